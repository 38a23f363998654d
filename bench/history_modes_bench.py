"""What a history table costs the merger: one sink's `changelog` and `scd2` modes
(docs/history.md) against `latest`, on the merger bench's snapshot and latency figures, in
one run on one stack. The sink: `--sink postgres` (the default) or `--sink delta`.

For each mode in turn (`--modes`, in order, `--repeat` rounds), `bench/merger_bench.py` runs
with `--pg-mode MODE --sinks postgres` (with `--sink delta`: `--delta-mode MODE --sinks
delta`): a fresh ingest + merger snapshot the bench's table (`--rows`, `--parallelism`),
then the latency run (a paced writer at `--rate` changes/s,
`--latency-seconds` idle, then a snapshot while the writes go on). Every figure is the merger
bench's own (see its docstring for the method); this script only lays them side by side, as
ratios to `latest` of the same run (medians over the rounds).

    .venv/bin/python bench/history_modes_bench.py [--sink postgres|delta] [--rows 1000000]
        [--repeat 1] [--record]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench import append_results, commit_label  # noqa: E402

MODES = ("latest", "changelog", "scd2")
SINKS = {"postgres": "PostgreSQL", "delta": "Delta"}  # --sink: the merger bench's sink name, and as printed


def run_mode(args, mode: str, out: Path) -> dict:
    import merger_bench

    argv = [
        "--pg-mode" if args.sink == "postgres" else "--delta-mode",
        mode,
        "--sinks",
        args.sink,
        "--rows",
        str(args.rows),
        "--parallelism",
        str(args.parallelism),
        "--snapshot-start",
        "cold",
        "--latency-parallelism",
        str(args.parallelism),
        "--rate",
        str(args.rate),
        "--latency-seconds",
        str(args.latency_seconds),
        "--state-dir",
        args.state_dir,
        "--json-file",
        str(out),
    ]
    code = merger_bench.main(argv)
    figures = json.loads(out.read_text())
    figures["exit"] = code
    return figures


def summary(fig: dict, sink: str) -> dict:
    """The figures compared, from one merger bench run into ``sink``."""
    snap = (fig.get("snapshots") or [{}])[0]
    lat = fig.get("latency") or {}
    idle = (lat.get("phases") or {}).get("idle", {}).get(sink) or {}
    during = (lat.get("phases") or {}).get("during snapshot", {}).get(sink) or {}
    return {
        "snapshot_rows_per_s": snap.get("rows_per_s"),
        "snapshot_s": snap.get("snapshot_s"),
        "sink_count": snap.get("sink_count"),
        "error": snap.get("error"),
        "idle_rate": idle.get("rate"),
        "idle_p50": idle.get("p50_s"),
        "idle_p99": idle.get("p99_s"),
        "idle_unseen": idle.get("unseen"),
        "during_p99": during.get("p99_s"),
        "during_snapshot_rows_per_s": (lat.get("snapshot") or {}).get("rows_per_s"),
        "exit": fig.get("exit"),
    }


def median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, spec: str) -> str:
    return "" if v is None else format(v, spec)


def table(args, results: dict[str, list[dict]]) -> list[str]:
    med = {m: {k: median([r[k] for r in runs]) for k in runs[0] if k not in ("error",)} for m, runs in results.items()}
    base = med.get("latest") or {}

    def ratio(m: str, k: str, inverse: bool = False) -> str:
        a, b = med[m].get(k), base.get(k)
        if not a or not b:
            return ""
        return f"{(b / a if inverse else a / b):.2f}x"

    L = [
        f"{args.rows:,}-row table, snapshot parallelism {args.parallelism}; latency: a paced writer at "
        f"{args.rate:g} changes/s, {args.latency_seconds:g} s idle, then a snapshot of the table while the "
        f"writes go on; {SINKS[args.sink]} sink only; medians of {args.repeat} round(s), modes run in turn.",
        "",
        f"| {SINKS[args.sink]} mode | snapshot rows/s | vs latest | idle p50 s | idle p99 s | p99 vs latest "
        "| p99 during snapshot s | snapshot rows/s under writes | vs latest | writes not seen |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in results:
        r = med[m]
        L.append(
            f"| {m} | {fmt(r['snapshot_rows_per_s'], ',.0f')} | {ratio(m, 'snapshot_rows_per_s')} "
            f"| {fmt(r['idle_p50'], '.3f')} | {fmt(r['idle_p99'], '.3f')} | {ratio(m, 'idle_p99')} "
            f"| {fmt(r['during_p99'], '.3f')} | {fmt(r['during_snapshot_rows_per_s'], ',.0f')} "
            f"| {ratio(m, 'during_snapshot_rows_per_s')} | {fmt(r['idle_unseen'], '.0f')} |"
        )
    L.append("")
    for m, runs in results.items():
        for i, r in enumerate(runs):
            extra = f"; error: {r['error']}" if r.get("error") else ""
            L.append(
                f"- {m}, round {i + 1}: snapshot {fmt(r['snapshot_s'], '.1f')} s ({r['sink_count']} rows in the "
                f"sink), idle p50/p99 {fmt(r['idle_p50'], '.3f')}/{fmt(r['idle_p99'], '.3f')} s at "
                f"{fmt(r['idle_rate'], ',.0f')} writes/s; bench exit {r['exit']}{extra}"
            )
    return L


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sink", choices=tuple(SINKS), default="postgres", help="the sink whose modes are compared")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--latency-seconds", type=float, default=60)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, in run order; latest is the base")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every mode")
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or "latest" not in modes:
        ap.error(f"--modes: {', '.join(MODES)}, latest among them (the base); not {bad}")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    started = time.strftime("%Y-%m-%d %H:%M")
    results: dict[str, list[dict]] = {m: [] for m in modes}
    code = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeat):
            for m in modes:
                fig = run_mode(args, m, Path(tmp) / f"{m}-{round_}.json")
                code |= fig["exit"]
                results[m].append(summary(fig, args.sink))
    lines = table(args, results)
    print("\n".join(lines), flush=True)
    if args.record:
        head = (
            f"### merger: history modes against latest ({SINKS[args.sink]}) — {started}, commit {commit_label()}, "
            f"load average at start {load} (`bench/history_modes_bench.py --sink {args.sink} --rows {args.rows} "
            f"--repeat {args.repeat}`)"
        )
        append_results([head, "", *lines])
    return code


if __name__ == "__main__":
    sys.exit(main())
