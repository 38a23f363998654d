"""The Delta reader's tombstones for a confirmation read: never older than the rows read
before them. The sink commits a batch's rows, then its tombstones; a read between the two
saw a deleted key with neither a row nor a tombstone, and verify confirmed it as missing
(a false difference under load). Real Delta tables (delta-rs), no server."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

import merger.verify.sinks as verify_sinks
from merger.sinks.delta import DeltaSink, app_main, app_tombstones, steps_done
from merger.verify.sinks import DeltaReader, SinkReadError

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _batch(rows):
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
            "_cdc_op": pa.array([r[2] for r in rows], pa.string()),
            "_cdc_seq": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


def _sink_with_a_delete(tmp_path):
    """A sink table where key 1 was written, then deleted at sequence 20 (version 2)."""
    sink = DeltaSink(str(tmp_path / "delta"))
    sink.ensure_table(("db", "t"), SCHEMA, ["id"])
    sink.apply(("db", "t"), 1, _batch([(1, "a", "c", 10), (2, "b", "c", 11)]))
    sink.apply(("db", "t"), 2, _batch([(1, None, "d", 20)]))
    return sink


def _table_step_only(sink, version: int) -> None:
    """What a batch's first commit leaves until its second: the table at ``version``,
    its tombstones not (key 2 deleted at sequence 30, its tombstone not yet written)."""
    main = DeltaTable(sink.table_path(("db", "t")))
    main.delete(
        "id = 2",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_main(main.metadata().id), version)]),
    )


def _finish_tombstone_step(sink, version: int) -> None:
    main = DeltaTable(sink.table_path(("db", "t")))
    app = app_tombstones(main.metadata().id)
    row = pa.table({"id": pa.array([2], pa.int64()), "_cdc_seq": pa.array([30], pa.int64())})
    tomb = DeltaTable(sink.tombstone_path(("db", "t")))
    row = row.cast(pa.schema(tomb.schema().to_arrow()))
    write_deltalake(
        tomb, row, mode="append", commit_properties=CommitProperties(app_transactions=[Transaction(app, version)])
    )


class _IntCanon:
    """The reader's canonical form of an integer key: the value itself."""

    @staticmethod
    def sinks(values):
        return list(values)


def _tombstones(reader):
    return reader.tombstones_with_keys(
        "db", "t", {"id": "bigint"}, ["id"], ["int"], [(1,), (2,)], key_canons=[_IntCanon()]
    )


def test_tombstones_of_a_finished_batch_are_read_at_once(tmp_path):
    sink = _sink_with_a_delete(tmp_path)
    main = DeltaTable(sink.table_path(("db", "t")))
    assert steps_done(main, DeltaTable(sink.tombstone_path(("db", "t")))) == (2, 2)
    assert _tombstones(DeltaReader(str(tmp_path / "delta"))) == [(1, 20)]


def test_the_read_waits_for_the_tombstone_step_of_the_rows_it_saw(tmp_path, monkeypatch):
    sink = _sink_with_a_delete(tmp_path)
    _table_step_only(sink, 3)  # key 2's row is gone: a reader of the rows saw that
    done = threading.Timer(0.5, _finish_tombstone_step, (sink, 3))
    done.start()
    started = time.monotonic()
    try:
        got = _tombstones(DeltaReader(str(tmp_path / "delta")))
    finally:
        done.join()
    assert sorted(got) == [(1, 20), (2, 30)]  # key 2 has its position: it changed, not missing
    assert time.monotonic() - started >= 0.4


def test_a_tombstone_step_that_never_comes_is_an_error_that_says_what_to_do(tmp_path, monkeypatch):
    sink = _sink_with_a_delete(tmp_path)
    _table_step_only(sink, 3)
    monkeypatch.setattr(verify_sinks, "TOMBSTONE_WAIT_S", 0.3)
    with pytest.raises(SinkReadError, match="start the merger, then verify again"):
        _tombstones(DeltaReader(str(tmp_path / "delta")))
