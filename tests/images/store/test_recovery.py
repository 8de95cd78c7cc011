"""The rule that tells a store recovering from an outage (503, retry later) from a slow one (504),
pinned on the answers pymilvus gives: a call refused at once ("Fail connecting", the server down),
then a call past its deadline on a store that answers again. The outage itself, for real, is
tests/images/test_outage.py; this is the rule it depends on, without its timing."""

import pytest
from pymilvus.exceptions import MilvusException

from accelkit.images.store import StoreError, StoreTimeoutError, StoreUnavailableError, VectorStore

REFUSED = MilvusException(
    code=2,
    message="Fail connecting to server on 127.0.0.1:19530, illegal connection params or server"
    " unavailable",
)
PAST_DEADLINE = MilvusException(code=1, message="<_InactiveRpcError: StatusCode.DEADLINE_EXCEEDED>")


def answers(*errors):
    """A pymilvus call that raises each of `errors` in turn."""
    pending = list(errors)

    def call(**_):
        raise pending.pop(0)

    return call


@pytest.fixture
def store(tmp_path):
    with VectorStore(uri=str(tmp_path / "recovery.db")) as opened:
        yield opened


def test_a_timeout_on_a_store_that_answers_is_slow_504(store):
    with pytest.raises(StoreTimeoutError) as caught:
        store._attempt("searching 'x'", answers(PAST_DEADLINE), (), {})
    assert not isinstance(caught.value, StoreUnavailableError), caught.value


def test_a_timeout_after_refusals_is_recovery_503_however_they_were_refused(store):
    """Refused at once while down (a plain store error, 503), then past the deadline once back:
    still recovering (503), not slow. The CI run this failed on saw only refusals while down
    (never a timed-out call), and answered the first slow search after it 504."""
    call = answers(REFUSED, PAST_DEADLINE)
    with pytest.raises(StoreError) as refused:
        store._attempt("inserting into 'x'", call, (), {})
    assert not isinstance(refused.value, StoreTimeoutError), refused.value
    with pytest.raises(StoreUnavailableError, match="still recovering"):
        store._attempt("searching 'x'", call, (), {})
