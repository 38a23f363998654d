"""The merger's start, split: from `Merger.run` to its first micro-batch done, next to a
plain PySpark start in the same run.

Each run is a fresh process (a Spark session cannot be started twice in one):

* baseline: `SparkSession.builder.getOrCreate()` with Spark's defaults (local[2]) and one
  `spark.range(1).collect()`: what any PySpark job waits for before its first job;
* the merger, on the local stack, with no table to snapshot: the time from the start of
  `Merger.run` to each step (checks, `make_spark`, the data source's registration, the
  query's start) and to the first micro-batch's progress, and the Python processes Spark
  started meanwhile (`--processes`).

    .venv/bin/python bench/start_bench.py [--runs 3] [--record]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import commit_label, publish  # noqa: E402

BASELINE = """
import time
t0 = time.monotonic()
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
t1 = time.monotonic()
spark.range(1).collect()
t2 = time.monotonic()
print("BASELINE", t1 - t0, t2 - t0)
spark.stop()
"""


def baseline() -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", BASELINE], capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next(x for x in out.stdout.splitlines() if x.startswith("BASELINE"))
    _, session, job = line.split()
    return float(session), float(job)


def merger_child(state_dir: str, show_processes: bool) -> None:
    """One merger start, timed step by step (runs in a child process)."""
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    from cdc import stack as local_stack
    from cdc.config import MergerConfig, load_model
    from merger import app
    from merger.mysql import checks
    from tests.merger_harness import write_merger_config

    info = local_stack.up(Path(state_dir))
    work = Path(tempfile.mkdtemp(prefix="start-bench-"))
    cfg = load_model(MergerConfig, write_merger_config(info, work / "m.yaml", "startbench", ["no_such_db"], work))

    def timed(owner, name: str) -> None:
        f = getattr(owner, name)

        @functools.wraps(f)
        def wrapper(*a, **k):
            try:
                return f(*a, **k)
            finally:
                marks[name] = time.monotonic() - started

        setattr(owner, name, wrapper)

    timed(checks, "check_source")
    timed(app, "make_spark")
    from pyspark.sql.datasource import DataSourceRegistration

    timed(DataSourceRegistration, "register")
    timed(app.Merger, "_start_query")
    if show_processes:
        threading.Thread(target=_watch_processes, args=(time.monotonic,), daemon=True).start()
    merger = app.Merger(cfg)
    stop = threading.Event()
    started = time.monotonic()
    runner = threading.Thread(target=merger.run, args=(stop,), daemon=True)
    runner.start()
    deadline = time.monotonic() + 180
    while (merger.query is None or not merger.query.recentProgress) and time.monotonic() < deadline:
        time.sleep(0.02)
    marks["first_batch"] = time.monotonic() - started
    marks["imports"] = started - t0
    stop.set()
    runner.join(60)
    print("MARKS", json.dumps(marks), flush=True)


def _watch_processes(clock) -> None:
    t0, seen = clock(), set()
    while True:
        for d in os.listdir("/proc"):
            if not d.isdigit() or d in seen:
                continue
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            seen.add(d)
            if "python" in cmd and "pyspark" in cmd or "spark_daemon" in cmd:
                print(f"  +{clock() - t0:5.2f}s {cmd[:120]}", flush=True)
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--processes", action="store_true", help="list the Python processes Spark starts")
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        merger_child(args.state_dir, args.processes)
        return 0
    from cdc import stack as local_stack

    local_stack.up(Path(args.state_dir))
    bases, runs = [], []
    for i in range(args.runs):
        bases.append(baseline())
        cmd = [sys.executable, __file__, "--child", "--state-dir", args.state_dir]
        out = subprocess.run(cmd + (["--processes"] if args.processes else []), capture_output=True, text=True)
        if args.processes:
            print("\n".join(x for x in out.stdout.splitlines() if x.startswith("  +")))
        line = next((x for x in out.stdout.splitlines() if x.startswith("MARKS")), None)
        if line is None:
            print(out.stderr[-3000:])
            return 1
        runs.append(json.loads(line[len("MARKS ") :]))
        print(f"run {i + 1}: baseline {bases[-1][1]:.2f} s, merger {json.dumps(runs[-1])}", flush=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    lines = [
        f"### merger start — {time.strftime('%Y-%m-%d %H:%M')}, commit {commit_label()}, "
        f"{os.cpu_count()} CPUs, median of {args.runs} (`bench/start_bench.py`)",
        "",
        "| step (seconds from `Merger.run`) | median |",
        "|---|---|",
        f"| checks done | {med('check_source'):.2f} |",
        f"| Spark session (`make_spark`) | {med('make_spark'):.2f} |",
        f"| data source registered | {med('register'):.2f} |",
        f"| query started | {med('_start_query'):.2f} |",
        f"| **first micro-batch done** | **{med('first_batch'):.2f}** |",
        f"| (before `Merger.run`: Python start and imports) | {med('imports'):.2f} |",
        f"| baseline: plain PySpark session, then its first job done | "
        f"{statistics.median(b[0] for b in bases):.2f}, {statistics.median(b[1] for b in bases):.2f} |",
    ]
    publish(lines, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
