"""What continuous verification (``verify.continuous``) costs the source and the sinks.

On the local stack: one table of --rows rows, ingest and the merger streaming a light
workload (--rate updates/s). The same period (--seconds) is measured with the background
verify off and at each budget of --budgets chunks per minute (chunk size 50,000, the
default): MariaDB's CPU (its process), its queries/s (``Questions``), PostgreSQL's CPU (all
its processes) and the merger's. The difference to the run without is what verifying costs.

    .venv/bin/python bench/continuous_verify_bench.py --rows 1000000 --record
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402

from bench import commit_label, publish  # noqa: E402
from cdc import stack as local_stack  # noqa: E402
from tests.ingest_harness import IngestProcess, write_config  # noqa: E402
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / TICKS


def children_of(pid: int) -> list[int]:
    out = [pid]
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(p.name))
    return out


def tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c in children_of(p) if c != p]
    return out


def conn(info, db=None):
    m = info.mariadb
    return pymysql.connect(
        host=m.host, port=m.port, user="root", password=m.root_password, database=db, autocommit=True
    )


def questions(info) -> int:
    with conn(info) as c, c.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


def verified_chunks(port: int) -> float:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cdc_merger_verify_chunks_total{")
    )


def measure(info, state: Path, merger_pid: int, seconds: float, port: int) -> dict:
    maria = int((state / "mariadb.pid").read_text())
    pg = int((Path(info.postgres.datadir) / "postmaster.pid").read_text().split()[0])
    pg_pids = tree(pg)
    merger = tree(merger_pid)
    c0 = verified_chunks(port)
    q0, m0, p0, g0, t0 = questions(info), cpu_s([maria]), cpu_s(pg_pids), cpu_s(merger), time.monotonic()
    time.sleep(seconds)
    q1, m1, p1, g1, t1 = questions(info), cpu_s([maria]), cpu_s(tree(pg)), cpu_s(tree(merger_pid)), time.monotonic()
    wall = t1 - t0
    return {
        "chunks_min": (verified_chunks(port) - c0) / wall * 60,
        "mariadb_cpu": (m1 - m0) / wall,
        "queries_s": (q1 - q0) / wall,
        "postgres_cpu": (p1 - p0) / wall,
        "merger_cpu": (g1 - g0) / wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=50, help="workload updates per second (all runs)")
    ap.add_argument("--seconds", type=float, default=90, help="measured period per run")
    ap.add_argument("--budgets", default="12,60,600", help="chunks per minute to measure (besides off)")
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    state = Path(args.state_dir)
    info = local_stack.up(state)
    work = state / "continuous-verify-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db, prefix = "cvbench", "cvb" + str(int(time.time()))
    with conn(info) as c, c.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, a VARCHAR(40), b INT, c DECIMAL(12,2), d DATETIME(6))")
        cur.execute(
            f"INSERT INTO {db}.t SELECT seq, CONCAT('name ', seq), seq % 1000, seq / 7, "
            f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{args.rows}"
        )
    icfg = write_config(info, work / "ingest.yaml", prefix, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, work / "ingest.log").start()
    stop = threading.Event()

    def workload():
        import random

        rnd = random.Random(1)
        with conn(info, db) as c, c.cursor() as cur:
            while not stop.is_set():
                cur.execute("UPDATE t SET b = b + 1 WHERE id = %s", (rnd.randint(1, args.rows),))
                stop.wait(1 / args.rate)

    results = {}
    port = local_stack.free_port()
    checker = SinkChecker(info, work)
    writer = threading.Thread(target=workload, daemon=True)
    try:
        for budget in [0.0, *(float(b) for b in args.budgets.split(","))]:
            mcfg = write_merger_config(
                info,
                work / "merger.yaml",
                prefix,
                [db],
                work,
                **{
                    "verify.continuous.chunks_per_minute": budget,
                    "snapshot.chunk_size": 50_000,
                    "metrics_port": port,
                },
            )
            merger = MergerProcess(mcfg, work / f"merger-{budget:g}.log").start()
            try:
                if not writer.is_alive():
                    checker.wait_equal(db, "t", timeout_s=1800, proc=merger)
                    writer.start()
                time.sleep(20)  # started, caught up
                print(f"measuring chunks_per_minute {budget:g} for {args.seconds:.0f}s ...", flush=True)
                results[budget] = measure(info, state, merger.proc.pid, args.seconds, port)
                print(f"  {results[budget]}", flush=True)
            finally:
                merger.stop()
    finally:
        stop.set()
        ingest.stop()
        checker.close()
    base = results[0.0]
    lines = [
        f"### continuous verification's cost — {time.strftime('%Y-%m-%d %H:%M')}, commit {commit_label()} "
        f"(`bench/continuous_verify_bench.py --rows {args.rows} --rate {args.rate:g} --seconds {args.seconds:g}`)",
        "",
        f"Machine: {os.cpu_count()} CPUs; load average at the end {os.getloadavg()[0]:.2f}. One table of "
        f"{args.rows:,} rows (5 columns), {args.rate:g} updates/s streaming in every run, chunks of 50,000 rows; "
        f"each run measured over {args.seconds:g} s once the merger had caught up.",
        "",
        "| chunks per minute (budget) | verified per minute | MariaDB CPU (cores) | MariaDB queries/s "
        "| PostgreSQL CPU | merger CPU | added to MariaDB | added queries/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for budget, r in results.items():
        lines.append(
            f"| {'off' if budget == 0 else f'{budget:g}'} | {r['chunks_min']:.1f} | {r['mariadb_cpu']:.3f} "
            f"| {r['queries_s']:.1f} | "
            f"{r['postgres_cpu']:.3f} | {r['merger_cpu']:.3f} | {r['mariadb_cpu'] - base['mariadb_cpu']:+.3f} | "
            f"{r['queries_s'] - base['queries_s']:+.1f} |"
        )
    publish(lines, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
