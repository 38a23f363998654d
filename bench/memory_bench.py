"""The merger's memory while it catches up a backlog of changes, per `batch_memory_mb`.

One run per setting, each on a database of its own in the local stack:

1. ingest and the merger start; the two (empty) tables are snapshotted;
2. the merger stops; the backlog is written and ingest has it all in Kafka: a `wide`
   table (--wide-rows rows of ~130 KB: a LONGTEXT with accents, a MEDIUMBLOB) and a
   `narrow` one (--narrow-rows rows of an INT, a VARCHAR and a BIGINT), then an UPDATE of
   every 7th wide row (before and after images);
3. the merger starts again and catches up; the sinks (PostgreSQL and Delta) are compared
   with the source, row for row.

Figures per run: the peak RSS of the merger's Python driver and of its Spark driver JVM
(sampled every 0.2 s, from the merger's start), their growth over the first sample after
the start, the largest micro-batch (records, MB of keys and values, from the merger's
progress log), the number of batches, and the wall time from the merger's start to the
sinks equal to the source. The baseline, in the same run, is the count-only bound the
merger had before `batch_memory_mb` (a setting of 1,000,000 MB: only
max_records_per_trigger cuts a batch).

    .venv/bin/python bench/memory_bench.py [--settings 1000000,512,128,32] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import commit_label, publish  # noqa: E402
from tests.procfs import java_child, rss_kb  # noqa: E402

MB = 1024 * 1024


class Peaks(threading.Thread):
    """RSS of the merger's Python process and its JVM child, every 0.2 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.jvm = pid, None
        self.first: dict[str, int] = {}
        self.peak = {"python": 0, "jvm": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            if self.jvm is None:
                self.jvm = java_child(self.pid)
            now = {"python": rss_kb(self.pid), "jvm": rss_kb(self.jvm)}
            if now["jvm"] and not self.first:
                self.first = dict(now)
            for k, v in now.items():
                self.peak[k] = max(self.peak[k], v)


def write_backlog(conn, db: str, wide_rows: int, narrow_rows: int) -> int:
    """The backlog; returns the bytes of its rows' values, about."""
    rng = random.Random(11)
    size = 0
    with conn.cursor() as cur:
        for lo in range(0, wide_rows, 50):
            values = [
                (i, f"row {i}", ("é" * 20 + "x" * 80) * 600, rng.randbytes(30_000))
                for i in range(lo, min(lo + 50, wide_rows))
            ]
            cur.executemany(f"INSERT INTO {db}.wide VALUES (%s, %s, %s, %s)", values)
            size += sum(len(v[2].encode()) + len(v[3]) for v in values)
        for lo in range(0, narrow_rows, 5_000):
            values = [(i, f"name {i}", i * 7) for i in range(lo, min(lo + 5_000, narrow_rows))]
            cur.executemany(f"INSERT INTO {db}.narrow VALUES (%s, %s, %s)", values)
            size += sum(len(v[1]) + 12 for v in values)
        cur.execute(f"UPDATE {db}.wide SET note = 'changed' WHERE id % 7 = 0")
    return size


def run_setting(info, args, work: Path, budget_mb: int, tag: str) -> dict:
    import pymysql

    from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
    from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config

    db, prefix = f"memb_{tag}", f"memb{tag}"
    m = info.mariadb
    conn = pymysql.connect(host=m.host, port=m.port, user="root", password=m.root_password, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
        cur.execute(f"CREATE TABLE {db}.wide (id INT PRIMARY KEY, note VARCHAR(40), body LONGTEXT, pic MEDIUMBLOB)")
        cur.execute(f"CREATE TABLE {db}.narrow (id INT PRIMARY KEY, name VARCHAR(40), n BIGINT)")
    run_dir = work / tag
    run_dir.mkdir(parents=True)
    icfg = write_config(info, run_dir / "ingest.yaml", prefix, [db, "cdc"], topic_partitions=2)
    mcfg = write_merger_config(
        info,
        run_dir / "merger.yaml",
        prefix,
        [db],
        run_dir,
        batch_memory_mb=budget_mb,
        **{"spark_conf": {"spark.driver.memory": "2g"}},
    )
    progress = run_dir / "progress.jsonl"
    os.environ["CDC_MERGER_PROGRESS_LOG"] = str(progress)
    ingest = IngestProcess(icfg, run_dir / "ingest.log").start()
    merger = MergerProcess(mcfg, run_dir / "merger.log").start()
    from merger.state.store import StateStore

    store = StateStore(run_dir / "state")
    try:
        deadline = time.monotonic() + 300
        while not all((store.load_plan(f"{db}.{t}") or {}).get("finished_at") for t in ("wide", "narrow")):
            if time.monotonic() > deadline or not merger.alive():
                raise RuntimeError(f"the empty snapshots did not finish:\n{merger.log_text()[-3000:]}")
            time.sleep(0.5)
        merger.stop()
        size = write_backlog(conn, db, args.wide_rows, args.narrow_rows)
        wait_caught_up(info, prefix, timeout_s=600, proc=ingest)
        progress.write_text("")
        merger = MergerProcess(mcfg, run_dir / "merger.log").start()
        started = time.monotonic()
        peaks = Peaks(merger.proc.pid)
        peaks.start()
        checker = SinkChecker(info, run_dir)
        try:
            for table in ("narrow", "wide"):
                checker.wait_equal(db, table, timeout_s=args.timeout, proc=merger)
        finally:
            checker.close()
        wall = time.monotonic() - started
        peaks.stop.set()
    finally:
        merger.stop()
        ingest.stop()
        os.environ.pop("CDC_MERGER_PROGRESS_LOG", None)
        conn.close()
    batches = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
    loaded = [
        (b.get("numInputRows") or 0, (b.get("addBatchSplit") or {}).get("recordBytes", 0))
        for b in batches
        if (b.get("numInputRows") or 0) > 0
    ]
    return {
        "batch_memory_mb": budget_mb,
        "backlog_mb": size / MB,
        "batches": len(loaded),
        "max_records": max((n for n, _ in loaded), default=0),
        "max_batch_mb": max((s for _, s in loaded), default=0) / MB,
        "records_mb": sum(s for _, s in loaded) / MB,
        "wall_s": wall,
        "python_peak_mb": peaks.peak["python"] / 1024,
        "jvm_peak_mb": peaks.peak["jvm"] / 1024,
        "python_growth_mb": (peaks.peak["python"] - peaks.first.get("python", 0)) / 1024,
        "jvm_growth_mb": (peaks.peak["jvm"] - peaks.first.get("jvm", 0)) / 1024,
    }


def report(args, runs: list[dict]) -> list[str]:
    lines = [
        f"### Merger memory catching up a backlog, commit {commit_label()}, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Backlog: {args.wide_rows:,} wide rows (~130 KB) + {args.narrow_rows:,} narrow rows + an UPDATE of every "
        f"7th wide row; {os.cpu_count()} CPUs. Baseline: batch_memory_mb 1,000,000 (count-only, as before the "
        "setting: max_records_per_trigger 200,000).",
        "",
        "| batch_memory_mb | batches | largest batch (records / MB) | records MB | Python peak (growth) MB "
        "| JVM peak (growth) MB | wall to equal s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['batch_memory_mb']:,} | {r['batches']} | {r['max_records']:,} / {r['max_batch_mb']:.1f} "
            f"| {r['records_mb']:.0f} | {r['python_peak_mb']:.0f} ({r['python_growth_mb']:+.0f}) "
            f"| {r['jvm_peak_mb']:.0f} ({r['jvm_growth_mb']:+.0f}) | {r['wall_s']:.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="1000000,512,128,32", help="batch_memory_mb values, comma-separated")
    ap.add_argument("--wide-rows", type=int, default=1_500)
    ap.add_argument("--narrow-rows", type=int, default=300_000)
    ap.add_argument("--timeout", type=float, default=900, help="seconds for the sinks to equal the source")
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, state, Delta tables)")
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    args = ap.parse_args(argv)
    from cdc import stack as local_stack

    info = local_stack.up(Path(args.state_dir))
    work = Path(args.state_dir) / "memory-bench"
    shutil.rmtree(work, ignore_errors=True)
    runs = []
    try:
        for i, setting in enumerate(int(s) for s in args.settings.split(",")):
            print(f"memory bench: batch_memory_mb {setting:,} ...", flush=True)
            runs.append(run_setting(info, args, work, setting, f"{i}{int(time.time()) % 100000}"))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    lines = report(args, runs)
    publish(lines, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
