"""The PostgreSQL sink's change log tables (mode ``changelog``) against the real server:
batches with replays (the same version again, a suffix read again under new versions),
truncates, a column added, compared with the pure model ``merger.history.changelog``
(which shares no code with the sink's SQL). The log is read back with plain SQL."""

from __future__ import annotations

import datetime as dt
import uuid

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.history.change import Change
from merger.history.changelog import appended_rows
from merger.history.modes import COMMIT_US, ChangelogMode, TableModes
from merger.sinks import SinkError, TableId
from merger.sinks.base import TableCut, TableFault

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.string())])
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _sink(stack, tables):
    from merger.sinks import PostgresSink

    return PostgresSink(stack.postgres, modes=TableModes({t: ChangelogMode() for t in tables}))


def _pg(stack):
    p = stack.postgres
    return psycopg.connect(host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database)


def _batch(changes: list[tuple]) -> pa.Table:
    """(op, id, v, seq, time_us) -> the merger's batch."""
    return pa.table(
        {
            "id": pa.array([c[1] for c in changes], pa.int32()),
            "v": pa.array([c[2] for c in changes], pa.string()),
            "_cdc_op": pa.array([c[0] for c in changes], pa.string()),
            "_cdc_seq": pa.array([c[3] for c in changes], pa.int64()),
            COMMIT_US: pa.array([c[4] for c in changes], pa.int64()),
        }
    )


def _log(stack, table: TableId) -> list[tuple]:
    with _pg(stack) as c:
        return [
            (op, i, v, seq, None if at is None else int((at - EPOCH).total_seconds() * 1_000_000))
            for op, i, v, seq, at in c.execute(
                f'SELECT __op, id, v, __seq, __at FROM "{table.database}"."{table.table}" ORDER BY __seq, id'
            ).fetchall()
        ]


def _model(batches: list[list[tuple]]) -> list[tuple]:
    last: dict = {}
    out = []
    for changes in batches:
        done = appended_rows(
            last,
            [Change((i,), op, seq, t, None if op == "d" else {"id": i, "v": v}) for op, i, v, seq, t in changes],
            "after",
        )
        last = done.last
        out += [(r.op, r.key[0], None if r.op == "d" else r.after["v"], r.sequence, r.time) for r in done.rows]
    return sorted(out, key=lambda r: (r[3], r[1]))


def _table(prefix="cl") -> TableId:
    return TableId(f"{prefix}_{uuid.uuid4().hex[:8]}", "t")


def test_replays_append_nothing_and_truncates_are_rows(stack):
    t = _table()
    sink = _sink(stack, [str(t)])
    try:
        assert sink.ensure_table(t, SCHEMA, ["id"]) == ["created"]
        b1 = [("r", 1, "a", 10, 1_000_000), ("r", 2, "b", 10, 1_000_000)]
        b2 = [("u", 1, "a2", 11, 2_000_000), ("d", 2, "b", 12, 2_000_000), ("c", 3, "c", 13, 3_000_123)]
        assert sink.apply(t, 1, _batch(b1))
        assert sink.apply(t, 2, _batch(b2))
        assert not sink.apply(t, 2, _batch(b2))  # the same write again: skipped by its version
        assert sink.apply(t, 3, _batch(b1 + b2))  # read again under a new version: nothing new
        assert sink.truncate(t, 4, TableCut(14, 4_000_000))
        assert not sink.truncate(t, 4, TableCut(14, 4_000_000))
        assert sink.apply(t, 5, _batch([("c", 1, "again", 15, 5_000_000)]))
        assert sink.applied_version(t) == 5
        got = _log(stack, t)
        assert got == [
            ("r", 1, "a", 10, 1_000_000),
            ("r", 2, "b", 10, 1_000_000),
            ("u", 1, "a2", 11, 2_000_000),
            ("d", 2, None, 12, 2_000_000),  # a delete keeps only its key
            ("c", 3, "c", 13, 3_000_123),  # microseconds kept exactly
            ("t", None, None, 14, 4_000_000),
            ("c", 1, "again", 15, 5_000_000),
        ]
    finally:
        sink.close()


def test_a_column_added_and_the_log_set_aside_when_dropped(stack):
    t = _table()
    sink = _sink(stack, [str(t)])
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        sink.apply(t, 1, _batch([("c", 1, "a", 10, 1)]))
        wider = SCHEMA.append(pa.field("w", pa.int64()))
        assert sink.ensure_table(t, wider, ["id"]) == ["added column w bigint"]
        batch = _batch([("u", 1, "b", 11, 2)]).append_column("w", pa.array([7], pa.int64()))
        sink.apply(t, 2, batch)
        with _pg(stack) as c:
            rows = c.execute(f'SELECT id, v, w, __op FROM "{t.database}"."t" ORDER BY __seq').fetchall()
        assert rows == [(1, "a", None, "c"), (1, "b", 7, "u")]
        sink.drop_table(t)  # the history is kept aside, a new log starts
        with _pg(stack) as c:
            aside = c.execute(
                "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE nspname = %s AND relname LIKE 't__until_%%'",
                (t.database,),
            ).fetchall()
            assert len(aside) == 1
            assert c.execute(f'SELECT count(*) FROM "{t.database}"."{aside[0][0]}"').fetchone()[0] == 2
        assert sink.ensure_table(t, wider, ["id"]) == ["created"]
        assert _log(stack, t) == []
    finally:
        sink.close()


def test_a_table_of_another_mode_is_never_taken_over(stack):
    from merger.sinks import PostgresSink

    t = _table()
    latest = PostgresSink(stack.postgres)
    try:
        latest.ensure_table(t, SCHEMA, ["id"])
    finally:
        latest.close()
    sink = _sink(stack, [str(t)])
    try:
        with pytest.raises(TableFault, match="is not a change log"):
            sink.ensure_table(t, SCHEMA, ["id"])
    finally:
        sink.close()
    logging = _sink(stack, [])  # the log, read as a latest table: refused too
    try:
        t2 = _table()
        logs = _sink(stack, [str(t2)])
        logs.ensure_table(t2, SCHEMA, ["id"])
        logs.close()
        with pytest.raises(SinkError):
            logging.ensure_table(t2, SCHEMA, ["id"])
    finally:
        logging.close()


changes = st.lists(
    st.tuples(st.sampled_from(["c", "u", "d", "r"]), st.integers(1, 4), st.sampled_from(["a", "b", None])),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(changes, st.lists(st.tuples(st.integers(0, 11), st.integers(1, 3)), max_size=4), st.randoms())
def test_any_replay_of_any_batches_leaves_the_models_log(stack, script, replays, rnd):
    """The changes in batches, then suffixes read again (each under a new version) and
    whole batches sent again under their own version: the log is the model's."""
    seqs = [(op, i, v, 100 + n, 1_000_000 * n) for n, (op, i, v) in enumerate(script)]
    cuts = sorted({rnd.randrange(1, len(seqs) + 1) for _ in range(2)} | {len(seqs)})
    batches, start = [], 0
    for cut in cuts:
        batches.append(seqs[start:cut])
        start = cut
    t = _table("clp")
    sink = _sink(stack, [str(t)])
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        version = 0
        for b in batches:
            version += 1
            sink.apply(t, version, _batch(b))
            if rnd.random() < 0.3:
                assert not sink.apply(t, version, _batch(b))  # a crash before the checkpoint: skipped
        for frm, n in replays:  # a suffix read again, in new batches
            suffix = seqs[min(frm, len(seqs) - 1) :]
            for k in range(n):
                version += 1
                sink.apply(t, version, _batch(suffix[k::n]))
        assert _log(stack, t) == _model(batches)
    finally:
        sink.close()
        with _pg(stack) as c:
            c.execute(f'DROP SCHEMA "{t.database}" CASCADE')


def test_a_change_at_sequence_0_is_kept(stack):
    """Topics Debezium wrote: the sequence is the Kafka offset, 0 for a partition's first record."""
    t = _table()
    sink = _sink(stack, [str(t)])
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        sink.apply(t, 1, _batch([("c", 1, "a", 0, 1_000_000)]))
        sink.apply(t, 2, _batch([("c", 1, "a", 0, 1_000_000), ("u", 1, "b", 1, 2_000_000)]))
        assert _log(stack, t) == [("c", 1, "a", 0, 1_000_000), ("u", 1, "b", 1, 2_000_000)]
    finally:
        sink.close()


# ------------------------------------------------------------------ image before_after


def _before_after_sink(stack, tables):
    from merger.sinks import PostgresSink

    return PostgresSink(stack.postgres, modes=TableModes({t: ChangelogMode("before_after") for t in tables}))


def _batch_ba(changes: list[tuple]) -> pa.Table:
    """(op, id, v, seq, time_us, before id, before v) -> the merger's batch with the before image."""
    return (
        _batch([c[:5] for c in changes])
        .append_column("_cdc_before_id", pa.array([c[5] for c in changes], pa.int32()))
        .append_column("_cdc_before_v", pa.array([c[6] for c in changes], pa.string()))
    )


def _log_ba(stack, table: TableId) -> list[tuple]:
    with _pg(stack) as c:
        return c.execute(
            f'SELECT __op, id, v, __before_id, __before_v, __seq FROM "{table.database}"."{table.table}" '
            "ORDER BY __seq, __op"
        ).fetchall()


def test_before_after_rows_carry_the_exact_before_image(stack):
    t = _table("ba")
    sink = _before_after_sink(stack, [str(t)])
    try:
        assert sink.ensure_table(t, SCHEMA, ["id"]) == ["created"]
        with _pg(stack) as c:
            types = dict(
                c.execute(
                    "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s",
                    (t.database,),
                ).fetchall()
            )
        assert types["__before_id"] == types["id"] == "integer"  # typed like the column
        assert types["__before_v"] == types["v"] == "text"
        b1 = [("r", 1, "a", 10, 1, None, None), ("c", 2, "b", 11, 2, None, None)]
        b2 = [
            ("u", 1, "a2", 12, 3, 1, "a"),
            ("d", 2, "b", 13, 4, 2, "b"),  # a delete: its after columns keep the key only
            ("d", 1, "a2", 14, 5, 1, "a2"),  # a key change 1 -> 5: delete + insert
            ("c", 5, "a2", 14, 5, None, None),
        ]
        assert sink.apply(t, 1, _batch_ba(b1))
        assert sink.apply(t, 2, _batch_ba(b2))
        assert sink.apply(t, 3, _batch_ba(b1 + b2))  # a replay appends nothing
        assert sink.truncate(t, 4, TableCut(15, 6))
        assert _log_ba(stack, t) == [
            ("r", 1, "a", None, None, 10),
            ("c", 2, "b", None, None, 11),
            ("u", 1, "a2", 1, "a", 12),
            ("d", 2, None, 2, "b", 13),
            ("c", 5, "a2", None, None, 14),
            ("d", 1, None, 1, "a2", 14),
            ("t", None, None, None, None, 15),
        ]
        # a column added: its twin too
        wider = SCHEMA.append(pa.field("w", pa.int64()))
        assert sorted(sink.ensure_table(t, wider, ["id"])) == [
            "added column __before_w bigint",
            "added column w bigint",
        ]
        batch = (
            _batch_ba([("u", 5, "z", 16, 7, 5, "a2")])
            .append_column("w", pa.array([8], pa.int64()))
            .append_column("_cdc_before_w", pa.array([None], pa.int64()))
        )
        assert sink.apply(t, 5, batch)
        with _pg(stack) as c:
            assert c.execute(
                f'SELECT w, __before_w, __before_v FROM "{t.database}"."t" WHERE __seq = 16'
            ).fetchall() == [(8, None, "a2")]
    finally:
        sink.close()


def test_a_log_never_changes_image_and_a_before_column_name_is_refused(stack):
    t = _table("ba")
    after = _sink(stack, [str(t)])
    try:
        after.ensure_table(t, SCHEMA, ["id"])
    finally:
        after.close()
    ba = _before_after_sink(stack, [str(t)])
    try:
        with pytest.raises(TableFault, match="is not a change log with image before_after"):
            ba.ensure_table(t, SCHEMA, ["id"])
        t2 = _table("ba")
        ba2 = _before_after_sink(stack, [str(t2)])
        ba2.ensure_table(t2, SCHEMA, ["id"])
        ba2.close()
        with pytest.raises(TableFault, match="is not a change log"):
            _sink(stack, [str(t2)]).ensure_table(t2, SCHEMA, ["id"])
        t3 = _table("ba")
        clash = SCHEMA.append(pa.field("__before_v", pa.string()))
        with pytest.raises(TableFault, match="__before_v"):
            _before_after_sink(stack, [str(t3)]).ensure_table(t3, clash, ["id"])
        after3 = _sink(stack, [str(t3)])  # image after takes such a column
        assert after3.ensure_table(t3, clash, ["id"]) == ["created"]
        after3.close()
    finally:
        ba.close()


def test_an_after_log_takes_a_batch_with_the_before_image(stack):
    """Another sink's before_after log of the table puts the before image in every batch."""
    t = _table("ba")
    sink = _sink(stack, [str(t)])
    try:
        sink.ensure_table(t, SCHEMA, ["id"])
        assert sink.apply(t, 1, _batch_ba([("u", 1, "b", 10, 1, 1, "a")]))
        assert _log(stack, t) == [("u", 1, "b", 10, 1)]
    finally:
        sink.close()
    from merger.sinks import PostgresSink

    t2 = _table("ba")
    latest = PostgresSink(stack.postgres)  # and a latest-state table
    try:
        latest.ensure_table(t2, SCHEMA, ["id"])
        assert latest.apply(t2, 1, _batch_ba([("c", 1, "b", 10, 1, None, None), ("u", 1, "c", 11, 2, 1, "b")]))
        with _pg(stack) as c:
            assert c.execute(f'SELECT * FROM "{t2.database}"."t"').fetchall() == [(1, "c", 11)]
    finally:
        latest.close()
