"""The Delta sink's cost per micro-batch at a steady trickle: ``DeltaSink.apply`` of small
update batches into one table, with the table's checkpoint interval as the merger sets it
(``delta.checkpointInterval`` 10) and as delta-rs leaves it (100, the behaviour before),
in one run.

A table of ``--rows`` rows, then ``--batches`` batches of ``--batch-rows`` random updates
(each a version, as the merger writes them). Every look the sink takes at a table's
versions (its app transactions, a refresh) replays the Delta log from the last checkpoint,
so its cost grows with the commits since then. Prints the median and mean wall time of an
apply, its CPU, and the time inside delta-rs's version calls (``transaction_version``,
``update_incremental``), per interval. No servers: the tables are on the local disk.

    .venv/bin/python bench/delta_apply_bench.py [--rows 20000] [--batches 200] [--batch-rows 200]
        [--intervals 10,100] [--repeat 2]
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from merger.sinks import TableId  # noqa: E402
from merger.sinks.delta import DeltaSink  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())])
VERSION_CALLS = ("transaction_version", "update_incremental")


class CallTimes:
    """Wall time inside DeltaTable's version calls, by name."""

    def __init__(self) -> None:
        self.seconds: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()
        for name in VERSION_CALLS:
            self._wrap(name)

    def _wrap(self, name: str) -> None:
        original = getattr(DeltaTable, name)

        def timed(table, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(table, *args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started
                self.calls[name] += 1

        setattr(DeltaTable, name, timed)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def batch(rows: list[dict]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.int64()),
            "v": pa.array([r["v"] for r in rows], pa.string()),
            "n": pa.array([r["n"] for r in rows], pa.int64()),
            "_cdc_op": pa.array([r["op"] for r in rows], pa.string()),
            "_cdc_seq": pa.array([r["seq"] for r in rows], pa.int64()),
        }
    )


def run(interval: int, args, calls: CallTimes) -> dict:
    base = tempfile.mkdtemp(prefix="delta-apply-")
    sink, table = DeltaSink(base), TableId("bench", "t")
    sink.ensure_table(table, SCHEMA, ["id"])
    sink.apply(table, 1, batch([{"id": i, "v": "x", "n": i, "op": "c", "seq": 1} for i in range(args.rows)]))
    # set after ensure_table, which keeps the sink's own setting (10)
    for path in (sink.table_path(table), sink.tombstone_path(table)):
        DeltaTable(path).alter.set_table_properties({"delta.checkpointInterval": str(interval)})
    sink = DeltaSink(base)  # as a merger: a writer epoch (fenced on every apply), the tables loaded afresh
    sink.claim_writer("bench")
    rnd = random.Random(1)
    walls, cpu_started = [], time.process_time()
    calls.reset()
    for version in range(2, args.batches + 2):
        rows = {}
        for _ in range(args.batch_rows):
            key = rnd.randrange(args.rows)
            rows[key] = {"id": key, "v": f"u{version}", "n": version, "op": "u", "seq": 10 + version}
        started = time.perf_counter()
        sink.apply(table, version, batch(list(rows.values())))
        walls.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu_started
    n = args.batches
    return {
        "interval": interval,
        "median_ms": statistics.median(walls) * 1e3,
        "mean_ms": statistics.mean(walls) * 1e3,
        "cpu_ms": cpu / n * 1e3,
        "version_calls_ms": sum(calls.seconds.values()) / n * 1e3,
        "version_calls": sum(calls.calls.values()) / n,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch-rows", type=int, default=200)
    ap.add_argument("--intervals", default="10,100", help="checkpoint intervals, in run order")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of every interval")
    args = ap.parse_args(argv)
    calls = CallTimes()
    intervals = [int(x) for x in args.intervals.split(",")]
    results = [run(i, args, calls) for _ in range(args.repeat) for i in intervals]
    print(f"{args.batches} batches of {args.batch_rows} random updates into a {args.rows:,}-row Delta table")
    print("| checkpoint interval | apply median ms | mean ms | CPU ms | in version calls ms (calls) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['interval']} | {r['median_ms']:.1f} | {r['mean_ms']:.1f} | {r['cpu_ms']:.1f} | "
            f"{r['version_calls_ms']:.1f} ({r['version_calls']:.1f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
