"""Key mode unique's check of each key's origin (merger/owner_check.py) against a real Delta
sink (local tables): the rows read back by the decoded keys, a conflict pausing the table,
a declared move applied. The processor's side with an in-memory sink: test_processor.py."""

from __future__ import annotations

import pytest

from merger.processor import BatchProcessor
from merger.state import StateStore
from tests.unit.test_processor import ORIGIN, PREFIX, UNIQUE, UniqueStream, _unique_change


@pytest.fixture
def delta(tmp_path_factory):
    from tests.delta_stores import LocalDeltaStore

    return LocalDeltaStore(tmp_path_factory).sink()


def test_a_key_from_a_second_origin_pauses_and_a_moved_one_applies_on_delta(tmp_path, delta):
    proc = BatchProcessor(
        PREFIX, StateStore(tmp_path / "state"), [delta], None, lambda t: 2, sharded=True, key_mode="unique"
    )
    proc.restored = True
    proc.table("db.t", UNIQUE)
    s = UniqueStream()
    _unique_change(s, "a", "c", 1, "a1")
    _unique_change(s, "a", "c", 2, "a2")
    proc.process(0, s.batch())
    _unique_change(s, "b", "u", 1, "b1", moved="a")  # a declared move of key 1
    proc.process(1, s.batch())
    assert proc.tables.get("db.t").phase == "streaming"
    _unique_change(s, "b", "u", 2, "b2")  # key 2 was not moved
    proc.process(2, s.batch())
    rt = proc.tables.get("db.t")
    assert rt.phase == "paused" and "key 2" in rt.error and "a/db.t" in rt.error and "b/db.t" in rt.error
    rows = sorted((r["id"], r["v"], r[ORIGIN]) for r in delta.rows(("db", "t")).to_pylist())
    assert rows == [(1, "b1", "b/db.t"), (2, "a2", "a/db.t")]
