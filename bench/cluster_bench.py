"""The merger in Spark local mode against a Spark standalone cluster, in the same run
(issue 25): ``bench/merger_bench.py`` twice on one stack, once with ``spark_master:
local[2]`` and once on the stack's cluster of two one-core workers (``cdc stack up
--spark-workers 2``): the wall time and rows/s of a snapshot of the bench table (1M rows by
default) and the p99 latency from commit to sink at 1,000 changes/s.

    .venv/bin/python bench/cluster_bench.py [--rows N] [--sink delta] [--record]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cdc import stack as local_stack  # noqa: E402
from cdc import stack_spark  # noqa: E402


def one(args, master: str) -> dict:
    """merger_bench with ``spark_master: master``: its JSON figures."""
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "merger_bench.py"),
        "--rows",
        str(args.rows),
        "--parallelism",
        "2",
        "--sinks",
        args.sink,
        "--snapshot-start",
        "cold",
        "--latency-seconds",
        str(args.latency_seconds),
        "--skip-latency-snapshot",
        "--state-dir",
        args.state_dir,
        "--merger-set",
        f"spark_master={master}",
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, cwd=ROOT)
    text = out.stdout
    start = text.find("{\n")
    if out.returncode != 0 or start < 0:
        tail = f"{text[-3000:]}\n{out.stderr[-3000:]}"
        raise RuntimeError(f"merger_bench with {master} failed ({out.returncode}):\n{tail}")
    return {"report": text[:start].strip(), "figures": json.loads(text[start:])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sink", default="delta", choices=["delta", "postgres"])
    ap.add_argument("--latency-seconds", type=float, default=60)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--record", action="store_true", help="append the figures to bench/RESULTS.md")
    args = ap.parse_args(argv)
    local_stack.up(Path(args.state_dir))
    cluster = stack_spark.up(args.state_dir, 2)
    started = time.strftime("%Y-%m-%d %H:%M")
    runs = {}
    try:
        for name, master in (("local[2]", "local[2]"), ("cluster, 2 workers x 1 core", cluster.master_url)):
            runs[name] = one(args, master)
            print(f"== {name}\n{runs[name]['report']}\n", flush=True)
    finally:
        stack_spark.down(args.state_dir)
    print(json.dumps({k: v["figures"] for k, v in runs.items()}, indent=1, default=str))
    if args.record:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        lines = [f"\n### merger: local[2] against a 2-worker Spark cluster — {started}, commit {commit.stdout.strip()}"]
        lines.append(f"(`bench/cluster_bench.py --rows {args.rows} --sink {args.sink}`)\n")
        for name, run in runs.items():
            lines.append(f"**{name}**\n\n```\n{run['report']}\n```\n")
        with open(ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
