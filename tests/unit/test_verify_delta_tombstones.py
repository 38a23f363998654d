"""The Delta reader's positions for a confirmation read (``positions_with_keys``): a key's
row and tombstone as one batch of the merger left them. The sink commits a batch's rows,
then its tombstones; read apart, a key deleted and written again in between showed
neither, and verify confirmed it as missing (a false difference under load). Real Delta
tables (delta-rs), no server."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

import merger.verify.sinks.delta as verify_sinks
from merger.sinks.delta import DeltaSink
from merger.sinks.delta.meta import app_main, app_tombstones, steps_done
from merger.verify.sinks.base import SinkReadError
from merger.verify.sinks.delta import DeltaReader

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
T = ("db", "t")


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
    """Keys 1 and 2 written (version 1), key 1 deleted at sequence 20 (version 2)."""
    sink = DeltaSink(str(tmp_path / "delta"))
    sink.ensure_table(T, SCHEMA, ["id"])
    sink.apply(T, 1, _batch([(1, "a", "c", 10), (2, "b", "c", 11)]))
    sink.apply(T, 2, _batch([(1, None, "d", 20)]))
    return sink


def _table_step_only(sink, version: int) -> None:
    """What a batch's first commit leaves until its second: the table at ``version`` (key 2
    deleted, at sequence 30), its tombstones not."""
    main = DeltaTable(sink.table_path(T))
    app = app_main(main.metadata().id)
    main.delete("id = 2", commit_properties=CommitProperties(app_transactions=[Transaction(app, version)]))


def _finish_tombstone_step(sink, version: int) -> None:
    main = DeltaTable(sink.table_path(T))
    tomb = DeltaTable(sink.tombstone_path(T))
    row = pa.table({"id": pa.array([2], pa.int64()), "_cdc_seq": pa.array([30], pa.int64())})
    write_deltalake(
        tomb,
        row.cast(pa.schema(tomb.schema().to_arrow())),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_tombstones(main.metadata().id), version)]),
    )


class _IntCanon:
    """The reader's canonical form of an integer key: the value itself."""

    @staticmethod
    def sinks(values):
        return list(values)


def _positions(reader):
    found = reader.positions_with_keys(
        "db", "t", {"id": "bigint"}, ["id"], ["int"], [(1,), (2,)], key_canons=[_IntCanon()]
    )
    return sorted(found)


def test_rows_and_tombstones_of_a_finished_batch(tmp_path):
    sink = _sink_with_a_delete(tmp_path)
    assert steps_done(DeltaTable(sink.table_path(T)), DeltaTable(sink.tombstone_path(T))) == (2, 2)
    assert _positions(DeltaReader(str(tmp_path / "delta"))) == [(1, 20), (2, 11)]


def test_the_read_waits_for_the_tombstone_step_of_the_table_it_read(tmp_path):
    sink = _sink_with_a_delete(tmp_path)
    _table_step_only(sink, 3)  # key 2's row is gone, its tombstone not written yet
    done = threading.Timer(0.5, _finish_tombstone_step, (sink, 3))
    done.start()
    started = time.monotonic()
    try:
        got = _positions(DeltaReader(str(tmp_path / "delta")))
    finally:
        done.join()
    assert got == [(1, 20), (2, 30)]  # key 2 has its position: it changed, it is not missing
    assert time.monotonic() - started >= 0.4


def test_a_batch_committed_between_the_two_loads(tmp_path, monkeypatch):
    """The table loaded, then a batch writes key 1 again (its tombstone goes), then the
    tombstones loaded: the table is loaded again, and key 1 shows its new row."""
    sink = _sink_with_a_delete(tmp_path)
    reader = DeltaReader(str(tmp_path / "delta"))
    opened = reader._open
    calls = []

    def open_then_a_batch(db, table):
        dt = opened(db, table)
        calls.append(dt.version())
        if len(calls) == 1:
            sink.apply(T, 3, _batch([(1, "again", "c", 40)]))
        return dt

    monkeypatch.setattr(reader, "_open", open_then_a_batch)
    assert _positions(reader) == [(1, 40), (2, 11)]
    assert len(calls) == 2


def test_a_tombstone_step_that_never_comes_is_an_error_that_says_what_to_do(tmp_path, monkeypatch):
    sink = _sink_with_a_delete(tmp_path)
    _table_step_only(sink, 3)
    monkeypatch.setattr(verify_sinks, "TOMBSTONE_WAIT_S", 0.3)
    with pytest.raises(SinkReadError, match="start the merger, then verify again"):
        _positions(DeltaReader(str(tmp_path / "delta")))
