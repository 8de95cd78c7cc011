"""The space check before a Milvus Lite write or flush says what the refusal kept."""

import pytest

from accelkit.images.store.errors import StoreFullError
from accelkit.images.store.lite import check_lite_space


def test_a_refused_flush_says_the_acknowledged_rows_are_kept(tmp_path):
    """A flush refused for room must not read as if the rows written before were lost: a
    review's attack saw `s.db is unchanged` after acknowledged upserts, which were kept."""
    db = tmp_path / "s.db"
    kept = "every acknowledged row is kept in Milvus Lite's log and stays searchable"
    with pytest.raises(StoreFullError) as refused:
        check_lite_space(str(db), 1 << 62, "flushing 'c'", kept=kept)
    said = str(refused.value)
    assert said.startswith("flushing 'c' (about ")
    assert kept in said and "is unchanged" not in said
    assert "\n" not in said
    with pytest.raises(StoreFullError, match="is unchanged"):  # any other write: as before
        check_lite_space(str(db), 1 << 62, "inserting 3 items")
