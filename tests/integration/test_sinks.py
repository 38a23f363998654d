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
import json
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.sinks import IncompatibleSchemaChange, SinkError, SinkUnavailable, TableId
from merger.sinks import types as T
from tests.changelog_reader import changelog_rows
from tests.support import readback
from tests.unit.test_sinks import (
    ALL_ROWS,
    ALL_TYPES,
    SIMPLE,
    STEP,
    batch,
    delta_sink,  # noqa: F401 (a fixture)
    delta_store,  # noqa: F401 (a fixture, delta_sink's)
    fresh,
    run_model,
    sorted_rows,
)


@pytest.fixture(scope="module")
def pg_sink(stack):
    from merger.sinks import PostgresSink

    sink = PostgresSink(stack.postgres)
    yield sink
    sink.close()


@pytest.fixture(scope="module")
def kafka_sink(stack):
    from merger.sinks import KafkaChangelogSink

    sink = KafkaChangelogSink(stack.kafka.bootstrap, "sinktest" + uuid.uuid4().hex[:6], partitions=3)
    yield sink
    sink.close()


@pytest.fixture(
    params=[
        "delta",
        pytest.param("postgres", marks=pytest.mark.integration),
        pytest.param("kafka", marks=pytest.mark.integration),
    ]
)
def any_sink(request):
    return request.getfixturevalue({"delta": "delta_sink", "postgres": "pg_sink", "kafka": "kafka_sink"}[request.param])


@pytest.fixture(params=["delta", pytest.param("postgres", marks=pytest.mark.integration)])
def table_sink(request):
    return request.getfixturevalue({"delta": "delta_sink", "postgres": "pg_sink"}[request.param])


def test_apply_replay_and_no_resurrection(any_sink):
    s, t = any_sink, fresh()
    assert s.ensure_table(t, SIMPLE, ["id"]) == ["created"]
    assert s.ensure_table(t, SIMPLE, ["id"]) == []
    assert s.applied_version(t) is None
    assert s.apply(
        t,
        1,
        batch(
            SIMPLE,
            [
                {"id": 1, "v": "a", "n": 1, "_cdc_op": "r", "_cdc_seq": 10},
                {"id": 2, "v": "b", "n": 2, "_cdc_op": "c", "_cdc_seq": 3},
                {"id": 2, "v": "b2", "n": 22, "_cdc_op": "u", "_cdc_seq": 4},  # same key, newer: wins
                {"id": 3, "_cdc_op": "d", "_cdc_seq": 7},  # delete of a key never seen
            ],
        ),
    )
    assert s.applied_version(t) == 1
    expected = [{"id": 1, "v": "a", "n": 1}, {"id": 2, "v": "b2", "n": 22}]
    assert sorted_rows(readback.rows(s, t), ["id"]) == expected
    # a replay of version 1 with other content changes nothing
    assert not s.apply(t, 1, batch(SIMPLE, [{"id": 9, "v": "x", "_cdc_op": "c", "_cdc_seq": 99}]))
    assert sorted_rows(readback.rows(s, t), ["id"]) == expected
    assert s.apply(
        t,
        2,
        batch(
            SIMPLE,
            [
                {"id": 1, "_cdc_op": "d", "_cdc_seq": 11},
                {"id": 3, "v": "old", "n": 3, "_cdc_op": "r", "_cdc_seq": 6},  # older than its delete
                {"id": 2, "v": "stale", "n": 0, "_cdc_op": "u", "_cdc_seq": 1},  # older than the row
            ],
        ),
    )
    assert sorted_rows(readback.rows(s, t), ["id"]) == [{"id": 2, "v": "b2", "n": 22}]
    # an older change never resurrects the deleted row 1, a newer one does
    assert s.apply(t, 3, batch(SIMPLE, [{"id": 1, "v": "zombie", "n": 0, "_cdc_op": "r", "_cdc_seq": 10}]))
    assert sorted_rows(readback.rows(s, t), ["id"]) == [{"id": 2, "v": "b2", "n": 22}]
    assert s.apply(
        t,
        4,
        batch(
            SIMPLE,
            [
                {"id": 1, "v": "back", "n": 5, "_cdc_op": "c", "_cdc_seq": 12},
                {"id": 3, "v": "new", "n": 8, "_cdc_op": "c", "_cdc_seq": 8},
            ],
        ),
    )
    assert sorted_rows(readback.rows(s, t), ["id"]) == [
        {"id": 1, "v": "back", "n": 5},
        {"id": 2, "v": "b2", "n": 22},
        {"id": 3, "v": "new", "n": 8},
    ]
    assert readback.count(s, t) == 3
    # truncate: empties, forgets tombstones, idempotent by version
    assert s.truncate(t, 5)
    assert readback.rows(s, t).num_rows == 0
    assert not s.truncate(t, 5)
    assert not s.apply(t, 4, batch(SIMPLE, [{"id": 7, "v": "x", "_cdc_op": "c", "_cdc_seq": 1}]))
    assert s.apply(t, 6, batch(SIMPLE, [{"id": 3, "v": "again", "n": 1, "_cdc_op": "c", "_cdc_seq": 2}]))
    assert sorted_rows(readback.rows(s, t), ["id"]) == [{"id": 3, "v": "again", "n": 1}]
    assert s.apply(t, 7, batch(SIMPLE, []))  # an empty batch still records its version
    assert s.applied_version(t) == 7


HOSTILE_DB = 'we"ird `db` ü'

HOSTILE_TABLE = "select 'from' #%?&=+ table"

HOSTILE = pa.schema(
    [
        ("order id", pa.int64()),
        ('va"l`ue', pa.string()),
        ("größe", pa.int32()),
        ("select", pa.string()),
        ("a,b;c{d}(e)=f", pa.bool_()),
    ]
)


def test_hostile_identifiers(any_sink):
    s = any_sink
    t = TableId(HOSTILE_DB + uuid.uuid4().hex[:4], HOSTILE_TABLE)
    s.ensure_table(t, HOSTILE, ["order id", "select"])
    rows = [
        {"order id": 1, 'va"l`ue': 'it\'s "quoted", with\nnewline', "größe": 3, "select": "x", "a,b;c{d}(e)=f": True},
        {"order id": 1, 'va"l`ue': "", "größe": None, "select": "y'; DROP TABLE t; --", "a,b;c{d}(e)=f": None},
        {"order id": 2, 'va"l`ue': None, "größe": -1, "select": "\\.", "a,b;c{d}(e)=f": False},
    ]
    assert s.apply(t, 1, batch(HOSTILE, [dict(r, _cdc_op="c", _cdc_seq=i) for i, r in enumerate(rows)]))
    assert sorted_rows(readback.rows(s, t), ["order id", "select"]) == sorted_rows(
        pa.Table.from_pylist(rows), ["order id", "select"]
    )
    assert s.apply(t, 2, batch(HOSTILE, [{"order id": 1, "select": "x", "_cdc_op": "d", "_cdc_seq": 10}]))
    assert readback.count(s, t) == 2


def test_schema_evolution(any_sink):
    s, t = any_sink, fresh()
    v1 = pa.schema([("id", pa.int32()), ("amount", pa.decimal128(10, 2)), ("name", pa.string())])
    s.ensure_table(t, v1, ["id"])
    s.apply(
        t, 1, batch(v1, [{"id": 1, "amount": decimal.Decimal("12.34"), "name": "a", "_cdc_op": "c", "_cdc_seq": 1}])
    )
    v2 = pa.schema(
        [("id", pa.int64()), ("amount", pa.decimal128(14, 2)), ("name", pa.string()), ("added", pa.float64())]
    )
    done = s.ensure_table(t, v2, ["id"])
    assert any(d.startswith("added column added") for d in done)
    assert sum(d.startswith("widened") for d in done) == 2
    assert s.ensure_table(t, v2, ["id"]) == []
    s.apply(
        t,
        2,
        batch(
            v2,
            [
                {
                    "id": 2**40,
                    "amount": decimal.Decimal("999999999999.99"),
                    "name": "big",
                    "added": 1.5,
                    "_cdc_op": "c",
                    "_cdc_seq": 2,
                }
            ],
        ),
    )
    assert sorted_rows(readback.rows(s, t), ["id"]) == [
        {"id": 1, "amount": decimal.Decimal("12.34"), "name": "a", "added": None},
        {"id": 2**40, "amount": decimal.Decimal("999999999999.99"), "name": "big", "added": 1.5},
    ]
    # a column dropped at the source stays in the sink, no longer written
    v3 = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(14, 2))])
    s.ensure_table(t, v3, ["id"])
    s.apply(t, 3, batch(v3, [{"id": 1, "amount": decimal.Decimal("1"), "_cdc_op": "u", "_cdc_seq": 3}]))
    # (the changelog's records are whole after images: a dropped column is simply absent)
    kept = None if hasattr(s, "prefix") else "a"
    assert sorted_rows(readback.rows(s, t), ["id"])[0] == {
        "id": 1,
        "amount": decimal.Decimal("1.00"),
        "name": kept,
        "added": None,
    }
    # incompatible: narrowing, family change, key change -> one-line messages naming everything
    with pytest.raises(IncompatibleSchemaChange) as e:
        s.ensure_table(t, pa.schema([("id", pa.int32())]), ["id"])
    msg = str(e.value)
    assert str(t) in msg and "'id'" in msg and "\n" not in msg
    with pytest.raises(IncompatibleSchemaChange, match="'name'"):
        s.ensure_table(t, pa.schema([("id", pa.int64()), ("name", pa.int64())]), ["id"])
    with pytest.raises(IncompatibleSchemaChange, match="key columns"):
        s.ensure_table(t, v2, ["id", "name"])
    with pytest.raises(IncompatibleSchemaChange, match="'amount'"):
        s.ensure_table(t, pa.schema([("id", pa.int64()), ("amount", pa.decimal128(14, 4))]), ["id"])
    # nothing of the refused changes was applied
    assert sorted_rows(readback.rows(s, t), ["id"])[1]["amount"] == decimal.Decimal("999999999999.99")


def test_decimal_scale_widening(table_sink):
    s, t = table_sink, fresh()
    v1 = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2))])
    s.ensure_table(t, v1, ["id"])
    s.apply(t, 1, batch(v1, [{"id": 1, "amount": decimal.Decimal("12345678.91"), "_cdc_op": "c", "_cdc_seq": 1}]))
    v2 = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(12, 4))])
    assert s.ensure_table(t, v2, ["id"]) == [
        "widened amount "
        + ("numeric(10,2) -> numeric(12,4)" if hasattr(s, "settings") else "decimal128(10, 2) -> decimal128(12, 4)")
    ]
    s.apply(t, 2, batch(v2, [{"id": 2, "amount": decimal.Decimal("0.0001"), "_cdc_op": "c", "_cdc_seq": 2}]))
    assert [r["amount"] for r in sorted_rows(readback.rows(s, t), ["id"])] == [
        decimal.Decimal("12345678.9100"),
        decimal.Decimal("0.0001"),
    ]


@pytest.mark.integration
def test_kafka_precise_decimal_scale_change_is_incompatible(kafka_sink):
    t = fresh()
    kafka_sink.ensure_table(t, pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2))]), ["id"])
    with pytest.raises(IncompatibleSchemaChange, match="carry no scale"):
        kafka_sink.ensure_table(t, pa.schema([("id", pa.int64()), ("amount", pa.decimal128(12, 4))]), ["id"])


def test_writing_a_column_before_ensure_table_is_an_error(any_sink):
    s, t = any_sink, fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    wider = pa.schema(list(SIMPLE) + [("extra", pa.string())])
    with pytest.raises(SinkError, match="extra"):
        s.apply(t, 1, batch(wider, [{"id": 1, "extra": "x", "_cdc_op": "c", "_cdc_seq": 1}]))
    assert s.applied_version(t) is None
    with pytest.raises(SinkError, match="ensure_table"):
        s.apply(fresh(), 1, batch(SIMPLE, []))


def _micros(v):
    if isinstance(v, dt.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds


def _expected_all_types(kind: str) -> list[dict]:
    out = []
    for r in ALL_ROWS:
        e = dict(r)
        e["u64"] = decimal.Decimal(r["u64"])
        if kind == "delta":
            e["tm"] = _micros(r["tm"])
            e["dur"] = _micros(r["dur"])
        elif kind == "postgres":
            e["tm"] = dt.timedelta(microseconds=_micros(r["tm"]))
            if e["j"] is not None:
                e["j"] = json.dumps(json.loads(e["j"]))  # jsonb normalizes the text
        out.append(e)
    return out


@pytest.mark.parametrize(
    "kind",
    [
        "delta",
        pytest.param("postgres", marks=pytest.mark.integration),
        pytest.param("kafka", marks=pytest.mark.integration),
    ],
)
def test_type_mapping_round_trip(kind, request):
    s = request.getfixturevalue({"delta": "delta_sink", "postgres": "pg_sink", "kafka": "kafka_sink"}[kind])
    t = fresh()
    s.ensure_table(t, ALL_TYPES, ["id"])
    rows = [dict(r, _cdc_op="r", _cdc_seq=1) for r in ALL_ROWS]
    data = batch(ALL_TYPES, rows)
    assert s.apply(t, 1, data)
    got = sorted_rows(readback.rows(s, t), ["id"])
    for g in got:
        if g["tstz"] is not None:
            g["tstz"] = g["tstz"].astimezone(dt.timezone.utc)
    assert got == _expected_all_types(kind)


@pytest.mark.integration
def test_postgres_binary_copy_round_trip(pg_sink, monkeypatch):
    """Tables whose columns all have a fixed binary COPY form go through pgpq's encoder
    (both the direct snapshot COPY and the staging + MERGE path): the same values."""
    from merger.sinks.postgres import copy as postgres_copy

    binary_cols = [f for f in ALL_TYPES if f.name not in ("b", "tm", "dur", "j")]
    schema = pa.schema(binary_cols)
    used = []
    real = postgres_copy.Copier.binary

    def spy(self, *args):
        out = real(self, *args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(postgres_copy.Copier, "binary", spy)
    monkeypatch.setattr(postgres_copy, "FAST_MIN_ROWS", 2)
    expected = [{k: v for k, v in r.items() if k in schema.names} for r in _expected_all_types("postgres")]
    for op in ("r", "c"):  # r: the direct COPY into the target, c: staging + MERGE
        t = fresh()
        pg_sink.ensure_table(t, schema, ["id"])
        rows = [dict({k: v for k, v in r.items() if k in schema.names}, _cdc_op=op, _cdc_seq=1) for r in ALL_ROWS]
        assert pg_sink.apply(t, 1, batch(schema, rows))
        got = sorted_rows(readback.rows(pg_sink, t), ["id"])
        for g in got:
            if g["tstz"] is not None:
                g["tstz"] = g["tstz"].astimezone(dt.timezone.utc)
        assert got == expected, op
    assert used == [True, True]


@pytest.mark.integration
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_postgres_matches_model(pg_sink, steps):
    run_model(pg_sink, steps)


INT_SCHEMA = pa.schema([("k", pa.int64()), ("val", pa.string())])

INT_CHANGE = st.tuples(st.integers(0, 40), st.integers(0, 30), st.sampled_from(["c", "u", "d"]))

INT_STEP = st.one_of(
    st.tuples(st.just("apply"), st.lists(INT_CHANGE, max_size=8)),
    # a snapshot slice: op r over a key range, one sequence (the window's HIGH) for all rows
    st.tuples(st.just("snapshot"), st.integers(0, 40), st.integers(0, 40), st.integers(0, 30)),
)


@pytest.mark.integration
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(INT_STEP, min_size=1, max_size=10))
def test_postgres_snapshot_copy_path_matches_model(pg_sink, monkeypatch, steps):
    """Snapshot rows COPYed straight into the target (few rows in the key range) or MERGEd
    (many): either way the sequence rule holds against rows and tombstones."""
    from merger.sinks.postgres import copy as postgres_copy

    monkeypatch.setattr(postgres_copy, "FAST_MIN_ROWS", 2)
    t = TableId("fast" + uuid.uuid4().hex[:8], "model")
    pg_sink.ensure_table(t, INT_SCHEMA, ["k"])
    model: dict = {}  # key -> (seq, row or None)
    version = 0
    for step in steps:
        if step[0] == "apply":
            changes = [
                {"k": k, "_cdc_op": op, "_cdc_seq": seq, **({} if op == "d" else {"val": f"{k}@{seq}"})}
                for k, seq, op in step[1]
            ]
        else:
            lo, hi, seq = min(step[1], step[2]), max(step[1], step[2]), step[3]
            changes = [{"k": k, "_cdc_op": "r", "_cdc_seq": seq, "val": f"{k}@{seq}r"} for k in range(lo, hi + 1)]
        version += 1
        assert pg_sink.apply(t, version, batch(INT_SCHEMA, changes)) is True
        best: dict = {}
        for c in changes:  # one batch: the highest sequence per key wins (ties: the later)
            if c["k"] not in best or c["_cdc_seq"] >= best[c["k"]]["_cdc_seq"]:
                best[c["k"]] = c
        for k, c in best.items():
            held = model.get(k)
            if held is None or c["_cdc_seq"] > held[0]:
                model[k] = (c["_cdc_seq"], None if c["_cdc_op"] == "d" else {"k": k, "val": c["val"]})
        live = sorted((r for _, r in model.values() if r is not None), key=lambda r: r["k"])
        assert sorted_rows(readback.rows(pg_sink, t), ["k"]) == live, step


# ----------------------------------------------------------------------------- PostgreSQL specifics


@pytest.mark.integration
def test_postgres_failed_batch_rolls_back_everything(pg_sink, stack):
    from merger.sinks import PostgresSink, UnstorableValue

    s, t = PostgresSink(stack.postgres, nul_policy="pause"), fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    s.apply(t, 1, batch(SIMPLE, [{"id": 1, "v": "a", "_cdc_op": "c", "_cdc_seq": 1}]))
    bad = batch(
        SIMPLE,
        [
            {"id": 2, "v": "fine", "_cdc_op": "c", "_cdc_seq": 2},
            {"id": 3, "v": "nul \x00 inside", "_cdc_op": "c", "_cdc_seq": 3},
        ],
    )
    with pytest.raises(UnstorableValue, match="NUL"):
        s.apply(t, 2, bad)
    s.close()
    s = pg_sink
    overflow = batch(
        pa.schema([("id", pa.int64()), ("n", pa.int64())]), [{"id": 4, "n": 2**40, "_cdc_op": "c", "_cdc_seq": 4}]
    )
    with pytest.raises(SinkError):
        s.apply(t, 2, overflow)  # does not fit the integer column
    assert s.applied_version(t) == 1
    assert sorted_rows(readback.rows(s, t), ["id"]) == [{"id": 1, "v": "a", "n": None}]


NUL_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("j", pa.json_())])

NUL_ROWS = [
    {"id": 1, "v": "a\x00b", "j": '{"k": "x\\u0000y", "raw": "\\\\u0000"}', "_cdc_op": "c", "_cdc_seq": 1},
    {"id": 2, "v": "\x00", "j": '["\\u0000\\u0000"]', "_cdc_op": "c", "_cdc_seq": 2},
    {"id": 3, "v": "plain", "j": '{"k": 1}', "_cdc_op": "c", "_cdc_seq": 3},
]


@pytest.mark.integration
@pytest.mark.parametrize("policy, char", [("strip", ""), ("replace", "\ufffd")])
@pytest.mark.parametrize("fast", [False, True])
def test_postgres_nul_policy_strips_or_replaces_text_and_jsonb(stack, policy, char, fast, monkeypatch):
    """PostgreSQL text refuses U+0000 and jsonb also its escape: both paths (MERGE and the
    snapshot COPY) store the value by the rule; the batch is not refused."""
    from merger.sinks import PostgresSink
    from merger.sinks.postgres import copy as postgres_copy

    monkeypatch.setattr(postgres_copy, "FAST_MIN_ROWS", 1 if fast else 10**9)
    s, t = PostgresSink(stack.postgres, nul_policy=policy), fresh()
    try:
        s.ensure_table(t, NUL_SCHEMA, ["id"])
        rows = [dict(r, _cdc_op="r") for r in NUL_ROWS] if fast else NUL_ROWS
        assert s.apply(t, 1, batch(NUL_SCHEMA, rows))
        got = {r["id"]: r for r in readback.rows(s, t).to_pylist()}
    finally:
        s.close()
    assert got[1]["v"] == f"a{char}b" and got[2]["v"] == char and got[3]["v"] == "plain"
    assert json.loads(got[1]["j"]) == {"k": f"x{char}y", "raw": "\\u0000"}  # an escaped backslash stays
    assert json.loads(got[2]["j"]) == [char * 2]


@pytest.mark.integration
def test_postgres_nul_policy_pause_refuses_the_batch(stack):
    from merger.sinks import PostgresSink, UnstorableValue

    s, t = PostgresSink(stack.postgres, nul_policy="pause"), fresh()
    try:
        s.ensure_table(t, NUL_SCHEMA, ["id"])
        with pytest.raises(UnstorableValue) as e:
            s.apply(t, 1, batch(NUL_SCHEMA, NUL_ROWS))
        assert f"table {t}: key {{'id': 1}}: column 'v'" in str(e.value)
        assert s.applied_version(t) is None and readback.count(s, t) == 0
        # the delete of a row whose before image holds a NUL is stored (only its key is)
        assert s.apply(t, 2, batch(NUL_SCHEMA, [{"id": 1, "v": "a\x00", "_cdc_op": "d", "_cdc_seq": 5}]))
    finally:
        s.close()


@pytest.mark.integration
def test_postgres_layout_and_control_table(pg_sink, stack):
    import psycopg

    from merger.sinks.postgres.catalog import tomb_name

    s, t = pg_sink, TableId("shop" + uuid.uuid4().hex[:6], "order")
    s.ensure_table(t, SIMPLE, ["id"])
    s.apply(t, 3, batch(SIMPLE, [{"id": 1, "_cdc_op": "d", "_cdc_seq": 1}]))
    p = stack.postgres
    with psycopg.connect(host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database) as c:
        assert c.execute(
            "SELECT version FROM _cdc._cdc_applied WHERE table_name = %s", (f'"{t.database}"."order"',)
        ).fetchone() == (3,)
        pk = c.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
            (f'"{t.database}"."order"',),
        ).fetchall()
        assert pk == [("id",)]
        tomb = tomb_name(t.database, "order")
        assert c.execute(f'SELECT id, _cdc_seq FROM _cdc."{tomb}"').fetchall() == [(1, 1)]
    with pytest.raises(SinkError, match="63-byte"):
        s.ensure_table(TableId("db", "ü" * 40), SIMPLE, ["id"])


@pytest.mark.integration
def test_postgres_unreachable_is_sink_unavailable(stack):
    from cdc.stack import free_port
    from merger.sinks import PostgresSink

    secret = "s3cr3t-" + uuid.uuid4().hex
    s = PostgresSink(
        {"host": "127.0.0.1", "port": free_port(), "user": "x", "password": secret, "dbname": "x", "connect_timeout": 2}
    )
    with pytest.raises(SinkUnavailable) as e:
        s.ensure_table(fresh(), SIMPLE, ["id"])
    assert secret not in str(e.value) and secret not in repr(s.settings)
    assert "unreachable" in str(e.value)


# ----------------------------------------------------------------------------- Kafka specifics


@pytest.mark.integration
def test_kafka_changelog_records_restart_and_partitioning(stack):
    from confluent_kafka import Consumer, TopicPartition

    from cdc.wire.partitioner import partition_for
    from merger.sinks import KafkaChangelogSink

    # a sink of its own: s2 below, a second instance on its prefix, fences it (the shared
    # kafka_sink would then fail the tests that come after this one)
    s, t = KafkaChangelogSink(stack.kafka.bootstrap, "restart" + uuid.uuid4().hex[:6], partitions=3), fresh()
    s.ensure_table(t, SIMPLE, ["id"])
    s.apply(t, 1, batch(SIMPLE, [{"id": i, "v": f"r{i}", "n": i, "_cdc_op": "r", "_cdc_seq": 10} for i in range(20)]))
    s.apply(
        t,
        2,
        batch(
            SIMPLE,
            [{"id": 3, "_cdc_op": "d", "_cdc_seq": 11}, {"id": 4, "v": "u", "n": 4, "_cdc_op": "u", "_cdc_seq": 12}],
        ),
    )
    # a restarted sink reads back the version and what it holds per key
    s2 = KafkaChangelogSink(stack.kafka.bootstrap, s.prefix, partitions=3)
    try:
        assert s2.applied_version(t) == 2
        assert not s2.apply(t, 2, batch(SIMPLE, [{"id": 50, "v": "x", "_cdc_op": "c", "_cdc_seq": 99}]))
        assert s2.apply(
            t,
            3,
            batch(
                SIMPLE,
                [
                    {"id": 3, "v": "zombie", "_cdc_op": "r", "_cdc_seq": 10},
                    {"id": 5, "v": "stale", "_cdc_op": "u", "_cdc_seq": 9},
                ],
            ),
        )
        rows = sorted_rows(readback.rows(s2, t), ["id"])
    finally:
        s2.close()
        s.close()
    assert [r["id"] for r in rows] == [i for i in range(20) if i != 3]
    by_id = {r["id"]: r for r in rows}
    assert by_id[4]["v"] == "u" and by_id[5]["v"] == "r5"
    topic = s2._all_states()[t].topic
    c = Consumer({"bootstrap.servers": stack.kafka.bootstrap, "group.id": "t", "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        msgs, idle = [], 0
        while idle < 3:
            got = c.consume(1000, 0.5)
            idle = 0 if got else idle + 1
            msgs += [m for m in got if not m.error()]
    finally:
        c.close()
    assert len(msgs) == 20 + 3  # 20 snapshot rows, one delete + its tombstone, one update
    for m in msgs:
        assert m.partition() == partition_for(m.key(), 3)
        assert json.loads(m.key()).keys() == {"id"}
    values = [json.loads(m.value()) for m in msgs if m.value() is not None]
    assert {v["op"] for v in values} == {"r", "d", "u"}
    snap = next(v for v in values if v["op"] == "r")
    assert snap["source"]["snapshot"] == "true" and snap["before"] is None and snap["after"]["v"].startswith("r")
    assert set(snap) == {"before", "after", "source", "op", "ts_ms", "transaction"}


def test_truncate_of_one_origin(any_sink):
    """``truncate_origin``: that origin's rows go, the other origins' stay; a version
    already applied (a replayed batch) is skipped, also after later writes of the origin."""
    schema = pa.schema([("id", pa.int64()), ("__cdc_origin", pa.string()), ("v", pa.string())])
    s, t = any_sink, fresh()
    s.ensure_table(t, schema, ["id", "__cdc_origin"])
    origins = ["s1/d.o_0", "s2/d.o_0", "s2/d.o_01"]  # s2/d.o_0 is a prefix of s2/d.o_01: exact match only
    s.apply(
        t,
        1,
        batch(
            schema,
            [{"id": i, "__cdc_origin": o, "v": "x", "_cdc_op": "r", "_cdc_seq": 5} for o in origins for i in range(3)],
        ),
    )
    s.apply(t, 2, batch(schema, [{"id": 0, "__cdc_origin": "s2/d.o_0", "_cdc_op": "d", "_cdc_seq": 6}]))
    assert s.truncate_origin(t, 3, "__cdc_origin", "s2/d.o_0")
    held = lambda: sorted((r["__cdc_origin"], r["id"], r["v"]) for r in readback.rows(s, t).to_pylist())  # noqa: E731
    assert held() == sorted((o, i, "x") for o in ("s1/d.o_0", "s2/d.o_01") for i in range(3))
    # the origin's tombstones went too, as after a truncate: its deleted key is taken at any sequence
    s.apply(t, 4, batch(schema, [{"id": 0, "__cdc_origin": "s2/d.o_0", "v": "new", "_cdc_op": "c", "_cdc_seq": 1}]))
    assert not s.truncate_origin(t, 3, "__cdc_origin", "s2/d.o_0")
    assert ("s2/d.o_0", 0, "new") in held() and len(held()) == 7


def test_kafka_changelog_deletes_the_rows_of_one_origin(stack):
    """`cdc shard remove --delete-rows` on the changelog: a delete and a tombstone for each
    live key of the shard; other shards' rows (shard22's too: a prefix is a shard name and
    its slash) stay; a sink started again counts none of them, and deletes nothing more."""
    from merger.sinks import KafkaChangelogSink

    schema = pa.schema([("id", pa.int64()), ("__cdc_origin", pa.string()), ("v", pa.string())])
    # a sink of its own: a second instance on one prefix fences the first (as s2 does below)
    s, t = KafkaChangelogSink(stack.kafka.bootstrap, "origins" + uuid.uuid4().hex[:6], partitions=3), fresh()
    s.ensure_table(t, schema, ["id", "__cdc_origin"])
    origins = ["shard1/d.o_0", "shard2/d.o_0", "shard2/d.o_1", "shard22/d.o_0"]
    rows = [
        {"id": i, "__cdc_origin": o, "v": f"{o}-{i}", "_cdc_op": "r", "_cdc_seq": 10} for o in origins for i in range(5)
    ]
    s.apply(t, 1, batch(schema, rows))
    s.apply(t, 2, batch(schema, [{"id": 0, "__cdc_origin": "shard2/d.o_1", "_cdc_op": "d", "_cdc_seq": 11}]))
    assert s.count_origin(t, "__cdc_origin", "shard2/") == 9
    assert s.count_origin(t, "v", "shard2/") is None  # not a key column
    assert s.count_origin(fresh(), "__cdc_origin", "shard2/") is None  # no such table
    assert s.delete_origin(t, "__cdc_origin", "shard2/") == 9

    topic = s._all_states()[t].topic
    s.close()
    expected = {
        (("__cdc_origin", r["__cdc_origin"]), ("id", r["id"])): {k: r[k] for k in ("id", "__cdc_origin", "v")}
        for r in rows
        if not r["__cdc_origin"].startswith("shard2/")
    }
    assert changelog_rows(stack.kafka.bootstrap, topic) == expected
    s2 = KafkaChangelogSink(stack.kafka.bootstrap, s.prefix, partitions=3)
    try:
        assert s2.count_origin(t, "__cdc_origin", "shard2/") == 0
        assert s2.delete_origin(t, "__cdc_origin", "shard2/") == 0
        assert s2.count_origin(t, "__cdc_origin", "shard1/") == 5
    finally:
        s2.close()
    assert changelog_rows(stack.kafka.bootstrap, topic) == expected


@pytest.mark.integration
def test_kafka_changelog_writes_bits_as_debezium_does(stack):
    """The sinks get BIT(n>1) big-endian (merger.schema.canonical); the changelog writes Debezium's
    little-endian Bits again, also after a restart (the width is in its control record)."""
    import base64

    from merger.sinks import KafkaChangelogSink

    s, t = KafkaChangelogSink(stack.kafka.bootstrap, "bits" + uuid.uuid4().hex[:6]), fresh()
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("b", pa.binary(), metadata={T.BIT_WIDTH: b"12"}),
            pa.field("raw", pa.binary()),
        ]
    )
    s.ensure_table(t, schema, ["id"])
    s.apply(t, 1, batch(schema, [{"id": 1, "b": b"\x0c\x61", "raw": b"\x0c\x61", "_cdc_op": "c", "_cdc_seq": 1}]))
    got = {}
    s.transport.read_topic(s._all_states()[t].topic, lambda m: got.update(json.loads(m.value())["after"]))
    assert got == {"id": 1, "b": base64.b64encode(b"\x61\x0c").decode(), "raw": base64.b64encode(b"\x0c\x61").decode()}
    s.close()
    s2 = KafkaChangelogSink(stack.kafka.bootstrap, s.prefix)
    try:
        assert readback.rows(s2, t).to_pylist() == [{"id": 1, "b": b"\x0c\x61", "raw": b"\x0c\x61"}]
    finally:
        s2.close()


@pytest.mark.integration
def test_kafka_unreachable_is_sink_unavailable():
    from cdc.stack import free_port
    from merger.sinks import KafkaChangelogSink

    s = KafkaChangelogSink(
        {"bootstrap.servers": f"127.0.0.1:{free_port()}", "socket.timeout.ms": 1000}, "x", timeout_s=2
    )
    with pytest.raises(SinkUnavailable, match="unreachable"):
        s.ensure_table(fresh(), SIMPLE, ["id"])
