"""Key mode unique's check of each key's origin (merger/batch/owner_check.py) against the real
sinks that keep rows: PostgreSQL (the local stack's) and Delta. A key written on a second
shard with no move pauses its table; a declared move is applied. The processor's side with
an in-memory sink: tests/unit/test_processor.py."""

from __future__ import annotations

import dataclasses

import pytest

from merger.batch.processor import BatchProcessor
from merger.state.store import StateStore
from tests.support import readback
from tests.unit.test_processor import ORIGIN, PREFIX, UNIQUE, UniqueStream, unique_change


@pytest.fixture
def row_sink(request, stack, tmp_path_factory):
    if request.param == "postgres":
        from merger.sinks import PostgresSink

        sink = PostgresSink(stack.postgres)
    else:
        from tests.delta_stores import LocalDeltaStore

        sink = LocalDeltaStore(tmp_path_factory).sink()
    yield sink
    sink.close()


@pytest.mark.parametrize("row_sink", ["postgres", "delta"], indirect=True)
def test_a_key_from_a_second_origin_pauses_and_a_moved_one_applies(tmp_path, row_sink, unique_name):
    spec = dataclasses.replace(UNIQUE, db=unique_name)
    name = f"{unique_name}.t"
    proc = BatchProcessor(
        PREFIX, StateStore(tmp_path / "state"), [row_sink], None, lambda t: 2, sharded=True, key_mode="unique"
    )
    proc.clock.restored = True
    proc.table(name, spec)
    s = UniqueStream()
    s.topic = f"{PREFIX}.{name}"
    unique_change(s, "a", "c", 1, "a1")
    unique_change(s, "a", "c", 2, "a2")
    proc.process(0, s.batch())
    unique_change(s, "b", "u", 1, "b1", moved="a")  # a declared move of key 1
    proc.process(1, s.batch())
    assert proc.tables.get(name).phase == "streaming"
    unique_change(s, "b", "u", 2, "b2")  # key 2 was not moved
    proc.process(2, s.batch())
    rt = proc.tables.get(name)
    assert rt.phase == "paused" and "key 2" in rt.error and "a/db.t" in rt.error and "b/db.t" in rt.error
    rows = sorted((r["id"], r["v"], r[ORIGIN]) for r in readback.rows(row_sink, (unique_name, "t")).to_pylist())
    assert rows == [(1, "b1", "b/db.t"), (2, "a2", "a/db.t")]
