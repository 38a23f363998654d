"""The merger catching up a backlog of one table, per topic partition count (issue 23, item 4):
how many Spark tasks read each micro-batch, and the catch-up's wall time.

One run per setting, each on a database and topic prefix of its own in the local stack:

1. ingest (``topic_partitions`` of the setting) and the merger start; the table's keys
   (--keys rows) are inserted and streamed;
2. the merger stops; the backlog is written and ingest has it all in Kafka: --rounds
   UPDATEs of every row (``c = c + 1``: each key changed --rounds times, in sequence);
3. the merger starts again and catches up: timed from its start until both sinks
   (PostgreSQL and Delta) hold the source's SUM(c), then compared with the source row for
   row (``merger.verify``), untimed.

Figures per run, from the merger's progress log (CDC_MERGER_PROGRESS_LOG): the batches that
read records, their read tasks (``readTasks``), the time Spark spent reading them into the
driver (``readMs``) and the processor's time (``processMs``), the catch-up from the first
to the last of these batches, and the wall time from the merger's start. A setting
``32:1`` runs the merger with ``spark_master: local[1]``: one task slot, so one read task
per batch (the rule before ``minPartitions``), otherwise the same.

    .venv/bin/python bench/partitions_bench.py [--settings 3,32,32:1] [--keys 50000 --rounds 10] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import commit_label, publish  # noqa: E402


def _sum_c(info, db: str, run_dir: Path) -> dict[str, int | None]:
    import psycopg
    import pymysql
    from deltalake import DeltaTable

    out: dict[str, int | None] = {}
    m = info.mariadb
    conn = pymysql.connect(host=m.host, port=m.port, user="root", password=m.root_password)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COALESCE(SUM(c), 0) FROM {db}.t")
            out["source"] = int(cur.fetchone()[0])
    finally:
        conn.close()
    pg = info.postgres
    try:
        with psycopg.connect(
            host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.database
        ) as pconn:
            out["postgres"] = int(pconn.execute(f'SELECT COALESCE(SUM(c), 0) FROM "{db}"."t"').fetchone()[0])
    except Exception:
        out["postgres"] = None
    try:
        col = DeltaTable(str(run_dir / "delta" / db / "t")).to_pyarrow_table(columns=["c"]).column("c")
        out["delta"] = sum(v or 0 for v in col.to_pylist())
    except Exception:
        out["delta"] = None
    return out


def run_setting(info, args, work: Path, partitions: int, slots: int | None, tag: str) -> dict:
    import pymysql

    from merger.state.store import StateStore
    from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
    from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config

    db, prefix = f"partb_{tag}", f"partb{tag}"
    m = info.mariadb
    conn = pymysql.connect(host=m.host, port=m.port, user="root", password=m.root_password, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, c INT NOT NULL, v VARCHAR(40))")
        cur.execute(f"USE {db}")  # for MariaDB's seq_1_to_<n>
    run_dir = work / tag
    run_dir.mkdir(parents=True)
    icfg = write_config(info, run_dir / "ingest.yaml", prefix, [db, "cdc"], topic_partitions=partitions)
    extra = {"spark_master": f"local[{slots}]"} if slots else {}
    if args.batch_reads:
        extra["batch_reads"] = args.batch_reads
    mcfg = write_merger_config(info, run_dir / "merger.yaml", prefix, [db], run_dir, **extra)
    progress = run_dir / "progress.jsonl"
    os.environ["CDC_MERGER_PROGRESS_LOG"] = str(progress)
    ingest = IngestProcess(icfg, run_dir / "ingest.log").start()
    merger = MergerProcess(mcfg, run_dir / "merger.log").start()
    store = StateStore(run_dir / "state")
    try:
        deadline = time.monotonic() + 300
        while not (store.load_plan(f"{db}.t") or {}).get("finished_at"):
            if time.monotonic() > deadline or not merger.alive():
                raise RuntimeError(f"the empty snapshot did not finish:\n{merger.log_text()[-3000:]}")
            time.sleep(0.5)
        with conn.cursor() as cur:  # streamed: the merger learns the topic's record size
            cur.execute(f"INSERT INTO {db}.t SELECT seq, 0, CONCAT('key ', seq) FROM seq_1_to_{args.keys}")
        checker = SinkChecker(info, run_dir)
        try:
            checker.wait_equal(db, "t", timeout_s=300, proc=merger)
        finally:
            checker.close()
        merger.stop()
        with conn.cursor() as cur:
            for r in range(1, args.rounds + 1):
                cur.execute(f"UPDATE {db}.t SET c = c + 1, v = CONCAT('round {r} of ', id)")
        wait_caught_up(info, prefix, timeout_s=600, proc=ingest)
        progress.write_text("")
        load_before = os.getloadavg()[0]
        merger = MergerProcess(mcfg, run_dir / "merger.log").start()
        started = time.monotonic()
        deadline = started + args.timeout
        while True:
            sums = _sum_c(info, db, run_dir)
            if sums["postgres"] == sums["delta"] == sums["source"]:
                break
            if time.monotonic() > deadline or not merger.alive():
                raise RuntimeError(f"not caught up within {args.timeout:.0f}s ({sums}):\n{merger.log_text()[-3000:]}")
            time.sleep(0.5)
        wall = time.monotonic() - started
        load_after = os.getloadavg()[0]
        checker = SinkChecker(info, run_dir)
        try:
            found = checker.compare(db, "t")
        finally:
            checker.close()
        assert all(c is not None and c.ok for _, c, _ in found), [(n, c.summary() if c else e) for n, c, e in found]
        time.sleep(2)  # the last batch's progress line
    finally:
        merger.stop()
        ingest.stop()
        os.environ.pop("CDC_MERGER_PROGRESS_LOG", None)
        conn.close()
    batches = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
    read = [b for b in batches if (b.get("numInputRows") or 0) > 0]
    split = [b.get("addBatchSplit") or {} for b in read]
    stamps = [datetime.datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")) for b in read]
    last_ms = (read[-1].get("durationMs") or {}).get("triggerExecution", 0) if read else 0
    return {
        "partitions": partitions,
        "slots": slots,
        "changes": args.keys * args.rounds,
        "batches": len(read),
        "records": sum(b["numInputRows"] for b in read),
        "tasks": [s.get("readTasks") for s in split],
        "read_s": sum(s.get("readMs", 0) for s in split) / 1000,
        "process_s": sum(s.get("processMs", 0) for s in split) / 1000,
        "catch_up_s": ((stamps[-1] - stamps[0]).total_seconds() + last_ms / 1000) if read else 0.0,
        "wall_s": wall,
        "load": (load_before, load_after),
    }


def report(args, runs: list[dict]) -> list[str]:
    lines = [
        f"### Catching up a backlog per topic partitions, commit {commit_label()}, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"`bench/partitions_bench.py`: {args.keys:,} keys x {args.rounds} UPDATEs of every row = "
        f"{args.keys * args.rounds:,} changes of one table, written while the merger was stopped; "
        f"{os.cpu_count()} CPUs, shared (1-minute load at the merger's start / when caught up in the table). "
        "Catch-up: first to last batch with records; wall: from the merger's start (JVM start included) "
        "to both sinks equal to the source."
        + (f" The merger's `batch_reads`: {args.batch_reads}." if args.batch_reads else ""),
        "",
        "| topic partitions | task slots | batches | read tasks per batch | Spark read s | processor s "
        "| catch-up s | wall s | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        tasks = r["tasks"]
        shown = ", ".join(str(t) for t in tasks) if len(tasks) <= 12 else f"{min(tasks)}-{max(tasks)}"
        lines.append(
            f"| {r['partitions']} | {r['slots'] or 'default'} | {r['batches']} | {shown} | {r['read_s']:.1f} "
            f"| {r['process_s']:.1f} | {r['catch_up_s']:.1f} | {r['wall_s']:.1f} "
            f"| {r['load'][0]:.1f} / {r['load'][1]:.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--settings", default="3,32,32:1", help="topic_partitions[:task slots], comma-separated (slots: spark_master)"
    )
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900, help="seconds for the sinks to catch up")
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, state, Delta tables)")
    ap.add_argument(
        "--batch-reads", choices=("auto", "driver", "spark"), help="the merger's batch_reads (default: its default)"
    )
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    args = ap.parse_args(argv)
    from cdc import stack as local_stack

    info = local_stack.up(Path(args.state_dir))
    work = Path(args.state_dir) / "partitions-bench"
    shutil.rmtree(work, ignore_errors=True)
    runs = []
    try:
        for i, setting in enumerate(args.settings.split(",")):
            parts, _, slots = setting.partition(":")
            print(f"partitions bench: {setting} ...", flush=True)
            tag = f"{i}{int(time.time()) % 100000}"
            runs.append(run_setting(info, args, work, int(parts), int(slots) if slots else None, tag))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    publish(report(args, runs), args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
