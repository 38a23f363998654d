"""Hundreds of tables: the initial snapshot of N small tables, as a new user meets it.

The local stack (real MariaDB, Tansu, PostgreSQL), N tables of --rows rows each
(``id INT PRIMARY KEY, v INT, s VARCHAR(30)``), one ingest (``topic_partitions`` --partitions)
and one merger with default snapshot settings into both sinks (Delta and PostgreSQL), both
started after the tables are filled. Measured: the time from the merger's start until the
merger's status says every table is ``streaming`` with its snapshot finished, and how many
windows expired on the way (the merger log's "expired" lines).

    .venv/bin/python bench/tables_bench.py [--tables 50,100,200] [--rows 1000] [--partitions 3]
        [--timeout 900] [--record] [--down]

The stack lives under .cdc/bench-stack (left running unless --down); work files go to
.cdc/bench-stack/tables-bench/<run> (kept with --keep). --record appends the figures to
bench/RESULTS.md under "hundreds of tables".
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402
import yaml  # noqa: E402

from bench import commit_label, publish  # noqa: E402
from cdc import stack as local_stack  # noqa: E402
from merger.state import StateStore  # noqa: E402
from tests.ingest_harness import IngestProcess, write_config  # noqa: E402
from tests.merger_harness import MergerProcess, write_merger_config  # noqa: E402

TARGET_S_PER_TABLE = 0.25  # 500 tables of 1,000 rows within 2 minutes (issue 23)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def table_name(i: int) -> str:
    return f"t{i:04d}"


def create_tables(stack: local_stack.StackInfo, db: str, n: int, rows: int) -> None:
    conn = pymysql.connect(
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"USE {db}")
            for i in range(n):
                cur.execute(f"CREATE TABLE {table_name(i)} (id INT PRIMARY KEY, v INT, s VARCHAR(30))")
                cur.execute(f"INSERT INTO {table_name(i)} SELECT seq, seq * 7, CONCAT('s', seq) FROM seq_1_to_{rows}")
    finally:
        conn.close()


def default_merger_config(stack, path: Path, prefix: str, db: str, work: Path) -> Path:
    """The harness's merger config with the product's default snapshot and trigger settings."""
    write_merger_config(stack, path, prefix, [db], work)
    cfg = yaml.safe_load(path.read_text())
    cfg.pop("snapshot", None)
    cfg.pop("trigger_interval_ms", None)
    path.write_text(yaml.safe_dump(cfg))
    return path


def all_streaming(store: StateStore, n: int) -> tuple[bool, int]:
    status = store.read_status() or {}
    tables = status.get("tables") or {}
    done = sum(1 for t in tables.values() if t.get("phase") == "streaming" and t.get("snapshot") == "finished")
    return done >= n, done


def run_one(stack, base: Path, n: int, rows: int, partitions: int, timeout_s: float) -> dict:
    run = f"tb{n}_{uuid.uuid4().hex[:6]}"
    work = base / run
    work.mkdir(parents=True)
    db = f"bench_{run}"
    log(f"{n} tables of {rows} rows: creating")
    create_tables(stack, db, n, rows)
    icfg = write_config(stack, work / "ingest.yaml", run, [db, "cdc"], topic_partitions=partitions)
    mcfg = default_merger_config(stack, work / "merger.yaml", run, db, work)
    ingest = IngestProcess(icfg, work / "ingest.log").start()
    merger = MergerProcess(mcfg, work / "merger.log").start()
    store = StateStore(work / "state")
    started = time.monotonic()
    done, last = False, -1
    try:
        while time.monotonic() - started < timeout_s:
            for p in (ingest, merger):
                if not p.alive():
                    raise RuntimeError(f"{p.config_path.stem} exited:\n{p.log_text()[-3000:]}")
            done, count = all_streaming(store, n)
            if count != last:
                log(f"  {count}/{n} streaming after {time.monotonic() - started:.0f}s")
                last = count
            if done:
                break
            time.sleep(1.0)
        took = time.monotonic() - started
    finally:
        merger.stop()
        ingest.stop()
    text = merger.log_text()
    result = {
        "tables": n,
        "rows": rows,
        "seconds": took if done else None,
        "streaming": last,
        "expired": text.count("expired"),
        "work": work,
    }
    log(f"  -> {result}")
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", default="50,100")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--down", action="store_true")
    args = ap.parse_args(argv)
    label = commit_label()  # the code the processes start with
    state = Path(args.state_dir)
    stack = local_stack.up(state)
    base = state / "tables-bench"
    results = []
    try:
        for n in [int(x) for x in args.tables.split(",")]:
            results.append(run_one(stack, base, n, args.rows, args.partitions, args.timeout))
            if not args.keep:
                shutil.rmtree(results[-1]["work"], ignore_errors=True)
    finally:
        if args.down:
            local_stack.down(state)
    lines = [
        f"### hundreds of tables ({time.strftime('%Y-%m-%d')}, commit {label})",
        "",
        f"{args.rows} rows per table, topic_partitions {args.partitions}, default settings, both sinks; "
        f"time from `cdc merge` start until every table is streaming (target <= {TARGET_S_PER_TABLE} s per table)",
        "",
        "| tables | seconds | per table | windows expired |",
        "|---|---|---|---|",
    ]
    for r in results:
        secs = f"{r['seconds']:.1f}" if r["seconds"] is not None else f"not done ({r['streaming']} streaming)"
        per = f"{r['seconds'] / r['tables']:.2f} s" if r["seconds"] is not None else "-"
        lines.append(f"| {r['tables']} | {secs} | {per} | {r['expired']} |")
    publish(lines, args.record)


if __name__ == "__main__":
    main()
