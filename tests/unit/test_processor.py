"""BatchProcessor without Spark or servers: Kafka-shaped records in, an in-memory sink out.

Checks the parts around the pure reconciler: markers and events in binlog order across
partitions, window emission (bulk filtering of staged rows, at the HIGH sequence), the
per-batch emission budget, and the re-run of a batch after a crash."""

from __future__ import annotations

import copy
import json
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc.tablespec import ColumnSpec, TableSpec
from cdc.wire.headers import EMITTED_HEADER, MOVED_FROM_HEADER, MOVED_TO_HEADER, POSITION_HEADER, WATERMARK_HEADER
from merger.batch.clock import STREAMING_RECENT_S
from merger.batch.processor import IDLE_EMIT_FACTOR, WINDOW_EXPIRIES_LIMIT, BatchProcessor
from merger.sinks.base import KeepsRows
from merger.snapshot.chunking import no_chunk_key_error
from merger.state.store import StateStore

PREFIX = "p"
RECORD_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


class MemorySink:
    """The sink contract in a dict: newest sequence per key wins, deletes leave a
    tombstone, a version already applied is skipped."""

    def __init__(self):
        self.tables: dict = {}
        self.tombs: dict = {}
        self.applied: dict = {}
        self.writes = 0

    def ensure_table(self, table, schema, keys):
        self.tables.setdefault(tuple(table), {})
        self.tombs.setdefault(tuple(table), {})
        self.keys = keys

    def _claim(self, table, version) -> bool:
        if version <= self.applied.get(table, -1):
            return False
        self.applied[table] = version
        self.writes += 1
        return True

    def apply(self, table, version, changes: pa.Table) -> bool:
        table = tuple(table)
        if not self._claim(table, version):
            return False
        rows, tombs = self.tables[table], self.tombs[table]
        for r in changes.to_pylist():
            key = tuple(r[k] for k in self.keys)
            held = rows.get(key, {}).get("_cdc_seq", tombs.get(key, -1))
            if r["_cdc_seq"] <= held:
                continue
            if r["_cdc_op"] == "d":
                rows.pop(key, None)
                tombs[key] = r["_cdc_seq"]
            else:
                rows[key] = {k: v for k, v in r.items() if k != "_cdc_op"}
        return True

    def applied_version(self, table) -> int | None:
        return self.applied.get(tuple(table))

    def nul_values_changed(self) -> dict:
        return {}

    def truncate(self, table, version) -> bool:
        table = tuple(table)
        if self._claim(table, version):
            self.tables[table].clear()
        return True

    def truncate_origin(self, table, version, column, origin) -> bool:
        table = tuple(table)
        if self._claim(table, version):
            for key in [k for k, r in self.tables[table].items() if r.get(column) == origin]:
                del self.tables[table][key]
        return True

    def state(self, table=("db", "t")) -> dict:
        return {k: {c: v for c, v in r.items() if c != "_cdc_seq"} for k, r in self.tables[table].items()}

    def close(self):
        pass


SPEC = TableSpec(
    "db", "t", (ColumnSpec("id", "int", 1, nullable=False), ColumnSpec("v", "varchar", 2, length=20)), ("id",)
)
COMPOSITE = TableSpec(
    "db",
    "c",
    (
        ColumnSpec("a", "int", 1, nullable=False),
        ColumnSpec("b", "varchar", 2, length=10, nullable=False),
        ColumnSpec("v", "int", 3),
    ),
    ("a", "b"),
)


class Stream:
    """Records of one table topic with 2 partitions, as the Kafka source delivers them."""

    def __init__(self, table: str = "db.t", partitions: int = 2):
        self.topic = f"{PREFIX}.{table}"
        self.partitions = partitions
        self.offsets = [0] * partitions
        self.pending: list = []
        self.pos = 1000

    def _add(self, partition: int, key, value, pos: int):
        headers = [{"key": POSITION_HEADER, "value": f"bin.000001:{pos}:0".encode()}]
        if isinstance(value, dict) and value.get("op") == "m":
            headers.append({"key": WATERMARK_HEADER, "value": json.dumps(value["marker"]).encode()})
            value = {"op": "m"}
        self.pending.append(
            {
                "key": json.dumps(key).encode(),
                "value": json.dumps(value).encode(),
                "topic": self.topic,
                "partition": partition,
                "offset": self.offsets[partition],
                "headers": headers,
            }
        )
        self.offsets[partition] += 1

    def change(self, op: str, key: dict, before=None, after=None):
        self.pos += 100
        partition = hash(json.dumps(key, sort_keys=True)) % self.partitions
        self._add(partition, key, {"op": op, "before": before, "after": after, "source": {"ts_ms": 1}}, self.pos)

    def marker(self, window: str, kind: str):
        self.pos += 100
        for p in range(self.partitions):
            self._add(p, None, {"op": "m", "marker": {"window": window, "kind": kind}}, self.pos)

    def batch(self) -> pa.Table:
        out, self.pending = pa.Table.from_pylist(self.pending, schema=RECORD_SCHEMA), []
        return out


def _processor(tmp_path, sink, **kw) -> BatchProcessor:
    store = StateStore(tmp_path / "state")
    proc = BatchProcessor(PREFIX, store, [sink], None, lambda topic: 2, **kw)
    proc.clock.restored = True
    return proc


def _open_window(
    proc: BatchProcessor,
    table: str,
    wid: str,
    rows: list[dict],
    spec=SPEC,
    chunk: str | None = None,
    saved: bool = True,
):
    """A window opened by the snapshot runner between two batches. ``saved``: a batch has
    saved the state since (an empty batch would do), so the batch that reads its markers
    may emit it (``Reconciler.emittable_windows``)."""
    rt = proc.table(table, spec)
    path = proc.store.staging_dir(table, wid)
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path / "part-0.parquet")
    proc.store.mark_staged(table, wid)  # as the snapshot runner does once Spark wrote them
    rt.reconciler.open_window(wid, [chunk or wid], time.time())
    plan = proc.store.load_plan(table) or {"table": table, "chunks": [], "done": [], "rows": 0}
    plan["chunks"].append({"id": chunk or wid})
    proc.store.save_plan(table, plan)
    if saved:
        rt.reconciler.mark_saved()
    return rt


def test_a_window_opened_since_the_last_saved_state_is_emitted_by_the_next_batch(tmp_path):
    """Its markers come in the first batch after it opened, which a crash before that batch's
    state save makes run again from the state before the window: the first run must emit
    what the re-run emits (nothing of it), or a change log keeps the rows the first run
    wrote while a new window reads them again. The next batch emits it."""
    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    proc.table("db.t", SPEC)
    s = Stream()
    s.change("c", {"id": 1}, after={"id": 1, "v": "old"})
    proc.process(0, s.batch())
    rerun_sink = copy.deepcopy(sink)  # for a re-run of batch 1: the sink before it
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": "snap"} for i in (1, 2, 3)], saved=False)
    s.marker("w1", "LOW")
    s.change("u", {"id": 1}, before={"id": 1, "v": "old"}, after={"id": 1, "v": "new"})
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    batch1 = s.batch()
    proc.process(1, batch1)
    assert sink.state() == {(1,): {"id": 1, "v": "new"}}
    assert rt.reconciler.is_ready("w1")

    # the batch run again by a merger restarted after a kill -9 before its state save
    rerun = BatchProcessor(PREFIX, StateStore(tmp_path / "state"), [rerun_sink], None, lambda topic: 2)
    rerun.process(1, batch1)
    assert rerun_sink.state() == sink.state()

    proc.process(2, s.batch())  # the emission's tick brings a batch without records
    assert sink.state() == {(1,): {"id": 1, "v": "new"}, (2,): {"id": 2, "v": "snap"}, (3,): {"id": 3, "v": "snap"}}
    assert "w1" not in rt.reconciler.windows


def test_window_rows_lose_to_changes_seen_after_low_and_carry_the_high_sequence(tmp_path):
    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    s = Stream()
    for i in (1, 2, 3):
        s.change("c", {"id": i}, after={"id": i, "v": "old"})
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": f"snap{i}"} for i in range(1, 11)])
    s.marker("w1", "LOW")
    s.change("u", {"id": 3}, before={"id": 3, "v": "old"}, after={"id": 3, "v": "new"})
    s.change("d", {"id": 4}, before={"id": 4, "v": "snap4"})
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    s.change("u", {"id": 5}, before={"id": 5, "v": "snap5"}, after={"id": 5, "v": "after-high"})
    proc.process(1, s.batch())
    expected = {(i,): {"id": i, "v": f"snap{i}"} for i in range(1, 11) if i != 4}
    expected[(3,)] = {"id": 3, "v": "new"}
    expected[(5,)] = {"id": 5, "v": "after-high"}
    assert sink.state() == expected
    assert "w1" not in rt.reconciler.windows
    assert proc.store.load_plan("db.t")["done"] == ["w1"]
    assert proc.status()["tables"]["db.t"]["snapshot"] == "finished"
    seqs = {r["id"]: r["_cdc_seq"] for r in sink.tables[("db", "t")].values()}
    assert len({seqs[i] for i in (1, 2, 6, 7, 8, 9, 10)}) == 1


def test_a_positional_window_waits_for_the_reader_to_pass_its_targets_then_emits_at_high_minus_one(tmp_path):
    """snapshot.watermarks positions: no marker comes. LOW and HIGH are sequences read from
    the source; a change read after the window opened is seen; the window is ready only once
    the reader has passed, in every partition, the end the runner took after ingest
    committed through HIGH (merger.batch.read_through), and its rows carry HIGH - 1."""
    from cdc.wire.position import EventPosition

    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    rt = proc.table("db.t", SPEC)
    s = Stream()
    for i in (1, 2, 3):
        s.change("c", {"id": i}, after={"id": i, "v": "old"})
    proc.process(0, s.batch())
    path = proc.store.staging_dir("db.t", "w1")
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"id": i, "v": f"snap{i}"} for i in range(1, 7)]), path / "part-0.parquet")
    proc.store.mark_staged("db.t", "w1")
    proc.store.save_plan("db.t", {"table": "db.t", "chunks": [{"id": "w1"}], "done": [], "rows": 0})
    proc.tables.open_positional_window(rt, "w1", ["w1"], time.time())
    low = EventPosition("bin.000001", s.pos + 50).sequence()
    assert proc.tables.set_position(rt, "w1", "LOW", low)
    s.change("u", {"id": 3}, before={"id": 3, "v": "old"}, after={"id": 3, "v": "new"})  # seen
    rt.reconciler.mark_staged("w1")
    high = EventPosition("bin.000001", s.pos + 50).sequence()
    assert proc.tables.set_position(rt, "w1", "HIGH", high, 1_000_000)
    ends = {p: s.offsets[p] for p in range(2)}  # every record below HIGH lies below these
    proc.tables.expect_read_through(rt, high - 1, ends)
    consumed: dict = {}
    proc.reader_ends = lambda: dict(consumed)
    proc.process(1, s.batch())
    assert not rt.reconciler.is_ready("w1")  # the reader has not passed the ends yet
    consumed.update({(s.topic, 0): ends[0]})
    proc.process(2, s.batch())
    assert not rt.reconciler.is_ready("w1")  # partition 1 still behind
    consumed.update({(s.topic, 1): ends[1]})
    proc.process(3, s.batch())  # ready now, and emitted: earlier batches saved the window
    assert "w1" not in rt.reconciler.windows
    expected = {(i,): {"id": i, "v": f"snap{i}"} for i in range(1, 7)}
    expected[(3,)] = {"id": 3, "v": "new"}
    assert sink.state() == expected
    seqs = {r["id"]: r["_cdc_seq"] for r in sink.tables[("db", "t")].values()}
    assert {seqs[i] for i in (1, 2, 4, 5, 6)} == {high - 1}
    assert not len(rt.read_through)  # reached in both partitions: dropped


def test_emission_budget_spreads_windows_over_batches_in_slices(tmp_path):
    sink = MemorySink()
    proc = _processor(tmp_path, sink, emit_rows_per_batch=50)
    s = Stream()
    proc.process(0, s.batch())
    rts = [
        _open_window(proc, "db.t", w, [{"id": i, "v": w} for i in range(lo, lo + 40)])
        for w, lo in (("wa", 0), ("wb", 100), ("wc", 200))
    ]
    for w in ("wa", "wb", "wc"):
        s.marker(w, "LOW")
        rts[0].reconciler.mark_staged(w)
        s.marker(w, "HIGH")
    s.change("c", {"id": 900}, after={"id": 900, "v": "live"})  # a streamed change: the budget is 50
    proc.process(1, s.batch())
    assert len(sink.state()) == 51  # window wa whole, 10 rows of wb, and the change
    assert proc.clock.emission_pending == "db.t"  # the runner must bring another batch
    assert set(rts[0].reconciler.windows) == {"wb", "wc"}
    # a change after HIGH of wb's key not yet emitted: that staged row must not come back
    s.change("u", {"id": 135}, before={"id": 135, "v": "wb"}, after={"id": 135, "v": "live"})
    s.change("d", {"id": 136}, before={"id": 136, "v": "wb"})
    proc.process(2, s.batch())
    assert len(sink.state()) == 100  # 30 more of wb (one deleted), 20 of wc
    assert proc.status()["tables"]["db.t"]["snapshot"] == "running"
    before = sink.state()
    again = BatchProcessor(PREFIX, proc.store, [sink], None, lambda topic: 2, emit_rows_per_batch=50)
    again.process(2, pa.Table.from_pylist([], schema=RECORD_SCHEMA))  # batch 2 once more, after a crash
    assert sink.state() == before
    again.process(3, s.batch())
    state = sink.state()
    assert len(state) == 120 and state[(135,)] == {"id": 135, "v": "live"} and (136,) not in state
    assert again.status()["tables"]["db.t"]["snapshot"] == "finished"
    assert again.clock.emission_pending is None
    assert not again.tables["db.t"].reconciler.windows and not again.tables["db.t"].emitted
    assert not (tmp_path / "state" / "staging").exists() or not any((tmp_path / "state" / "staging").rglob("*.parquet"))


def test_a_batch_without_streamed_changes_emits_more_than_the_budget(tmp_path):
    """Nobody waits behind the emission of a batch that brought only markers (an idle
    source, whose every batch costs a watermark tick and Spark's own work): it emits
    IDLE_EMIT_FACTOR x emit_rows_per_batch. A batch without changes while changes stream
    in (one within STREAMING_RECENT_S) is not idle: the next change waits behind it."""
    assert IDLE_EMIT_FACTOR > 1
    budget, idle = 30, 30 * IDLE_EMIT_FACTOR
    rows = 2 * idle + 2 * budget + 20
    sink = MemorySink()
    proc = _processor(tmp_path, sink, emit_rows_per_batch=budget)
    s = Stream()
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": "snap"} for i in range(rows)])
    s.marker("w1", "LOW")
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    proc.process(1, s.batch())
    assert len(sink.state()) == idle
    s.change("c", {"id": 10_000}, after={"id": 10_000, "v": "live"})
    proc.process(2, s.batch())
    assert len(sink.state()) == idle + budget + 1  # the budget's snapshot rows, and the change
    proc.process(3, s.batch())
    assert len(sink.state()) == idle + 2 * budget + 1  # no change in it, but one a moment ago
    proc.clock.last_change_at -= STREAMING_RECENT_S  # quiet for a while: idle again
    proc.process(4, s.batch())
    assert len(sink.state()) == 2 * idle + 2 * budget + 1
    proc.process(5, s.batch())
    assert len(sink.state()) == rows + 1 and not rt.reconciler.windows


def test_a_batch_run_again_after_a_crash_changes_nothing(tmp_path):
    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    s = Stream()
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": "snap"} for i in range(1, 6)])
    s.marker("w1", "LOW")
    s.change("u", {"id": 2}, before={"id": 2, "v": "snap"}, after={"id": 2, "v": "live"})
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    batch = s.batch()
    proc.process(1, batch)
    state, writes = sink.state(), sink.writes
    # a new process (the merger restarted) gets batch 1 again from Spark
    again = BatchProcessor(PREFIX, proc.store, [sink], None, lambda topic: 2)
    again.process(1, batch)
    assert sink.state() == state and sink.writes == writes
    assert state[(2,)] == {"id": 2, "v": "live"}


def test_composite_keys_are_filtered_row_by_row(tmp_path):
    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    s = Stream("db.c")
    proc.process(0, s.batch())
    rows = [{"a": a, "b": b, "v": 0} for a in range(3) for b in ("x", "y")]
    rt = _open_window(proc, "db.c", "w", rows, COMPOSITE)
    s.marker("w", "LOW")
    s.change("u", {"a": 1, "b": "y"}, before={"a": 1, "b": "y", "v": 0}, after={"a": 1, "b": "y", "v": 9})
    s.change("d", {"a": 2, "b": "x"}, before={"a": 2, "b": "x", "v": 0})
    rt.reconciler.mark_staged("w")
    s.marker("w", "HIGH")
    proc.process(1, s.batch())
    got = sink.state(("db", "c"))
    assert (2, "x") not in got and got[(1, "y")]["v"] == 9
    assert len(got) == 5 and all(r["v"] == 0 for k, r in got.items() if k != (1, "y"))


@pytest.mark.parametrize("truncate_after_low", [True, False])
def test_truncate_inside_a_window_drops_its_rows(tmp_path, truncate_after_low):
    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    s = Stream()
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w", [{"id": i, "v": "snap"} for i in range(1, 4)])
    if not truncate_after_low:
        for p in range(2):  # a truncate record goes to every partition
            s.pos += 1
            s._add(p, None, {"op": "t", "source": {"ts_ms": 1}}, s.pos)
    s.marker("w", "LOW")
    if truncate_after_low:
        for p in range(2):
            s._add(p, None, {"op": "t", "source": {"ts_ms": 1}}, s.pos + 1)
        s.pos += 1
    s.change("c", {"id": 7}, after={"id": 7, "v": "live"})
    rt.reconciler.mark_staged("w")
    s.marker("w", "HIGH")
    proc.process(1, s.batch())
    if truncate_after_low:
        assert sink.state() == {(7,): {"id": 7, "v": "live"}}
    else:
        assert set(sink.state()) == {(1,), (2,), (3,), (7,)}


def test_a_crash_between_two_windows_of_one_batch_loses_nothing(tmp_path):
    """Window A is written, the process dies before window B: the re-run of the batch must
    write B (its sink versions follow A's, so A's staged rows must still be there)."""
    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    s = Stream()
    proc.process(0, s.batch())
    rts = [
        _open_window(proc, "db.t", w, [{"id": i, "v": w} for i in range(lo, lo + 5)])
        for w, lo in (("wa", 0), ("wb", 100))
    ]
    for w in ("wa", "wb"):
        s.marker(w, "LOW")
    proc.process(1, s.batch())  # the windows are in the saved state from here on
    for w in ("wa", "wb"):
        rts[0].reconciler.mark_staged(w)
        s.marker(w, "HIGH")
    batch = s.batch()
    real_apply = sink.apply
    calls = []

    def dying_apply(table, version, changes):
        calls.append(version)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")  # the second window's write never happens
        return real_apply(table, version, changes)

    sink.apply = dying_apply
    with pytest.raises(KeyboardInterrupt):
        proc.process(2, batch)
    sink.apply = real_apply
    assert len(sink.state()) == 5
    BatchProcessor(PREFIX, proc.store, [sink], None, lambda topic: 2).process(2, batch)
    assert len(sink.state()) == 10


class NulSink(MemorySink):
    """Stores text like the PostgreSQL sink does: a NUL character follows ``policy``."""

    def __init__(self, policy: str):
        from merger.sinks.nul_count import NulCounts

        super().__init__()
        self.policy = policy
        self.counts = NulCounts("memory", policy)

    def apply(self, table, version, changes: pa.Table) -> bool:
        from merger.sinks.nul import apply_nul_policy

        if version <= self.applied.get(tuple(table), -1):
            return False
        stored, changed = apply_nul_policy(".".join(table), changes, ["id"], ["v"], [], self.policy)
        self.counts.add(".".join(table), changed)
        return super().apply(table, version, stored)

    def nul_values_changed(self) -> dict:
        return self.counts.snapshot()


def _records(*streams) -> pa.Table:
    return pa.concat_tables([s.batch() for s in streams])


def test_a_value_a_sink_cannot_store_pauses_only_its_table(tmp_path):
    import dataclasses

    sink = NulSink("pause")
    proc = _processor(tmp_path, sink)
    proc.table("db.t", SPEC)
    proc.table("db.u", dataclasses.replace(SPEC, table="u"))
    t, u = Stream("db.t"), Stream("db.u")
    t.change("c", {"id": 1}, after={"id": 1, "v": "fine"})
    t.change("c", {"id": 2}, after={"id": 2, "v": "nul\x00here"})
    u.change("c", {"id": 1}, after={"id": 1, "v": "other"})
    proc.process(0, _records(t, u))
    rt = proc.tables["db.t"]
    assert rt.phase == "paused"
    assert "db.t" in rt.error and "{'id': 2}" in rt.error and "'v'" in rt.error and "U+0000" in rt.error
    assert sink.state(("db", "u")) == {(1,): {"id": 1, "v": "other"}}
    # the paused table's changes are kept on disk, the other table flows on
    t.change("u", {"id": 1}, before={"id": 1, "v": "fine"}, after={"id": 1, "v": "later"})
    u.change("c", {"id": 2}, after={"id": 2, "v": "more"})
    proc.process(1, _records(t, u))
    assert len(sink.state(("db", "u"))) == 2
    assert proc.status()["tables"]["db.t"]["phase"] == "paused"
    # the operator sets nul_policy: strip and resumes: every kept change is applied, in order
    sink.policy = "strip"
    tick = proc.store.tick()
    proc.resume_table(rt)
    assert proc.store.tick() > tick  # a batch for the kept changes, even if no record comes
    proc.process(2, _records(t, u))
    assert rt.phase == "streaming"
    assert sink.state() == {(1,): {"id": 1, "v": "later"}, (2,): {"id": 2, "v": "nulhere"}}
    # the stripped value is counted for its table, in the status `cdc status` shows
    tables = proc.status()["tables"]
    assert (tables["db.t"]["nul_values_changed"], tables["db.u"]["nul_values_changed"]) == (1, 0)


def test_a_snapshot_row_a_sink_cannot_store_pauses_its_table_and_keeps_the_window(tmp_path):
    sink = NulSink("pause")
    proc = _processor(tmp_path, sink)
    s = Stream()
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": 1, "v": "ok"}, {"id": 2, "v": "bad\x00"}])
    s.marker("w1", "LOW")
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    proc.process(1, s.batch())
    assert rt.phase == "paused" and "{'id': 2}" in rt.error
    assert "w1" in rt.reconciler.windows  # not emitted: it will be after `cdc resume`
    sink.policy = "replace"
    proc.resume_table(rt)
    proc.process(2, s.batch())
    assert sink.state() == {(1,): {"id": 1, "v": "ok"}, (2,): {"id": 2, "v": "bad\ufffd"}}
    assert "w1" not in rt.reconciler.windows


def test_a_new_state_dir_writes_above_the_versions_the_sinks_recorded(tmp_path):
    """A merger started with a new state_dir against sink tables an earlier merger wrote:
    its batch ids start at 0 again, its writes must not be skipped."""
    from merger.batch.versions import PER_BATCH

    sink = MemorySink()
    sink.ensure_table(("db", "t"), None, ["id"])
    sink.applied[("db", "t")] = 57 * PER_BATCH + 3  # recorded by the earlier merger
    proc = _processor(tmp_path, sink)
    proc.table("db.t", SPEC)
    s = Stream()
    proc.process(0, s.batch())
    s.change("c", {"id": 1}, after={"id": 1, "v": "a"})
    batch = s.batch()
    proc.process(1, batch)
    assert sink.state() == {(1,): {"id": 1, "v": "a"}}
    # the batch run again after a crash (a new process, same state_dir): still skipped
    writes = sink.writes
    BatchProcessor(PREFIX, proc.store, [sink], None, lambda topic: 2).process(1, batch)
    assert sink.writes == writes
    s.change("u", {"id": 1}, before={"id": 1, "v": "a"}, after={"id": 1, "v": "b"})
    proc.process(2, s.batch())
    assert sink.state() == {(1,): {"id": 1, "v": "b"}}


@pytest.mark.parametrize("policy", ["pause", "dead_letter"])
def test_a_change_that_cannot_be_decoded_pauses_its_table_by_default(tmp_path, policy):
    """on_bad_record: pause (the default) stops only that table, its changes kept, never
    dropped with a warning; dead_letter writes it to the dead-letter topic and goes on."""
    import dataclasses

    letters = []
    sink = MemorySink()
    kw = {} if policy == "pause" else {"on_bad_record": "dead_letter"}
    proc = _processor(tmp_path, sink, dead_letter=lambda record, why: letters.append(why), **kw)
    proc.table("db.t", SPEC)
    proc.table("db.u", dataclasses.replace(SPEC, table="u"))
    t, u = Stream("db.t"), Stream("db.u")
    t.change("c", {"id": 1}, after={"id": 1, "v": "fine"})
    t.change("c", {"id": "x"}, after={"id": "not-a-number", "v": "bad"})
    u.change("c", {"id": 1}, after={"id": 1, "v": "other"})
    proc.process(0, _records(t, u))
    assert sink.state(("db", "u")) == {(1,): {"id": 1, "v": "other"}}
    rt = proc.tables["db.t"]
    if policy == "dead_letter":
        assert rt.phase == "streaming" and len(letters) == 1 and sink.state() == {(1,): {"id": 1, "v": "fine"}}
        return
    assert rt.phase == "paused" and not letters
    assert "offset" in rt.error and "cannot decode" in rt.error and "cdc snapshot db.t" in rt.error, rt.error
    assert (proc.store.root / "paused").exists()  # the changes are kept
    assert proc.status()["tables"]["db.t"]["phase"] == "paused"


def test_each_batch_teaches_the_record_sizes_the_kafka_source_admits_by(tmp_path):
    from merger.kafka.offsets import read_record_sizes

    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    s = Stream()
    for i in range(10):
        s.change("c", {"id": i}, after={"id": i, "v": "x" * 10})
    batch = s.batch()
    proc.process(0, batch)
    path = str(proc.store.record_sizes_path)
    narrow = read_record_sizes(path)[s.topic]
    size = sum(len(r["key"]) + len(r["value"]) for r in batch.to_pylist())
    assert narrow == pytest.approx(size / 10, abs=0.1)  # what the planner reads
    assert proc.last_timing["recordBytes"] == size
    for i in range(10, 12):
        s.change("c", {"id": i}, after={"id": i, "v": "y" * 5000})
    proc.process(1, s.batch())
    wide = read_record_sizes(path)[s.topic]
    assert wide > 5000  # wider rows: the estimate rises at once
    fresh = _processor(tmp_path, MemorySink())
    fresh.process(2, s.batch())  # an empty batch learns nothing, keeps the file
    assert read_record_sizes(path)[s.topic] == wide
    # a topic seen only through watermark markers (an empty table's snapshot) stays new:
    # the markers say nothing of the width of its rows
    other = Stream("db.u")
    other.marker("w9", "LOW")
    fresh.process(3, other.batch())
    assert other.topic not in read_record_sizes(path)


@pytest.mark.parametrize(
    "garbled",
    [
        b"bin.000001:99999999999:0",
        b"bin.000001:-5:0",
        b"bin.000001:1:0:7",
        b"bin.000001:1:0:0:99999",
        b"bin.000001:1:0:1:9:9",
        b"no position",
    ],
)
@pytest.mark.parametrize("policy", ["dead_letter", "pause"])
def test_a_garbled_position_header_is_a_bad_record_and_never_advances_the_replay_filter(tmp_path, garbled, policy):
    sink = MemorySink()
    dead = []
    proc = _processor(tmp_path, sink, on_bad_record=policy, dead_letter=lambda r, why: dead.append(r["offset"]))
    rt = proc.table("db.t", SPEC)
    s = Stream(partitions=1)
    s.change("c", {"id": 1}, after={"id": 1, "v": "a"})
    s.change("c", {"id": 2}, after={"id": 2, "v": "b"})
    s.pending[-1]["headers"][0]["value"] = garbled
    s.change("c", {"id": 3}, after={"id": 3, "v": "c"})
    proc.process(0, s.batch())
    assert proc.bad_records == 1 and dead == [1]
    if policy == "pause":  # the table stops at the record, its changes kept until `cdc resume`
        assert rt.phase == "paused" and "offset 1" in rt.error and sink.state() == {}
        proc.resume_table(rt)
        proc.process(1, Stream(partitions=1).batch())
    assert sink.state() == {(1,): {"id": 1, "v": "a"}, (3,): {"id": 3, "v": "c"}}


def test_a_window_waits_while_its_partition_is_behind_and_repeated_expiry_pauses_the_table(tmp_path):
    """Issue 23: a timed-out window whose HIGH marker may wait unread (the reader is behind
    in that partition) stays open, and is emitted once the marker is read; windows that
    expire WINDOW_EXPIRIES_LIMIT times in a row pause the table with the reason, instead
    of being read again for ever."""
    sink = MemorySink()
    behind: set[int] = {1}
    proc = _processor(tmp_path, sink, window_timeout_s=0.05)
    proc.reader_behind = lambda: {(f"{PREFIX}.db.t", p) for p in behind}
    s = Stream()
    s.change("c", {"id": 1}, after={"id": 1, "v": "a"})
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": f"snap{i}"} for i in range(1, 4)])
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "LOW")
    proc.process(1, s.batch())
    time.sleep(0.1)
    proc.process(2, s.batch())  # timed out, but partition 1 holds unread records
    assert "w1" in rt.reconciler.windows
    s.marker("w1", "HIGH")
    proc.process(3, s.batch())
    assert "w1" not in rt.reconciler.windows and len(sink.state()) == 3  # emitted

    behind.clear()  # read to the end: windows whose markers never come expire
    for n in range(1, WINDOW_EXPIRIES_LIMIT + 1):
        _open_window(proc, "db.t", f"x{n}", [{"id": 9, "v": "x"}])
        s.marker(f"x{n}", "LOW")
        proc.process(3 + 2 * n, s.batch())
        time.sleep(0.1)
        proc.process(4 + 2 * n, s.batch())
        assert f"x{n}" not in rt.reconciler.windows
        assert (rt.phase == "paused") == (n == WINDOW_EXPIRIES_LIMIT), (n, rt.phase)
    status = proc.status()["tables"]["db.t"]
    assert status["phase"] == "paused"
    assert f"{WINDOW_EXPIRIES_LIMIT} windows in a row expired" in status["error"]
    assert "partition(s) [0, 1]" in status["error"] and "cdc resume db.t" in status["error"]
    proc.resume_table(rt)
    assert rt.phase == "streaming" and rt.windows_expired == 0


def test_a_window_waits_for_every_partition_of_a_topic_created_after_the_table_was_met(tmp_path):
    """The table is met (its snapshot planned) before ingest created its topic: the broker
    then knows no partitions. A batch holding only partition 0's markers (the admission cut
    the rest) must not make the window ready: its topic has 3 partitions by then."""
    sink = MemorySink()
    created = {"partitions": None}
    store = StateStore(tmp_path / "state")
    proc = BatchProcessor(PREFIX, store, [sink], None, lambda topic: created["partitions"] or 1)
    proc.clock.restored = True
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": "snap"} for i in range(1, 4)])
    rt.reconciler.mark_staged("w1")
    assert rt.partitions == 1
    created["partitions"] = 3  # ingest creates the topic with the first marker
    s = Stream(partitions=3)
    s.marker("w1", "LOW")
    s.marker("w1", "HIGH")
    records = s.batch()
    proc.process(0, records.filter(pc.equal(records["partition"], 0)))
    assert rt.partitions == 3 and "w1" in rt.reconciler.windows and sink.writes == 0
    proc.process(1, records.filter(pc.not_equal(records["partition"], 0)))
    assert "w1" not in rt.reconciler.windows and len(sink.state()) == 3


def test_a_change_of_a_sharded_source_stops_the_merger_before_anything_is_applied(tmp_path):
    """The merger's part of sharded sources (snapshots per shard, DDL across shards) is not
    built: it stops with the reason at the first change of a shard, rather than mix it in."""
    from merger.errors import MergerError

    sink = MemorySink()
    proc = _processor(tmp_path, sink)
    proc.table("db.t", SPEC)
    s = Stream(partitions=1)
    s.change("c", {"id": 1}, after={"id": 1, "v": "a"})
    s.pending[-1]["headers"][0]["value"] = b"binlog.000001:4:0@shard1"
    with pytest.raises(MergerError, match="shard shard1 of a sharded source"):
        proc.process(0, s.batch())
    assert sink.state() == {}


class ShardStream(Stream):
    """Two shards' records in one topic, interleaved as one producer sent them: each
    shard's positions rise along its own binlog (shard a's far above shard b's)."""

    def __init__(self, partitions: int = 2):
        super().__init__(partitions=partitions)
        self.positions = {"a": 900_000, "b": 1_000}
        self.shard = "a"

    def _add(self, partition: int, key, value, pos: int):
        super()._add(partition, key, value, pos)
        header = self.pending[-1]["headers"][0]
        header["value"] = f"bin.000001:{self.positions[self.shard]}:0@{self.shard}".encode()
        self.positions[self.shard] += 1 if value == {"op": "m"} and partition < self.partitions - 1 else 100
        if value == {"op": "m"} and partition < self.partitions - 1:
            self.positions[self.shard] -= 1  # a marker: the same position in every partition

    def on(self, shard: str) -> "ShardStream":
        self.shard = shard
        return self


@pytest.mark.parametrize(
    "order,owner,other",
    [
        ("shards merged", "a", "b"),
        ("shards merged", "b", "a"),
        # each broken copy where it shows: the window of the shard of high positions (a) is
        # lost when the batch is walked by sequence; the window of the shard of low
        # positions (b) when the reconciler tells replays by sequence
        ("broken: by sequence", "a", "b"),
        ("broken: reconciler by sequence", "b", "a"),
    ],
)
def test_a_window_of_one_shard_among_another_shards_changes(tmp_path, monkeypatch, order, owner, other):
    """Shard a's window, with shard b's changes (of lower positions) between its markers in
    the same partitions: a's change after LOW still beats the window's row, b's changes are
    applied. The broken copy walks the batch in the one-server order (by sequence): b's
    records then come before a's LOW, the offsets go back, and the window is lost."""
    import merger.sources.sharded_topics as sharded_topics

    if order == "broken: by sequence":
        monkeypatch.setattr(
            sharded_topics, "shards_merged", lambda placed: sorted(range(len(placed)), key=lambda i: placed[i][3])
        )
    if order == "broken: reconciler by sequence":  # the markers' and events' sequences as offsets
        monkeypatch.setattr(sharded_topics.ShardedTopics, "reconciler_order", lambda self, offset, seq: (seq, None))
    sink = MemorySink()
    proc = _processor(tmp_path, sink, sharded=True)
    s = ShardStream()
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": f"snap{i}"} for i in range(1, 7)])
    s.on(owner).marker("w1", "LOW")
    for i in range(100, 106):
        s.on(other).change("c", {"id": i}, after={"id": i, "v": f"{other}{i}"})
    s.on(owner).change("u", {"id": 3}, before={"id": 3, "v": "snap3"}, after={"id": 3, "v": "new"})
    s.on(other).change("u", {"id": 100}, before={"id": 100, "v": f"{other}100"}, after={"id": 100, "v": "o-new"})
    rt.reconciler.mark_staged("w1")
    s.on(owner).marker("w1", "HIGH")
    proc.process(0, s.batch())
    expected = {(i,): {"id": i, "v": f"snap{i}"} for i in range(1, 7)}
    expected[(3,)] = {"id": 3, "v": "new"}
    expected.update({(i,): {"id": i, "v": f"{other}{i}"} for i in range(101, 106)})
    expected[(100,)] = {"id": 100, "v": "o-new"}
    if order.startswith("broken"):
        assert sink.state() != expected or "w1" in rt.reconciler.windows
        return
    assert sink.state() == expected
    assert "w1" not in rt.reconciler.windows


class UniqueStream(ShardStream):
    """A ShardStream of key mode unique: every record also carries ingest's emission
    counter (``cdc.emitted``), rising with each write; a marker's copies share one."""

    def __init__(self, partitions: int = 2):
        super().__init__(partitions=partitions)
        self.emitted = 1

    def _add(self, partition: int, key, value, pos: int):
        super()._add(partition, key, value, pos)
        self.pending[-1]["headers"].append({"key": EMITTED_HEADER, "value": str(self.emitted).encode()})
        marker = isinstance(value, dict) and value.get("op") == "m"  # (a marker's value holds its header too)
        if not (marker and partition < self.partitions - 1):
            self.emitted += 1


@pytest.mark.parametrize("key_mode", ["unique", "origin"])
def test_key_mode_unique_orders_a_moved_keys_changes_by_the_emission_counter(tmp_path, key_mode):
    """Key 1 moved from shard a (high positions) to shard b (low ones): b's later change
    wins, and a window of a emitted after it (HIGH before b's change) does not overwrite
    it. The broken copy (the positions as sequences, key mode origin's kind) keeps a's."""
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode=key_mode)
    s = UniqueStream()
    rt = _open_window(proc, "db.t", "w1", [{"id": 1, "v": "snap-a"}, {"id": 2, "v": "snap-a"}])
    s.on("a").marker("w1", "LOW")
    s.on("a").change("c", {"id": 1}, after={"id": 1, "v": "a"})
    rt.reconciler.mark_staged("w1")
    s.on("a").marker("w1", "HIGH")
    s.on("b").change("u", {"id": 2}, before={"id": 2, "v": "snap-a"}, after={"id": 2, "v": "b"})
    proc.process(0, s.batch())
    s.on("b").change("u", {"id": 1}, before={"id": 1, "v": "a"}, after={"id": 1, "v": "b"})
    proc.process(1, s.batch())
    expected = {(1,): {"id": 1, "v": "b"}, (2,): {"id": 2, "v": "b"}}
    if key_mode == "origin":
        assert sink.state() != expected
        return
    assert sink.state() == expected


def test_key_mode_unique_pauses_a_table_at_a_record_without_the_emission_counter(tmp_path):
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    proc.table("db.t", SPEC)
    s = UniqueStream()
    s.on("a").change("c", {"id": 1}, after={"id": 1, "v": "a"})
    s.on("a").change("c", {"id": 2}, after={"id": 2, "v": "a"})
    s.pending[-1]["headers"].pop()
    proc.process(0, s.batch())
    rt = proc.tables.get("db.t")
    assert rt.phase == "paused" and "no cdc.emitted header" in rt.error and "\n" not in rt.error


class RowSink(MemorySink, KeepsRows):
    """A MemorySink that keeps rows readable by key, as PostgreSQL's and Delta's."""

    def rows_with_keys(self, table, key_columns, keys) -> pa.Table:
        rows = self.tables[tuple(table)]
        held = [{c: v for c, v in rows[tuple(k)].items() if c != "_cdc_seq"} for k in keys if tuple(k) in rows]
        return pa.Table.from_pylist(
            held, schema=pa.schema([("id", pa.int32()), ("v", pa.string()), (ORIGIN, pa.string())])
        )


ORIGIN = "__cdc_origin"
UNIQUE = TableSpec(
    "db",
    "t",
    (
        ColumnSpec("id", "int", 1, nullable=False),
        ColumnSpec("v", "varchar", 2, length=20),
        ColumnSpec(ORIGIN, "varchar", 3, length=255, nullable=False),
    ),
    ("id",),
)


def unique_change(s: "UniqueStream", shard: str, op: str, key: int, v: str, moved: str | None = None) -> None:
    row = {"id": key, "v": v, ORIGIN: f"{shard}/db.t"}
    s.on(shard).change(op, {"id": key}, before=row if op == "d" else None, after=None if op == "d" else row)
    if moved:
        s.pending[-1]["headers"].append({"key": MOVED_FROM_HEADER, "value": moved.encode()})


def test_key_mode_unique_pauses_a_table_at_a_key_from_a_second_origin(tmp_path):
    """Key 1 lives on shard a; shard b writes it with no move declared: the table pauses
    with one line naming the key and both origins, and the way out; nothing of b's is
    applied, key 2 of the same slice neither (kept with the table's changes)."""
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    proc.table("db.t", UNIQUE)
    s = UniqueStream()
    unique_change(s, "a", "c", 1, "a1")
    proc.process(0, s.batch())
    unique_change(s, "b", "c", 2, "b2")
    unique_change(s, "b", "u", 1, "b1")
    proc.process(1, s.batch())
    rt = proc.tables.get("db.t")
    assert rt.phase == "paused", rt.error
    assert "key 1" in rt.error and "a/db.t" in rt.error and "b/db.t" in rt.error and "\n" not in rt.error
    assert "key_mode: origin" in rt.error and "cdc shard move" in rt.error
    assert sink.state() == {(1,): {"id": 1, "v": "a1", ORIGIN: "a/db.t"}}


def test_key_mode_unique_pauses_at_a_write_on_a_moves_source_after_its_switch(tmp_path):
    """Ingest emits such a write with cdc.moved_to (not dropped unseen): the table pauses,
    naming the key, the shard written and the move's target; nothing of it is applied."""
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    proc.table("db.t", UNIQUE)
    s = UniqueStream()
    unique_change(s, "a", "c", 1, "a1")
    proc.process(0, s.batch())
    unique_change(s, "a", "u", 1, "stray")
    s.pending[-1]["headers"].append({"key": MOVED_TO_HEADER, "value": b"b"})
    proc.process(1, s.batch())
    rt = proc.tables.get("db.t")
    assert rt.phase == "paused", rt.error
    assert "key 1" in rt.error and "a/db.t" in rt.error and "shard b" in rt.error and "\n" not in rt.error
    assert sink.state() == {(1,): {"id": 1, "v": "a1", ORIGIN: "a/db.t"}}


def test_key_mode_unique_pauses_at_two_origins_inserting_one_key_in_one_batch(tmp_path):
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    proc.table("db.t", UNIQUE)
    s = UniqueStream()
    unique_change(s, "a", "c", 5, "a")
    unique_change(s, "b", "c", 5, "b")
    proc.process(0, s.batch())
    rt = proc.tables.get("db.t")
    assert rt.phase == "paused" and "key 5" in rt.error
    assert sink.state() == {}


def test_key_mode_unique_applies_a_moved_key_and_a_batch_run_again(tmp_path, monkeypatch):
    """b's change of key 1 names a in cdc.moved_from: applied, the row's origin is b's. The
    same batch run again after a crash (the sink holds b's row, a's change comes again)
    is no conflict; the broken copy that checks a batch the sink already holds pauses."""
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    proc.table("db.t", UNIQUE)
    s = UniqueStream()
    unique_change(s, "a", "c", 1, "a1")
    unique_change(s, "b", "u", 1, "b1", moved="a")
    records = s.batch()
    proc.process(0, records)
    assert proc.tables.get("db.t").phase == "streaming"
    assert sink.state() == {(1,): {"id": 1, "v": "b1", ORIGIN: "b/db.t"}}
    for broken in (False, True):
        if broken:
            monkeypatch.setattr(RowSink, "applied_version", lambda self, table: None)
        again = BatchProcessor(PREFIX, proc.store, [sink], None, lambda topic: 2, sharded=True, key_mode="unique")
        again.table("db.t", UNIQUE)
        again.process(0, records)  # no state saved before batch 0: all of it again
        assert (again.tables.get("db.t").phase == "paused") == broken
    assert sink.state() == {(1,): {"id": 1, "v": "b1", ORIGIN: "b/db.t"}}


def test_key_mode_unique_needs_a_sink_that_keeps_rows(tmp_path):
    from merger.errors import MergerError

    with pytest.raises(MergerError, match="needs a sink that keeps rows") as exc:
        _processor(tmp_path, MemorySink(), sharded=True, key_mode="unique")
    assert "\n" not in str(exc.value)
    _processor(tmp_path, MemorySink(), sharded=True)  # key mode origin: no check


def _with_cutover(s: "UniqueStream", passed: list) -> None:
    """The marker just added (one copy per partition) carries the moves its shard passed."""
    from cdc.shard_cutover import passed_to_json

    for record in s.pending[-s.partitions :]:
        header = next(h for h in record["headers"] if h["key"] == WATERMARK_HEADER)
        marker = json.loads(header["value"])
        marker["cutover"] = {
            "passed": passed_to_json(passed),
            "switched": [m.to_json() for m, r in passed if r == "switch"],
        }
        header["value"] = json.dumps(marker).encode()


@pytest.mark.parametrize("switched", [False, True])
def test_key_mode_unique_leaves_out_window_rows_of_a_range_moved_away_and_asks_its_target(tmp_path, switched):
    """A window on shard a whose HIGH marker says a passed the switch of keys 10..20 to b:
    its rows of those keys are left out (their values may lag b's) and, once the snapshot
    is done, a snapshot of the table on shard b is asked for. Without the move every row
    is emitted, and nothing asked."""
    from cdc.shard_cutover import SWITCH, KeyRange, Move

    move = Move(1, KeyRange(10, 20), "a", "b", "db.t")
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    rows = [{"id": i, "v": "snap", ORIGIN: "a/db.t"} for i in (5, 15, 25)]
    rt = _open_window(proc, "db.t", "w1", rows, spec=UNIQUE, chunk="db.t@a/db.t:0001")
    s = UniqueStream()
    s.on("a").marker("w1", "LOW")
    _with_cutover(s, [])
    rt.reconciler.mark_staged("w1")
    s.on("a").marker("w1", "HIGH")
    _with_cutover(s, [(move, SWITCH)] if switched else [])
    proc.process(0, s.batch())
    assert "w1" not in rt.reconciler.windows
    emitted = sorted(k[0] for k in sink.state())
    requests = [(r["action"], r["table"], r["args"]) for r in proc.store.take_requests()]
    if switched:
        assert emitted == [5, 25]
        assert requests == [("snapshot", "db.t", {"where": None, "shard": "b"})]
    else:
        assert emitted == [5, 15, 25] and requests == []


def test_key_mode_unique_asks_for_the_targets_snapshot_once_the_running_one_is_done(tmp_path):
    """A new plan replaces a running one: the snapshot of the move's target is asked for
    only when the last window of the plan is emitted, not at the window that left rows out."""
    from cdc.shard_cutover import SWITCH, KeyRange, Move

    switched = [(Move(1, KeyRange(10, 20), "a", "b", "db.t"), SWITCH)]
    sink = RowSink()
    proc = _processor(tmp_path, sink, sharded=True, key_mode="unique")
    s = UniqueStream()
    rt = _open_window(proc, "db.t", "w1", [{"id": 15, "v": "x", ORIGIN: "a/db.t"}], spec=UNIQUE, chunk="db.t@a/db.t:1")
    _open_window(proc, "db.t", "w2", [{"id": 30, "v": "y", ORIGIN: "b/db.t"}], spec=UNIQUE, chunk="db.t@b/db.t:2")
    for wid, shard in (("w1", "a"), ("w2", "b")):
        s.on(shard).marker(wid, "LOW")
        _with_cutover(s, switched if shard == "a" else [])
        rt.reconciler.mark_staged(wid)
        s.on(shard).marker(wid, "HIGH")
        _with_cutover(s, switched if shard == "a" else [])
        proc.process(0 if wid == "w1" else 1, s.batch())
        requests = proc.store.take_requests()
        if wid == "w1":
            assert requests == [] and proc.store.load_plan("db.t")["then_snapshot"] == ["b"]
    assert [(r["action"], r["args"]) for r in requests] == [("snapshot", {"where": None, "shard": "b"})]
    assert sorted(k[0] for k in sink.state()) == [30]


def test_key_mode_unique_window_cutover_survives_a_restart(tmp_path):
    from cdc.shard_cutover import SWITCH, KeyRange, Move
    from merger.dblog import Reconciler

    rec = Reconciler(1)
    rec.open_window("w", ["c"], 0.0)
    cut = {"passed": [[Move(1, KeyRange(1, 2), "a", "b", "db.t").to_json(), SWITCH]], "switched": []}
    rec.on_marker(0, 1, "w", "LOW", 7, {"passed": [], "switched": []})
    rec.on_marker(0, 2, "w", "HIGH", 9, cut)
    again = Reconciler.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert again.window("w").cutover == {"LOW": {"passed": [], "switched": []}, "HIGH": cut}
    plain = Reconciler(1)
    plain.open_window("w", ["c"], 0.0)
    assert "cutover" not in plain.to_dict()["windows"][0]  # other windows' state as before


def test_one_server_changes_stop_a_sharded_merger(tmp_path):
    from merger.errors import MergerError

    proc = _processor(tmp_path, MemorySink(), sharded=True)
    proc.table("db.t", SPEC)
    s = Stream(partitions=1)
    s.change("c", {"id": 1}, after={"id": 1, "v": "a"})
    with pytest.raises(MergerError, match="one-server source"):
        proc.process(0, s.batch())


ORIGINS = TableSpec(
    "db",
    "t",
    (
        ColumnSpec("id", "int", 1, nullable=False),
        ColumnSpec("v", "varchar", 2, length=20),
        ColumnSpec("__cdc_origin", "varchar", 3, length=255, nullable=False),
    ),
    ("id", "__cdc_origin"),
)


def _truncate_of(s: ShardStream, shard: str, table: str) -> None:
    """A TRUNCATE of ``db.<table>`` on ``shard``: a record in every partition of the logical
    table's topic at the statement's one position, its source naming the physical table."""
    s.on(shard)
    pos = s.positions[shard]
    for p in range(s.partitions):
        Stream._add(s, p, None, {"op": "t", "source": {"ts_ms": 1, "db": "db", "table": table, "shard": shard}}, 0)
        s.pending[-1]["headers"][0]["value"] = f"bin.000001:{pos}:0@{shard}".encode()
    s.positions[shard] += 100


@pytest.mark.parametrize("broken", [False, True])
def test_a_truncate_of_one_origin_empties_its_rows_and_its_windows_only(tmp_path, monkeypatch, broken):
    """Shard a truncates its db.t_0, an origin of the logical table db.t: that origin's rows
    go, with its open window's snapshot rows and a change of it from before the truncate
    read late from a lagging partition; shard b's rows and window, and a's changes after
    the truncate, stay. The broken copy takes the truncate for one of the whole table."""
    if broken:
        from merger.batch.origins import Origins

        monkeypatch.setattr(Origins, "truncated_by", lambda self, rt, ev: None)
    sink = MemorySink()
    proc = _processor(tmp_path, sink, sharded=True)
    a, b = "a/db.t_0", "b/db.t_0"
    rt = _open_window(proc, "db.t", "wa", [{"id": 50, "v": "snap", "__cdc_origin": a}], ORIGINS, f"db.t@{a}:01")
    _open_window(proc, "db.t", "wb", [{"id": 60, "v": "snap", "__cdc_origin": b}], ORIGINS, f"db.t@{b}:01")
    s = ShardStream()
    s.on("a").marker("wa", "LOW")
    s.on("b").marker("wb", "LOW")
    for i in range(1, 4):
        s.on("a").change("c", {"id": i, "__cdc_origin": a}, after={"id": i, "v": "a", "__cdc_origin": a})
        s.on("b").change("c", {"id": i, "__cdc_origin": b}, after={"id": i, "v": "b", "__cdc_origin": b})
    s.on("a").change("u", {"id": 3, "__cdc_origin": a}, after={"id": 3, "v": "late", "__cdc_origin": a})
    late = s.pending[-1]
    _truncate_of(s, "a", "t_0")
    s.on("a").change("c", {"id": 9, "__cdc_origin": a}, after={"id": 9, "v": "after", "__cdc_origin": a})
    rt.reconciler.mark_staged("wa")
    proc.tables["db.t"].reconciler.mark_staged("wb")
    s.on("a").marker("wa", "HIGH")
    s.on("b").marker("wb", "HIGH")
    # the late change's partition lags: the change and what follows it there come in the
    # next batch, after the other partition's copy of the truncate was applied
    lagging = [r for r in s.pending if r["partition"] == late["partition"] and r["offset"] >= late["offset"]]
    first = [r for r in s.pending if r not in lagging]
    proc.process(0, pa.Table.from_pylist(first, schema=RECORD_SCHEMA))
    proc.process(1, pa.Table.from_pylist(lagging, schema=RECORD_SCHEMA))
    expected = {(i, b): {"id": i, "v": "b", "__cdc_origin": b} for i in range(1, 4)}
    expected[(60, b)] = {"id": 60, "v": "snap", "__cdc_origin": b}
    expected[(9, a)] = {"id": 9, "v": "after", "__cdc_origin": a}
    if broken:
        assert sink.state() != expected
        return
    assert sink.state() == expected
    assert proc.tables["db.t"].origin_truncated == {a: proc.tables["db.t"].origin_truncated[a]}


def _drop_of(s: ShardStream, shard: str, table: str, kind: str = "DROP", spec=None, row: int = 0) -> None:
    """A DROP TABLE of ``db.<table>`` on ``shard`` (or another ``kind`` of DDL marker, at
    ``row`` of the statement): a DDL marker of the logical table in every partition at one
    position, its source naming the physical table."""
    from cdc.ddl import ddl_marker
    from cdc.wire.headers import DDL_HEADER

    s.on(shard)
    pos = s.positions[shard]
    marker = json.dumps(ddl_marker("db", "t", kind, f"{kind} TABLE db.{table}", spec)).encode()
    for p in range(s.partitions):
        value = {"op": "m", "source": {"ts_ms": 1, "db": "db", "table": table, "shard": shard}}
        Stream._add(s, p, None, {"op": "c"}, 0)
        s.pending[-1]["value"] = json.dumps(value).encode()
        s.pending[-1]["headers"] = [
            {"key": POSITION_HEADER, "value": f"bin.000001:{pos}:{row}@{shard}".encode()},
            {"key": DDL_HEADER, "value": marker},
        ]
    if row == 0:
        s.positions[shard] += 100


@pytest.mark.parametrize("on_drop", ["truncate", "keep"])
def test_a_drop_of_one_origin_empties_or_keeps_its_rows_only(tmp_path, on_drop):
    """Shard a drops its db.t_0: with ``on_drop: truncate`` that origin's rows go (once,
    though the marker is in every partition), with ``keep`` they stay; shard b's rows and
    later changes stay either way, and the logical table goes on streaming."""
    sink = MemorySink()
    proc = _processor(tmp_path, sink, sharded=True, on_drop=on_drop)
    proc.table("db.t", ORIGINS)
    a, b = "a/db.t_0", "b/db.t_0"
    s = ShardStream()
    for i in range(1, 4):
        s.on("a").change("c", {"id": i, "__cdc_origin": a}, after={"id": i, "v": "a", "__cdc_origin": a})
        s.on("b").change("c", {"id": i, "__cdc_origin": b}, after={"id": i, "v": "b", "__cdc_origin": b})
    _drop_of(s, "a", "t_0")
    s.on("b").change("c", {"id": 9, "__cdc_origin": b}, after={"id": 9, "v": "b", "__cdc_origin": b})
    proc.process(0, s.batch())
    expected = {(i, b): {"id": i, "v": "b", "__cdc_origin": b} for i in (1, 2, 3, 9)}
    if on_drop == "keep":
        expected.update({(i, a): {"id": i, "v": "a", "__cdc_origin": a} for i in (1, 2, 3)})
    assert sink.state() == expected
    rt = proc.tables["db.t"]
    assert rt.phase == "streaming" and rt.shard_ddl.through["a"] > 0
    writes = sink.writes
    proc.process(0, s.batch())  # nothing new: no write
    assert sink.writes == writes


def test_a_table_renamed_into_a_logical_table_is_an_origin_snapshotted_anew(tmp_path):
    """RENAME TABLE t_1 TO t_7 on shard a, t_7 routed too: t_1's rows go (a DROP of that
    origin), what t_7's origin held before (a swap) goes too, and a snapshot of shard a's
    tables is asked for, once, though the markers are in every partition."""
    sink = MemorySink()
    proc = _processor(tmp_path, sink, sharded=True)
    proc.table("db.t", ORIGINS)
    a1, a7, b1 = "a/db.t_1", "a/db.t_7", "b/db.t_1"
    s = ShardStream()
    for origin, shard in ((a1, "a"), (a7, "a"), (b1, "b")):
        s.on(shard).change("c", {"id": 1, "__cdc_origin": origin}, after={"id": 1, "v": "x", "__cdc_origin": origin})
    _drop_of(s, "a", "t_1", "DROP", None, row=0)
    _drop_of(s, "a", "t_7", "RENAME", ORIGINS, row=1)
    proc.process(0, s.batch())
    assert sink.state() == {(1, b1): {"id": 1, "v": "x", "__cdc_origin": b1}}
    requests = proc.store.take_requests()
    assert [(r["action"], r["table"], r["args"]) for r in requests] == [
        ("snapshot", "db.t", {"where": None, "shard": "a"})
    ]
    proc.process(0, s.batch())  # nothing new
    assert proc.store.take_requests() == []


def _origin_records(ops: list[tuple], partitions: int = 2) -> list[list[dict]]:
    """Each partition's records of ``ops`` (writes, deletes and truncates of the origins
    ``<shard>/db.<table>`` of the logical table db.t), each shard's positions rising along
    its binlog: a change in its key's partition, a truncate in every partition at one position."""
    out: list[list[dict]] = [[] for _ in range(partitions)]
    pos = {"a": 1_000, "b": 500_000}

    def add(p: int, shard: str, key, value: dict, headers: list | None = None) -> None:
        out[p].append(
            {
                "key": json.dumps(key).encode() if key is not None else None,
                "value": json.dumps(value).encode(),
                "topic": f"{PREFIX}.db.t",
                "partition": p,
                "offset": len(out[p]),
                "headers": [{"key": POSITION_HEADER, "value": f"bin.000001:{pos[shard]}:0@{shard}".encode()}],
            }
        )

    for op in ops:
        shard, table = op[1], op[2]
        origin = f"{shard}/db.{table}"
        source = {"ts_ms": 1, "db": "db", "table": table, "shard": shard}
        pos[shard] += 100
        if op[0] == "t":
            for p in range(partitions):
                add(p, shard, None, {"op": "t", "source": source})
            continue
        key = {"id": op[3], "__cdc_origin": origin}
        if op[0] == "d":
            row = {"id": op[3], "v": None, "__cdc_origin": origin}
            add(op[3] % partitions, shard, key, {"op": "d", "before": row, "after": None, "source": source})
        else:
            row = {"id": op[3], "v": op[4], "__cdc_origin": origin}
            add(op[3] % partitions, shard, key, {"op": "c", "before": None, "after": row, "source": source})
    return out


ORIGIN_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("w"),
            st.sampled_from("ab"),
            st.sampled_from(["t_0", "t_1"]),
            st.integers(0, 5),
            st.text("xyz", max_size=3),
        ),
        st.tuples(st.just("d"), st.sampled_from("ab"), st.sampled_from(["t_0", "t_1"]), st.integers(0, 3)),
        st.tuples(st.just("t"), st.sampled_from("ab"), st.sampled_from(["t_0", "t_1"])),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=ORIGIN_OPS, cuts=st.lists(st.integers(0, 30), min_size=2, max_size=6), behind=st.integers(1, 8))
def test_truncates_of_origins_against_a_model(tmp_path_factory, ops, cuts, behind):
    """Writes, deletes and TRUNCATEs of four origins (two shards, two tables each) of one
    logical table, the two partitions read in batches that cut them at different places
    (one partition lagging behind the other's truncate): the sink equals a model that
    applies each origin's statements in order, a truncate emptying that origin only."""
    model: dict = {}
    for op in ops:
        origin = f"{op[1]}/db.{op[2]}"
        if op[0] == "t":
            model = {k: v for k, v in model.items() if k[1] != origin}
        elif op[0] == "d":
            model.pop((op[3], origin), None)
        else:
            model[(op[3], origin)] = {"id": op[3], "v": op[4], "__cdc_origin": origin}
    parts = _origin_records(ops)
    sink = MemorySink()
    proc = _processor(tmp_path_factory.mktemp("p"), sink, sharded=True)
    proc.table("db.t", ORIGINS)
    # batch k takes each partition up to its own cut: partition 1 lags ``behind`` partition 0
    ends = sorted(set(cuts))
    taken = [0, 0]
    for k, end in enumerate([*ends, 10**6]):
        lag = [end, max(0, end - behind)] if k < len(ends) else [end, end]
        batch = []
        for p in range(2):
            upto = max(taken[p], min(lag[p], len(parts[p])))
            batch += parts[p][taken[p] : upto]
            taken[p] = upto
        proc.process(k, pa.Table.from_pylist(batch, schema=RECORD_SCHEMA))
    assert taken == [len(parts[0]), len(parts[1])]
    assert sink.state() == model


def test_the_merger_takes_a_tables_key_by_the_tested_chunk_key_rule(tmp_path):
    """The processor's key of a table is ``resolve_chunk_key``'s (primary key first, then
    ``snapshot.chunk_keys``), and a table with neither fails with that function's message."""
    keyless = TableSpec("db", "k", (ColumnSpec("a", "int", 1), ColumnSpec("b", "int", 2)), ())
    proc = _processor(tmp_path, MemorySink(), chunk_keys={"db.t": ["v"], "db.c": ["a"]})
    assert proc.table("db.t", SPEC).keys == ["id"]  # the primary key wins over chunk_keys
    rt = proc.table("db.k", keyless)
    assert rt.phase == "failed" and rt.error == no_chunk_key_error("db.k")
    configured = TableSpec("db", "c", (ColumnSpec("a", "int", 1), ColumnSpec("b", "int", 2)), ())
    assert proc.table("db.c", configured).keys == ["a"]
