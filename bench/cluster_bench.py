"""The merger in Spark local mode against a Spark standalone cluster, in the same run
(issue 25): ``bench/merger_bench.py`` twice on one stack, once with ``spark_master:
local[2]`` and once on the stack's cluster of two one-core workers (``cdc stack up
--spark-workers 2``): the wall time and rows/s of a snapshot of the bench table (1M rows by
default) and the p99 latency from commit to sink at 1,000 changes/s.

While each run goes, Spark's REST API (the driver's UI, turned on for the bench on a port
of its own) is read every 2 s: per executor (the driver included) its cores, tasks, task
time, GC time, storage memory and peak memory (JVM heap, and with
``spark.executor.processTreeMetrics.enabled`` the RSS of its JVM and of its Python
workers): the figures that size a cluster (docs/operations/sizing.md, "Sizing a cluster").

    .venv/bin/python bench/cluster_bench.py [--rows N] [--sink delta] [--record]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import append_results, commit_label  # noqa: E402
from cdc import stack as local_stack  # noqa: E402
from cdc import stack_spark  # noqa: E402

MB = 1 << 20
POLL_S = 2.0
# peakMemoryMetrics worth a column (bytes); the ProcessTree ones need processTreeMetrics
PEAKS = {
    "JVMHeapMemory": "peak JVM heap",
    "ProcessTreeJVMRSSMemory": "peak JVM RSS",
    "ProcessTreePythonRSSMemory": "peak Python RSS",
}
UI_CONF = {
    "spark.ui.enabled": "true",
    "spark.executor.processTreeMetrics.enabled": "true",
    # executor metrics sampled every 500 ms, not only at heartbeats (10 s): a short peak is seen
    "spark.executor.metrics.pollingInterval": "500ms",
}


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class ExecutorPoller(threading.Thread):
    """Reads the driver's REST API every ``POLL_S`` while merger_bench runs: per application
    (a merger process: the snapshot run, then the latency run) and executor, the largest
    value each figure reached."""

    def __init__(self, ui_port: int):
        super().__init__(daemon=True)
        self.base = f"http://127.0.0.1:{ui_port}/api/v1"
        self.apps: dict[str, dict] = {}  # app id -> {"order", "memory", "executors": {id: {...}}}
        self.stop = threading.Event()
        self.polls = self.errors = 0

    def run(self) -> None:
        while not self.stop.wait(POLL_S):
            try:
                self.poll()
                self.polls += 1
            except (OSError, ValueError):  # no merger running between runs, or it is stopping
                self.errors += 1

    def poll(self) -> None:
        for app in _get(f"{self.base}/applications"):
            seen = self.apps.get(app["id"])
            if seen is None:
                seen = self.apps[app["id"]] = {"order": len(self.apps), "memory": self._memory(app["id"])}
                seen["executors"] = {}
            for e in _get(f"{self.base}/applications/{app['id']}/allexecutors"):
                row = seen["executors"].setdefault(e["id"], {})
                peaks = e.get("peakMemoryMetrics") or {}
                figures = {
                    "cores": e.get("totalCores", 0),
                    "tasks": e.get("totalTasks", 0),
                    "task_s": e.get("totalDuration", 0) / 1000,
                    "gc_s": e.get("totalGCTime", 0) / 1000,
                    "max_storage_mb": e.get("maxMemory", 0) / MB,
                    **{name: peaks.get(name, 0) / MB for name in PEAKS},
                }
                for key, value in figures.items():
                    row[key] = max(row.get(key, 0), value)

    def _memory(self, app_id: str) -> dict[str, str]:
        try:
            env = _get(f"{self.base}/applications/{app_id}/environment")
        except (OSError, ValueError):
            return {}
        props = dict(env.get("sparkProperties", []))
        return {k: props.get(k, "(default)") for k in ("spark.driver.memory", "spark.executor.memory")}

    def runs(self, names: list[str]) -> list[dict]:
        """The applications in the order they started, named by ``names``."""
        ordered = sorted(self.apps.values(), key=lambda a: a["order"])
        return [dict(a, name=names[i] if i < len(names) else f"run {i + 1}") for i, a in enumerate(ordered)]


def one(args, master: str) -> dict:
    """merger_bench with ``spark_master: master``, its Spark UI read meanwhile: its figures
    (from ``--json-file``) and the executors'."""
    ui_port = local_stack.free_port()
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        figures_file = Path(tmp) / "figures.json"
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
            "--json-file",
            str(figures_file),
        ]
        for key, value in {**UI_CONF, "spark.ui.port": str(ui_port)}.items():
            cmd += ["--spark-conf", f"{key}={value}"]
        poller = ExecutorPoller(ui_port)
        poller.start()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, cwd=ROOT)
        finally:
            poller.stop.set()
            poller.join(10)
        if out.returncode != 0 or not figures_file.exists():
            tail = f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
            raise RuntimeError(f"merger_bench with {master} failed ({out.returncode}):\n{tail}")
        figures = json.loads(figures_file.read_text())
    report = "\n".join(figures.pop("report"))
    runs = poller.runs(["snapshot run", "latency run"])
    return {"report": report, "figures": figures, "executors": runs, "polls": poller.polls}


def executor_table(runs: list[dict]) -> list[str]:
    """Markdown: one row per application and executor."""
    lines = [
        "| run | executor | cores | tasks | task time s | GC s | storage memory MB | "
        + " | ".join(f"{label} MB" for label in PEAKS.values())
        + " |",
        "|---" * (6 + len(PEAKS)) + "|---|",
    ]
    for run in runs:
        memory = ", ".join(f"{k} {v}" for k, v in run["memory"].items())
        for eid, e in sorted(run["executors"].items(), key=lambda kv: (kv[0] != "driver", kv[0])):
            peaks = " | ".join(f"{e.get(name, 0):,.0f}" for name in PEAKS)
            # the driver of a cluster runs no task (its totalDuration is not task time)
            task_s = f"{e['task_s']:,.1f}" if e["tasks"] else "-"
            lines.append(
                f"| {run['name']} ({memory}) | {eid} | {e['cores']} | {e['tasks']:,} | {task_s} | "
                f"{e['gc_s']:,.1f} | {e['max_storage_mb']:,.0f} | {peaks} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sink", default="delta", choices=["delta", "postgres"])
    ap.add_argument("--latency-seconds", type=float, default=60)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    args = ap.parse_args(argv)
    local_stack.up(Path(args.state_dir))
    cluster = stack_spark.up(args.state_dir, 2)
    started = time.strftime("%Y-%m-%d %H:%M")
    commit = commit_label()
    runs = {}
    try:
        for name, master in (("local[2]", "local[2]"), ("cluster, 2 workers x 1 core", cluster.master_url)):
            runs[name] = one(args, master)
            print(f"== {name}\n{runs[name]['report']}\n", flush=True)
            print("\n".join(executor_table(runs[name]["executors"])) + "\n", flush=True)
    finally:
        stack_spark.down(args.state_dir)
    print(json.dumps({k: {"figures": v["figures"], "executors": v["executors"]} for k, v in runs.items()}, default=str))
    if args.record:
        lines = [f"### merger: local[2] against a 2-worker Spark cluster — {started}, commit {commit}"]
        lines.append(f"(`bench/cluster_bench.py --rows {args.rows} --sink {args.sink}`)\n")
        for name, run in runs.items():
            lines.append(f"**{name}**\n\n```\n{run['report']}\n```\n")
            lines.append(
                f"Spark's REST API during the {name} runs (read every {POLL_S:.0f} s, {run['polls']} reads; "
                "the largest value seen; task time = the sum of the executor's task durations):\n"
            )
            lines += executor_table(run["executors"]) + [""]
        append_results(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
