"""The quant tests measure kernel speeds into a cache of their own, never the user's."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:  # children (python -m accelkit) inherit it
        patch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path_factory.mktemp("accelkit-cache")))
        yield
