"""Tests of merger.sinks: the Delta Lake sink (real Delta tables in tmp dirs), the
PostgreSQL sink (the local stack's PostgreSQL 15) and the Kafka merged-changelog sink
(the local stack's broker).

The core is a property test against a dict model (random upserts/deletes with random
sequences, batches in any order, replays of old versions, truncates): after every call
the sink's rows equal the model's live rows. It runs for Delta and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.sinks import SinkError, TableId
from merger.sinks import types as T
from merger.sinks.base import latest_per_key
from tests.support import readback

OPS = pa.schema([("_cdc_op", pa.string()), ("_cdc_seq", pa.int64())])


def batch(schema: pa.Schema, rows: list[dict]) -> pa.Table:
    full = pa.schema(list(schema) + list(OPS))
    return pa.table({n: [r.get(n) for r in rows] for n in full.names}, schema=full)


def sorted_rows(t: pa.Table, keys) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: tuple(r[k] for k in keys))


# ----------------------------------------------------------------------------- sink factories


@pytest.fixture(scope="session")
def delta_store(tmp_path_factory):
    """Where the Delta tests put their tables: local directories here; the same tests run
    on s3:// (the stack's moto server) in tests/integration/test_delta_object_store.py."""
    from tests.delta_stores import LocalDeltaStore

    return LocalDeltaStore(tmp_path_factory)


@pytest.fixture
def delta_sink(delta_store):
    return delta_store.sink()


def fresh(prefix="db") -> TableId:
    return TableId(prefix + uuid.uuid4().hex[:8], "t")


# ----------------------------------------------------------------------------- unit tests


def test_latest_per_key_keeps_highest_sequence_and_later_tie():
    t = pa.table(
        {
            "k": [1, 2, 1, 3, 2, 1],
            "v": list("abcdef"),
            "_cdc_op": ["c", "u", "u", "d", "r", "c"],
            "_cdc_seq": [5, 3, 7, 1, 3, 2],
        }
    )
    out = latest_per_key(TableId("d", "t"), t, ["k"]).to_pylist()
    assert [(r["k"], r["v"], r["_cdc_seq"]) for r in out] == [(1, "c", 7), (2, "e", 3), (3, "d", 1)]
    composite = pa.table({"a": [1, 1, 1], "b": ["x", "y", "x"], "_cdc_op": ["c", "c", "u"], "_cdc_seq": [1, 2, 0]})
    out = latest_per_key(TableId("d", "t"), composite, ["a", "b"]).to_pylist()
    assert [(r["a"], r["b"], r["_cdc_seq"]) for r in out] == [(1, "x", 1), (1, "y", 2)]


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"_cdc_op": ["x"]}, "unknown _cdc_op"),
        ({"k": pa.array([None], pa.int64())}, "null in key column"),
    ],
)
def test_latest_per_key_rejects_bad_batches(bad, message):
    cols = {"k": pa.array([1], pa.int64()), "_cdc_op": ["c"], "_cdc_seq": [1]}
    cols.update(bad)
    with pytest.raises(SinkError, match=message):
        latest_per_key(TableId("d", "t"), pa.table(cols), ["k"])


def test_widening_rules():
    assert T.compare(pa.int32(), pa.int64()) == T.WIDEN
    assert T.compare(pa.int64(), pa.int32()) is None
    assert T.compare(pa.int64(), pa.decimal128(20, 0)) == T.WIDEN
    assert T.compare(pa.int64(), pa.decimal128(18, 0)) is None
    assert T.compare(pa.decimal128(10, 2), pa.decimal128(12, 2)) == T.WIDEN
    assert T.compare(pa.decimal128(10, 2), pa.decimal128(10, 3)) is None  # integer digits shrink
    assert T.compare(pa.decimal128(10, 2), pa.decimal128(12, 3)) == T.WIDEN
    assert T.compare(pa.float32(), pa.float64()) == T.WIDEN
    assert T.compare(pa.string(), pa.int64()) is None
    assert T.compare(pa.timestamp("us"), pa.timestamp("us", tz="UTC")) is None
    assert T.compare(pa.string(), pa.json_()) == T.SAME


def test_pg_type_mapping():
    cases = {
        pa.int8(): "smallint",
        pa.uint8(): "smallint",
        pa.int16(): "smallint",
        pa.int32(): "integer",
        pa.uint16(): "integer",
        pa.uint32(): "bigint",
        pa.int64(): "bigint",
        pa.uint64(): "numeric(20,0)",
        pa.float32(): "real",
        pa.float64(): "double precision",
        pa.decimal128(12, 3): "numeric(12,3)",
        pa.decimal256(65, 30): "numeric(65,30)",
        pa.string(): "text",
        pa.large_string(): "text",
        pa.binary(): "bytea",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.timestamp("us"): "timestamp without time zone",
        pa.timestamp("ms", tz="UTC"): "timestamp with time zone",
        pa.time64("us"): "interval",
        pa.duration("us"): "interval",
        pa.json_(): "jsonb",
        pa.dictionary(pa.int8(), pa.string()): "text",
    }
    for arrow, pg in cases.items():
        storage = T.pg_storage_type(arrow)
        assert T.pg_type_name(storage) == pg, arrow
        assert T.pg_type_to_storage(pg) == storage, arrow
    assert T.delta_storage_type(pa.time64("us")) == pa.int64()
    assert T.delta_storage_type(pa.decimal256(65, 30)) == pa.string()
    with pytest.raises(T.UnsupportedType):
        T.pg_storage_type(pa.null())


# ----------------------------------------------------------------------------- shared behaviour

SIMPLE = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int32())])


ALL_TYPES = pa.schema(
    [
        ("id", pa.int64()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec", pa.decimal128(20, 6)),
        ("s", pa.string()),
        ("b", pa.binary()),
        ("ok", pa.bool_()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tstz", pa.timestamp("us", tz="UTC")),
        ("tm", pa.time64("us")),
        ("dur", pa.duration("us")),
        ("j", pa.json_()),
    ]
)

ALL_ROWS = [
    {
        "id": 1,
        "i8": -128,
        "i16": 32767,
        "i32": -(2**31),
        "u64": 2**64 - 1,
        "f32": 1.5,
        "f64": -1e300,
        "dec": decimal.Decimal("-12345678901234.123456"),
        "s": 'ünïcødé 😀 "q" ,;\\',
        "b": b"\x00\xff\x10\\",
        "ok": True,
        "d": dt.date(1000, 1, 1),
        "ts": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "tstz": dt.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=dt.timezone.utc),
        "tm": dt.time(23, 59, 59, 999999),
        "dur": dt.timedelta(hours=838, minutes=59, seconds=59),
        "j": '{"a": [1, 2]}',
    },
    {
        "id": 2,
        "i8": 0,
        "i16": None,
        "i32": 0,
        "u64": 0,
        "f32": None,
        "f64": float("inf"),
        "dec": decimal.Decimal("0.000001"),
        "s": "",
        "b": b"",
        "ok": False,
        "d": dt.date(1970, 1, 1),
        "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 500000),
        "tstz": None,
        "tm": dt.time(0, 0),
        "dur": -dt.timedelta(hours=838, minutes=59, seconds=59),
        "j": None,
    },
]


# ----------------------------------------------------------------------------- property test

KEY = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b"]))

CHANGE = st.tuples(KEY, st.integers(0, 25), st.sampled_from(["c", "u", "r", "d", "d"]), st.integers(-3, 3))

STEP = st.one_of(
    st.tuples(st.just("apply"), st.lists(CHANGE, max_size=10)),
    st.tuples(st.just("replay"), st.integers(0, 1000), st.lists(CHANGE, max_size=4)),
    st.tuples(st.just("truncate")),
    st.tuples(st.just("replay-truncate"), st.integers(0, 1000)),
)

MODEL_SCHEMA = pa.schema([("k", pa.int32()), ("name", pa.string()), ("val", pa.string()), ("n", pa.int64())])


def run_model(sink, steps) -> None:
    t = TableId("prop" + uuid.uuid4().hex[:8], "model")
    sink.ensure_table(t, MODEL_SCHEMA, ["k", "name"])
    universe: dict = {}  # (key, seq) -> the one change with that sequence (sequences are offsets)
    model: dict = {}  # key -> (seq, row or None)
    version = 0
    for step in steps:
        kind = step[0]
        if kind in ("apply", "replay"):
            changes = []
            for key, seq, op, n in step[-1]:
                op, n = universe.setdefault((key, seq), (op, n))
                row = {"k": key[0], "name": key[1], "_cdc_op": op, "_cdc_seq": seq}
                if op != "d":
                    row.update(val=f"{key}@{seq}", n=n)
                changes.append(row)
            data = batch(MODEL_SCHEMA, changes)
            if kind == "replay":
                if version == 0:
                    continue
                old = 1 + step[1] % version
                assert sink.apply(t, old, data) is False
            else:
                version += 1
                assert sink.apply(t, version, data) is True
                for c in changes:
                    key = (c["k"], c["name"])
                    held = model.get(key)
                    if held is None or c["_cdc_seq"] > held[0]:
                        model[key] = (
                            c["_cdc_seq"],
                            None
                            if c["_cdc_op"] == "d"
                            else {"k": key[0], "name": key[1], "val": c["val"], "n": c["n"]},
                        )
        elif kind == "truncate":
            version += 1
            assert sink.truncate(t, version) is True
            model.clear()
        else:
            if version == 0:
                continue
            assert sink.truncate(t, 1 + step[1] % version) is False
        live = sorted((r for _, r in model.values() if r is not None), key=lambda r: (r["k"], r["name"]))
        assert sorted_rows(readback.rows(sink, t), ["k", "name"]) == live, step
    assert sink.applied_version(t) == (version or None)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_delta_matches_model(delta_store, steps):
    run_model(delta_store.sink(), steps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_delta_compacted_every_other_batch_matches_model(delta_store, steps):
    run_model(delta_store.sink(compact_every_commits=2), steps)


# ----------------------------------------------------------------------------- Delta specifics


def _active_files(delta_store, path: str) -> int:
    return len(delta_store.table(path).file_uris())


@pytest.mark.parametrize("every", [10, 0])
def test_delta_small_files_are_compacted_every_n_batches(delta_store, every):
    """Each batch of new rows adds a file; every `compact_every_commits` batches the small
    ones become one, and the table, its versions and the refusal of replays are unchanged (0 = never:
    the files pile up, which shows the count below is the compaction's doing)."""
    s, t = delta_store.sink(compact_every_commits=every), fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    expected = {}
    for v in range(1, 26):
        rows = [{"id": v, "v": f"new{v}", "n": v, "_cdc_op": "c", "_cdc_seq": 10 * v}]
        if v % 5 == 0:  # an update of an older row: a MERGE rewrites the file holding it
            rows.append({"id": v - 1, "v": f"upd{v}", "n": -v, "_cdc_op": "u", "_cdc_seq": 10 * v + 1})
        if v % 7 == 0:
            rows.append({"id": v - 3, "_cdc_op": "d", "_cdc_seq": 10 * v + 2})
        assert s.apply(t, v, batch(SIMPLE, rows)) is True
        for r in rows:
            expected.pop(r["id"], None)
            if r["_cdc_op"] != "d":
                expected[r["id"]] = {"id": r["id"], "v": r["v"], "n": r["n"]}
    assert sorted_rows(readback.rows(s, t), ["id"]) == sorted(expected.values(), key=lambda r: r["id"])
    assert s.applied_version(t) == 25
    assert s.apply(t, 20, batch(SIMPLE, [{"id": 99, "v": "x", "_cdc_op": "c", "_cdc_seq": 1}])) is False
    operations = [h["operation"] for h in delta_store.table(s.table_path(t)).history()]
    files = _active_files(delta_store, s.table_path(t))
    if every:
        assert operations.count("OPTIMIZE") == 2  # after batches 10 and 20
        assert files <= 6, files  # one compacted file plus the batches since
    else:
        assert "OPTIMIZE" not in operations
        assert files >= 15, files


def test_delta_crash_between_table_and_tombstones(delta_store, delta_sink, monkeypatch):
    """The table commit lands, the process dies before the tombstone commit; the replay of
    the same version completes the tombstones and nothing else."""
    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    s.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 5}]))
    original = type(s.latest)._merge_tombs

    def crash(self, *a, **k):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(type(s.latest), "_merge_tombs", crash)
    deleting = batch(SIMPLE, [{"id": 1, "_cdc_op": "d", "_cdc_seq": 6}, {"id": 2, "_cdc_op": "d", "_cdc_seq": 9}])
    with pytest.raises(KeyboardInterrupt):
        s.apply(t, 2, deleting)
    monkeypatch.setattr(type(s.latest), "_merge_tombs", original)
    assert readback.rows(s, t).num_rows == 0
    s2 = delta_store.sink(s.base)  # a restarted merger
    assert s2.apply(t, 2, deleting) is False  # already applied to the table...
    s2.apply(
        t,
        3,
        batch(
            SIMPLE,
            [
                {"id": 1, "v": "zombie", "_cdc_op": "r", "_cdc_seq": 5},
                {"id": 2, "v": "zombie", "_cdc_op": "r", "_cdc_seq": 8},
            ],
        ),
    )
    assert readback.rows(s2, t).num_rows == 0  # ...and the tombstones were completed


def test_delta_newer_write_over_unfinished_tombstones_pauses_the_table(delta_store, delta_sink, monkeypatch):
    """The table commit lands and the tombstone commit never does; if the next write is
    not the replay of that version (a merger that did not re-run the batch), the deletes
    are not remembered: the sink refuses (the merger pauses the table) instead of warning
    and letting an older change bring a deleted row back."""
    from merger.sinks.base import TableFault

    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    s.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 5}]))

    def crash(self, *a, **k):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(type(s.latest), "_merge_tombs", crash)
    with pytest.raises(KeyboardInterrupt):
        s.apply(t, 2, batch(SIMPLE, [{"id": 1, "_cdc_op": "d", "_cdc_seq": 6}]))
    monkeypatch.undo()
    s2 = delta_store.sink(s.base)
    zombie = batch(SIMPLE, [{"id": 1, "v": "zombie", "_cdc_op": "r", "_cdc_seq": 5}])
    for version in (3, 1_000_000):  # a newer batch, or a new state_dir's versions
        with pytest.raises(TableFault, match="tombstones of version 2 were never written.*cdc snapshot"):
            s2.apply(t, version, zombie)
    assert readback.rows(s2, t).num_rows == 0  # the deleted row stays deleted
    assert s2.apply(t, 2, batch(SIMPLE, [{"id": 1, "_cdc_op": "d", "_cdc_seq": 6}])) is False  # the replay mends it
    s2.apply(t, 3, zombie)
    assert readback.rows(s2, t).num_rows == 0


def test_delta_commit_conflict_with_a_users_optimize_is_retried(delta_sink, monkeypatch):
    """A user's OPTIMIZE commits between the sink's read and its MERGE commit (a real
    delta-rs conflict): the step is done again on the new table version; a writer that
    conflicts every time pauses the table instead of stopping the merger."""
    from deltalake import DeltaTable, write_deltalake

    from merger.sinks.base import TableFault

    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    for v in range(1, 6):
        s.apply(t, v, batch(SIMPLE, [{"id": v, "v": f"r{v}", "n": v, "_cdc_op": "c", "_cdc_seq": 10 * v}]))
    original = type(s.latest)._merge_main
    races = []

    def users_optimize_first(self, *a, **k):
        if not races:
            races.append(DeltaTable(self.handles.table_path(t)).optimize.compact())
        return original(self, *a, **k)

    monkeypatch.setattr(type(s.latest), "_merge_main", users_optimize_first)
    rows = [
        {"id": 1, "v": "upd", "n": 1, "_cdc_op": "u", "_cdc_seq": 100},
        {"id": 9, "v": "new", "_cdc_op": "c", "_cdc_seq": 101},
    ]
    assert s.apply(t, 6, batch(SIMPLE, rows)) is True
    assert races and races[0]["numFilesRemoved"] == 5
    got = {r["id"]: r["v"] for r in readback.rows(s, t).to_pylist()}
    assert got == {1: "upd", 2: "r2", 3: "r3", 4: "r4", 5: "r5", 9: "new"}

    def another_writer_every_time(self, m, *a, **k):
        row = DeltaTable(self.handles.table_path(t)).to_pyarrow_table().slice(0, 1)
        # a row in the batch's key range: its file is one the MERGE must read
        foreign = row.set_column(0, "id", pa.array([2], row.schema.field("id").type))
        write_deltalake(self.handles.table_path(t), foreign, mode="append")
        races.append(1)
        return original(self, m, *a, **k)

    monkeypatch.setattr(type(s.latest), "_merge_main", another_writer_every_time)
    monkeypatch.setattr("merger.sinks.delta.latest.time.sleep", lambda s: None)
    with pytest.raises(TableFault, match="conflicted with another writer.*cdc resume"):
        s.apply(t, 7, batch(SIMPLE, [{"id": 2, "v": "u2", "n": 2, "_cdc_op": "u", "_cdc_seq": 200}]))


def test_delta_tombstones_written_only_when_they_change(delta_sink, monkeypatch):
    """A batch with no delete and no write of a tombstoned key records its tombstone step in
    the table's own commit: the tombstone table gets no commit, and a replay of that batch,
    or of any before it, is still refused without writing anything."""
    from deltalake import DeltaTable

    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    tombs = DeltaTable(s.tombstone_path(t))
    created = tombs.version()
    for v in range(1, 6):
        rows = [{"id": v, "v": f"r{v}", "n": v, "_cdc_op": "c", "_cdc_seq": 10 * v}]
        assert s.apply(t, v, batch(SIMPLE, rows)) is True
    tombs.update_incremental()
    assert tombs.version() == created  # five batches, no tombstone commit
    main = DeltaTable(s.table_path(t))
    main_version = main.version()

    def must_not_write(self, *a, **k):
        raise AssertionError("a replay wrote the tombstones")

    monkeypatch.setattr(type(s.latest), "_merge_tombs", must_not_write)
    restarted = type(s)(s.base)
    for v in (5, 3):
        assert restarted.apply(t, v, batch(SIMPLE, [{"id": 9, "v": "x", "_cdc_op": "c", "_cdc_seq": 1}])) is False
    monkeypatch.undo()
    main.update_incremental()
    assert main.version() == main_version
    # a delete writes the tombstones; the next clean batch again does not
    assert s.apply(t, 6, batch(SIMPLE, [{"id": 1, "_cdc_op": "d", "_cdc_seq": 60}])) is True
    tombs.update_incremental()
    assert tombs.version() == created + 1
    assert s.apply(t, 7, batch(SIMPLE, [{"id": 1, "v": "old", "_cdc_op": "r", "_cdc_seq": 5}])) is True
    assert s.apply(t, 8, batch(SIMPLE, [{"id": 8, "v": "r8", "n": 8, "_cdc_op": "c", "_cdc_seq": 80}])) is True
    tombs.update_incremental()
    assert tombs.version() == created + 1
    assert sorted(r["id"] for r in readback.rows(s, t).to_pylist()) == [2, 3, 4, 5, 8]  # the stale id 1 stayed deleted


def test_delta_merge_skips_files_outside_the_batch_key_range(delta_sink):
    """Snapshot chunks arrive as key ranges: a MERGE reads only the files whose key range
    meets the batch's (with a streamed MERGE, delta-rs scans every file of the table,
    so each chunk cost more than the one before)."""
    from deltalake import DeltaTable

    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    for v in range(1, 7):
        ids = range(100 * v, 100 * v + 100)
        s.apply(t, v, batch(SIMPLE, [{"id": i, "v": "r", "n": 1, "_cdc_op": "r", "_cdc_seq": 0} for i in ids]))
    last = DeltaTable(s.table_path(t)).history(1)[0]
    assert last["operation"] == "MERGE"
    metrics = last["operationMetrics"]
    assert metrics["num_target_files_skipped_during_scan"] == 5, metrics
    assert metrics["num_target_files_scanned"] == 0, metrics
    assert readback.rows(s, t).num_rows == 600


@pytest.mark.parametrize("ranges", [True, False])
def test_delta_merge_of_old_and_new_keys_skips_the_files_between(delta_sink, monkeypatch, ranges):
    """Updates of old rows and inserts of new ones span the whole key range: filtered by
    the batch's key ranges the MERGE reads only the files holding them (without the
    filter, a broken copy, it reads all ten)."""
    from deltalake import DeltaTable

    import merger.sinks.delta.latest as delta_module

    if not ranges:
        monkeypatch.setattr(delta_module, "range_filter", lambda *a, **k: None)
    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    for v in range(1, 11):
        ids = range(100 * v, 100 * v + 100)
        s.apply(t, v, batch(SIMPLE, [{"id": i, "v": "r", "n": 1, "_cdc_op": "r", "_cdc_seq": 0} for i in ids]))
    mixed = [{"id": i, "v": "upd", "n": 2, "_cdc_op": "u", "_cdc_seq": 5} for i in (105, 106)]
    mixed += [{"id": i, "v": "new", "n": 3, "_cdc_op": "c", "_cdc_seq": 6} for i in (5000, 5001)]
    s.apply(t, 11, batch(SIMPLE, mixed))
    metrics = DeltaTable(s.table_path(t)).history(1)[0]["operationMetrics"]
    assert metrics["num_target_rows_updated"] == 2 and metrics["num_target_rows_inserted"] == 2
    rows = {r["id"]: r["v"] for r in readback.rows(s, t).to_pylist()}
    assert len(rows) == 1002 and rows[105] == rows[106] == "upd" and rows[5000] == "new" and rows[107] == "r"
    if ranges:
        assert metrics["num_target_files_scanned"] == 1, metrics
        assert metrics["num_target_files_skipped_during_scan"] == 9, metrics
    else:
        assert metrics["num_target_files_scanned"] == 10, metrics


_EXTREME_KEYS = {
    "bigint unsigned": (pa.uint64(), [1, 2**63 + 5, 2**64 - 2]),
    "bigint": (pa.int64(), [-(2**63), 5, 2**63 - 1]),
    "datetime(6)": (pa.timestamp("us"), [dt.datetime(2020, 1, 1, 0, 0, 0, us) for us in (1, 500, 999)]),
    "long string": (pa.string(), ["a" * 40 + c for c in "amz"]),
    "decimal(30,6)": (
        pa.decimal128(30, 6),
        [decimal.Decimal(v) for v in ("1.000001", "123456789012345678901234.5", "999999999999999999999999.999999")],
    ),
    "binary": (pa.binary(), [b"\x00" * 40 + b"\x01", b"\x00" * 40 + b"\x05", b"\xff" * 40]),
}


@pytest.mark.parametrize("kind", sorted(_EXTREME_KEYS))
def test_delta_deletes_and_updates_of_extreme_keys(delta_store, kind):
    """The Delta log's file statistics are inexact for some key types (a decimal(20, 0) max
    of 18446744073709551614 is logged as 9223372036854775807): a MERGE or a tombstone lookup
    that pruned files by them lost the delete of the highest key, duplicated an update, and
    let a stale snapshot row bring the deleted key back."""
    typ, keys = _EXTREME_KEYS[kind]
    s, t = delta_store.sink(), fresh()
    schema = pa.schema([("id", typ), ("v", pa.string())])
    s.ensure_table(t, schema, ["id"])

    def changes(ids, op, seq):
        return batch(schema, [{"id": i, "v": op, "_cdc_op": op, "_cdc_seq": seq} for i in ids])

    s.apply(t, 1, changes(keys, "c", 1))
    s.apply(t, 2, changes([keys[2]], "d", 2))
    s.apply(t, 3, changes([keys[1]], "u", 3))
    s.apply(t, 4, changes([keys[2]], "r", 1))  # a stale snapshot row of the deleted key
    s.apply(t, 5, changes([keys[1]], "u", 5))
    got = sorted((r["v"], r["id"]) for r in readback.rows(s, t).to_pylist())
    assert [v for v, _ in got] == ["c", "u"], got
    assert len({i for _, i in got}) == 2
    # read back by the source's own key values (what cdc verify asks for)
    assert [r["v"] for r in s.rows_with_keys(t, ["id"], [(keys[1],), (keys[2],)]).to_pylist()] == ["u"]
    assert sorted(r["v"] for r in s.rows_in_range(t, ["id"], (keys[0],), (keys[2],)).to_pylist()) == ["c", "u"]
    assert [r["v"] for r in s.rows_in_range(t, ["id"], (keys[1],), None).to_pylist()] == ["u"]


def test_delta_tables_are_written_in_files_of_the_compaction_target(delta_store):
    """New tables get delta.targetFileSize = compact_target_mb (MERGE output files are cut
    at it, so an update rewrites at most about that much per file it touches); a table of
    an older release, or after the setting changed, gets it on ensure_table."""
    base = delta_store.base()
    s, t = delta_store.sink(base, compact_target_mb=2), fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    assert delta_store.table(s.table_path(t)).metadata().configuration["delta.targetFileSize"] == str(2 << 20)
    s.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 1}]))
    s2 = delta_store.sink(base, compact_target_mb=8)
    s2.ensure_table(t, SIMPLE, ["id"])
    assert delta_store.table(s.table_path(t)).metadata().configuration["delta.targetFileSize"] == str(8 << 20)
    assert s2.applied_version(t) == 1 and readback.rows(s2, t).num_rows == 1


def test_delta_replay_after_table_commit_of_an_older_release(delta_sink):
    """A table commit that recorded only the table's version (written before tombstone
    steps could be recorded with it), then a crash: the replay records the tombstone
    step, so later batches see no lag."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    s.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 5}]))
    main = DeltaTable(s.table_path(t))
    app = f"cdc-sink:{main.metadata().id}"
    rows = batch(SIMPLE, [{"id": 2, "v": "b", "n": 2, "_cdc_op": "c", "_cdc_seq": 6}])
    write_deltalake(
        main,
        rows.drop_columns(["_cdc_op"]),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app, 2)]),
    )
    restarted = type(s)(s.base)
    assert restarted.apply(t, 2, rows) is False
    tombs = DeltaTable(s.tombstone_path(t))
    assert tombs.transaction_version(f"cdc-sink-tombstones:{main.metadata().id}") == 2
    assert restarted.apply(t, 2, rows) is False
    assert sorted(r["id"] for r in readback.rows(restarted, t).to_pylist()) == [1, 2]


def test_delta_layout_and_log(delta_store, delta_sink):
    s, t = delta_sink, TableId("shop", "orders")
    s.ensure_table(t, ALL_TYPES, ["id"])
    s.apply(t, 7, batch(ALL_TYPES, [dict(r, _cdc_op="c", _cdc_seq=1) for r in ALL_ROWS]))
    dt_ = delta_store.table(s.table_path(t))
    assert s.table_path(t).endswith("/shop/orders")
    assert dt_.transaction_version(f"cdc-sink:{dt_.metadata().id}") == 7
    assert dt_.schema().to_arrow() is not None and "_cdc_seq" in pa.schema(dt_.schema().to_arrow()).names
    assert dt_.protocol().min_reader_version <= 3  # no column mapping / deletion vectors
    with pytest.raises(SinkError, match="reserved"):
        s.ensure_table(TableId("_cdc", "x"), SIMPLE, ["id"])


def test_delta_tables_checkpoint_every_10_commits_older_ones_too(delta_store):
    """Each batch commits, and each version check replays the log from the last
    checkpoint: the sink's tables (and their tombstones) checkpoint every 10 commits; a
    table made without the setting (an older release) gets it at ensure_table."""
    s, t = delta_store.sink(), fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    paths = (s.table_path(t), s.tombstone_path(t))
    for p in paths:
        assert delta_store.table(p).metadata().configuration["delta.checkpointInterval"] == "10"
    for v in range(1, 13):
        rows = [{"id": v, "v": "x", "n": v, "_cdc_op": "c", "_cdc_seq": v}]
        rows.append({"id": v - 1, "_cdc_op": "d", "_cdc_seq": v})
        assert s.apply(t, v, batch(SIMPLE, rows)) is True
    main = delta_store.table(paths[0])
    assert main.version() >= 10
    assert any(f.name.endswith(".checkpoint.parquet") for f in Path(paths[0], "_delta_log").iterdir())
    assert sorted_rows(readback.rows(s, t), ["id"]) == [{"id": 12, "v": "x", "n": 12}]
    for p in paths:  # an older release's tables
        delta_store.table(p).alter.set_table_properties({"delta.checkpointInterval": "100"})
    s2 = delta_store.sink(Path(paths[0]).parents[1])
    s2.ensure_table(t, SIMPLE, ["id"])
    for p in paths:
        assert delta_store.table(p).metadata().configuration["delta.checkpointInterval"] == "10"
    assert s2.apply(t, 12, batch(SIMPLE, [{"id": 50, "v": "y", "n": 1, "_cdc_op": "c", "_cdc_seq": 99}])) is False


def test_delta_string_key_deletes_over_several_batches(delta_sink):
    """Tombstone files written by deltalake hold string_view columns; looking them up for a
    string key used to fail in pyarrow ("no kernel matching (string, string_view)") when
    a file's statistics could not rule it out."""
    s, t = delta_sink, fresh()
    schema = pa.schema([("region", pa.string()), ("code", pa.string()), ("n", pa.int64())])
    s.ensure_table(t, schema, ["region", "code"])
    keys = [(r, f"k{i}") for i, r in enumerate(["apac", "eu", "us", "latam"] * 3)]
    s.apply(
        t,
        1,
        batch(
            schema,
            [{"region": r, "code": c, "n": 1, "_cdc_op": "c", "_cdc_seq": i} for i, (r, c) in enumerate(keys, 1)],
        ),
    )
    s.apply(t, 2, batch(schema, [{"region": r, "code": c, "_cdc_op": "d", "_cdc_seq": 100} for r, c in keys[:8]]))
    s.apply(
        t,
        3,
        batch(
            schema,
            [
                {"region": "eu", "code": "k1", "n": 2, "_cdc_op": "c", "_cdc_seq": 101},
                {"region": "us", "code": "k2", "n": 3, "_cdc_op": "u", "_cdc_seq": 50},
            ],
        ),
    )
    assert sorted_rows(readback.rows(s, t), ["region", "code"]) == [
        {"region": "apac", "code": "k8", "n": 1},
        {"region": "eu", "code": "k1", "n": 2},
        {"region": "eu", "code": "k9", "n": 1},
        {"region": "latam", "code": "k11", "n": 1},
        {"region": "us", "code": "k10", "n": 1},
    ]


def test_delta_first_write_into_an_empty_table_is_an_append(delta_store, delta_sink, monkeypatch):
    """Issue 23: a table's first rows (a snapshot's, mostly) are appended, not MERGEd; its
    deletes still become tombstones, and later writes MERGE."""
    s, t = delta_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    rows = [{"id": i, "v": f"r{i}", "n": i, "_cdc_op": "r", "_cdc_seq": 10} for i in range(1, 5)]
    rows.append({"id": 7, "_cdc_op": "d", "_cdc_seq": 11})
    assert s.apply(t, 1, batch(SIMPLE, rows)) is True
    ops = [h["operation"] for h in delta_store.table(s.table_path(t)).history()]
    assert ops[0] == "WRITE" and "MERGE" not in ops
    assert sorted(r["id"] for r in readback.rows(s, t).to_pylist()) == [1, 2, 3, 4]
    # the delete's tombstone holds: an older insert of 7 stays out
    older = {"id": 7, "v": "old", "n": 0, "_cdc_op": "c", "_cdc_seq": 5}
    s.apply(t, 2, batch(SIMPLE, [older, {"id": 1, "v": "u1", "n": 1, "_cdc_op": "u", "_cdc_seq": 20}]))
    assert sorted((r["id"], r["v"]) for r in readback.rows(s, t).to_pylist()) == [
        (1, "u1"),
        (2, "r2"),
        (3, "r3"),
        (4, "r4"),
    ]
    assert delta_store.table(s.table_path(t)).history()[0]["operation"] == "MERGE"


def test_delta_first_writes_of_two_mergers_racing_leave_no_row_twice(delta_store, delta_sink, monkeypatch):
    """Another merger on the same sink tables (a mistake) writes the table's first rows
    between this one's read of the empty table and its append: the append's commit
    conflicts (the same Delta app transaction id), and the retry MERGEs."""
    first, t = delta_sink, fresh()
    first.ensure_table(t, SIMPLE, ["id"])
    other = delta_store.sink(first.base)
    other.ensure_table(t, SIMPLE, ["id"])
    rows = [{"id": i, "v": f"r{i}", "n": i, "_cdc_op": "r", "_cdc_seq": 10} for i in range(1, 5)]
    original, raced = type(first.latest)._append_first, []

    def the_other_writes_first(self, *a, **k):
        if not raced:
            raced.append(1)
            other.apply(t, 1, batch(SIMPLE, rows))
        return original(self, *a, **k)

    monkeypatch.setattr(type(first.latest), "_append_first", the_other_writes_first)
    monkeypatch.setattr("merger.sinks.delta.latest.time.sleep", lambda s: None)
    assert first.apply(t, 2, batch(SIMPLE, [{**r, "_cdc_seq": 12} for r in rows])) is True
    assert raced
    assert sorted((r["id"], r["v"]) for r in readback.rows(first, t).to_pylist()) == [(i, f"r{i}") for i in range(1, 5)]


def test_delta_a_second_merger_takes_over_and_the_first_is_fenced(delta_store, delta_sink):
    """Two mergers with two state directories on one set of Delta tables (one bucket): the
    one that claimed last writes; the older stops at its next write to a table the newer
    wrote (SinkFenced, not retried), before committing anything. A restarted merger (same
    state directory, same owner id) keeps its epoch and replays its own batch."""
    from merger.sinks.delta.writers import SinkFenced

    first, t = delta_sink, fresh()
    first.claim_writer("state-a")
    first.ensure_table(t, SIMPLE, ["id"])
    assert first.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 1}]))
    second = delta_store.sink(first.base)
    second.claim_writer("state-b")
    assert second.writer_epoch == first.writer_epoch + 1
    second.ensure_table(t, SIMPLE, ["id"])
    # its versions start above what the sink holds (merger/batch/sink_writer.py's version base)
    assert second.apply(t, 1_000_001, batch(SIMPLE, [{"id": 2, "v": "b", "n": 2, "_cdc_op": "c", "_cdc_seq": 2}]))
    for write in (
        lambda: first.apply(t, 2, batch(SIMPLE, [{"id": 3, "v": "c", "n": 3, "_cdc_op": "c", "_cdc_seq": 3}])),
        lambda: first.truncate(t, 3),
        lambda: first.ensure_table(t, SIMPLE, ["id"]),
    ):
        with pytest.raises(SinkFenced, match="a newer merger .* took over"):
            write()
    assert sorted(r["id"] for r in readback.rows(second, t).to_pylist()) == [1, 2]
    restarted = delta_store.sink(first.base)
    restarted.claim_writer("state-b")
    assert restarted.writer_epoch == second.writer_epoch
    assert restarted.apply(t, 1_000_001, batch(SIMPLE, [{"id": 2, "_cdc_op": "d", "_cdc_seq": 9}])) is False


def test_delta_an_older_merger_writing_after_the_takeover_stops_the_newer(delta_store, delta_sink):
    """The newer merger read the table's version before the older one's last write: its own
    version is not above the table's any more. Applying it would be skipped as a replay (a
    lost batch), so the newer one stops instead, and no write interleaves."""
    from merger.sinks.delta.writers import SinkFenced

    first, t = delta_sink, fresh()
    first.claim_writer("state-a")
    first.ensure_table(t, SIMPLE, ["id"])
    first.apply(t, 5, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 1}]))
    second = delta_store.sink(first.base)
    second.claim_writer("state-b")
    first.apply(t, 6, batch(SIMPLE, [{"id": 2, "v": "b", "n": 2, "_cdc_op": "c", "_cdc_seq": 2}]))
    with pytest.raises(SinkFenced, match="an older merger .* wrote version 6"):
        second.apply(t, 6, batch(SIMPLE, [{"id": 3, "v": "c", "n": 3, "_cdc_op": "c", "_cdc_seq": 3}]))
    assert sorted(r["id"] for r in readback.rows(first, t).to_pylist()) == [1, 2]


def test_delta_writer_epochs():
    from merger.sinks.delta.writers import next_epoch, verdict

    assert next_epoch([], "a") == (1, True)
    claims = [{"owner": "a", "epoch": 1}, {"owner": "b", "epoch": 2}]
    assert next_epoch(claims, "b") == (2, False)
    assert next_epoch(claims, "a") == (3, True)
    assert verdict(2, None, 5, 9) is None  # written before epochs existed
    assert verdict(2, 2, 5, 9) is None  # its own write: a replay
    assert "newer" in verdict(2, 3, 50, 9)
    assert "older" in verdict(3, 2, 5, 9)
    assert verdict(3, 2, 10, 9) is None


def test_delta_mergers_claiming_at_once_get_distinct_epochs(delta_store):
    """Three mergers start at the same moment on tables no one claimed yet: the claims
    table is created once and each claim commits its own epoch (a claim committed since
    another's read makes that one's commit fail, and it reads again)."""
    import threading

    base, got, errors = delta_store.base(), {}, []

    def claim(owner):
        try:
            sink = delta_store.sink(base)
            sink.claim_writer(owner)
            got[owner] = sink.writer_epoch
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(o,)) for o in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and sorted(got.values()) == [1, 2, 3], (got, errors)
    claims = delta_store.table(f"{base}/_cdc/writers").to_pyarrow_table().to_pylist()
    assert sorted((c["epoch"], c["owner"]) for c in claims) == sorted((e, o) for o, e in got.items())


@pytest.mark.parametrize("first_write", ["append", "merge"])
def test_delta_a_takeover_between_the_fence_check_and_the_commit_fails_that_commit(
    delta_store, delta_sink, monkeypatch, first_write
):
    """The newer merger commits after the older one checked the epoch and before its
    commit: both commits carry the app transaction cdc-writer, so the older one's fails as a
    conflict; its retry reads the newer epoch and stops. Nothing of the older lands after."""
    from merger.sinks.delta.writers import SinkFenced

    older, t = delta_sink, fresh()
    older.claim_writer("state-a")
    older.ensure_table(t, SIMPLE, ["id"])
    if first_write == "merge":
        older.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "n": 1, "_cdc_op": "c", "_cdc_seq": 1}]))
    newer = delta_store.sink(older.base)
    newer.claim_writer("state-b")
    newer.ensure_table(t, SIMPLE, ["id"])
    original, raced = type(older.latest)._merge_main, []

    def newer_commits_first(self, *a, **k):
        if self is older.latest and not raced:
            raced.append(1)
            newer.apply(t, 1_000_001, batch(SIMPLE, [{"id": 2, "v": "new", "n": 2, "_cdc_op": "c", "_cdc_seq": 5}]))
        return original(self, *a, **k)

    monkeypatch.setattr(type(older.latest), "_merge_main", newer_commits_first)
    monkeypatch.setattr("merger.sinks.delta.latest.time.sleep", lambda s: None)
    with pytest.raises(SinkFenced, match="a newer merger"):
        older.apply(t, 2, batch(SIMPLE, [{"id": 3, "v": "old", "n": 3, "_cdc_op": "c", "_cdc_seq": 9}]))
    assert raced
    assert 3 not in [r["id"] for r in readback.rows(newer, t).to_pylist()]
