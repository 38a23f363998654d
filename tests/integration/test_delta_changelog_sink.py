"""The Delta sink's change log tables (mode ``changelog``) on real Delta tables (delta-rs,
a local directory; one test on the stack's S3 server): batches with replays (the same
version again, a suffix read again under new versions), truncates, a column added,
compared with the pure model ``merger.history.changelog``. The log is read back by the
test itself with ``deltalake`` and pyarrow, in its own types, not with the sink's code."""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.history.change import Change
from merger.history.changelog import appended_rows
from merger.history.modes import COMMIT_US, ChangelogMode, TableModes
from merger.sinks import SinkError, TableId
from merger.sinks.base import TableCut, TableFault

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.string())])


def _sink(base, tables, **kwargs):
    from merger.sinks.delta import DeltaSink

    return DeltaSink(str(base), modes=TableModes({t: ChangelogMode() for t in tables}), **kwargs)


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


def _read(base, table: TableId, storage_options=None) -> pa.Table:
    return DeltaTable(f"{base}/{table.database}/{table.table}", storage_options=storage_options).to_pyarrow_table()


def _log(base, table: TableId, storage_options=None) -> list[tuple]:
    t = _read(base, table, storage_options)
    assert t.schema.field("__at").type == pa.timestamp("us", tz="UTC")
    at = pc.cast(t["__at"], pa.int64()).to_pylist()  # microseconds since the epoch, exactly
    rows = [
        (op, i, v, seq, us)
        for op, i, v, seq, us in zip(
            t["__op"].to_pylist(), t["id"].to_pylist(), t["v"].to_pylist(), t["__seq"].to_pylist(), at
        )
    ]
    return sorted(rows, key=lambda r: (r[3], -1 if r[1] is None else r[1]))


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


def test_replays_append_nothing_and_truncates_are_rows(tmp_path):
    t = _table()
    sink = _sink(tmp_path, [str(t)])
    assert sink.ensure_table(t, SCHEMA, ["id"]) == ["created"]
    path = f"{tmp_path}/{t.database}/t"
    conf = DeltaTable(path).metadata().configuration
    assert conf["cdc.mode"] == "changelog" and json.loads(conf["cdc.keys"]) == ["id"]
    b1 = [("r", 1, "a", 10, 1_000_000), ("r", 2, "b", 10, 1_000_000)]
    b2 = [("u", 1, "a2", 11, 2_000_000), ("d", 2, "b", 12, 2_000_000), ("c", 3, "c", 13, 3_000_123)]
    assert sink.apply(t, 1, _batch(b1))
    commits = DeltaTable(path).version()
    assert sink.apply(t, 2, _batch(b2))
    assert DeltaTable(path).version() == commits + 1  # one commit per write
    assert DeltaTable(path).transaction_version(f"cdc-sink:{DeltaTable(path).metadata().id}") == 2
    assert not sink.apply(t, 2, _batch(b2))  # the same write again: skipped by its version
    assert sink.apply(t, 3, _batch(b1 + b2))  # read again under a new version: nothing new
    assert sink.truncate(t, 4, TableCut(14, 4_000_000))
    assert not sink.truncate(t, 4, TableCut(14, 4_000_000))
    assert sink.truncate(t, 5, TableCut(14, 4_000_000))  # the same truncate read again: no second row
    assert sink.apply(t, 6, _batch([("c", 1, "again", 15, 5_000_000)]))
    assert sink.truncate(t, 7)  # a DDL's reset (no place of its own): after every change of the log
    assert not sink.truncate(t, 7)  # replayed: its version, not its place, says it is there already
    assert sink.applied_version(t) == 7
    got = _log(tmp_path, t)
    assert got[:7] == [
        ("r", 1, "a", 10, 1_000_000),
        ("r", 2, "b", 10, 1_000_000),
        ("u", 1, "a2", 11, 2_000_000),
        ("d", 2, None, 12, 2_000_000),  # a delete keeps only its key
        ("c", 3, "c", 13, 3_000_123),  # microseconds kept exactly
        ("t", None, None, 14, 4_000_000),
        ("c", 1, "again", 15, 5_000_000),
    ]
    assert len(got) == 8 and got[7][:4] == ("t", None, None, 16)
    versions = dict(zip(_read(tmp_path, t)["__seq"].to_pylist(), _read(tmp_path, t)["__version"].to_pylist()))
    assert versions == {10: 1, 11: 2, 12: 2, 13: 2, 14: 4, 15: 6, 16: 7}


def test_a_truncate_of_one_origin_is_a_row_of_that_origin(tmp_path):
    t = _table()
    sink = _sink(tmp_path, [str(t)])
    schema = pa.schema([("__cdc_origin", pa.string()), ("id", pa.int32()), ("v", pa.string())])
    sink.ensure_table(t, schema, ["__cdc_origin", "id"])
    batch = _batch([("c", 1, "a", 5, 1), ("c", 1, "b", 6, 2)])
    batch = batch.add_column(0, "__cdc_origin", pa.array(["s1/db.t", "s2/db.t"]))
    assert sink.apply(t, 1, batch)
    assert sink.truncate_origin(t, 2, "__cdc_origin", "s1/db.t", cut=TableCut(7, 3))
    assert sink.truncate_origin(t, 3, "__cdc_origin", "s2/db.t", cut=TableCut(7, 3))  # another origin, same place
    assert sink.truncate_origin(t, 4, "__cdc_origin", "s1/db.t", cut=TableCut(7, 3))  # read again: no row
    got = sorted(
        (r["__op"], r["__cdc_origin"], r["id"], r["__seq"]) for r in _read(tmp_path, t).to_pylist() if r["__op"] == "t"
    )
    assert got == [("t", "s1/db.t", None, 7), ("t", "s2/db.t", None, 7)]


def test_a_column_added_and_the_log_set_aside_when_dropped(tmp_path):
    t = _table()
    sink = _sink(tmp_path, [str(t)])
    sink.ensure_table(t, SCHEMA, ["id"])
    sink.apply(t, 1, _batch([("c", 1, "a", 10, 1)]))
    wider = SCHEMA.append(pa.field("w", pa.int64()))
    assert sink.ensure_table(t, wider, ["id"]) == ["added column w int64"]
    batch = _batch([("u", 1, "b", 11, 2)]).append_column("w", pa.array([7], pa.int64()))
    sink.apply(t, 2, batch)
    rows = sorted(_read(tmp_path, t).to_pylist(), key=lambda r: r["__seq"])
    assert [(r["id"], r["v"], r["w"], r["__op"]) for r in rows] == [(1, "a", None, "c"), (1, "b", 7, "u")]
    sink.drop_table(t)  # the history is kept aside, a new log starts
    aside = [n for n in os.listdir(tmp_path / t.database) if n.startswith("t__until_")]
    assert len(aside) == 1
    kept = DeltaTable(str(tmp_path / t.database / aside[0]))
    assert kept.to_pyarrow_table().num_rows == 2 and kept.metadata().configuration["cdc.mode"] == "changelog"
    assert sink.ensure_table(t, wider, ["id"]) == ["created"]
    assert _log(tmp_path, t) == []
    assert sink.applied_version(t) is None  # a new table: its versions start again
    assert sink.apply(t, 1, _batch([("c", 1, "new", 20, 3)]))


def test_a_widened_column_keeps_the_log_and_its_versions(tmp_path):
    t = _table()
    sink = _sink(tmp_path, [str(t)])
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
    path = f"{tmp_path}/{t.database}/t"
    table_id = DeltaTable(path).metadata().id
    assert sink.ensure_table(t, pa.schema([("id", pa.int32()), ("n", pa.int64())]), ["id"]) == [
        "widened n int32 -> int64"
    ]
    assert DeltaTable(path).metadata().id == table_id and DeltaTable(path).metadata().configuration["cdc.mode"]
    assert not sink.apply(t, 1, batch(5, 3))  # the versions survive the rewrite
    assert sink.apply(t, 2, batch(2**40, 4))
    got = sorted((r["n"], r["__seq"]) for r in _read(tmp_path, t).to_pylist())
    assert got == [(5, 3), (2**40, 4)]


def test_a_batch_of_new_changes_opens_no_older_file_of_a_wide_log(tmp_path):
    """``__seq`` comes after 40 user columns (Delta keeps statistics of the first 32 by
    default): the log keeps its statistics anyway, so a batch whose changes are all newer
    than the log reads none of its files, shown by removing the oldest from the disk."""
    t = _table()
    sink = _sink(tmp_path, [str(t)], compact_every_commits=0)
    wide = pa.schema([("id", pa.int32())] + [(f"c{i}", pa.int32()) for i in range(40)])
    sink.ensure_table(t, wide, ["id"])

    def batch(seq):
        cols = {"id": pa.array([seq % 3], pa.int32())}
        cols.update({f"c{i}": pa.array([seq], pa.int32()) for i in range(40)})
        cols.update({"_cdc_op": ["u"], "_cdc_seq": pa.array([seq], pa.int64()), COMMIT_US: pa.array([seq], pa.int64())})
        return pa.table(cols)

    for seq in (1, 2, 3):
        assert sink.apply(t, seq, batch(seq))
    path = f"{tmp_path}/{t.database}/t"
    files = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    assert files["max.__seq"].to_pylist() and not files["max.__seq"].null_count
    oldest = min(files.to_pylist(), key=lambda f: f["max.__seq"])["path"]
    os.remove(f"{path}/{oldest}")
    assert sink.apply(t, 4, batch(4))  # would fail reading the removed file
    assert sink.truncate(t, 5)  # a DDL's reset: after the highest sequence, from the statistics
    seqs = sorted(
        r["__seq"] for r in DeltaTable(path).to_pyarrow_dataset().to_table(filter=ds.field("__seq") >= 2).to_pylist()
    )
    assert seqs == [2, 3, 4, 5]


def test_a_table_of_another_mode_is_never_taken_over(tmp_path):
    from merger.sinks.delta import DeltaSink

    t = _table()
    DeltaSink(str(tmp_path)).ensure_table(t, SCHEMA, ["id"])  # a latest-state table at that path
    with pytest.raises(TableFault, match="is not a change log"):
        _sink(tmp_path, [str(t)]).ensure_table(t, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="is not a change log"):
        _sink(tmp_path, [str(t)]).apply(t, 1, _batch([("c", 1, "a", 1, 1)]))
    t2 = _table()
    _sink(tmp_path, [str(t2)]).ensure_table(t2, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="is a changelog table"):  # the log, configured latest: refused
        DeltaSink(str(tmp_path)).ensure_table(t2, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="is a changelog table"):
        DeltaSink(str(tmp_path)).apply(t2, 1, _batch([("c", 1, "a", 1, 1)]))
    with pytest.raises(TableFault, match="is a changelog table"):  # a rebuild of it as latest: not deleted
        DeltaSink(str(tmp_path)).drop_table(t2)
    assert DeltaTable(f"{tmp_path}/{t2.database}/t").metadata().configuration["cdc.mode"] == "changelog"
    t3 = _table()  # a table someone else marked with another mode
    DeltaTable.create(
        f"{tmp_path}/{t3.database}/t", SCHEMA, configuration={"cdc.mode": "scd2"}, raise_if_key_not_exists=False
    )
    with pytest.raises(TableFault, match="marked scd2"):
        _sink(tmp_path, [str(t3)]).ensure_table(t3, SCHEMA, ["id"])
    assert _read(tmp_path, t).num_rows == 0 and _read(tmp_path, t3).num_rows == 0  # untouched


def test_a_change_of_key_columns_is_not_followed(tmp_path):
    from merger.sinks import IncompatibleSchemaChange

    t = _table()
    sink = _sink(tmp_path, [str(t)])
    sink.ensure_table(t, SCHEMA, ["id"])
    with pytest.raises(IncompatibleSchemaChange, match="key columns"):
        sink.ensure_table(t, SCHEMA, ["id", "v"])
    with pytest.raises(SinkError, match="has no latest state"):
        sink.rows_with_keys(t, ["id"], [(1,)])


changes = st.lists(
    st.tuples(st.sampled_from(["c", "u", "d", "r"]), st.integers(1, 4), st.sampled_from(["a", "b", None])),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(changes, st.lists(st.tuples(st.integers(0, 11), st.integers(1, 3)), max_size=4), st.randoms(), st.booleans())
def test_any_replay_of_any_batches_leaves_the_models_log(tmp_path_factory, script, replays, rnd, from_zero):
    """The changes in batches, then suffixes read again (each under a new version) and
    whole batches sent again under their own version: the log is the model's. Sequences
    start at 0 in half the examples (a Debezium topic's first offset)."""
    first = 0 if from_zero else 100
    seqs = [(op, i, v, first + n, 1_000_000 * n) for n, (op, i, v) in enumerate(script)]
    cuts = sorted({rnd.randrange(1, len(seqs) + 1) for _ in range(2)} | {len(seqs)})
    batches, start = [], 0
    for cut in cuts:
        batches.append(seqs[start:cut])
        start = cut
    base = tmp_path_factory.mktemp("dcl")
    t = _table("clp")
    sink = _sink(base, [str(t)])
    sink.ensure_table(t, SCHEMA, ["id"])
    version = 0
    for b in batches:
        version += 1
        assert sink.apply(t, version, _batch(b))
        if rnd.random() < 0.3:
            assert not sink.apply(t, version, _batch(b))  # a crash before the checkpoint: skipped
    for frm, n in replays:  # a suffix read again, in new batches
        suffix = seqs[min(frm, len(seqs) - 1) :]
        for k in range(n):
            version += 1
            sink.apply(t, version, _batch(suffix[k::n]))
    assert _log(base, t) == _model(batches)


def test_a_change_at_sequence_0_is_kept(tmp_path):
    """Topics Debezium wrote: the sequence is the Kafka offset, 0 for a partition's first record."""
    t = _table()
    sink = _sink(tmp_path, [str(t)])
    sink.ensure_table(t, SCHEMA, ["id"])
    sink.apply(t, 1, _batch([("c", 1, "a", 0, 1_000_000)]))
    sink.apply(t, 2, _batch([("c", 1, "a", 0, 1_000_000), ("u", 1, "b", 1, 2_000_000)]))
    assert _log(tmp_path, t) == [("c", 1, "a", 0, 1_000_000), ("u", 1, "b", 1, 2_000_000)]


def test_a_float_key_is_walked_and_keeps_the_models_log(tmp_path):
    """A key type whose equality Arrow and Python may judge differently (a float: 0.0 and
    -0.0 are one key in Python) is decided by the model's walk, not over columns: replays,
    a repeat in one batch and the two zeros append what the model appends."""
    schema = pa.schema([("id", pa.float64()), ("v", pa.string())])

    def batch(changes):
        return _batch(changes).set_column(0, "id", pa.array([c[1] for c in changes], pa.float64()))

    batches = [
        [("c", 1.0, "a", 100, 1_000_000), ("c", 2.0, "b", 101, 2_000_000)],
        [("u", 2.0, "b", 101, 2_000_000), ("u", 1.0, "c", 102, 3_000_000), ("u", 1.0, "c", 102, 3_000_000)],
        [("c", 0.0, "z", 103, 4_000_000), ("u", -0.0, "z", 103, 4_000_000), ("d", 1.0, None, 104, 5_000_000)],
    ]
    t = _table()
    sink = _sink(tmp_path, [str(t)])
    sink.ensure_table(t, schema, ["id"])
    for version, changes in enumerate(batches, 1):
        assert sink.apply(t, version, batch(changes))
    assert _log(tmp_path, t) == _model(batches)
    assert len(_log(tmp_path, t)) == 5  # the replay of 101, the repeat of 102 and -0.0 at 103 not appended


def test_string_keys_and_compaction_keep_the_log(tmp_path):
    """A key type whose Delta statistics are inexact (no file skipping), and the log's
    small files compacted every other write: the last sequences are still found."""
    t = _table()
    sink = _sink(tmp_path, [str(t)], compact_every_commits=2)
    schema = pa.schema([("k", pa.string()), ("v", pa.string())])
    sink.ensure_table(t, schema, ["k"])

    def batch(rows):
        return pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.string()),
                "v": pa.array([r[1] for r in rows], pa.string()),
                "_cdc_op": pa.array(["u"] * len(rows), pa.string()),
                "_cdc_seq": pa.array([r[2] for r in rows], pa.int64()),
                COMMIT_US: pa.array([1] * len(rows), pa.int64()),
            }
        )

    rows = [(f"key{n % 3}", f"v{n}", n) for n in range(12)]
    for v in range(1, 7):
        sink.apply(t, v, batch(rows[(v - 1) * 2 : v * 2]))
        sink.apply(t, 100 + v, batch(rows[: v * 2]))  # everything read again
    got = sorted((r["k"], r["__seq"]) for r in _read(tmp_path, t).to_pylist())
    assert got == sorted((k, s) for k, _, s in rows)


def test_a_log_on_object_storage_is_written_and_never_deleted(s3_store):
    from tests.delta_stores import S3DeltaStore

    store = S3DeltaStore(s3_store)
    base = store.base()
    t = _table()
    sink = _sink(base, [str(t)], storage_options=store.options)
    sink.ensure_table(t, SCHEMA, ["id"])
    assert sink.apply(t, 1, _batch([("c", 1, "a", 0, 1)]))
    assert not sink.apply(t, 1, _batch([("c", 1, "a", 0, 1)]))
    assert sink.apply(t, 2, _batch([("c", 1, "a", 0, 1), ("d", 1, None, 1, 2)]))
    assert _log(base, t, store.options) == [("c", 1, "a", 0, 1), ("d", 1, None, 1, 2)]
    with pytest.raises(SinkError, match="cannot be set aside"):
        sink.drop_table(t)
    assert len(_log(base, t, store.options)) == 2


# ------------------------------------------------------------------ image before_after


def _before_after_sink(base, tables):
    from merger.sinks.delta import DeltaSink

    return DeltaSink(str(base), modes=TableModes({t: ChangelogMode("before_after") for t in tables}))


def _batch_ba(changes: list[tuple]) -> pa.Table:
    """(op, id, v, seq, time_us, before id, before v) -> the merger's batch with the before image."""
    return (
        _batch([c[:5] for c in changes])
        .append_column("_cdc_before_id", pa.array([c[5] for c in changes], pa.int32()))
        .append_column("_cdc_before_v", pa.array([c[6] for c in changes], pa.string()))
    )


def _log_ba(base, table: TableId) -> list[tuple]:
    t = _read(base, table)
    names = ["__op", "id", "v", "__before_id", "__before_v", "__seq"]
    rows = list(zip(*[t[n].to_pylist() for n in names]))
    return sorted(rows, key=lambda r: (r[5], r[0]))


def test_before_after_rows_carry_the_exact_before_image(tmp_path):
    t = _table("ba")
    sink = _before_after_sink(tmp_path, [str(t)])
    assert sink.ensure_table(t, SCHEMA, ["id"]) == ["created"]
    dt = DeltaTable(f"{tmp_path}/{t.database}/t")
    assert dt.metadata().configuration["cdc.image"] == "before_after"
    schema = _read(tmp_path, t).schema
    assert schema.field("__before_id").type == schema.field("id").type == pa.int32()  # typed like the column
    assert schema.field("__before_v").type == schema.field("v").type
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
    assert _log_ba(tmp_path, t) == [
        ("r", 1, "a", None, None, 10),
        ("c", 2, "b", None, None, 11),
        ("u", 1, "a2", 1, "a", 12),
        ("d", 2, None, 2, "b", 13),
        ("c", 5, "a2", None, None, 14),
        ("d", 1, None, 1, "a2", 14),
        ("t", None, None, None, None, 15),
    ]
    wider = SCHEMA.append(pa.field("w", pa.int64()))
    assert sorted(sink.ensure_table(t, wider, ["id"])) == ["added column __before_w int64", "added column w int64"]
    batch = (
        _batch_ba([("u", 5, "z", 16, 7, 5, "a2")])
        .append_column("w", pa.array([8], pa.int64()))
        .append_column("_cdc_before_w", pa.array([3], pa.int64()))
    )
    assert sink.apply(t, 5, batch)
    last = _read(tmp_path, t).filter(pc.equal(_read(tmp_path, t)["__seq"], 16))
    assert [last[c][0].as_py() for c in ("w", "__before_w", "__before_v")] == [8, 3, "a2"]


def test_a_log_never_changes_image_and_a_before_column_name_is_refused(tmp_path):
    t = _table("ba")
    _sink(tmp_path, [str(t)]).ensure_table(t, SCHEMA, ["id"])  # a log made with image after
    with pytest.raises(TableFault, match="image after.*before_after now"):
        _before_after_sink(tmp_path, [str(t)]).ensure_table(t, SCHEMA, ["id"])
    t2 = _table("ba")
    _before_after_sink(tmp_path, [str(t2)]).ensure_table(t2, SCHEMA, ["id"])
    with pytest.raises(TableFault, match="image before_after.*after now"):
        _sink(tmp_path, [str(t2)]).ensure_table(t2, SCHEMA, ["id"])
    t3 = _table("ba")
    clash = SCHEMA.append(pa.field("__before_v", pa.string()))
    with pytest.raises(TableFault, match="__before_v"):
        _before_after_sink(tmp_path, [str(t3)]).ensure_table(t3, clash, ["id"])
    assert _sink(tmp_path, [str(t3)]).ensure_table(t3, clash, ["id"]) == ["created"]  # image after takes it


def test_an_after_log_takes_a_batch_with_the_before_image(tmp_path):
    t = _table("ba")
    sink = _sink(tmp_path, [str(t)])
    sink.ensure_table(t, SCHEMA, ["id"])
    assert sink.apply(t, 1, _batch_ba([("u", 1, "b", 10, 1, 1, "a")]))
    assert _log(tmp_path, t) == [("u", 1, "b", 10, 1)]
    assert "__before_v" not in _read(tmp_path, t).column_names
