"""Hundreds of tables: the initial snapshot of N small tables, then the cost of the idle
ones while one table is busy (issue 23).

The local stack (real MariaDB, Tansu, PostgreSQL), N tables of --rows rows each: N-1 tables
``id INT PRIMARY KEY, v INT, s VARCHAR(30)`` and one busy table ``lat`` with the same columns
plus ``w BIGINT`` (the write number the latency probe looks for). One ingest
(``topic_partitions`` --partitions), started first and waited for until it has caught up with
the source, then one merger with the product's default snapshot and trigger settings into
both sinks (Delta and PostgreSQL). Each N gets its own database, topic prefix, merger state,
Delta directory and PostgreSQL schema (removed afterwards unless --keep). Measured per N:

* start: `cdc merge` start -> its status.json first shows a finished micro-batch (polled
  every 0.25 s);
* snapshot: `cdc merge` start -> status says every table is ``streaming`` with its snapshot
  finished; rows/s = N * rows / that time; windows expired (merger log);
* idle (--idle-seconds twice): CPU seconds per second of the merger's process tree (Python
  driver, Spark JVM, pyspark daemon and workers: /proc, as bench/merger_bench.py's
  TreeSampler), its micro-batches per second, and the tree's RSS at the end of the phase (and
  its peak over the whole run). Measured twice: just after the snapshot (5 s of settling),
  while the source's end probe still follows the partitions the snapshot's markers moved
  (``merger.kafka.end_check.FOLLOW_S``, 30 s), and settled, from FOLLOW_S + 5 s after the
  snapshot on: an idle merger as it is most of the time (the target's figure);
* busy (--busy-seconds after --warmup-seconds): single-row autocommit UPDATEs of ``lat`` at
  --busy-rate/s (gaps +-20 %, not phase-locked with the trigger) while the N-1 others stay
  idle; commit -> visible latency p50/p99 in PostgreSQL, Delta and on the table's Kafka
  topic, measured as bench/merger_bench.py does (commit time client-side; the PostgreSQL
  poller every 100 ms by an index on w, the Delta poller every 20 ms on the table's
  _delta_log, the Kafka probe read_committed) and the merger's CPU meanwhile.

Targets (issue 23): 500 tables of 1,000 rows all streaming within 120 s of `cdc merge`
starting (<= 0.25 s per table); the busy table's p99 at every N within 20 % of the N = 5
figure (the baseline, measured in the same run: put 5 first in --tables).

    .venv/bin/python bench/tables_bench.py [--tables 5,50,200,500] [--rows 1000] [--partitions 3]
        [--idle-seconds 30] [--busy-rate 10] [--busy-seconds 30] [--timeout 900] [--record] [--down]

The stack lives under .cdc/bench-stack (left running unless --down); work files go to
.cdc/bench-stack/tables-bench/<run> (kept with --keep; the source database and PostgreSQL
schema are always removed). --pyspy BIN profiles the largest N's merger after its busy phase.
--record appends the figures to bench/HISTORY.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402
import yaml  # noqa: E402

from bench import commit_label, publish  # noqa: E402
from bench.merger_bench import (  # noqa: E402
    QUIET_JITTER,
    DeltaPoller,
    KafkaPoller,
    PgPoller,
    TreeSampler,
    merger_part,
    pg_conn,
    phase_stats,
)
from cdc import stack as local_stack  # noqa: E402
from merger.kafka.end_check import FOLLOW_S  # noqa: E402
from merger.state.store import StateStore  # noqa: E402
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config  # noqa: E402
from tests.merger_harness import MergerProcess, write_merger_config  # noqa: E402
from tests.procfs import children, java_child, rss_kb  # noqa: E402

TARGET_500_S = 120.0  # 500 tables of 1,000 rows within 2 minutes (issue 23: "<= 0.25 s per small table")
TARGET_P99_RATIO = 1.2  # the busy table's p99 within 20 % of the 5-table figure
TARGET_IDLE_RATIO = 1.2  # the settled idle merger's CPU at the 5-table figure (within noise: 20 %)
BUSY = "lat"  # the pollers of bench/merger_bench.py look for this table name


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def table_name(i: int) -> str:
    return BUSY if i == 0 else f"t{i:04d}"


def root_conn(stack, db: str | None = None) -> pymysql.Connection:
    return pymysql.connect(
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def create_tables(stack: local_stack.StackInfo, db: str, n: int, rows: int) -> None:
    conn = root_conn(stack)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"USE {db}")
            for i in range(n):
                t = table_name(i)
                if t == BUSY:
                    cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(30), w BIGINT NOT NULL)")
                    cur.execute(f"INSERT INTO {t} SELECT seq, seq * 7, CONCAT('s', seq), 0 FROM seq_1_to_{rows}")
                else:
                    cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(30))")
                    cur.execute(f"INSERT INTO {t} SELECT seq, seq * 7, CONCAT('s', seq) FROM seq_1_to_{rows}")
    finally:
        conn.close()


def drop_everything(stack, db: str, n: int) -> None:
    """The run's source database, its PostgreSQL schema, tombstone tables and applied rows."""
    from psycopg import sql

    from merger.sinks.postgres.catalog import tomb_name

    try:
        conn = root_conn(stack)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.close()
    except Exception as exc:
        log(f"  could not drop database {db}: {exc}")
    try:
        with pg_conn(stack) as pg:
            pg.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(db)))
            if pg.execute("SELECT to_regclass('_cdc._cdc_applied')").fetchone()[0]:
                for i in range(n):
                    tomb = tomb_name(db, table_name(i))
                    pg.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("_cdc", tomb)))
                pg.execute("DELETE FROM _cdc._cdc_applied WHERE table_name LIKE %s", ('"' + db + '".%',))
    except Exception as exc:
        log(f"  could not clean PostgreSQL schema {db}: {exc}")


def default_merger_config(stack, path: Path, prefix: str, db: str, work: Path) -> Path:
    """The harness's merger config with the product's default snapshot and trigger settings."""
    write_merger_config(stack, path, prefix, [db], work)
    cfg = yaml.safe_load(path.read_text())
    cfg.pop("snapshot", None)
    cfg.pop("trigger_interval_ms", None)
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_status(store: StateStore) -> dict:
    try:
        return store.read_status() or {}
    except (OSError, ValueError):
        return {}


def count_streaming(status: dict) -> int:
    tables = status.get("tables") or {}
    return sum(1 for t in tables.values() if t.get("phase") == "streaming" and t.get("snapshot") == "finished")


def tree_rss_mb(root: int) -> float:
    """RSS of a process and all its descendants now, MB."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss_kb(pid)
        todo.extend(children(pid))
    return total / 1024


def merger_cpu_s(report: dict) -> float:
    return sum(v for k, v in report["by_label"].items() if k.startswith("merger: "))


class BusyWriter(threading.Thread):
    """Single-row autocommit UPDATEs of the busy table at --busy-rate (gaps +-20 %), each
    setting ``w`` to a global write number; commit time client-side when the statement
    returns. The attributes the pollers of bench/merger_bench.py read: next_w, ids,
    committed."""

    def __init__(self, stack, db: str, rows: int, rate: float):
        super().__init__(name="busy-writer", daemon=True)
        self.conn = root_conn(stack, db)
        self.rows = rows
        self.rate = rate
        self.stop_event = threading.Event()
        self.ids: dict[int, int] = {}
        self.committed: dict[int, float] = {}
        self.next_w = 1
        self.error: BaseException | None = None
        self._rng = random.Random(23)

    def run(self) -> None:
        due = time.monotonic()
        try:
            with self.conn.cursor() as cur:
                while not self.stop_event.is_set():
                    wait = due - time.monotonic()
                    if wait > 0:
                        self.stop_event.wait(min(0.01, wait))
                        continue
                    due += self._rng.uniform(1 - QUIET_JITTER, 1 + QUIET_JITTER) / self.rate
                    w = self.next_w
                    row_id = (w - 1) % self.rows + 1
                    self.ids[w] = row_id
                    cur.execute(f"UPDATE {BUSY} SET w = %s, v = v + 1 WHERE id = %s", (w, row_id))
                    self.committed[w] = time.time()
                    self.next_w = w + 1
        except BaseException as exc:  # reported by the caller
            self.error = exc
        finally:
            self.conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


def wait_for(predicate, timeout_s: float, what: str, alive, interval: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive()
        got = predicate()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def run_one(stack, base: Path, n: int, args) -> dict:
    from cdc.wire.topics import table_topic
    from merger.sinks.delta import DeltaSink

    rows = args.rows
    run = f"tb{n}_{uuid.uuid4().hex[:6]}"
    work = base / run
    work.mkdir(parents=True)
    db = f"bench_{run}"
    result: dict = {"tables": n, "rows": rows, "work": work, "seconds": None, "streaming": 0}
    log(f"{n} tables of {rows} rows: creating")
    create_tables(stack, db, n, rows)
    icfg = write_config(stack, work / "ingest.yaml", run, [db, "cdc"], topic_partitions=args.partitions)
    mcfg = default_merger_config(stack, work / "merger.yaml", run, db, work)
    ingest = IngestProcess(icfg, work / "ingest.log").start()
    merger = sampler = writer = None
    pollers: list = []
    try:
        wait_caught_up(stack, run, timeout_s=180, proc=ingest)
        merger = MergerProcess(mcfg, work / "merger.log").start()
        started = time.monotonic()
        sampler = TreeSampler(merger.proc.pid)
        sampler.start()
        store = StateStore(work / "state")

        def alive() -> None:
            for p in (ingest, merger):
                if not p.alive():
                    raise RuntimeError(f"{p.config_path.stem} exited:\n{p.log_text()[-3000:]}")
            if writer is not None and writer.error is not None:
                raise RuntimeError(f"writer failed: {writer.error!r}")

        last = -1
        while time.monotonic() - started < args.timeout:
            alive()
            status = read_status(store)
            if result.get("start_s") is None and status.get("last_batch") is not None:
                result["start_s"] = time.monotonic() - started
                log(f"  first micro-batch after {result['start_s']:.1f}s")
            count = count_streaming(status)
            if count != last:
                log(f"  {count}/{n} streaming after {time.monotonic() - started:.0f}s")
                last = count
            result["streaming"] = count
            if count >= n:
                result["seconds"] = time.monotonic() - started
                break
            time.sleep(0.25)
        result["expired"] = merger.log_text().count("expired")
        if result["seconds"] is None:
            return result
        result["rows_per_s"] = n * rows / result["seconds"]

        time.sleep(5.0)  # settle: the last windows' clean-up, a status write
        streamed_at = time.monotonic()
        log(f"  idle phase just after the snapshot {args.idle_seconds:.0f}s")
        sampler.mark()
        wait_alive(alive, time.monotonic() + args.idle_seconds)
        cpu = sampler.cpu_report()
        result["idle_cpu_early"] = merger_cpu_s(cpu) / cpu["wall_s"] if cpu["wall_s"] else None
        wait_alive(alive, streamed_at + FOLLOW_S + 5.0)
        log(f"  idle phase settled {args.idle_seconds:.0f}s (early: merger {fmt(result['idle_cpu_early'])} CPU s/s)")
        result["load_idle"] = os.getloadavg()[0]
        b0 = read_status(store).get("last_batch") or 0
        sampler.mark()
        wait_alive(alive, time.monotonic() + args.idle_seconds)
        cpu = sampler.cpu_report()
        b1 = read_status(store).get("last_batch") or 0
        result["idle_cpu"] = merger_cpu_s(cpu) / cpu["wall_s"] if cpu["wall_s"] else None
        result["idle_machine"] = cpu["machine_busy_s"] / cpu["wall_s"] if cpu["wall_s"] else None
        result["idle_batches_s"] = (b1 - b0) / args.idle_seconds
        result["idle_by_label"] = {
            k: round(v / cpu["wall_s"], 4) for k, v in cpu["by_label"].items() if cpu["wall_s"] and v > 0
        }
        result["rss_mb"] = tree_rss_mb(merger.proc.pid)
        log(
            f"  idle: merger {result['idle_cpu']:.3f} CPU s/s, {result['idle_batches_s']:.2f} batches/s, "
            f"RSS {result['rss_mb']:.0f} MB (load {result['load_idle']:.1f}); CPU s/s by process: "
            + ", ".join(f"{k} {v:.3f}" for k, v in result["idle_by_label"].items())
        )

        secs = f"{args.warmup_seconds:.0f}s + {args.busy_seconds:.0f}s"
        log(f"  busy phase: {args.busy_rate:g} UPDATEs/s of {BUSY}, {secs}")
        writer = BusyWriter(stack, db, rows, args.busy_rate)
        pg = PgPoller(stack, db, writer, 0.1)
        delta = DeltaPoller(work / "delta", writer, 0.02)
        delta.path = Path(DeltaSink(str(work / "delta")).table_path((db, BUSY)))
        delta.log = delta.path / "_delta_log"
        kafka = KafkaPoller(stack.kafka.bootstrap, table_topic(run, db, BUSY), writer)
        pollers = [pg, delta, kafka]
        for p in pollers:
            p.start()
        writer.start()
        wait_for(lambda: all(p.seen for p in pollers), 120, "the first write to reach every sink", alive)
        time.sleep(args.warmup_seconds)
        t0 = time.time()
        sampler.mark()
        end = time.monotonic() + args.busy_seconds
        while time.monotonic() < end:
            alive()
            time.sleep(0.5)
        t1 = time.time()
        cpu = sampler.cpu_report()
        result["busy_cpu"] = merger_cpu_s(cpu) / cpu["wall_s"] if cpu["wall_s"] else None
        result["load_busy"] = os.getloadavg()[0]
        if args.jfr and n == max(args.ns):  # Java Flight Recorder of the Spark JVM, beside py-spy
            jvm = java_child(merger.proc.pid)
            jfr_out = Path(args.pyspy_out) / f"jfr-{n}.jfr"
            if jvm is not None:
                log(f"  JFR of the merger's JVM, 20 s, busy: {jfr_out}")
                subprocess.run(
                    ["jcmd", str(jvm), "JFR.start", "duration=20s", "settings=profile", f"filename={jfr_out}"],
                    capture_output=True,
                    timeout=60,
                )
        if (args.pyspy or args.jfr) and n == max(args.ns):  # after the measurement: the writer goes on
            time.sleep(0 if args.pyspy else 22)
        if args.pyspy and n == max(args.ns):  # after the measurement: the writer goes on, off the clock
            out = Path(args.pyspy_out) / f"pyspy-{n}.txt"
            log(f"  py-spy of the merger's Python processes, 20 s, busy: {out}")
            subprocess.run(
                [args.pyspy, "record", "-p", str(merger.proc.pid), "--subprocesses", "--nonblocking", "-d", "20"]
                + ["-r", "50", "-f", "raw", "-o", str(out)],
                capture_output=True,
                timeout=120,
            )
            if args.jfr:
                time.sleep(2)  # the recording is written when its 20 s end
        writer.stop()
        top = writer.next_w
        try:
            wait_for(lambda: all(p.caught_up(top) for p in pollers), 60, "every write to reach the sinks", alive)
        except TimeoutError as exc:
            log(f"  {exc} (counted as unseen)")
        result["lat"] = {p.sink: phase_stats(writer, p, t0, t1) for p in pollers}
        for p in (pg, delta):
            result["lat"][f"{p.sink} - kafka"] = merger_part(writer, kafka, p, t0, t1)
        result["peak_rss_mb"] = sampler.report()["peak_total_mb"]
        result["poll_errors"] = {p.sink: p.last_error for p in pollers if p.errors}
        lat = result["lat"]
        log(
            "  busy: "
            + ", ".join(f"{k} p50 {fmt(v['p50_s'])} p99 {fmt(v['p99_s'])} ({v['measured']})" for k, v in lat.items())
            + f"; merger {result['busy_cpu']:.3f} CPU s/s"
        )
    finally:
        if writer is not None:
            writer.stop()
        for p in pollers:
            p.stop()
        if merger is not None:
            merger.stop()
        if sampler is not None:
            sampler.stop()
            sampler.kill_leftovers()
        ingest.stop()
        drop_everything(stack, db, n)
    log(f"  -> {json.dumps({k: v for k, v in result.items() if k not in ('work', 'lat')}, default=str)}")
    return result


def wait_alive(alive, until: float) -> None:
    while time.monotonic() < until:
        alive()
        time.sleep(0.5)


def fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def report(args, label: str, results: list[dict]) -> list[str]:
    lines = [
        f"### hundreds of tables, one busy ({time.strftime('%Y-%m-%d %H:%M')}, commit {label})",
        "",
        f"{args.rows} rows per table, topic_partitions {args.partitions}, default settings, both sinks in one "
        f"merger; `bench/tables_bench.py --tables {args.tables} --rows {args.rows}`. start = `cdc merge` start -> "
        "first micro-batch; streaming = -> every table streaming; idle = merger tree CPU s per s over "
        f"{args.idle_seconds:.0f} s with nothing changing, settled (from 35 s after the snapshot on; in brackets: "
        "the first 30 s after it, while the end probe still follows the partitions the snapshot moved); "
        f"busy = {args.busy_rate:g} single-row UPDATEs/s of one "
        f"table for {args.busy_seconds:.0f} s, the other N-1 idle, commit -> visible p50 / p99 (s). "
        "Load = 1-min load average at the idle phase / at the busy phase's end.",
        "",
        "| tables | start | streaming | per table | rows/s | expired | idle CPU s/s | batches/s idle "
        "| RSS idle / peak MB | PostgreSQL p50 / p99 | Delta p50 / p99 | Kafka p50 / p99 | busy CPU s/s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["seconds"] is None:
            lines.append(f"| {r['tables']} | {fmt(r.get('start_s'), 1)} s | not done ({r['streaming']} streaming) |")
            continue
        lat = r.get("lat") or {}

        def pp(sink: str) -> str:
            s = lat.get(sink)
            return "-" if not s else f"{fmt(s['p50_s'])} / {fmt(s['p99_s'])}"

        lines.append(
            f"| {r['tables']} | {fmt(r.get('start_s'), 1)} s | {r['seconds']:.1f} s "
            f"| {r['seconds'] / r['tables']:.2f} s | {r['rows_per_s']:,.0f} | {r['expired']} "
            f"| {fmt(r.get('idle_cpu'))} ({fmt(r.get('idle_cpu_early'))}) | {fmt(r.get('idle_batches_s'), 2)} "
            f"| {fmt(r.get('rss_mb'), 0)} / {fmt(r.get('peak_rss_mb'), 0)} | {pp('postgres')} | {pp('delta')} "
            f"| {pp('kafka')} | {fmt(r.get('busy_cpu'))} "
            f"| {fmt(r.get('load_idle'), 1)} / {fmt(r.get('load_busy'), 1)} |"
        )
    lines += ["", *targets(results)]
    return lines


def targets(results: list[dict]) -> list[str]:
    out = []
    done = [r for r in results if r["seconds"] is not None]
    big = max(results, key=lambda r: r["tables"]) if results else None
    if big is not None:
        limit = TARGET_500_S * big["tables"] / 500
        scale = "" if big["tables"] == 500 else " (the 500-table target's 0.24 s a table)"
        if big["seconds"] is None:
            out.append(f"- {big['tables']} tables streaming within {limit:.0f} s{scale}: NO (not all streaming)")
        else:
            ok = big["seconds"] <= limit
            out.append(
                f"- {big['tables']} tables streaming within {limit:.0f} s{scale}: {'yes' if ok else 'NO'} "
                f"({big['seconds']:.1f} s, {big['seconds'] / big['tables']:.2f} s a table"
                + ("" if ok else f", {big['seconds'] / limit - 1:+.0%}")
                + ")"
            )
    base = next((r for r in done if r["tables"] == 5 and r.get("lat")), None)
    if base is None:
        out.append("- busy p99 vs 5 tables: no 5-table baseline in this run")
        return out
    for r in done:
        if r is base or not r.get("lat"):
            continue
        for sink in ("postgres", "delta"):
            b, x = base["lat"][sink]["p99_s"], r["lat"][sink]["p99_s"]
            if b is None or x is None:
                continue
            ratio = x / b
            ok = ratio <= TARGET_P99_RATIO
            part = f"{sink} - kafka"
            bm, xm = base["lat"][part]["p99_s"], r["lat"][part]["p99_s"]
            merger = f"; the merger's part (topic -> sink) {xm:.3f} / {bm:.3f} s" if bm and xm else ""
            out.append(
                f"- busy p99 {sink} at {r['tables']} tables vs 5: {x:.3f} / {b:.3f} s = {ratio:.2f}x "
                f"({'within' if ok else 'NOT within'} 20 %{merger})"
            )
        b, x = base.get("idle_cpu"), r.get("idle_cpu")
        if b and x:
            ok = x / b <= TARGET_IDLE_RATIO
            out.append(
                f"- idle merger CPU at {r['tables']} tables vs 5: {x:.3f} / {b:.3f} CPU s/s = {x / b:.2f}x "
                f"({'within' if ok else 'NOT within'} 20 %; just after the snapshot "
                f"{fmt(r.get('idle_cpu_early'))} / {fmt(base.get('idle_cpu_early'))})"
            )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", default="5,50,200,500")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for every table to stream")
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--busy-rate", type=float, default=10, help="UPDATEs per second of the busy table")
    ap.add_argument("--busy-seconds", type=float, default=30)
    ap.add_argument("--warmup-seconds", type=float, default=5)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work files (logs, state)")
    ap.add_argument("--pyspy", help="py-spy binary: profile the largest N's merger for 20 s after its busy phase")
    ap.add_argument("--pyspy-out", default="/tmp", help="where the py-spy raw profile (and the JFR recording) goes")
    ap.add_argument("--jfr", action="store_true", help="record the largest N's Spark JVM for 20 s (jcmd JFR.start)")
    ap.add_argument("--down", action="store_true")
    args = ap.parse_args(argv)
    label = commit_label()  # the code the processes start with
    state = Path(args.state_dir)
    stack = local_stack.up(state)
    base = state / "tables-bench"
    results = []
    try:
        args.ns = [int(x) for x in args.tables.split(",")]
        for n in args.ns:
            try:
                results.append(run_one(stack, base, n, args))
            except Exception as exc:  # the other Ns still run; the failure is printed
                log(f"{n} tables failed: {exc}")
                results.append({"tables": n, "seconds": None, "streaming": "failed", "work": None})
            if not args.keep and results[-1]["work"] is not None:
                shutil.rmtree(results[-1]["work"], ignore_errors=True)
    finally:
        if args.down:
            local_stack.down(state)
    publish(report(args, label, results), args.record)


if __name__ == "__main__":
    main()
