"""Replay a statement file through the whole pipeline and compare every sink table with the
source: for reproducing (and cutting down) a divergence the fuzzer found.

    CDC_TEST_STATE_DIR=/work/stack .venv/bin/python -m tests.fuzz_replay fuzz-seed3.sql [--minimise]

The file is what tests/integration/test_fuzz.py writes (``statement;`` per line, ``--`` comments);
``@sync`` on a line of its own waits until the sinks are equal before going on (to put a
statement after the merger caught up). The statements run in a new database on the
running stack, with a fresh ingest and merger. ``--minimise`` cuts the list down with
delta debugging, one pipeline run per candidate (minutes each).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pymysql

from cdc import stack as local_stack
from tests.fuzz_sql import execute_tolerant, minimise
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config

SYNC = "@sync"


def read_statements(path: Path) -> list[str]:
    out, cur = [], []
    for line in path.read_text().splitlines(keepends=True):
        if not cur and (line.startswith("--") or not line.strip()):
            continue
        if not cur and line.strip() == SYNC:
            out.append(SYNC)
            continue
        cur.append(line)
        if line.rstrip("\n").endswith(";"):
            out.append("".join(cur).rstrip("\n")[:-1])
            cur = []
    return out


def tables_of(conn, db: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
        return sorted(r[0] for r in cur.fetchall())


def replay(stack, statements: list[str], work: Path, wait_s: float = 120) -> list[str]:
    """Runs ``statements`` through ingest + merger; returns the differences (empty: equal)."""
    name = "r" + uuid.uuid4().hex[:8]
    db = f"{name}_db"
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
        charset="utf8mb4",
    )
    work.mkdir(parents=True, exist_ok=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        cur.execute(f"USE `{db}`")
    ingest = IngestProcess(
        write_config(stack, work / "ingest.yaml", name, [db, "cdc"], topic_partitions=3, on_xa_rollback="warn"),
        work / "ingest.log",
    ).start()
    merger = MergerProcess(
        write_merger_config(
            stack,
            work / "merger.yaml",
            name,
            [db],
            work,
            **{"snapshot.chunk_size": 100, "snapshot.chunks_per_window": 2},
        ),
        work / "merger.log",
    ).start()
    checker = SinkChecker(stack, work)
    problems: list[str] = []
    try:
        with conn.cursor() as cur:
            for sql in statements:
                if sql == SYNC:
                    for t in tables_of(conn, db):
                        checker.wait_equal(db, t, timeout_s=wait_s, proc=merger)
                    continue
                execute_tolerant(cur, [sql])
        for t in tables_of(conn, db):
            try:
                checker.wait_equal(db, t, timeout_s=wait_s, proc=merger)
            except AssertionError as exc:
                problems.append(f"{t}: {str(exc)[:800]}")
                if not merger.alive():
                    break
    except AssertionError as exc:  # the merger stopped during a sync
        problems.append(f"stopped: {str(exc)[-800:]}")
    finally:
        merger.stop()
        ingest.stop()
        checker.close()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--minimise", action="store_true")
    ap.add_argument("--wait", type=float, default=120, help="seconds to wait for equal sinks")
    args = ap.parse_args(argv)
    stack = local_stack.up(Path(os.environ.get("CDC_TEST_STATE_DIR", ".cdc/test-stack")))
    statements = read_statements(args.file)
    base = Path(tempfile.mkdtemp(prefix="fuzz-replay-"))
    runs = iter(range(10**6))

    def fails(candidate: list[str]) -> bool:
        started = time.monotonic()
        problems = replay(stack, candidate, base / f"run{next(runs)}", args.wait)
        print(
            f"{len(candidate)} statements: {'DIVERGES' if problems else 'equal'} "
            f"({time.monotonic() - started:.0f}s) {problems[:1]}",
            flush=True,
        )
        return bool(problems)

    if not fails(statements):
        print("no divergence")
        return 0
    if args.minimise:
        small = minimise(statements, fails)
        out = args.file.with_suffix(".min.sql")
        out.write_text("".join(s + (";\n" if s != SYNC else "\n") for s in small))
        print(f"minimal: {len(small)} statements in {out}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
