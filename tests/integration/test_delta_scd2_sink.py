"""The Delta sink's SCD type 2 tables (mode ``scd2``) on real Delta tables (delta-rs, a
local directory), read back by the test itself with ``deltalake`` and pyarrow (not with
the sink's code) and compared with the naive model: every distinct change applied once,
in sequence order, by AUTO CDC's rules, written here without the core's code (the core,
``merger.history.scd2``, is what the sink runs; the model is test_scd2_sink.py's).
Batches are replayed (the same version again, suffixes read again under new versions),
snapshot rows of unchanged keys arrive, truncates close versions; the versions of each
key must tile time."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.history.modes import COMMIT_US, ChangelogMode, SCD2Mode, TableModes
from merger.sinks import SinkError, TableId
from merger.sinks.base import TableCut, TableFault
from tests.support import readback

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.string()), ("u", pa.int64())])


def _sink(base, tables: dict, **kwargs):
    from merger.sinks.delta import DeltaSink

    return DeltaSink(str(base), modes=TableModes(tables), **kwargs)


def _batch(changes: list[tuple]) -> pa.Table:
    """(op, id, v, u, seq, time_us) -> the merger's batch."""
    return pa.table(
        {
            "id": pa.array([c[1] for c in changes], pa.int32()),
            "v": pa.array([c[2] for c in changes], pa.string()),
            "u": pa.array([c[3] for c in changes], pa.int64()),
            "_cdc_op": pa.array([c[0] for c in changes], pa.string()),
            "_cdc_seq": pa.array([c[4] for c in changes], pa.int64()),
            COMMIT_US: pa.array([c[5] for c in changes], pa.int64()),
        }
    )


def _read(base, t: TableId) -> pa.Table:
    return DeltaTable(f"{base}/{t.database}/{t.table}").to_pyarrow_table()


def _history(base, t: TableId) -> list[tuple]:
    h = _read(base, t)
    for c in ("__start_at", "__end_at"):
        assert h.schema.field(c).type == pa.timestamp("us", tz="UTC")
    cols = ["id", "v", "u", "__start_seq", "__end_seq", "__last_seq"]
    out = list(
        zip(
            *[h[c].to_pylist() for c in cols],
            pc.cast(h["__start_at"], pa.int64()).to_pylist(),  # microseconds since the epoch, exactly
            pc.cast(h["__end_at"], pa.int64()).to_pylist(),
            h["__current"].to_pylist(),
        )
    )
    return sorted(out, key=lambda r: (r[0], r[3]))


def _model(changes: list[tuple], tracked: set[str]) -> list[tuple]:
    """Every change once, in sequence order (a truncate: ("t", None, ..., seq, time))."""
    versions: dict[int, list[list]] = {}  # id -> [v, u, start_seq, end_seq, last_seq, start_at, end_at]
    for op, i, v, u, seq, at in sorted(set(changes), key=lambda c: c[4]):
        if op == "t":
            for vs in versions.values():
                if not vs:
                    continue
                cur = vs[-1]
                if cur[3] is None and cur[4] < seq:
                    cur[3], cur[6] = seq, max(at, cur[5])
            continue
        vs = versions.setdefault(i, [])
        last = vs[-1] if vs else None
        if last is not None and seq <= (last[4] if last[3] is None else last[3]):
            continue  # a replay
        when = at if last is None else max(at, last[5] if last[3] is None else last[6])
        current = last if last is not None and last[3] is None else None
        if op == "d":
            if current:
                current[3], current[6] = seq, when
            continue
        if current is None:
            vs.append([v, u, seq, None, seq, when, None])
            continue
        changed = {c for c, old, new in (("v", current[0], v), ("u", current[1], u)) if old != new}
        if not changed:
            continue
        if changed & tracked:
            current[3], current[6] = seq, when
            vs.append([v, u, seq, None, seq, when, None])
        else:
            current[0], current[1], current[4] = v, u, seq
    return [
        (i, v, u, ss, es, ls, sa, ea, es is None) for i in sorted(versions) for v, u, ss, es, ls, sa, ea in versions[i]
    ]


def _table() -> TableId:
    return TableId(f"h_{uuid.uuid4().hex[:8]}", "t")


def test_versions_in_place_updates_deletes_truncate_and_replays(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode(track_history_except=("u",))})
    assert sink.ensure_table(t, SCHEMA, ["id"]) == ["created"]
    assert DeltaTable(f"{tmp_path}/{t.database}/t").metadata().configuration["cdc.mode"] == "scd2"
    snap = [("r", 1, "a", 1, 10, 1_000_000), ("r", 2, "b", 1, 10, 1_000_000)]
    b2 = [
        ("u", 1, "a", 2, 11, 2_000_000),  # untracked column: in place
        ("u", 1, "A", 2, 12, 3_000_000),  # tracked: a new version
        ("d", 2, "b", 1, 13, 3_000_000),
        ("c", 3, "c", 0, 14, 4_000_000),
    ]
    assert sink.apply(t, 1, _batch(snap))
    assert sink.apply(t, 2, _batch(b2))
    assert not sink.apply(t, 2, _batch(b2))
    assert sink.applied_version(t) == 2
    assert sink.apply(t, 3, _batch(snap + b2))  # read again: nothing changes
    assert sink.apply(t, 4, _batch([("r", 1, "A", 2, 15, 5_000_000)]))  # a re-snapshot, unchanged: nothing
    assert sink.truncate(t, 5, TableCut(16, 6_000_000))
    assert not sink.truncate(t, 5, TableCut(16, 6_000_000))  # the same version again: skipped
    assert sink.apply(t, 6, _batch([("c", 2, "b2", 9, 17, 7_000_000)]))  # the deleted key again
    assert sink.truncate(t, 7, TableCut(16, 6_000_000))  # the truncate read again: closes nothing newer
    got = _history(tmp_path, t)
    assert got == [
        (1, "a", 2, 10, 12, 11, 1_000_000, 3_000_000, False),
        (1, "A", 2, 12, 16, 12, 3_000_000, 6_000_000, False),
        (2, "b", 1, 10, 13, 10, 1_000_000, 3_000_000, False),
        (2, "b2", 9, 17, None, 17, 7_000_000, None, True),
        (3, "c", 0, 14, 16, 14, 4_000_000, 6_000_000, False),
    ]
    changes = snap + b2 + [("t", None, None, None, 16, 6_000_000), ("c", 2, "b2", 9, 17, 7_000_000)]
    assert got == _model(changes, {"v"})
    assert readback.count(sink, t) == 5 and readback.rows(sink, t).num_rows == 5
    with pytest.raises(SinkError, match="no latest state"):
        sink.rows_with_keys(t, ["id"], [(1,)])


def test_a_truncate_of_one_origin_closes_that_origins_versions(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode()})
    schema = pa.schema([("__cdc_origin", pa.string()), ("id", pa.int32()), ("v", pa.string()), ("u", pa.int64())])
    sink.ensure_table(t, schema, ["__cdc_origin", "id"])
    batch = _batch([("c", 1, "a", 0, 5, 1), ("c", 1, "b", 0, 6, 2)])
    batch = batch.add_column(0, "__cdc_origin", pa.array(["s1/db.t", "s2/db.t"]))
    assert sink.apply(t, 1, batch)
    assert sink.truncate_origin(t, 2, "__cdc_origin", "s1/db.t", cut=TableCut(7, 3))
    assert sink.truncate_origin(t, 3, "__cdc_origin", "s1/db.t", cut=TableCut(7, 3))  # read again: nothing
    got = sorted((r["__cdc_origin"], r["__end_seq"], r["__current"]) for r in _read(tmp_path, t).to_pylist())
    assert got == [("s1/db.t", 7, False), ("s2/db.t", None, True)]


def test_a_ddl_reset_closes_every_current_version_after_every_change(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode()})
    sink.ensure_table(t, SCHEMA, ["id"])
    sink.apply(t, 1, _batch([("c", 1, "a", 0, 5, 1), ("c", 2, "b", 0, 8, 2), ("d", 2, None, None, 9, 3)]))
    assert sink.truncate(t, 2)  # no cut: after the highest sequence, at the clock's time
    got = sorted((r["id"], r["__end_seq"], r["__current"]) for r in _read(tmp_path, t).to_pylist())
    assert got == [(1, 10, False), (2, 9, False)]


def test_options_that_do_not_fit_the_table_pause_it(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode(track_history=("nope",))})
    with pytest.raises(TableFault, match="unknown column"):
        sink.ensure_table(t, SCHEMA, ["id"])
    t2 = _table()
    _sink(tmp_path, {str(t2): SCD2Mode(track_history=("v",))}).ensure_table(t2, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="track_history_except names unknown column"):  # options changed later
        _sink(tmp_path, {str(t2): SCD2Mode(track_history_except=("w",))}).apply(t2, 1, _batch([("c", 1, "a", 0, 1, 1)]))
    assert _read(tmp_path, t2).num_rows == 0


def test_a_change_at_sequence_0_opens_a_version(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode()})
    sink.ensure_table(t, SCHEMA, ["id"])
    sink.apply(t, 1, _batch([("c", 1, "a", 1, 0, 1_000_000)]))
    sink.apply(t, 2, _batch([("c", 1, "a", 1, 0, 1_000_000)]))
    assert _history(tmp_path, t) == [(1, "a", 1, 0, None, 0, 1_000_000, None, True)]


def test_an_added_column_appears_in_later_versions_and_a_dropped_history_is_set_aside(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode()})
    sink.ensure_table(t, SCHEMA, ["id"])
    sink.apply(t, 1, _batch([("c", 1, "a", 0, 10, 1)]))
    wider = SCHEMA.append(pa.field("w", pa.int64()))
    assert sink.ensure_table(t, wider, ["id"]) == ["added column w int64"]
    sink.apply(t, 2, _batch([("u", 1, "a", 0, 11, 2)]).append_column("w", pa.array([7], pa.int64())))
    rows = sorted(_read(tmp_path, t).to_pylist(), key=lambda r: r["__start_seq"])
    assert [(r["v"], r["w"], r["__start_seq"], r["__end_seq"]) for r in rows] == [
        ("a", None, 10, 11),
        ("a", 7, 11, None),
    ]
    # a batch without the column (dropped at the source) opens nothing by itself
    sink.apply(t, 3, _batch([("r", 1, "a", 0, 12, 3)]))
    assert _read(tmp_path, t).num_rows == 2
    sink.drop_table(t)  # the history is kept aside, a new one starts
    aside = [n for n in os.listdir(tmp_path / t.database) if n.startswith("t__until_")]
    assert len(aside) == 1
    kept = DeltaTable(str(tmp_path / t.database / aside[0]))
    assert kept.to_pyarrow_table().num_rows == 2 and kept.metadata().configuration["cdc.mode"] == "scd2"
    assert sink.ensure_table(t, wider, ["id"]) == ["created"]
    assert _read(tmp_path, t).num_rows == 0 and sink.applied_version(t) is None
    assert sink.apply(t, 1, _batch([("c", 1, "new", 0, 20, 3)]))


def test_a_table_of_another_mode_is_never_taken_over(tmp_path):
    from merger.sinks.delta import DeltaSink

    t = _table()
    DeltaSink(str(tmp_path)).ensure_table(t, SCHEMA, ["id"])  # a latest-state table at that path
    with pytest.raises(TableFault, match="is not an SCD type 2 history"):
        _sink(tmp_path, {str(t): SCD2Mode()}).ensure_table(t, SCHEMA, ["id"])
    t2 = _table()
    _sink(tmp_path, {str(t2): SCD2Mode()}).ensure_table(t2, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="is a scd2 table"):  # the history, configured latest: refused
        DeltaSink(str(tmp_path)).apply(t2, 1, _batch([("c", 1, "a", 0, 1, 1)]))
    with pytest.raises(TableFault, match="is a scd2 table"):  # a rebuild of it as latest: not deleted
        DeltaSink(str(tmp_path)).drop_table(t2)
    with pytest.raises(TableFault, match="marked scd2"):  # configured changelog: refused
        _sink(tmp_path, {str(t2): ChangelogMode()}).ensure_table(t2, SCHEMA, ["id"])
    t3 = _table()
    _sink(tmp_path, {str(t3): ChangelogMode()}).ensure_table(t3, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="marked changelog"):
        _sink(tmp_path, {str(t3): SCD2Mode()}).apply(t3, 1, _batch([("c", 1, "a", 0, 1, 1)]))
    assert _read(tmp_path, t).num_rows == 0 and _read(tmp_path, t2).num_rows == 0


def test_string_keys_and_compaction_keep_the_history(tmp_path):
    """A key type whose Delta statistics are inexact (files not skipped by them), the
    history's files compacted every other write: versions still close, replays nothing."""
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode()}, compact_every_commits=2)
    schema = pa.schema([("k", pa.string()), ("v", pa.string())])
    sink.ensure_table(t, schema, ["k"])

    def batch(rows):
        return pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.string()),
                "v": pa.array([r[1] for r in rows], pa.string()),
                "_cdc_op": pa.array(["u"] * len(rows), pa.string()),
                "_cdc_seq": pa.array([r[2] for r in rows], pa.int64()),
                COMMIT_US: pa.array([r[2] for r in rows], pa.int64()),
            }
        )

    rows = [(f"key{n % 3}", f"v{n}", n) for n in range(12)]
    for v in range(1, 7):
        sink.apply(t, v, batch(rows[(v - 1) * 2 : v * 2]))
        sink.apply(t, 100 + v, batch(rows[: v * 2]))  # everything read again
    got = sorted((r["k"], r["v"], r["__start_seq"], r["__end_seq"]) for r in _read(tmp_path, t).to_pylist())
    expected = []
    for k in ("key0", "key1", "key2"):
        mine = [r for r in rows if r[0] == k]
        expected += [(k, v, s, mine[n + 1][2] if n + 1 < len(mine) else None) for n, (_, v, s) in enumerate(mine)]
    assert got == sorted(expected)


ops = st.lists(
    st.tuples(
        st.sampled_from(["c", "u", "d", "r", "u", "u", "t"]),
        st.integers(1, 3),
        st.sampled_from(["a", "b"]),
        st.integers(0, 1),
        st.integers(0, 2),  # seconds since the previous change (0: the same second)
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops, st.lists(st.tuples(st.integers(0, 13), st.integers(1, 3)), max_size=3), st.randoms())
def test_any_batches_and_replays_give_the_models_history_and_tile_time(tmp_path_factory, script, replays, rnd):
    changes, at = [], 1_700_000_000_000_000
    for n, (op, i, v, u, gap) in enumerate(script):
        at += gap * 1_000_000
        changes.append((op, None, None, None, 100 + n, at) if op == "t" else (op, i, v, u, 100 + n, at))
    base = tmp_path_factory.mktemp("scd2")
    t = _table()
    sink = _sink(base, {str(t): SCD2Mode(track_history=("v",))})
    version = 0

    def send(part, again=False):
        nonlocal version
        rows = []
        for c in part:
            if c[0] == "t":
                if rows:
                    version += 1
                    sink.apply(t, version, _batch(rows))
                    rows = []
                version += 1
                sink.truncate(t, version, TableCut(c[4], c[5]))
                if again:
                    assert not sink.truncate(t, version, TableCut(c[4], c[5]))
            else:
                rows.append(c)
        if rows:
            version += 1
            sink.apply(t, version, _batch(rows))
            if again:  # the same version again (a batch re-run after a crash): skipped
                assert not sink.apply(t, version, _batch(rows))

    sink.ensure_table(t, SCHEMA, ["id"])
    cut = sorted({rnd.randrange(1, len(changes) + 1)} | {len(changes)})
    start = 0
    for c in cut:
        send(changes[start:c], again=rnd.random() < 0.5)
        start = c
    for frm, n in replays:
        suffix = changes[min(frm, len(changes) - 1) :]  # truncates too: read again under new versions
        for k in range(n):
            send(suffix[k::n])
    got = _history(base, t)
    assert got == _model(changes, {"v"})
    by_key: dict = {}
    for row in got:
        by_key.setdefault(row[0], []).append(row)
    for versions in by_key.values():  # time tiles: no overlap, at most the last is open
        for a, b in zip(versions, versions[1:]):
            assert a[4] is not None and a[4] <= b[3] and a[7] <= b[6]
        assert sum(1 for v in versions if v[8]) <= 1
        assert all(v[8] == (v[4] is None) for v in versions)


def test_a_widened_column_keeps_the_versions_and_the_applied_version(tmp_path):
    t = _table()
    sink = _sink(tmp_path, {str(t): SCD2Mode()})
    narrow = pa.schema([("id", pa.int32()), ("n", pa.int32())])
    sink.ensure_table(t, narrow, ["id"])

    def batch(n, seq):
        return pa.table(
            {
                "id": pa.array([1], pa.int32()),
                "n": pa.array([n], pa.int64()),
                "_cdc_op": ["u"],
                "_cdc_seq": pa.array([seq], pa.int64()),
                COMMIT_US: pa.array([seq], pa.int64()),
            }
        )

    assert sink.apply(t, 1, batch(5, 3))
    assert sink.ensure_table(t, pa.schema([("id", pa.int32()), ("n", pa.int64())]), ["id"]) == [
        "widened n int32 -> int64"
    ]
    assert not sink.apply(t, 1, batch(5, 3))  # the versions survive the rewrite
    assert sink.apply(t, 2, batch(5, 4))  # the same value, read back in the wider type: nothing
    assert sink.apply(t, 3, batch(2**40, 5))
    got = sorted((r["n"], r["__start_seq"], r["__end_seq"]) for r in _read(tmp_path, t).to_pylist())
    assert got == [(5, 3, 5), (2**40, 5, None)]


def test_a_history_on_object_storage_is_written_and_never_deleted(s3_store):
    from tests.delta_stores import S3DeltaStore

    store = S3DeltaStore(s3_store)
    base = store.base()
    t = _table()
    sink = _sink(base, {str(t): SCD2Mode()}, storage_options=store.options)
    sink.ensure_table(t, SCHEMA, ["id"])
    assert sink.apply(t, 1, _batch([("c", 1, "a", 0, 0, 1)]))
    assert not sink.apply(t, 1, _batch([("c", 1, "a", 0, 0, 1)]))
    assert sink.apply(t, 2, _batch([("c", 1, "a", 0, 0, 1), ("u", 1, "b", 0, 1, 2)]))
    read = DeltaTable(f"{base}/{t.database}/t", storage_options=store.options).to_pyarrow_table().to_pylist()
    assert sorted((r["v"], r["__start_seq"], r["__end_seq"]) for r in read) == [("a", 0, 1), ("b", 1, None)]
    with pytest.raises(SinkError, match="cannot be set aside"):
        sink.drop_table(t)
    assert DeltaTable(f"{base}/{t.database}/t", storage_options=store.options).to_pyarrow_table().num_rows == 2
