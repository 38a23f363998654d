"""BatchProcessor at DDL markers, without Spark or servers: each DDL is a marker in every
partition of the table's topic (ingest ``_ddl_markers``); the sink tables are emptied,
rebuilt or re-snapshotted exactly there, whatever batch each partition's part arrives in."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa

from cdc.ddl import ddl_marker
from cdc.tablespec import ColumnSpec, TableSpec
from cdc.wire.headers import DDL_HEADER, POSITION_HEADER
from merger.batch.processor import BatchProcessor
from merger.sinks.base import IncompatibleSchemaChange
from tests.unit.test_processor import PREFIX, RECORD_SCHEMA, SPEC, MemorySink, Stream, _open_window, _processor


class Sink(MemorySink):
    """MemorySink that holds a schema: it follows added columns and wider integers, and
    refuses other type changes, like the real sinks; drop_table forgets everything."""

    def __init__(self):
        super().__init__()
        self.schemas: dict = {}
        self.dropped = 0

    def ensure_table(self, table, schema, keys):
        table = tuple(table)
        old = self.schemas.get(table)
        if old is not None:
            for f in schema:
                i = old.get_field_index(f.name)
                if (
                    i >= 0
                    and old.field(i).type != f.type
                    and not (
                        pa.types.is_integer(old.field(i).type)
                        and pa.types.is_integer(f.type)
                        and f.type.bit_width >= old.field(i).type.bit_width
                    )
                ):
                    raise IncompatibleSchemaChange(
                        f"column {f.name} cannot change from {old.field(i).type} to {f.type}"
                    )
            kept = [f for f in old if schema.get_field_index(f.name) < 0]  # columns the source lost stay
            schema = pa.schema(list(schema) + kept)
        self.schemas[table] = schema
        super().ensure_table(table, schema, keys)
        return [] if old is not None else ["created"]

    def drop_table(self, table):
        table = tuple(table)
        self.dropped += 1
        for d in (self.tables, self.tombs, self.schemas, self.applied):
            d.pop(table, None)

    def columns(self, table=("db", "t")) -> list[str]:
        return self.schemas[table].names


class DdlStream(Stream):
    def ddl(self, kind: str, sql: str, spec: TableSpec | None, table: str = "db.t"):
        """A DDL marker into every partition, at one binlog position."""
        self.pos += 100
        db, name = table.split(".", 1)
        marker = json.dumps(ddl_marker(db, name, kind, sql, spec))
        for p in range(self.partitions):
            self.pending.append(
                {
                    "key": b'{"prefix":"cdc.ddl"}',
                    "value": json.dumps({"op": "m", "source": {"ts_ms": 1}}).encode(),
                    "topic": self.topic,
                    "partition": p,
                    "offset": self.offsets[p],
                    "headers": [
                        {"key": POSITION_HEADER, "value": f"bin.000001:{self.pos}:0".encode()},
                        {"key": DDL_HEADER, "value": marker.encode()},
                    ],
                }
            )
            self.offsets[p] += 1

    def batch_of(self, partition: int) -> pa.Table:
        """Only one partition's pending records: the other partition lags behind."""
        mine = [r for r in self.pending if r["partition"] == partition]
        self.pending = [r for r in self.pending if r["partition"] != partition]
        return pa.Table.from_pylist(mine, schema=RECORD_SCHEMA)


V2 = TableSpec("db", "t", (ColumnSpec("id", "int", 1, nullable=False), ColumnSpec("w", "int", 2)), ("id",))


def _keys_in(stream: Stream, partition: int, n: int) -> list[int]:
    out, i = [], 0
    while len(out) < n:
        i += 1
        if hash(json.dumps({"id": i}, sort_keys=True)) % stream.partitions == partition:
            out.append(i)
    return out


def _requests(proc) -> list[tuple[str, str]]:
    return [(r["action"], r["table"]) for r in proc.store.take_requests()]


def test_drop_and_create_again_empties_at_the_drop_even_for_a_lagging_partition(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.table("db.t", SPEC)
    p0, p1 = _keys_in(s, 0, 2), _keys_in(s, 1, 2)
    for i in p0 + p1:
        s.change("c", {"id": i}, after={"id": i, "v": "old"})
    proc.process(0, s.batch())
    late = p1[0] + 1000
    while hash(json.dumps({"id": late}, sort_keys=True)) % 2 != 1:
        late += 1
    s.change("c", {"id": late}, after={"id": late, "v": "old, late"})  # before the DROP, in partition 1
    s.ddl("DROP", "DROP TABLE t", None)
    s.ddl("CREATE", "CREATE TABLE t (id INT PRIMARY KEY, w INT)", V2)
    s.change("c", {"id": p0[0]}, after={"id": p0[0], "w": 1})
    s.change("c", {"id": p1[1]}, after={"id": p1[1], "w": 2})
    proc.process(1, s.batch_of(0))  # partition 0 first: its DROP and CREATE markers
    assert proc.tables["db.t"].spec == V2
    assert sink.state() == {(p0[0],): {"id": p0[0], "w": 1}}
    proc.process(2, s.batch())  # then partition 1, with a change older than the DROP
    assert sink.state() == {(p0[0],): {"id": p0[0], "w": 1}, (p1[1],): {"id": p1[1], "w": 2}}
    assert sink.columns() == ["id", "w"]  # the column the new table lacks is gone (rebuilt)
    assert ("snapshot", "db.t") in _requests(proc)  # CREATE ... AS SELECT / IF NOT EXISTS: read it again
    assert proc.tables["db.t"].phase == "streaming"


def test_on_drop_keep_keeps_the_rows(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink, on_drop="keep")
    s = DdlStream()
    proc.table("db.t", SPEC)
    s.change("c", {"id": 1}, after={"id": 1, "v": "old"})
    s.ddl("DROP", "DROP TABLE t", None)
    proc.process(0, s.batch())
    assert sink.state() == {(1,): {"id": 1, "v": "old"}}
    assert proc.status()["tables"]["db.t"]["phase"] == "dropped"
    s.ddl("CREATE", "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", SPEC)
    s.change("c", {"id": 2}, after={"id": 2, "v": "new"})
    proc.process(1, s.batch())
    assert set(sink.state()) == {(1,), (2,)}


def test_a_drop_cancels_the_snapshot_and_its_open_windows(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": "snap"} for i in range(1, 4)])
    s.marker("w1", "LOW")
    s.ddl("DROP", "DROP TABLE t", None)
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    proc.process(1, s.batch())
    assert sink.state() == {} and not rt.reconciler.windows
    assert proc.store.load_plan("db.t")["cancelled"]


def test_alter_inside_a_window_drops_it_and_resnapshots(tmp_path):
    """ADD COLUMN ... NOT NULL: existing rows read 0 in the source, no row event says so.
    The open window's rows were read with the old definition: they must not be emitted."""
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.process(0, s.batch())
    rt = _open_window(proc, "db.t", "w1", [{"id": i, "v": "snap"} for i in range(1, 4)])
    s.marker("w1", "LOW")
    v2 = dataclasses.replace(SPEC, columns=SPEC.columns + (ColumnSpec("must", "int", 3, nullable=False),))
    s.ddl("ALTER", "ALTER TABLE t ADD COLUMN must INT NOT NULL", v2)
    s.change("c", {"id": 9}, after={"id": 9, "v": "live", "must": 5})
    rt.reconciler.mark_staged("w1")
    s.marker("w1", "HIGH")
    proc.process(1, s.batch())
    assert sink.state() == {(9,): {"id": 9, "v": "live", "must": 5}}
    assert not rt.reconciler.windows
    assert _requests(proc) == [("snapshot", "db.t")]
    assert sink.columns() == ["id", "v", "must"]


def test_drop_column_rebuilds_the_sink_tables_and_voids_older_changes(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.table("db.t", SPEC)
    p1 = _keys_in(s, 1, 2)
    s.change("c", {"id": p1[0]}, after={"id": p1[0], "v": "old"})
    proc.process(0, s.batch())
    s.change("d", {"id": p1[0]}, before={"id": p1[0], "v": "old"})  # older than the DDL, partition 1
    v2 = dataclasses.replace(SPEC, columns=SPEC.columns[:1])
    s.ddl("ALTER", "ALTER TABLE t DROP COLUMN v", v2)
    s.change("c", {"id": p1[1]}, after={"id": p1[1]})
    proc.process(1, s.batch_of(0))
    assert sink.dropped == 1 and sink.columns() == ["id"] and sink.state() == {}
    assert _requests(proc) == [("snapshot", "db.t")]
    proc.process(2, s.batch())
    assert sink.state() == {(p1[1],): {"id": p1[1]}}


def test_a_type_the_sinks_cannot_follow_rebuilds_them(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.table("db.t", SPEC)
    s.change("c", {"id": 1}, after={"id": 1, "v": "12"})
    proc.process(0, s.batch())
    v2 = dataclasses.replace(SPEC, columns=(SPEC.columns[0], ColumnSpec("v", "int", 2)))
    s.ddl("ALTER", "ALTER TABLE t MODIFY v INT", v2)
    s.change("u", {"id": 1}, before={"id": 1, "v": 12}, after={"id": 1, "v": 13})
    proc.process(1, s.batch())
    assert sink.dropped == 1 and sink.schemas[("db", "t")].field("v").type == pa.int32()
    assert sink.state() == {(1,): {"id": 1, "v": 13}}
    assert _requests(proc) == [("snapshot", "db.t")]


def test_after_a_resnapshot_older_deletes_of_a_lagging_partition_still_count(tmp_path):
    """A re-snapshot overwrites rows where they stand; it cannot remove a row the source
    deleted before the DDL, so that delete must be applied, decoded with the new
    definition (leniently: only its key matters)."""
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.table("db.t", SPEC)
    p1 = _keys_in(s, 1, 1)[0]
    s.change("c", {"id": p1}, after={"id": p1, "v": "x"})
    proc.process(0, s.batch())
    s.change("d", {"id": p1}, before={"id": p1, "v": "x"})
    v2 = dataclasses.replace(SPEC, columns=(SPEC.columns[0], ColumnSpec("v", "varchar", 2, length=5)))
    s.ddl("ALTER", "ALTER TABLE t MODIFY v VARCHAR(5)", v2)
    proc.process(1, s.batch_of(0))
    assert sink.state() == {(p1,): {"id": p1, "v": "x"}} and sink.dropped == 0
    proc.process(2, s.batch())
    assert sink.state() == {}


def test_a_swap_of_two_tables_resets_both_and_snapshots_both(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink)
    a, b = DdlStream("db.a"), DdlStream("db.b")
    spec_a = dataclasses.replace(SPEC, table="a")
    spec_b = dataclasses.replace(V2, table="b")
    proc.table("db.a", spec_a)
    proc.table("db.b", spec_b)
    a.change("c", {"id": 1}, after={"id": 1, "v": "a1"})
    b.change("c", {"id": 2}, after={"id": 2, "w": 2})
    proc.process(0, pa.concat_tables([a.batch(), b.batch()]))
    # RENAME TABLE a TO tmp, b TO a, tmp TO b: each name now holds the other table
    a.ddl("RENAME", "RENAME TABLE a TO tmp, b TO a, tmp TO b", dataclasses.replace(V2, table="a"), "db.a")
    b.ddl("RENAME", "RENAME TABLE a TO tmp, b TO a, tmp TO b", dataclasses.replace(SPEC, table="b"), "db.b")
    a.change("c", {"id": 3}, after={"id": 3, "w": 3})
    proc.process(1, pa.concat_tables([a.batch(), b.batch()]))
    assert sink.state(("db", "a")) == {(3,): {"id": 3, "w": 3}}
    assert sink.state(("db", "b")) == {}
    assert sorted(_requests(proc)) == [("snapshot", "db.a"), ("snapshot", "db.b")]


def test_a_table_first_met_by_its_create_marker_and_gone_since(tmp_path):
    """A merger reading a topic's history: the table was created, written and dropped.
    Its definition comes from the CREATE marker (the source no longer has it)."""
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    s.ddl("CREATE", "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", SPEC)
    s.change("c", {"id": 1}, after={"id": 1, "v": "x"})
    proc.process(0, s.batch())
    assert sink.state() == {(1,): {"id": 1, "v": "x"}} and proc.bad_records == 0
    s.ddl("DROP", "DROP TABLE t", None)
    proc.process(1, s.batch())
    assert sink.state() == {} and proc.tables["db.t"].phase == "dropped"
    # markers of a table the merger never knew and the source no longer has: nothing to do
    other = DdlStream("db.gone")
    other.ddl("DROP", "DROP TABLE gone", None, "db.gone")
    proc.process(2, other.batch())
    assert proc.bad_records == 0 and "db.gone" not in proc.tables


def test_a_batch_with_a_ddl_run_again_after_a_crash_changes_nothing(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    proc.table("db.t", SPEC)
    s.change("c", {"id": 1}, after={"id": 1, "v": "a"})
    proc.process(0, s.batch())
    s.change("c", {"id": 2}, after={"id": 2, "v": "b"})
    s.ddl("ALTER", "ALTER TABLE t DROP COLUMN v", dataclasses.replace(SPEC, columns=SPEC.columns[:1]))
    s.change("c", {"id": 3}, after={"id": 3})
    batch = s.batch()
    proc.process(1, batch)
    state = sink.state()
    assert state == {(3,): {"id": 3}}
    again = BatchProcessor(PREFIX, proc.store, [sink], None, lambda topic: 2)
    again.process(1, batch)
    assert sink.state() == state and again.tables["db.t"].spec.column_names == ("id",)


def test_on_drop_keep_still_applies_older_changes_of_a_lagging_partition(tmp_path):
    sink = Sink()
    proc = _processor(tmp_path, sink, on_drop="keep")
    s = DdlStream()
    proc.table("db.t", SPEC)
    p1 = _keys_in(s, 1, 1)[0]
    s.change("c", {"id": p1}, after={"id": p1, "v": "before the drop"})
    s.ddl("DROP", "DROP TABLE t", None)
    s.ddl("CREATE", "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", SPEC)
    proc.process(0, s.batch_of(0))
    proc.process(1, s.batch())
    assert sink.state() == {(p1,): {"id": p1, "v": "before the drop"}}


def test_debezium_schema_changes_are_judged_in_their_own_form(tmp_path):
    """Topics written by Debezium carry no DDL markers: the schema-change record decides,
    compared in the form of tableChanges (a CREATE for a table known already, as at
    Debezium's initial snapshot, changes nothing)."""
    import copy

    from merger.state.store import StateStore
    from tests.unit.test_debezium_mode import _change, _Topics

    sink = Sink()
    proc = BatchProcessor(
        "dbz",
        StateStore(tmp_path / "state"),
        [sink],
        None,
        lambda topic: 3,
        on_new_table=lambda name: None,
        source_connector="debezium",
    )
    proc.clock.restored = True
    k = _Topics("dbz")

    def schema(ddl: str, change: dict, pos: int):
        k.add(
            "dbz",
            {"databaseName": "shop"},
            {
                "source": {"file": "binlog.000001", "pos": pos, "row": 0},
                "databaseName": "shop",
                "ddl": ddl,
                "tableChanges": [change],
            },
        )

    # met first through the source's information_schema (collations, display widths, ...)
    proc.table(
        "shop.t",
        TableSpec(
            "shop",
            "t",
            (
                ColumnSpec("id", "int", 1, length=11, nullable=False),
                ColumnSpec("v", "varchar", 2, length=20, charset="utf8mb4", collation="utf8mb4_general_ci"),
            ),
            ("id",),
            "utf8mb4",
        ),
    )
    k.event("shop.t", "c", 1, None, {"id": 1, "v": "a"}, 200)
    proc.process(0, k.take())
    schema("CREATE TABLE t ...", _change("CREATE", "shop", "t"), 300)
    proc.process(1, k.take())
    assert _requests(proc) == []
    alter = copy.deepcopy(_change("ALTER", "shop", "t"))
    alter["table"]["columns"].append(
        {
            "name": "must",
            "jdbcType": 4,
            "typeName": "INT",
            "typeExpression": "INT",
            "position": 3,
            "optional": False,
            "autoIncremented": False,
            "generated": False,
        }
    )
    schema("ALTER TABLE t ADD COLUMN must INT NOT NULL", alter, 400)
    k.event("shop.t", "c", 2, None, {"id": 2, "v": "b", "must": 3}, 450)
    proc.process(2, k.take())
    assert _requests(proc) == [("snapshot", "shop.t")] and "must" in sink.columns(("shop", "t"))
    schema("DROP TABLE t", {"type": "DROP", "id": '"shop"."t"', "table": None}, 500)
    proc.process(3, k.take())
    assert sink.state(("shop", "t")) == {} and proc.tables["shop.t"].phase == "dropped"


def test_a_history_of_two_tables_under_one_name_met_for_the_first_time(tmp_path):
    """A new merger reads a topic from its start: rows of a table, its DROP, a CREATE with
    another definition, rows of the new table. Only the new table's rows remain."""
    sink = Sink()
    proc = _processor(tmp_path, sink)
    s = DdlStream()
    for i in (1, 2, 3):  # the first table's CREATE is older than the topic's retention
        s.change("c", {"id": i}, after={"id": i, "v": "first table"})
    s.ddl("DROP", "DROP TABLE t", None)
    s.ddl("CREATE", "CREATE TABLE t (id INT PRIMARY KEY, w INT)", V2)
    s.change("c", {"id": 3}, after={"id": 3, "w": 3})
    proc.process(0, s.batch())
    assert sink.state() == {(3,): {"id": 3, "w": 3}} and proc.bad_records == 0
    assert proc.tables["db.t"].phase == "streaming"
