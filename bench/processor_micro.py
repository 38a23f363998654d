"""The merger's processor alone: CPU per record of ``BatchProcessor.process`` on ingest-shaped
UPDATEs of one table, without Spark, servers or sink work (a sink that keeps nothing).

The records are what ingest writes for ``UPDATE t SET c = c + 1`` on a table ``(id INT
PRIMARY KEY, c INT NOT NULL, v VARCHAR(40))`` (the catch-up bench's table: the Debezium
envelope with before, after and source, the ``cdc.position`` header and Debezium's four
context headers), in the form the driver's read hands them over (rows, 3 partitions).
Each batch holds new positions, so the replay filter takes every record.

Figures: CPU seconds (``time.process_time``) per batch, best of ``--repeat`` after one
warm-up batch, as microseconds a record; with Python's collector settings as the merger
sets them (``merger.collector``) or Python's defaults (``--collector default``).

    .venv/bin/python bench/processor_micro.py [--records 40000] [--repeat 5] [--collector merger|default]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cdc.tablespec import ColumnSpec, TableSpec  # noqa: E402
from merger.batch.processor import BatchProcessor  # noqa: E402
from merger.collector import collect_less  # noqa: E402
from merger.state.store import StateStore  # noqa: E402

PREFIX = "bench"
DB = "bench_db"
PARTITIONS = 3
SPEC = TableSpec(
    DB,
    "t",
    (
        ColumnSpec("id", "int", 1, nullable=False),
        ColumnSpec("c", "int", 2, nullable=False),
        ColumnSpec("v", "varchar", 3, length=40),
    ),
    ("id",),
)


class NullSink:
    """The sink contract, keeping nothing: what is measured is the processor."""

    def ensure_table(self, table, schema, keys):
        pass

    def apply(self, table, version, changes) -> bool:
        return True

    def applied_version(self, table):
        return None

    def nul_values_changed(self) -> dict:
        return {}

    def truncate(self, table, version) -> bool:
        return True

    def close(self):
        pass


def records(batch: int, n: int, keys: int = 50_000) -> list[dict]:
    """Batch ``batch``'s ``n`` UPDATEs, in topic, partition and offset order."""
    topic = f"{PREFIX}.{DB}.t"
    per_partition: list[list[dict]] = [[] for _ in range(PARTITIONS)]
    for i in range(n):
        seq = batch * n + i
        key = seq % keys + 1
        rnd = seq // keys + 1
        pos = 1_000 + seq * 60
        value = {
            "before": {"id": key, "c": rnd - 1, "v": f"round {rnd - 1} of {key}"},
            "after": {"id": key, "c": rnd, "v": f"round {rnd} of {key}"},
            "source": {
                "version": "3.6.3.Final",
                "connector": "mysql",
                "name": PREFIX,
                "ts_ms": 1796638153000,
                "snapshot": "false",
                "db": DB,
                "sequence": None,
                "ts_us": 1796638153000000,
                "ts_ns": 1796638153000000000,
                "table": "t",
                "server_id": 1,
                "gtid": f"0-1-{seq}",
                "file": "binlog.000002",
                "pos": pos,
                "row": 0,
                "thread": None,
                "query": None,
            },
            "transaction": None,
            "op": "u",
            "ts_ms": 1796638155474,
            "ts_us": 1796638155474406,
            "ts_ns": 1796638155474406584,
        }
        partition = key % PARTITIONS
        per_partition[partition].append(
            {
                "key": json.dumps({"id": key}, separators=(",", ":")).encode(),
                "value": json.dumps(value, separators=(",", ":")).encode(),
                "topic": topic,
                "partition": partition,
                "offset": batch * n + len(per_partition[partition]),
                "headers": {
                    "cdc.position": f"binlog.000002:{pos}:0".encode(),
                    "__debezium.context.connectorLogicalName": PREFIX.encode(),
                    "__debezium.context.taskId": b"0",
                    "__debezium.context.connectorName": b"mysql",
                    "__debezium.context.runId": b"5ad982cf-3966-403f-9fe8-7b0229517488",
                },
            }
        )
    return [r for part in per_partition for r in part]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=40_000, help="records per batch")
    ap.add_argument("--repeat", type=int, default=5, help="measured batches (after one warm-up)")
    ap.add_argument("--collector", choices=("merger", "default"), default="merger")
    args = ap.parse_args()
    if args.collector == "merger":
        collect_less()  # as the merger, before its batches come
    batches = [records(b, args.records) for b in range(args.repeat + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        proc = BatchProcessor(PREFIX, StateStore(Path(tmp) / "state"), [NullSink()], None, lambda topic: PARTITIONS)
        proc.clock.restored = True
        proc.table(f"{DB}.t", SPEC)
        times = []
        for b, rows in enumerate(batches):
            t0 = time.process_time()
            proc.process(b, rows)
            times.append(time.process_time() - t0)
        rt = proc.tables.get(f"{DB}.t")
        assert rt.rows_applied == len(batches) * args.records, rt.rows_applied
    best = min(times[1:])
    print(
        f"processor, {args.records:,} UPDATEs a batch, collector {args.collector}: best {best * 1000:.0f} ms CPU "
        f"= {best / args.records * 1e6:.2f} us a record (batches: {', '.join(f'{t * 1000:.0f}' for t in times)} ms)"
    )
    gc.collect()


if __name__ == "__main__":
    main()
