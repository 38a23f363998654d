"""Debezium mode of the merger (merger/sources/debezium_topics.py) without Spark or Kafka:
the replay rule on Debezium's positions, the signal rows, one micro-batch of Debezium records
through ``BatchProcessor`` into a real Delta table, and the signal writer against the
real MariaDB."""

from __future__ import annotations

import json

import pyarrow as pa

from cdc.wire.position import EventPosition
from merger.sources.debezium_topics import DebeziumReplayFilter, signal_row
from tests.support import readback

P = EventPosition


def _src(pos: int, row: int = 0, snapshot: str = "false") -> dict:
    return {"source": {"file": "binlog.000002", "pos": pos, "row": row, "snapshot": snapshot}}


# ---------------------------------------------------------------------- replay rule


def test_replay_filter_passes_equal_positions_and_drops_lower():
    f = DebeziumReplayFilter()
    t = "p.db.t"
    # the initial snapshot: every record at the position read when it started
    assert all(
        f.accept_record(t, 0, P("binlog.000002", 400), _src(400, snapshot=s)) for s in ("first", "true", "true", "last")
    )
    assert f.accept_record(t, 0, P("binlog.000002", 400), _src(400))  # first change after it
    # a key change: delete and create share the update's position
    assert f.accept_record(t, 0, P("binlog.000002", 900), _src(900))
    assert f.accept_record(t, 0, P("binlog.000002", 900), _src(900))
    # an incremental snapshot chunk: all rows at the close-window position
    for _ in range(3):
        assert f.accept_record(t, 0, P("binlog.000002", 1500), _src(1500, snapshot="incremental"))
    # a replayed suffix (Kafka Connect restarted from an older offset) is dropped
    assert not f.accept_record(t, 0, P("binlog.000002", 900), _src(900))
    assert not f.accept_record(t, 0, P("binlog.000002", 1200, 3), _src(1200, 3))
    assert f.accept_record(t, 0, P("binlog.000002", 1600), _src(1600))
    # other partitions and tombstones are independent
    assert f.accept_record(t, 1, P("binlog.000002", 100), _src(100))
    assert f.accept_record(t, 0, None, None)


def test_replay_filter_restarts_at_a_new_initial_snapshot():
    f = DebeziumReplayFilter()
    assert f.accept_record("t", 0, P("binlog.000009", 5000), _src(5000))
    # Debezium lost its offsets after a binlog reset and snapshots again, lower down
    assert f.accept_record("t", 0, P("binlog.000001", 300), _src(300, snapshot="first"))
    assert f.accept_record("t", 0, P("binlog.000001", 300), _src(300, snapshot="last"))
    assert f.accept_record("t", 0, P("binlog.000001", 350), _src(350))
    assert not f.accept_record("t", 0, P("binlog.000001", 320), _src(320))


# ---------------------------------------------------------------------- signals


def test_signal_rows():
    assert signal_row("snapshot", "shop.order_lines") == (
        "execute-snapshot",
        {"data-collections": [r"shop\.order_lines"], "type": "incremental"},
    )
    kind, data = signal_row("snapshot", "shop.orders", "created > '2025-01-01'")
    assert kind == "execute-snapshot"
    assert data["additional-conditions"] == [{"data-collection": r"shop\.orders", "filter": "created > '2025-01-01'"}]
    assert signal_row("pause", "shop.orders") == ("pause-snapshot", {"type": "incremental"})
    assert signal_row("resume", "shop.orders") == ("resume-snapshot", {"type": "incremental"})
    assert signal_row("cancel", "shop.orders") == (
        "stop-snapshot",
        {"data-collections": [r"shop\.orders"], "type": "incremental"},
    )


# ---------------------------------------------------------------------- one batch


def _change(change_type: str, db: str, table: str) -> dict:
    return {
        "type": change_type,
        "id": f'"{db}"."{table}"',
        "table": {
            "defaultCharsetName": "utf8mb4",
            "primaryKeyColumnNames": ["id"],
            "columns": [
                {
                    "name": "id",
                    "jdbcType": 4,
                    "typeName": "INT",
                    "typeExpression": "INT",
                    "position": 1,
                    "optional": False,
                    "autoIncremented": False,
                    "generated": False,
                },
                {
                    "name": "v",
                    "jdbcType": 12,
                    "typeName": "VARCHAR",
                    "typeExpression": "VARCHAR",
                    "length": 20,
                    "charsetName": "utf8mb4",
                    "position": 2,
                    "optional": True,
                    "autoIncremented": False,
                    "generated": False,
                },
            ],
        },
    }


class _Topics:
    """Records as Kafka Connect's producer would have put them in partitions."""

    def __init__(self, prefix: str, partitions: int = 3):
        self.prefix = prefix
        self.partitions = partitions
        self.offsets: dict[tuple[str, int], int] = {}
        self.rows: list[dict] = []

    def add(self, topic: str, key: dict | None, value: dict | None) -> None:
        from cdc.wire.partitioner import partition_for

        kb = None if key is None else json.dumps(key, separators=(",", ":")).encode()
        part = 0 if kb is None or topic == self.prefix else partition_for(kb, self.partitions)
        off = self.offsets.get((topic, part), 0)
        self.offsets[(topic, part)] = off + 1
        self.rows.append(
            {
                "key": kb,
                "value": None if value is None else json.dumps(value).encode(),
                "topic": topic,
                "partition": part,
                "offset": off,
                "headers": [],
            }
        )

    def event(self, table: str, op: str, key: int, before, after, pos: int, row: int = 0, snapshot="false"):
        topic = f"{self.prefix}.{table}"
        value = {
            "before": None if before is None else {"id": key if op != "c" else None, **before},
            "after": after,
            "op": op,
            "ts_ms": 1,
            "transaction": None,
            "source": {
                "file": "binlog.000001",
                "pos": pos,
                "row": row,
                "snapshot": snapshot,
                "db": table.split(".")[0],
                "table": table.split(".")[1],
                "ts_ms": 1,
            },
        }
        self.add(topic, {"id": key}, value)

    def take(self) -> pa.Table:
        rows, self.rows = self.rows, []
        return pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("key", pa.binary()),
                    ("value", pa.binary()),
                    ("topic", pa.string()),
                    ("partition", pa.int32()),
                    ("offset", pa.int64()),
                    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                ]
            ),
        )


def test_batch_of_debezium_records_into_delta(tmp_path):
    from merger.batch.processor import BatchProcessor
    from merger.sinks.delta import DeltaSink
    from merger.state.store import StateStore

    prefix, name = "dbz", "shop.t"
    sink = DeltaSink(str(tmp_path / "delta"))
    requested = []
    proc = BatchProcessor(
        prefix,
        StateStore(tmp_path / "state"),
        [sink],
        None,
        lambda topic: 3,
        on_new_table=requested.append,
        source_connector="debezium",
    )
    k = _Topics(prefix)
    # Debezium's initial snapshot: schema records and rows all at one position (row 0)
    k.add(
        prefix,
        {"databaseName": "shop"},
        {
            "source": {"file": "binlog.000001", "pos": 400, "row": 0, "snapshot": "true"},
            "databaseName": "shop",
            "ddl": "CREATE TABLE t ...",
            "tableChanges": [_change("CREATE", "shop", "t")],
        },
    )
    for i in range(1, 21):
        k.event(name, "r", i, None, {"id": i, "v": f"s{i}"}, 400, snapshot="first" if i == 1 else "true")
    proc.process(0, k.take())
    assert requested == ["shop.t"]  # the merger met the table (auto snapshot request, if on)
    # the first change after the snapshot may carry the snapshot's very position
    k.event(name, "u", 1, {"v": "s1"}, {"id": 1, "v": "changed"}, 400)
    proc.process(1, k.take())
    got = {r["id"]: r["v"] for r in readback.rows(sink, ("shop", "t")).to_pylist()}
    assert len(got) == 20 and got[1] == "changed"

    # a key change (delete + tombstone + create at one position), a multi-row event,
    # an incremental snapshot chunk at its close-window position, then more changes
    k.event(name, "d", 2, {"v": "s2"}, None, 700)
    k.add(f"{prefix}.{name}", {"id": 2}, None)
    k.event(name, "c", 200, None, {"id": 200, "v": "s2"}, 700)
    k.event(name, "u", 3, {"v": "s3"}, {"id": 3, "v": "x"}, 900, 0)
    k.event(name, "u", 4, {"v": "s4"}, {"id": 4, "v": "y"}, 900, 1)
    for i in (3, 4, 5, 200):
        k.event(
            name, "r", i, None, {"id": i, "v": {3: "x", 4: "y", 5: "s5", 200: "s2"}[i]}, 1500, snapshot="incremental"
        )
    k.event(name, "u", 5, {"v": "s5"}, {"id": 5, "v": "late"}, 1800)
    batch = k.take()
    proc.process(2, batch)
    # Kafka Connect restarted and wrote the last records again (at new offsets)
    for r in batch.slice(batch.num_rows - 3).to_pylist():
        k.add(r["topic"], json.loads(r["key"]), json.loads(r["value"]))
    proc.process(3, k.take())
    got = {r["id"]: r["v"] for r in readback.rows(sink, ("shop", "t")).to_pylist()}
    assert 2 not in got and got[200] == "s2" and got[3] == "x" and got[4] == "y" and got[5] == "late"
    assert len(got) == 20
    # 20 initial + 4 incremental + the replayed r of key 200 (at the highest position of
    # its partition, so it passes: harmless, same row at a higher offset)
    assert proc.tables["shop.t"].snapshot_rows == 25
    # sequences are Kafka offsets, so a restart (state restored) keeps them comparable
    proc2 = BatchProcessor(
        prefix, StateStore(tmp_path / "state"), [sink], None, lambda topic: 3, source_connector="debezium"
    )
    k.event(name, "u", 5, {"v": "late"}, {"id": 5, "v": "later"}, 2000)
    proc2.process(4, k.take())
    assert {r["id"]: r["v"] for r in readback.rows(sink, ("shop", "t")).to_pylist()}[5] == "later"
    # a truncate (one record, one partition) empties the table and asks Debezium for a
    # snapshot, which brings back rows written after it that another partition delivered
    # before it
    k.add(
        f"{prefix}.{name}",
        None,
        {
            "before": None,
            "after": None,
            "op": "t",
            "ts_ms": 1,
            "source": {"file": "binlog.000001", "pos": 2100, "row": 0, "snapshot": "false"},
        },
    )
    k.event(name, "c", 7, None, {"id": 7, "v": "after truncate"}, 2200)
    store = StateStore(tmp_path / "state")
    store.take_requests()
    proc2.process(5, k.take())
    assert readback.rows(sink, ("shop", "t")).to_pylist() == [{"id": 7, "v": "after truncate"}]
    assert [(r["action"], r["table"]) for r in store.take_requests()] == [("snapshot", "shop.t")]


def test_cli_snapshot_needs_a_signal_table_in_debezium_mode(tmp_path):
    import subprocess
    import sys

    from tests.merger_harness import ROOT

    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        f"source_connector: debezium\nstate_dir: {tmp_path / 'state'}\n"
        f"sinks: {{delta: {{path: {tmp_path / 'delta'}}}}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "snapshot", "shop.orders", "-c", str(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "set signal_table" in out.stderr and "Traceback" not in out.stderr
