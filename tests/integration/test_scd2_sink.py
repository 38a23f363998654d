"""The PostgreSQL sink's SCD type 2 tables (mode ``scd2``) against the real server, read
back with plain SQL and compared with the naive model: every distinct change applied
once, in sequence order, by AUTO CDC's rules, written here without the core's code (the
core, ``merger.history.scd2``, is what the sink runs). Batches are replayed (the same
version again, suffixes read again under new versions), snapshot rows of unchanged keys
arrive, truncates close versions; the versions of each key must tile time."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.history.modes import COMMIT_US, SCD2Mode, TableModes
from merger.sinks import TableId
from merger.sinks.base import TableCut, TableFault

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.string()), ("u", pa.int64())])
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _sink(stack, tables: dict):
    from merger.sinks import PostgresSink

    return PostgresSink(stack.postgres, modes=TableModes(tables))


def _pg(stack):
    p = stack.postgres
    return psycopg.connect(host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database)


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


def _us(at):
    return None if at is None else int((at - EPOCH).total_seconds() * 1_000_000)


def _history(stack, t: TableId) -> list[tuple]:
    with _pg(stack) as c:
        rows = c.execute(
            f"SELECT id, v, u, __start_seq, __end_seq, __last_seq, __start_at, __end_at, __current "
            f'FROM "{t.database}"."{t.table}" ORDER BY id, __start_seq'
        ).fetchall()
    return [(i, v, u, ss, es, ls, _us(sa), _us(ea), cur) for i, v, u, ss, es, ls, sa, ea, cur in rows]


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


def test_versions_in_place_updates_deletes_truncate_and_replays(stack):
    t = _table()
    sink = _sink(stack, {str(t): SCD2Mode(track_history_except=("u",))})
    try:
        assert sink.ensure_table(t, SCHEMA, ["id"]) == ["created"]
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
        assert sink.apply(t, 3, _batch(snap + b2))  # read again: nothing changes
        assert sink.apply(t, 4, _batch([("r", 1, "A", 2, 15, 5_000_000)]))  # a re-snapshot, unchanged: nothing
        assert sink.truncate(t, 5, TableCut(16, 6_000_000))
        assert sink.apply(t, 6, _batch([("c", 2, "b2", 9, 17, 7_000_000)]))  # the deleted key again
        assert sink.truncate(t, 7, TableCut(16, 6_000_000))  # the truncate read again: closes nothing newer
        got = _history(stack, t)
        assert got == [
            (1, "a", 2, 10, 12, 11, 1_000_000, 3_000_000, False),
            (1, "A", 2, 12, 16, 12, 3_000_000, 6_000_000, False),
            (2, "b", 1, 10, 13, 10, 1_000_000, 3_000_000, False),
            (2, "b2", 9, 17, None, 17, 7_000_000, None, True),
            (3, "c", 0, 14, 16, 14, 4_000_000, 6_000_000, False),
        ]
        changes = snap + b2 + [("t", None, None, None, 16, 6_000_000), ("c", 2, "b2", 9, 17, 7_000_000)]
        assert got == _model(changes, {"v"})
    finally:
        sink.close()


def test_options_that_do_not_fit_the_table_pause_it(stack):
    t = _table()
    sink = _sink(stack, {str(t): SCD2Mode(track_history=("nope",))})
    try:
        with pytest.raises(TableFault, match="unknown column"):
            sink.ensure_table(t, SCHEMA, ["id"])
    finally:
        sink.close()


def test_a_key_has_one_open_version_whatever_the_server_is_told(stack):
    """The partial unique index: PostgreSQL itself refuses a second open version."""
    t = _table()
    sink = _sink(stack, {str(t): SCD2Mode()})
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        sink.apply(t, 1, _batch([("c", 1, "a", 1, 10, 1)]))
        with _pg(stack) as c, pytest.raises(psycopg.errors.UniqueViolation):
            c.execute(
                f'INSERT INTO "{t.database}"."t" (id, v, u, __start_at, __start_seq, __last_seq) '
                "VALUES (1, 'x', 1, now(), 20, 20)"
            )
    finally:
        sink.close()


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
def test_any_batches_and_replays_give_the_models_history_and_tile_time(stack, script, replays, rnd):
    changes, at = [], 1_700_000_000_000_000
    for n, (op, i, v, u, gap) in enumerate(script):
        at += gap * 1_000_000
        changes.append((op, None, None, None, 100 + n, at) if op == "t" else (op, i, v, u, 100 + n, at))
    t = _table()
    sink = _sink(stack, {str(t): SCD2Mode(track_history=("v",))})
    version = 0

    def send(part):
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
            else:
                rows.append(c)
        if rows:
            version += 1
            sink.apply(t, version, _batch(rows))

    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        cut = sorted({rnd.randrange(1, len(changes) + 1)} | {len(changes)})
        start = 0
        for c in cut:
            send(changes[start:c])
            start = c
        for frm, n in replays:
            suffix = changes[min(frm, len(changes) - 1) :]  # truncates too: read again under new versions
            for k in range(n):
                send(suffix[k::n])
        got = _history(stack, t)
        assert got == _model(changes, {"v"})
        by_key: dict = {}
        for row in got:
            by_key.setdefault(row[0], []).append(row)
        for versions in by_key.values():  # time tiles: no overlap, at most the last is open
            for a, b in zip(versions, versions[1:]):
                assert a[4] is not None and a[4] <= b[3] and a[7] <= b[6]
            assert sum(1 for v in versions if v[8]) <= 1
    finally:
        sink.close()
        with _pg(stack) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{t.database}" CASCADE')


def test_a_change_at_sequence_0_opens_a_version(stack):
    t = _table()
    sink = _sink(stack, {str(t): SCD2Mode()})
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        sink.apply(t, 1, _batch([("c", 1, "a", 1, 0, 1_000_000)]))
        sink.apply(t, 2, _batch([("c", 1, "a", 1, 0, 1_000_000)]))
        assert _history(stack, t) == [(1, "a", 1, 0, None, 0, 1_000_000, None, True)]
    finally:
        sink.close()


def test_json_values_are_compared_as_json(stack):
    """A JSON value the sink stores as jsonb (which reorders keys and spaces) read back
    equal opens nothing; a different one opens a version."""
    t = _table()
    schema = pa.schema([("id", pa.int32()), ("j", pa.json_())])
    sink = _sink(stack, {str(t): SCD2Mode()})

    def batch(rows):
        return pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int32()),
                "j": pa.array([r[1] for r in rows], pa.json_()),
                "_cdc_op": pa.array([r[2] for r in rows], pa.string()),
                "_cdc_seq": pa.array([r[3] for r in rows], pa.int64()),
                COMMIT_US: pa.array([1_000_000 * r[3] for r in rows], pa.int64()),
            }
        )

    try:
        sink.ensure_table(t, schema, ["id"])
        sink.apply(t, 1, batch([(1, '{"b": [1, 2],   "a": 1}', "c", 1)]))
        sink.apply(t, 2, batch([(1, '{"a":1,"b":[1,2]}', "r", 2)]))  # the same value: nothing
        sink.apply(t, 3, batch([(1, '{"a": 2, "b": [1, 2]}', "u", 3)]))
        with _pg(stack) as c:
            rows = c.execute(
                f'SELECT j, __start_seq, __current FROM "{t.database}"."t" ORDER BY __start_seq'
            ).fetchall()
        assert rows == [({"a": 1, "b": [1, 2]}, 1, False), ({"a": 2, "b": [1, 2]}, 3, True)]
    finally:
        sink.close()


@pytest.mark.parametrize("mode", ["scd2", "changelog"])
def test_nul_values_in_history_tables_follow_the_sinks_nul_rule(stack, mode):
    """PostgreSQL text cannot hold U+0000: a history table stores such a value by the
    sink's NUL rule, as a latest-state table does (strip here), and ``pause`` refuses the
    batch with the key and column named."""
    from merger.history.modes import ChangelogMode
    from merger.sinks import PostgresSink, UnstorableValue

    t = _table()
    modes = TableModes({str(t): SCD2Mode() if mode == "scd2" else ChangelogMode()})
    sink = PostgresSink(stack.postgres, nul_policy="strip", modes=modes)
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        assert sink.apply(t, 1, _batch([("c", 1, "a\x00b", 1, 10, 1_000_000), ("c", 2, "\x00", 1, 11, 1_000_000)]))
        assert sink.apply(t, 2, _batch([("u", 1, "c\x00", 1, 12, 2_000_000)]))
        with _pg(stack) as c:
            got = c.execute(f'SELECT id, v FROM "{t.database}"."{t.table}" ORDER BY 1, v').fetchall()
        assert sorted(got) == sorted([(1, "ab"), (1, "c"), (2, "")])
    finally:
        sink.close()
    t = _table()
    modes = TableModes({str(t): SCD2Mode() if mode == "scd2" else ChangelogMode()})
    sink = PostgresSink(stack.postgres, nul_policy="pause", modes=modes)
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        with pytest.raises(UnstorableValue) as e:
            sink.apply(t, 1, _batch([("c", 1, "a\x00b", 1, 10, 1_000_000)]))
        assert "key {'id': 1}: column 'v'" in str(e.value)
        assert sink.applied_version(t) is None
    finally:
        sink.close()


@pytest.mark.parametrize(
    "key_type, keys",
    [
        (pa.string(), ["b", "A", "a ", "é"]),  # no range probe: the keys are copied and joined
        (pa.decimal128(12, 2), [Decimal("1.50"), Decimal("-2.00"), Decimal("10.25")]),
    ],
    ids=["string", "decimal"],
)
def test_keys_that_are_not_integers_open_then_close_versions(stack, key_type, keys):
    """A batch that only opens versions (copied straight in) and one that changes them (the
    latest versions read back by joining the keys), with string and DECIMAL keys; read
    back with plain SQL."""
    t = _table()
    schema = pa.schema([("k", key_type), ("v", pa.string())])
    sink = _sink(stack, {str(t): SCD2Mode()})

    def batch(rows):  # (op, key, v, seq, time_us)
        return pa.table(
            {
                "k": pa.array([r[1] for r in rows], key_type),
                "v": pa.array([r[2] for r in rows], pa.string()),
                "_cdc_op": pa.array([r[0] for r in rows], pa.string()),
                "_cdc_seq": pa.array([r[3] for r in rows], pa.int64()),
                COMMIT_US: pa.array([r[4] for r in rows], pa.int64()),
            }
        )

    try:
        sink.ensure_table(t, schema, ["k"])
        assert sink.apply(t, 1, batch([("r", k, f"s{i}", 10, 1_000_000) for i, k in enumerate(keys)]))
        assert sink.apply(t, 2, batch([("u", keys[0], "changed", 11, 2_000_000), ("d", keys[1], None, 12, 3_000_000)]))
        with _pg(stack) as c:
            got = c.execute(
                f'SELECT k, v, __start_seq, __end_seq FROM "{t.database}"."{t.table}" ORDER BY k, __start_seq'
            ).fetchall()
        want = [(k, f"s{i}", 10, {0: 11, 1: 12}.get(i)) for i, k in enumerate(keys)] + [(keys[0], "changed", 11, None)]
        assert sorted(got, key=repr) == sorted(want, key=repr)
    finally:
        sink.close()
