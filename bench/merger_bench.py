"""Merger benchmark: snapshot throughput, commit -> sink latency, and memory of the
merger's process tree, with the real processes (ingest, `cdc merge`) on a local stack.

1. Snapshot rows/s: a table of --rows rows (id INT PK, a INT, b VARCHAR(40),
   c DECIMAL(10,2), d DATETIME(3), e BIGINT) is snapshotted by a fresh merger (fresh
   state dir, fresh sink: its own Delta path / its own PostgreSQL schema) into each sink
   alone, at each --parallelism P (snapshot.parallelism = P, chunks_per_window = max(4, P),
   chunk_size --chunk-size). Time = the snapshot plan's created_at -> finished_at, and
   wall time from the merger's start -> finished_at. Each run gets its own ingest (new
   topic prefix, started at the current binlog position): the table's topic carries only
   watermark markers, so the merger does nothing but the snapshot. Beside it: one
   pymysql connection streaming `SELECT *` of the same table (SSCursor).
2. Commit -> visible latency at a steady --rate changes/s: a paced writer thread does
   single-row autocommit UPDATEs (of pre-loaded rows, in turn) and INSERTs (new ids),
   alternately, into a small table; every write sets `w` to a global write number and
   its commit time is taken client-side when the autocommit statement returns. Pollers
   query the sinks for rows with `w >= the oldest write not seen yet` (PostgreSQL every
   --pg-poll-ms through an index on w created on the sink table; Delta every
   --delta-poll-ms through delta-rs); latency = time the poll that first returned the
   write completed - commit time (an upper bound; resolution = the poll interval). A
   write overwritten (same id) before it was seen is not counted. Phases: idle (only the
   steady writes, --latency-seconds after a warm-up) and while a snapshot of the
   --rows-row table runs (requested through the merger's control directory, measured
   until the plan's finished_at). Between the two, unless --quiet-writes 0: the quiet phase,
   isolated changes on a quiet source (the writer pauses until the sinks have caught up,
   then does --quiet-writes single-row UPDATEs, one every --quiet-interval-s +-20 %).
3. Peak RSS: VmRSS of every process of the merger's tree (the Python driver, the JVM,
   the pyspark daemon and its forked workers) sampled every 0.5 s; peaks per kind.

--pg-mode / --delta-mode changelog|scd2 make the bench's tables history tables in that sink
(docs/history.md). Every write is then a row of its own (a change, a version), none is
overwritten: the pollers' `w >= oldest unseen` finds each write's row (a change log's, or
its SCD2 version, current or already closed by a later write), in both sinks the same way.
A snapshot's row count is the change log's rows (one `r` row per source row, the snapshotted
table gets no change) or the SCD2 table's current versions (`__end_seq IS NULL`).

Targets printed beside: snapshot into PostgreSQL >= 150,000 rows/s at parallelism 2;
p99 commit -> sink <= 3 s, also while a snapshot runs; quiet phase: p50 <= 0.7 s and
p99 <= 1.0 s.

    .venv/bin/python bench/merger_bench.py [--rows 1000000] [--parallelism 1,2,4]
        [--sinks delta,postgres] [--skip-latency] [--skip-snapshots]
        [--pg-mode latest|changelog|scd2] [--delta-mode latest|changelog|scd2]
        [--latency-seconds 60] [--rate 1000] [--record] [--down]

The stack is started under .cdc/bench-stack (left running unless --down). Work files go
to .cdc/bench-stack/merger-bench/<run> (removed unless --keep). --record appends the
figures as a dated markdown table to bench/HISTORY.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402
import pymysql.cursors  # noqa: E402

from bench import append_results, commit_label  # noqa: E402
from cdc import stack as local_stack  # noqa: E402
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config  # noqa: E402
from tests.merger_harness import MergerProcess, write_merger_config  # noqa: E402
from tests.procfs import rss_kb as _rss_kb  # noqa: E402
from tests.support import readback  # noqa: E402

DB = "bench_merger"
BIG = "big"
LAT = "lat"
WARM = "warm"
LAT_PRELOAD = 20_000  # rows the UPDATEs cycle through (each revisited every 40 s at 1000/s)
LAT_INSERT_BASE = 10_000_000  # ids of the INSERTed rows start here

TARGET_PG_ROWS_S = 150_000
TARGET_P99_S = 3.0
TARGET_QUIET_P50_S = 0.7  # isolated changes on a quiet source
TARGET_QUIET_P99_S = 1.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def root_conn(info, db: str | None = None, **kw) -> pymysql.Connection:
    return pymysql.connect(
        host=info.mariadb.host,
        port=info.mariadb.port,
        user="root",
        password=info.mariadb.root_password,
        database=db,
        autocommit=True,
        connect_timeout=10,
        **kw,
    )


def pg_conn(info):
    import psycopg

    p = info.postgres
    return psycopg.connect(
        host=p.host,
        port=p.port,
        user=p.user,
        password=p.password,
        dbname=p.database,
        autocommit=True,
        connect_timeout=10,
        application_name="merger-bench",
    )


def wait_for(predicate, timeout_s: float, what: str, interval: float = 0.5, alive=None):
    """predicate() until truthy (returned), else TimeoutError; alive() may raise early."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval)


# ----------------------------------------------------------------------------- source tables


def ensure_big_table(
    info, rows: int, db: str = DB, table: str = BIG, step: int = 200_000, binlog: bool = True
) -> float | None:
    """The snapshot table ``db.table`` with exactly ``rows`` rows (kept between runs),
    loaded ``step`` rows per INSERT ... SELECT (``binlog`` False: not written to the
    binlog, for a table created before the run's ingest starts). Returns the load time,
    or None if the table was already there."""
    name = f"{db}.{table}"
    conn = root_conn(info)
    try:
        with conn.cursor() as cur:
            if not binlog:
                cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema=%s AND table_name=%s", (db, table)
            )
            if cur.fetchone()[0]:
                cur.execute(f"SELECT COUNT(*), COALESCE(MAX(id), 0) FROM {name}")
                n, top = cur.fetchone()
                if n == rows and top == rows:
                    return None
            t0 = time.monotonic()
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            cur.execute(
                f"CREATE TABLE {name} (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(10,2), "
                "d DATETIME(3), e BIGINT) ENGINE=InnoDB"
            )
            for lo in range(1, rows + 1, step):
                hi = min(lo + step - 1, rows)
                # the sequence engine needs the database prefix
                cur.execute(
                    f"INSERT INTO {name} SELECT seq, seq % 1000, "
                    f"CONCAT('row-', seq, '-', LEFT(MD5(seq), 24)), (seq % 100000) / 100, "
                    f"TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL (seq % 1000) * 1000 "
                    f"MICROSECOND, seq * 1000003 FROM {db}.seq_{lo}_to_{hi}"
                )
            cur.execute(f"ANALYZE TABLE {name}")
            return time.monotonic() - t0
    finally:
        conn.close()


def reset_lat_table(info) -> None:
    conn = root_conn(info)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
            cur.execute(f"DROP TABLE IF EXISTS {DB}.{LAT}")
            cur.execute(
                f"CREATE TABLE {DB}.{LAT} (id INT PRIMARY KEY, w BIGINT NOT NULL, v INT NOT NULL, "
                "ts DATETIME(6) NOT NULL, pad VARCHAR(40)) ENGINE=InnoDB"
            )
            cur.execute(
                f"INSERT INTO {DB}.{LAT} SELECT seq, 0, 0, NOW(6), 'preloaded' FROM {DB}.seq_1_to_{LAT_PRELOAD}"
            )
    finally:
        conn.close()


def pymysql_scan(info, table: str) -> dict:
    """One connection, SELECT * streamed with SSCursor: rows/s a plain client reads."""
    conn = root_conn(info, cursorclass=pymysql.cursors.SSCursor, read_timeout=900)
    try:
        with conn.cursor() as cur:
            t0 = time.perf_counter()
            cur.execute(f"SELECT * FROM {table}")
            n = 0
            while True:
                rows = cur.fetchmany(10_000)
                if not rows:
                    break
                n += len(rows)
            took = time.perf_counter() - t0
    finally:
        conn.close()
    return {"rows": n, "seconds": took, "rows_per_s": n / took if took else 0.0}


# ----------------------------------------------------------------------------- process tree RSS


def process_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, starttime) of a process, None if gone."""
    full = _stat_full(pid)
    return None if full is None else full[:2]


def _stat_full(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, starttime, utime + stime in clock ticks, comm) of a process, None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[19]), int(rest[11]) + int(rest[12]), comm


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot (/proc/stat)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return (sum(f) - idle) / CLK_TCK, sum(f) / CLK_TCK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class TreeSampler(threading.Thread):
    """Samples VmRSS of a process and all its descendants every ``interval`` s."""

    def __init__(self, root_pid: int, interval: float = 0.5):
        super().__init__(name="rss-sampler", daemon=True)
        self.root = root_pid
        self.interval = interval
        self.stop_event = threading.Event()
        self.seen: dict[int, tuple[int, str]] = {}  # pid -> (starttime, kind)
        self.peak_proc: dict[str, int] = {}  # kind -> largest single process
        self.peak_sum: dict[str, int] = {}  # kind -> largest sum of one sample
        self.max_count: dict[str, int] = {}
        self.peak_total = 0
        self.samples = 0
        self.last_sums: dict[str, int] = {}  # kind -> RSS KB summed, at the latest sample
        # CPU seconds per process (pid, starttime): first and last value seen, and a label
        # (the merger tree's kinds; other processes of the machine by command name)
        self.cpu_first: dict[tuple[int, int], int] = {}
        self.cpu_last: dict[tuple[int, int], int] = {}
        self.cpu_label: dict[tuple[int, int], str] = {}
        self.machine_first: tuple[float, float] | None = None
        self.machine_last: tuple[float, float] | None = None

    def _kind(self, pid: int, ppid: int, kinds: dict[int, str]) -> str:
        if pid == self.root:
            return "driver (python)"
        cmd = _cmdline(pid)
        exe = cmd.split(" ", 1)[0]
        if not cmd:
            return "exited"  # a zombie or a process gone between the reads
        if os.path.basename(exe) == "java" or "org.apache.spark" in cmd:
            return "JVM (spark)"
        if "pyspark.daemon" in cmd or "merger.spark.daemon" in cmd:
            if kinds.get(ppid, "").startswith("pyspark daemon") or kinds.get(ppid, "").startswith("pyspark worker"):
                return "pyspark worker"
            return "pyspark daemon"
        m = re.search(r"-m (pyspark\S*)", cmd)
        if m:
            return f"pyspark worker ({m.group(1)})"
        if "python" in os.path.basename(exe):
            return "python (other)"
        return f"other ({os.path.basename(exe) or '?'})"

    def sample(self) -> None:
        parents: dict[int, int] = {}
        starts: dict[int, int] = {}
        cpu: dict[int, tuple[int, str]] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                st = _stat_full(int(entry.name))
                if st:
                    parents[int(entry.name)], starts[int(entry.name)] = st[:2]
                    cpu[int(entry.name)] = st[2], st[3]
        if self.root not in parents:
            return
        busy = _machine_busy()
        self.machine_first = self.machine_first or busy
        self.machine_last = busy
        first = self.samples == 0
        for pid, (ticks, comm) in cpu.items():
            k = (pid, starts[pid])
            if k not in self.cpu_first:
                # a process there at the first sample counts from then; a later one from 0
                self.cpu_first[k] = ticks if first else 0
                self.cpu_label[k] = "machine: " + comm
            self.cpu_last[k] = ticks
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        kinds: dict[int, str] = {}
        sums: dict[str, int] = {}
        counts: dict[str, int] = {}
        total = 0
        for pid in tree:  # parents before children (depth-first from the root)
            known = self.seen.get(pid)
            if known and known[0] == starts[pid]:
                kind = known[1]
            else:
                kind = self._kind(pid, parents[pid], kinds)
            # a forked worker keeps the daemon's command line: decide by the parent
            if kind == "pyspark daemon" and kinds.get(parents[pid], "").startswith("pyspark"):
                kind = "pyspark worker"
            kinds[pid] = kind
            if kind == "exited":
                continue
            self.seen[pid] = (starts[pid], kind)
            self.cpu_label[(pid, starts[pid])] = "merger: " + kind
            rss = _rss_kb(pid)
            total += rss
            sums[kind] = sums.get(kind, 0) + rss
            counts[kind] = counts.get(kind, 0) + 1
            self.peak_proc[kind] = max(self.peak_proc.get(kind, 0), rss)
        for kind, s in sums.items():
            self.peak_sum[kind] = max(self.peak_sum.get(kind, 0), s)
            self.max_count[kind] = max(self.max_count.get(kind, 0), counts[kind])
        self.peak_total = max(self.peak_total, total)
        self.last_sums = sums
        self.samples += 1

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.sample()
            except Exception:  # a process vanished mid-read: next sample
                pass
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)

    def leftovers(self) -> list[int]:
        """Processes of the tree that are still alive (same pid and start time)."""
        out = []
        for pid, (start, _) in self.seen.items():
            st = process_stat(pid)
            if st and st[1] == start:
                out.append(pid)
        return out

    def kill_leftovers(self) -> None:
        """After the driver stopped: end what is left of its tree (by pid)."""
        pids = self.leftovers()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def mark(self) -> None:
        """CPU figures count from now on (e.g. from the snapshot's start, not the merger's)."""
        self.sample()
        self.cpu_first = dict(self.cpu_last)
        self.machine_first = self.machine_last

    def cpu_report(self) -> dict:
        """CPU seconds used between the first and the last sample, per label."""
        out: dict[str, float] = {}
        for k, last in self.cpu_last.items():
            used = (last - self.cpu_first.get(k, 0)) / CLK_TCK
            if used > 0:
                out[self.cpu_label[k]] = out.get(self.cpu_label[k], 0.0) + used
        wall = busy = 0.0
        if self.machine_first and self.machine_last:
            busy = self.machine_last[0] - self.machine_first[0]
            wall = (self.machine_last[1] - self.machine_first[1]) / (os.cpu_count() or 1)
        return {"by_label": dict(sorted(out.items(), key=lambda kv: -kv[1])), "machine_busy_s": busy, "wall_s": wall}

    def report(self) -> dict:
        return {
            "peak_total_mb": self.peak_total / 1024,
            "samples": self.samples,
            "cpu": self.cpu_report(),
            "kinds": {
                k: {
                    "peak_proc_mb": self.peak_proc[k] / 1024,
                    "peak_sum_mb": self.peak_sum.get(k, 0) / 1024,
                    "max_count": self.max_count.get(k, 0),
                }
                for k in sorted(self.peak_proc)
            },
        }


def merge_rss(reports: list[dict]) -> dict:
    out = {"peak_total_mb": 0.0, "kinds": {}}
    for r in reports:
        out["peak_total_mb"] = max(out["peak_total_mb"], r["peak_total_mb"])
        for k, v in r["kinds"].items():
            cur = out["kinds"].setdefault(k, {"peak_proc_mb": 0.0, "peak_sum_mb": 0.0, "max_count": 0})
            for f in cur:
                cur[f] = max(cur[f], v[f])
    return out


# ----------------------------------------------------------------------------- one merger run


class Run:
    """An ingest + merger pair with a fresh topic prefix, state dir and sink."""

    def __init__(
        self,
        info,
        work: Path,
        name: str,
        sinks: list[str],
        table_include: list[str],
        snapshot: dict,
        trigger_ms: int,
        spark_conf: dict,
    ):
        self.info = info
        self.name = name
        self.dir = work / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prefix = "mb" + uuid.uuid4().hex[:8]
        self.pg_schema = f"bench_{self.prefix}"
        self.sinks = sinks
        self.table_include = table_include
        self.snapshot = snapshot
        self.trigger_ms = trigger_ms
        self.spark_conf = spark_conf
        self.ingest: IngestProcess | None = None
        self.merger: MergerProcess | None = None
        self.sampler: TreeSampler | None = None
        self.started_at: float | None = None

    @property
    def state(self) -> Path:
        return self.dir / "state"

    @property
    def delta_base(self) -> Path:
        return self.dir / "delta"

    def plan_path(self, table: str) -> Path:
        from merger.state.store import safe_name

        return self.state / "snapshots" / f"{safe_name(f'{DB}.{table}')}.json"

    def plan(self, table: str) -> dict | None:
        try:
            return json.loads(self.plan_path(table).read_text())
        except (OSError, ValueError):
            return None

    def status(self) -> dict | None:
        try:
            return json.loads((self.state / "status.json").read_text())
        except (OSError, ValueError):
            return None

    def check_alive(self) -> None:
        if self.ingest is not None and not self.ingest.alive():
            raise RuntimeError(f"ingest exited:\n{self.ingest.log_text()[-3000:]}")
        if self.merger is not None and not self.merger.alive():
            raise RuntimeError(f"merger exited:\n{self.merger.log_text()[-4000:]}")

    def start(self, ingest_timeout_s: float = 180) -> None:
        info = self.info
        icfg = write_config(info, self.dir / "ingest.yaml", self.prefix, [DB, "cdc"], topic_partitions=3)
        self.ingest = IngestProcess(icfg, self.dir / "ingest.log").start()
        # the merger's first LOW watermark must come after ingest's start position
        wait_caught_up(info, self.prefix, timeout_s=ingest_timeout_s, proc=self.ingest)
        sinks: dict = {}
        if "delta" in self.sinks:
            sinks["delta"] = {"path": str(self.delta_base)}
            if DELTA_MODE != "latest":  # a history table (docs/history.md, "In Delta") for each
                sinks["delta"]["tables"] = {f"{DB}.{t}": {"mode": DELTA_MODE} for t in (BIG, LAT, WARM)}
        if "postgres" in self.sinks:
            sinks["postgres"] = {
                "host": info.postgres.host,
                "port": info.postgres.port,
                "user": info.postgres.user,
                "dbname": info.postgres.database,
                "schema": self.pg_schema,
                "password_file": str(local_stack.secret_file(info, "postgres_password")),
            }
            if PG_MODE != "latest":  # a history table (docs/history.md) for each of the bench's tables
                sinks["postgres"]["tables"] = {f"{DB}.{t}": {"mode": PG_MODE} for t in (BIG, LAT, WARM)}
        mcfg = write_merger_config(
            info,
            self.dir / "merger.yaml",
            self.prefix,
            [DB],
            self.dir,
            table_include=self.table_include,
            sinks=sinks,
            snapshot=self.snapshot,
            trigger_interval_ms=self.trigger_ms,
            spark_conf=self.spark_conf,
            **MERGER_SETTINGS,
        )
        self.started_at = time.time()
        self.merger = MergerProcess(mcfg, self.dir / "merger.log").start()
        self.sampler = TreeSampler(self.merger.proc.pid)
        self.sampler.start()

    def stop(self) -> None:
        for step in (self._stop_merger, self._stop_ingest):
            try:
                step()
            except Exception as exc:  # keep stopping the rest
                log(f"{self.name}: while stopping: {exc}")

    def _stop_merger(self) -> None:
        if self.merger is not None:
            self.merger.stop()
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler.kill_leftovers()

    def _stop_ingest(self) -> None:
        if self.ingest is not None:
            self.ingest.stop()

    def sink_count(self, sink: str, table: str) -> int | None:
        """The table's rows in the sink, compared with the source's: the latest state's
        rows; a change log's rows (one per change: the bench's snapshotted table gets one
        `r` row per source row and no change); an SCD type 2 table's current versions
        (`__end_seq IS NULL`: one per source row)."""
        try:
            if sink == "postgres":
                from psycopg import sql

                where = sql.SQL(" WHERE __end_seq IS NULL" if PG_MODE == "scd2" else "")
                with pg_conn(self.info) as conn:
                    return conn.execute(
                        sql.SQL("SELECT count(*) FROM {}{}").format(sql.Identifier(self.pg_schema, table), where)
                    ).fetchone()[0]
            from merger.sinks.delta import DeltaSink

            if DELTA_MODE == "latest":
                return readback.count(DeltaSink(str(self.delta_base)), (DB, table))
            return delta_history_count(DeltaSink(str(self.delta_base)).table_path((DB, table)), DELTA_MODE)
        except Exception:
            return None

    def cleanup(self, keep: bool) -> None:
        if "postgres" in self.sinks:
            try:
                drop_pg_schema(self.info, self.pg_schema)
            except Exception as exc:
                log(f"{self.name}: could not drop PostgreSQL schema {self.pg_schema}: {exc}")
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def window_stats(self) -> dict:
        """From the merger log: time spent reading windows (LOW..HIGH, runner thread)."""
        text = self.merger.log_text() if self.merger else ""
        reads = [float(x) for x in re.findall(r"rows staged in ([0-9.]+)s", text)]
        emitted = len(re.findall(r"emitted: \d+ rows", text))
        expired = len(re.findall(r"expired; its chunks will be read again", text))
        return {
            "windows": len(reads),
            "read_s_sum": sum(reads),
            "read_s_max": max(reads, default=0.0),
            "emitted": emitted,
            "expired": expired,
        }


def delta_history_count(path: str, mode: str) -> int:
    """A Delta history table's rows, read with deltalake: a change log's rows, an SCD type
    2 table's current versions."""
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    if mode == "changelog":
        return dt.count()
    ends = dt.to_pyarrow_table(columns=["__end_seq"]).column("__end_seq")
    return ends.null_count


def drop_pg_schema(info, schema: str) -> None:
    from psycopg import sql

    from merger.sinks.postgres.catalog import tomb_name

    with pg_conn(info) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        exists = conn.execute("SELECT to_regclass('_cdc._cdc_applied')").fetchone()[0]
        if exists:
            for table in (BIG, LAT, WARM):
                conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("_cdc", tomb_name(schema, table)))
                )
            conn.execute(
                "DELETE FROM _cdc._cdc_applied WHERE table_name LIKE %s", ('"' + schema.replace('"', '""') + '".%',)
            )


MERGER_SETTINGS: dict = {}  # --merger-set KEY=VALUE (dotted config keys)
PG_MODE = "latest"  # --pg-mode: the PostgreSQL sink's mode for the bench's tables
DELTA_MODE = "latest"  # --delta-mode: the Delta sink's mode for the bench's tables


def spark_conf(args) -> dict:
    out = {}
    for item in args.spark_conf:
        k, _, v = item.partition("=")
        out[k] = v
    return out


def snapshot_settings(parallelism: int, chunk_size: int, **extra) -> dict:
    # chunks_per_window: the product default (4), at least one chunk per parallel read
    return {
        "parallelism": parallelism,
        "chunks_per_window": max(4, parallelism),
        "chunk_size": chunk_size,
        "window_timeout_s": 900,
        **extra,
    }


# ----------------------------------------------------------------------------- figure 1


def ensure_warm_table(info) -> None:
    """A 100,000-row copy of the start of the big table (two chunks): the warm runs
    snapshot it first, so that the merger has run a snapshot before the measured one."""
    conn = root_conn(info)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema=%s AND table_name=%s", (DB, WARM)
            )
            if not cur.fetchone()[0]:
                cur.execute(f"CREATE TABLE {DB}.{WARM} LIKE {DB}.{BIG}")
                cur.execute(f"INSERT INTO {DB}.{WARM} SELECT * FROM {DB}.{BIG} WHERE id <= 100000")
    finally:
        conn.close()


def run_snapshot(info, args, work: Path, sink: str, parallelism: int, warm: bool = False) -> dict:
    """One snapshot of the big table by a fresh merger: at its start (cold), or (warm)
    requested once the merger has snapshotted the small table (JVM, Python workers, sink
    connections started: a merger that is already running)."""
    from merger.state.store import StateStore

    settings = snapshot_settings(parallelism, args.chunk_size, **({"auto_new_tables": False} if warm else {}))
    tables = [rf"{DB}\.{BIG}"] + ([rf"{DB}\.{WARM}"] if warm else [])
    run = Run(
        info,
        work,
        f"snap-{sink}-p{parallelism}{'-warm' if warm else ''}",
        [sink],
        tables,
        settings,
        args.trigger_ms,
        spark_conf(args),
    )
    timeout = args.snapshot_timeout or (300 + args.rows / 2000)
    try:
        log(f"snapshot {sink} p={parallelism}{' warm' if warm else ''}: starting ingest ({run.prefix}) and merger")
        run.start()
        if warm:
            wait_for(run.status, 240, "the merger's first status.json", alive=run.check_alive)
            StateStore(run.state).request("snapshot", f"{DB}.{WARM}", where=None)
            wait_for(
                lambda: (p := run.plan(WARM)) and p.get("finished_at"),
                timeout,
                f"the warm-up snapshot of {DB}.{WARM}",
                alive=run.check_alive,
            )
            StateStore(run.state).request("snapshot", f"{DB}.{BIG}", where=None)
        wait_for(
            lambda: run.plan(BIG), timeout, f"the snapshot plan of {DB}.{BIG}", interval=0.1, alive=run.check_alive
        )
        run.sampler.mark()
        plan = wait_for(
            lambda: (p := run.plan(BIG)) and p.get("finished_at") and p,
            timeout,
            f"the snapshot of {DB}.{BIG} into {sink} (p={parallelism})",
            alive=run.check_alive,
        )
        count = run.sink_count(sink, BIG)
        windows = run.window_stats()
        rss = run.sampler.report()
    finally:
        run.stop()
        run.cleanup(args.keep)
    snap_s = plan["finished_at"] - plan["created_at"]
    wall_s = plan["finished_at"] - run.started_at
    rows = plan.get("rows") or args.rows
    res = {
        "sink": sink,
        "parallelism": parallelism,
        "warm": warm,
        "rows": rows,
        "chunks": len(plan.get("chunks", [])),
        "snapshot_s": snap_s,
        "rows_per_s": rows / snap_s if snap_s > 0 else 0.0,
        "wall_s": wall_s,
        "wall_rows_per_s": rows / wall_s if wall_s > 0 else 0.0,
        "startup_s": plan["created_at"] - run.started_at,
        "sink_count": count,
        "windows": windows,
        "rss": rss,
    }
    ok = "ok" if count == args.rows else f"MISMATCH: sink has {count}"
    log(
        f"snapshot {sink} p={parallelism}: {rows:,} rows in {snap_s:.1f}s = {res['rows_per_s']:,.0f} rows/s "
        f"(wall {wall_s:.1f}s) [{ok}]"
    )
    return res


# ----------------------------------------------------------------------------- figure 2


class PacedWriter(threading.Thread):
    """Single-row autocommit UPDATE/INSERT at a steady rate; commit time client-side."""

    def __init__(self, info, rate: float):
        super().__init__(name="paced-writer", daemon=True)
        self.conn = root_conn(info, DB)
        self.rate = rate
        self.stop_event = threading.Event()
        self.ids: dict[int, int] = {}  # w -> id
        self.committed: dict[int, float] = {}  # w -> commit time (time.time())
        self.next_w = 1
        self.error: BaseException | None = None
        self.started: float | None = None
        self.stopped: float | None = None
        self.updates_only = False
        self._origin = (0.0, 1)  # (monotonic time, first write number) the pacing counts from
        self.jitter = 0.0
        self._due = 0.0  # with jitter: when the next write is due (monotonic)
        self._rng = random.Random(23)

    def pace(self, rate: float, updates_only: bool = False, jitter: float = 0.0) -> None:
        """From now on: ``rate`` writes/s (0: pause), UPDATEs only if told; with ``jitter``
        each gap is 1/rate times a uniform factor in [1 - jitter, 1 + jitter] (writes not
        phase-locked with the merger's trigger)."""
        self.updates_only = updates_only
        self.jitter = jitter
        self._due = time.monotonic()
        self._origin = (time.monotonic(), self.next_w)
        self.rate = rate

    def run(self) -> None:
        upd, ins = 0, 0
        try:
            with self.conn.cursor() as cur:
                self.started = time.time()
                self._origin = (time.monotonic(), self.next_w)
                while not self.stop_event.is_set():
                    t0, w0 = self._origin
                    rate = self.rate
                    if not rate:
                        time.sleep(0.01)
                        continue
                    if self.jitter:
                        wait = self._due - time.monotonic()
                        if wait > 0:
                            time.sleep(min(0.01, wait))
                            continue
                        self._due += self._rng.uniform(1 - self.jitter, 1 + self.jitter) / rate
                        due = self.next_w
                    else:
                        due = w0 + int((time.monotonic() - t0) * rate)
                    if self.next_w > due:
                        time.sleep(min(0.001 if rate >= 100 else 0.01, (self.next_w - due) / rate))
                        continue
                    w = self.next_w
                    if w % 2 or self.updates_only:
                        row_id = upd % LAT_PRELOAD + 1
                        upd += 1
                        self.ids[w] = row_id
                        cur.execute(f"UPDATE {LAT} SET w = %s, v = v + 1, ts = NOW(6) WHERE id = %s", (w, row_id))
                    else:
                        row_id = LAT_INSERT_BASE + ins
                        ins += 1
                        self.ids[w] = row_id
                        cur.execute(
                            f"INSERT INTO {LAT} (id, w, v, ts, pad) VALUES (%s, %s, 0, NOW(6), 'inserted')", (row_id, w)
                        )
                    self.committed[w] = time.time()
                    self.next_w = w + 1
        except BaseException as exc:  # reported by the caller
            self.error = exc
        finally:
            self.stopped = time.time()
            self.conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


class SinkPoller(threading.Thread):
    """Finds the first time each write is visible in a sink."""

    def __init__(self, name: str, writer: PacedWriter, interval_s: float):
        super().__init__(name=f"poll-{name}", daemon=True)
        self.sink = name
        self.writer = writer
        self.interval = interval_s
        self.stop_event = threading.Event()
        self.seen: dict[int, float] = {}
        self.superseded: set[int] = set()
        self.lo = 1  # oldest write not seen (or superseded) yet
        self.polls = 0
        self.poll_s = 0.0
        self.errors = 0
        self.last_error = ""
        self.fetched_at: float | None = None

    def fetch(self, lo: int) -> list[tuple[int, int]]:
        raise NotImplementedError

    def ready(self) -> bool:
        return True

    def poll_once(self) -> None:
        top = self.writer.next_w  # writes below this number were issued
        # writes in flight, by row id: a later write of the same id that shows up first
        # overwrote them (never visible on their own)
        pending_by_id: dict[int, list[int]] = {}
        for w in range(self.lo, top):
            if w not in self.seen and w not in self.superseded:
                pending_by_id.setdefault(self.writer.ids.get(w, -1), []).append(w)
        t0 = time.perf_counter()
        self.fetched_at = None
        rows = self.fetch(self.lo)
        now = self.fetched_at or time.time()  # a fetch that knows when its rows became visible says so
        self.poll_s += time.perf_counter() - t0
        self.polls += 1
        # in write order: a history table (change log, SCD type 2) holds a row for every write,
        # so an older write of a key is seen before a later one of the same poll supersedes it
        for row_id, w in sorted(rows, key=lambda r: r[1]):
            if w < self.lo or w in self.seen:
                continue
            self.seen[w] = now
            self.superseded.discard(w)
            for older in pending_by_id.get(row_id, []):
                if older < w and older not in self.seen:
                    self.superseded.add(older)
        while self.lo < top and (self.lo in self.seen or self.lo in self.superseded):
            self.lo += 1

    def run(self) -> None:
        while not self.stop_event.is_set():
            t0 = time.monotonic()
            try:
                if self.ready():
                    self.poll_once()
            except Exception as exc:
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.stop_event.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(15)

    def caught_up(self, upto: int) -> bool:
        return self.lo >= upto


class PgPoller(SinkPoller):
    def __init__(self, info, schema: str, writer: PacedWriter, interval_s: float):
        super().__init__("postgres", writer, interval_s)
        self.info = info
        self.schema = schema
        self.conn = None
        self.indexed = False

    def ready(self) -> bool:
        from psycopg import sql

        if self.conn is None or self.conn.closed:
            self.conn = pg_conn(self.info)
        if not self.indexed:
            qualified = f'"{self.schema}"."{LAT}"'
            if self.conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone()[0] is None:
                return False
            # the poll looks up recent writes by w: an index keeps it cheap as the table grows
            self.conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS bench_lat_w ON {} (w)").format(sql.Identifier(self.schema, LAT))
            )
            self.indexed = True
        return True

    def fetch(self, lo: int) -> list[tuple[int, int]]:
        from psycopg import sql

        return self.conn.execute(
            sql.SQL("SELECT id, w FROM {} WHERE w >= %s").format(sql.Identifier(self.schema, LAT)), (lo,)
        ).fetchall()

    def stop(self) -> None:
        super().stop()
        if self.conn is not None:
            self.conn.close()


class DeltaPoller(SinkPoller):
    """Watches the table's Delta log for its next commit file. A commit is visible to every
    reader from the moment its `NNN.json` exists, so that moment is when the rows of the
    files it adds became visible; they are read afterwards with pyarrow, off the clock.
    (Reading the table through delta-rs on each poll took ~75-95 ms, which added that and
    half the poll interval to every figure.)"""

    def __init__(self, base: Path, writer: PacedWriter, interval_s: float):
        super().__init__("delta", writer, interval_s)
        from merger.sinks.delta import DeltaSink

        self.path = Path(DeltaSink(str(base)).table_path((DB, LAT)))
        self.log = self.path / "_delta_log"
        self.version = 0  # the next commit to look for

    def ready(self) -> bool:
        return self.log.is_dir()

    def fetch(self, lo: int) -> list[tuple[int, int]]:
        from urllib.parse import unquote

        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        added: list[str] = []
        while True:
            commit = self.log / f"{self.version:020d}.json"
            try:
                text = commit.read_text()
            except FileNotFoundError:
                break
            if self.fetched_at is None:
                self.fetched_at = time.time()
            self.version += 1
            for line in text.splitlines():
                action = json.loads(line) if line.strip() else {}
                if "add" in action:
                    added.append(unquote(action["add"]["path"]))
        rows: list[tuple[int, int]] = []
        for rel in added:
            t = pq.read_table(self.path / rel, columns=["id", "w"])
            t = t.filter(pc.greater_equal(t.column("w"), lo))
            rows.extend(zip(t.column("id").to_pylist(), t.column("w").to_pylist()))
        return rows


class KafkaPoller(SinkPoller):
    """When each write is readable (read_committed) on the table's topic: the ingest part
    of the latency; the merger's part is the sink's figure minus this one."""

    def __init__(self, bootstrap: str, topic: str, writer: PacedWriter):
        super().__init__("kafka", writer, 0.0)
        from confluent_kafka import Consumer

        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )
        self.subscribed = False

    def ready(self) -> bool:
        if not self.subscribed:
            from confluent_kafka import OFFSET_BEGINNING, TopicPartition

            meta = self.consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return False
            self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            self.subscribed = True
        return True

    def fetch(self, lo: int) -> list[tuple[int, int]]:
        rows = []
        for m in self.consumer.consume(1000, 0.05):
            if m.error() or m.value() is None:
                continue
            v = json.loads(m.value())
            after = (v.get("payload", v) or {}).get("after") or {}
            if "w" in after and after["w"] is not None:
                rows.append((after["id"], after["w"]))
        return rows

    def stop(self) -> None:
        super().stop()
        self.consumer.close()


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))  # nearest rank
    return sorted_values[k]


def phase_stats(writer: PacedWriter, poller: SinkPoller, t0: float, t1: float) -> dict:
    ws = [w for w, t in writer.committed.items() if t0 <= t < t1]
    lat = sorted(poller.seen[w] - writer.committed[w] for w in ws if w in poller.seen)
    superseded = sum(1 for w in ws if w in poller.superseded)
    unseen = len(ws) - len(lat) - superseded
    return {
        "writes": len(ws),
        "rate": len(ws) / (t1 - t0) if t1 > t0 else 0.0,
        "measured": len(lat),
        "superseded": superseded,
        "unseen": unseen,
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "max_s": lat[-1] if lat else None,
        "seconds": t1 - t0,
    }


def merger_part(writer: PacedWriter, kafka: SinkPoller, sink: SinkPoller, t0: float, t1: float) -> dict:
    """Topic -> sink: for the writes both saw, the sink's first sight minus the topic's."""
    ws = [w for w, t in writer.committed.items() if t0 <= t < t1 and w in kafka.seen and w in sink.seen]
    lat = sorted(sink.seen[w] - kafka.seen[w] for w in ws)
    return {
        "writes": len(ws),
        "rate": len(ws) / (t1 - t0) if t1 > t0 else 0.0,
        "measured": len(lat),
        "superseded": 0,
        "unseen": 0,
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "max_s": lat[-1] if lat else None,
        "seconds": t1 - t0,
        "part": True,
    }


QUIET_PHASE = "quiet"
QUIET_JITTER = 0.2  # the gaps vary by +-20 %: a 0.5 s gap would meet the 500 ms trigger always at the same phase


def quiet_phase(args, writer: PacedWriter, pollers: list, marks: dict, writer_ok, sampler: TreeSampler) -> None:
    """Isolated changes on a quiet source: the writer pauses until every sink has caught
    up, then does --quiet-writes single-row UPDATEs, one every --quiet-interval-s."""
    writer.pace(0)
    top = writer.next_w
    wait_for(
        lambda: all(p.caught_up(top) for p in pollers), args.drain_seconds, "the sinks to catch up", alive=writer_ok
    )
    time.sleep(2.0)  # a quiet source: nothing read for a while
    log(f"latency: quiet phase, {args.quiet_writes} UPDATEs one every {args.quiet_interval_s}s")
    marks["quiet_start"] = time.time()
    sampler.mark()
    writer.pace(1 / args.quiet_interval_s, updates_only=True, jitter=QUIET_JITTER)
    quiet_s = args.quiet_writes * args.quiet_interval_s * (1 + QUIET_JITTER)
    wait_for(lambda: writer.next_w >= top + args.quiet_writes, 60 + 2 * args.quiet_writes + quiet_s, "the quiet writes")
    writer.pace(0)
    marks["quiet_end"] = time.time()
    top = writer.next_w
    try:
        wait_for(lambda: all(p.caught_up(top) for p in pollers), args.drain_seconds, "the quiet writes to arrive")
    except TimeoutError as exc:
        log(f"latency: {exc} (counted as unseen)")


def run_latency(info, args, work: Path, sinks: list[str]) -> dict:
    reset_lat_table(info)
    run = Run(
        info,
        work,
        "latency",
        sinks,
        [rf"{DB}\.{LAT}", rf"{DB}\.{BIG}"],
        snapshot_settings(args.latency_parallelism, args.chunk_size, auto_new_tables=False),
        args.trigger_ms,
        spark_conf(args),
    )
    writer = PacedWriter(info, args.rate)
    pollers: list[SinkPoller] = []
    if "postgres" in sinks:
        pollers.append(PgPoller(info, run.pg_schema, writer, args.pg_poll_ms / 1000))
    if "delta" in sinks:
        pollers.append(DeltaPoller(run.delta_base, writer, args.delta_poll_ms / 1000))
    if args.kafka_probe:
        from cdc.wire.topics import table_topic

        pollers.append(KafkaPoller(info.kafka.bootstrap, table_topic(run.prefix, DB, LAT), writer))
    marks: dict[str, float] = {}
    snap_plan = None
    try:
        log(f"latency: starting ingest ({run.prefix}) and merger (sinks {','.join(sinks)})")
        run.start()
        wait_for(run.status, 240, "the merger's first status.json", alive=run.check_alive)
        for p in pollers:
            p.start()
        writer.start()
        marks["writer_start"] = time.time()

        def writer_ok():
            run.check_alive()
            if writer.error is not None:
                raise RuntimeError(f"writer failed: {writer.error!r}")

        wait_for(lambda: all(p.seen for p in pollers), 240, "the first write to reach every sink", alive=writer_ok)
        marks["first_visible"] = time.time()
        log(
            f"latency: first write visible after {marks['first_visible'] - marks['writer_start']:.1f}s; "
            f"warm-up {args.warmup_seconds:.0f}s, then idle phase {args.latency_seconds:.0f}s"
        )
        time.sleep(args.warmup_seconds)
        marks["idle_start"] = time.time()
        run.sampler.mark()
        end = time.monotonic() + args.latency_seconds
        while time.monotonic() < end:
            writer_ok()
            time.sleep(0.5)
        marks["idle_end"] = time.time()
        cpu = {"idle": run.sampler.cpu_report()}
        if args.quiet_writes:
            quiet_phase(args, writer, pollers, marks, writer_ok, run.sampler)
            cpu[QUIET_PHASE] = run.sampler.cpu_report()
            writer.pace(args.rate)
        if not args.skip_latency_snapshot:
            from merger.state.store import StateStore

            log(f"latency: requesting a snapshot of {DB}.{BIG} ({args.rows:,} rows) while writing")
            StateStore(run.state).request("snapshot", f"{DB}.{BIG}", where=None)
            marks["snap_start"] = time.time()
            run.sampler.mark()
            timeout = args.snapshot_timeout or (300 + args.rows / 2000)
            snap_plan = wait_for(
                lambda: (p := run.plan(BIG)) and p.get("finished_at") and p,
                timeout,
                f"the snapshot of {DB}.{BIG} during the latency phase",
                alive=writer_ok,
            )
            marks["snap_end"] = time.time()
            cpu["during snapshot"] = run.sampler.cpu_report()
        writer.stop()
        if writer.error is not None:
            raise RuntimeError(f"writer failed: {writer.error!r}")
        top = writer.next_w
        try:
            wait_for(
                lambda: all(p.caught_up(top) for p in pollers),
                args.drain_seconds,
                "every write to reach the sinks",
                alive=run.check_alive,
            )
        except TimeoutError as exc:
            log(f"latency: {exc} (counted as unseen)")
        counts = {s: run.sink_count(s, BIG) for s in sinks} if snap_plan else {}
        if args.keep:  # per write: commit and first sight in each poller (for timelines)
            with open(run.dir / "writes.csv", "w") as f:
                f.write("w,id,committed," + ",".join(p.sink for p in pollers) + "\n")
                for w, t in sorted(writer.committed.items()):
                    f.write(
                        f"{w},{writer.ids.get(w)},{t:.4f},"
                        + ",".join(f"{p.seen[w]:.4f}" if w in p.seen else "" for p in pollers)
                        + "\n"
                    )
            (run.dir / "marks.json").write_text(json.dumps(marks))
        rss = run.sampler.report()
        windows = run.window_stats()
        status = run.status() or {}
    finally:
        writer.stop()
        for p in pollers:
            p.stop()
        run.stop()
        run.cleanup(args.keep)
    out = {
        "sinks": sinks,
        "rate_target": args.rate,
        "rss": rss,
        "windows": windows,
        "phases": {},
        "cpu": cpu,
        "pollers": {
            p.sink: {
                "polls": p.polls,
                "avg_poll_ms": 1000 * p.poll_s / p.polls if p.polls else None,
                "errors": p.errors,
                "last_error": p.last_error,
            }
            for p in pollers
        },
        "first_visible_s": marks["first_visible"] - marks["writer_start"],
        "lat_status": (status.get("tables") or {}).get(f"{DB}.{LAT}"),
    }
    phases = [("idle", marks["idle_start"], marks["idle_end"])]
    if "quiet_start" in marks:
        phases.append((QUIET_PHASE, marks["quiet_start"], marks["quiet_end"]))
    if snap_plan:
        phases.append(("during snapshot", marks["snap_start"], marks["snap_end"]))
        snap_s = snap_plan["finished_at"] - snap_plan["created_at"]
        out["snapshot"] = {
            "rows": snap_plan.get("rows"),
            "snapshot_s": snap_s,
            "rows_per_s": (snap_plan.get("rows") or 0) / snap_s if snap_s > 0 else 0.0,
            "sink_counts": counts,
        }
    kafka = next((p for p in pollers if p.sink == "kafka"), None)
    for name, t0, t1 in phases:
        out["phases"][name] = {p.sink: phase_stats(writer, p, t0, t1) for p in pollers}
        for p in pollers:
            if kafka is not None and p is not kafka:
                out["phases"][name][f"{p.sink} - kafka"] = merger_part(writer, kafka, p, t0, t1)
    return out


# ----------------------------------------------------------------------------- output


def fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def report(args, env: dict, baseline: dict | None, snaps: list[dict], lat: dict | None) -> list[str]:
    """Markdown lines (printed, and appended to HISTORY.md with --record)."""
    L = []
    L.append(
        f"Machine: {env['cpus']} CPUs, {env['mem_gb']:.0f} GB; load average at start {env['load']}; "
        f"merger trigger {args.trigger_ms} ms, Spark master {MERGER_SETTINGS.get('spark_master', 'local (default)')}, "
        "Spark conf: product defaults (driver 2g)"
        + (f" + {', '.join(args.spark_conf)}" if args.spark_conf else "")
        + (f"; PostgreSQL tables in mode `{PG_MODE}`" if PG_MODE != "latest" else "")
        + (f"; Delta tables in mode `{DELTA_MODE}`" if DELTA_MODE != "latest" else "")
    )
    if baseline:
        L += [
            "",
            f"Source table `{DB}.{BIG}`: {baseline['rows']:,} rows (id INT PK, a INT, b VARCHAR(40), "
            "c DECIMAL(10,2), d DATETIME(3), e BIGINT).",
            f"Baseline: one pymysql connection streaming `SELECT *` (SSCursor): {baseline['rows']:,} rows in "
            f"{baseline['seconds']:.2f} s = {baseline['rows_per_s']:,.0f} rows/s.",
        ]
    if snaps:
        L += [
            "",
            f"Snapshot throughput (one sink per run; chunk_size {args.chunk_size:,}, chunks_per_window = "
            "max(4, parallelism); time = plan created_at -> finished_at; wall = merger start -> finished_at):",
            "",
            "| sink | parallelism | rows | chunks | snapshot s | rows/s | wall s | rows/s (wall) | "
            "vs pymysql SELECT * | target | windows read s (sum/max) | peak RSS tree MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in snaps:
            if "error" in s:
                L.append(
                    f"| {s['sink']}{' (warm)' if s.get('warm') else ''} | {s['parallelism']} | "
                    f"FAILED: {s['error']} |||||||||||"
                )
                continue
            target = ""
            if s["sink"] == "postgres" and s["parallelism"] == 2:
                target = f">= {TARGET_PG_ROWS_S:,}: " + ("met" if s["rows_per_s"] >= TARGET_PG_ROWS_S else "NOT met")
            vs = f"{s['rows_per_s'] / baseline['rows_per_s']:.2f}x" if baseline and baseline["rows_per_s"] else "-"
            w = s["windows"]
            L.append(
                f"| {s['sink']}{' (warm)' if s.get('warm') else ''} | {s['parallelism']} | {s['rows']:,} | "
                f"{s['chunks']} | {s['snapshot_s']:.1f} | "
                f"{s['rows_per_s']:,.0f} | {s['wall_s']:.1f} | {s['wall_rows_per_s']:,.0f} | {vs} | {target} | "
                f"{w['read_s_sum']:.1f}/{w['read_s_max']:.1f} ({w['windows']} windows"
                f"{', %d expired' % w['expired'] if w['expired'] else ''}) | {s['rss']['peak_total_mb']:.0f} |"
            )
            if s.get("sink_count") != s["rows"]:
                L.append(f"|  |  | ^ sink count {s.get('sink_count')} != {s['rows']:,} |||||||||||")
        cpu_runs = [s for s in snaps if "error" not in s and s["rss"].get("cpu")]
        if cpu_runs:
            L += [
                "",
                "CPU seconds per process group while the snapshot ran (plan created -> finished, sampled every 0.5 s; "
                "`machine` = the busy CPU seconds of the whole machine and its wall time per core):",
                "",
                "| sink | p | machine busy s / wall s | merger JVM | merger driver | pyspark workers | mariadbd | "
                "postgres | ingest + broker | other |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for s in cpu_runs:
                c = s["rss"]["cpu"]
                g = {
                    "jvm": 0.0,
                    "driver": 0.0,
                    "workers": 0.0,
                    "mariadbd": 0.0,
                    "postgres": 0.0,
                    "ingest": 0.0,
                    "other": 0.0,
                }
                for label, v in c["by_label"].items():
                    if label == "merger: JVM (spark)":
                        g["jvm"] += v
                    elif label == "merger: driver (python)":
                        g["driver"] += v
                    elif label.startswith("merger: pyspark"):
                        g["workers"] += v
                    elif label.startswith("machine: mariadb") or label.startswith("machine: mysqld"):
                        g["mariadbd"] += v
                    elif label.startswith("machine: postgres"):
                        g["postgres"] += v
                    elif (
                        label.startswith("machine: python")
                        or label.startswith("machine: cdc")
                        or "tansu" in label
                        or "broker" in label
                    ):
                        g["ingest"] += v
                    else:
                        g["other"] += v
                L.append(
                    f"| {s['sink']}{' (warm)' if s.get('warm') else ''} | {s['parallelism']} | "
                    f"{c['machine_busy_s']:.1f} / {c['wall_s']:.1f} | "
                    + " | ".join(
                        f"{g[k]:.1f}" for k in ("jvm", "driver", "workers", "mariadbd", "postgres", "ingest", "other")
                    )
                    + " |"
                )
    if lat:
        L += [
            "",
            f"Commit -> visible latency at {args.rate:,.0f} changes/s (method: a paced writer thread does "
            "single-row autocommit UPDATEs of pre-loaded rows and INSERTs of new rows, alternately, each "
            "setting `w` = a global write number; commit time = client clock when the statement returns; "
            f"pollers find when each write is visible: PostgreSQL queried every {args.pg_poll_ms} ms for "
            "`w >= oldest unseen write` (an index on w), seen at the query's completion; Delta: its log checked "
            f"every {args.delta_poll_ms} ms for the next commit file, the rows of the files that commit adds seen "
            "from the moment the file exists (read with pyarrow afterwards); latency = seen - commit time "
            "(upper bound, resolution = poll interval). "
            f"Merger writes to sinks {'+'.join(lat['sinks'])} "
            "(written at the same time, each in its own thread, per batch); "
            f"snapshot during phase 2: {args.rows:,} rows, parallelism {args.latency_parallelism}):",
            "",
            "| phase | sink | seconds | writes | changes/s | p50 s | p99 s | max s | not seen | target p99 <= 3 s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for phase, per_sink in lat["phases"].items():
            for sink, st in per_sink.items():
                if st["p99_s"] is None or sink == "kafka" or st.get("part"):
                    met = "-"
                elif phase == QUIET_PHASE:  # its own target: p50 and p99 (see the line under the table)
                    ok = st["p50_s"] <= TARGET_QUIET_P50_S and st["p99_s"] <= TARGET_QUIET_P99_S
                    met = f"p50/p99 <= {TARGET_QUIET_P50_S}/{TARGET_QUIET_P99_S} s: " + (
                        "met" if ok and not st["unseen"] else "NOT met"
                    )
                else:
                    met = "met" if st["p99_s"] <= TARGET_P99_S and not st["unseen"] else "NOT met"
                L.append(
                    f"| {phase} | {sink} | {st['seconds']:.0f} | {st['measured']:,} | {st['rate']:,.0f} | "
                    f"{fmt_s(st['p50_s'])} | {fmt_s(st['p99_s'])} | {fmt_s(st['max_s'])} | "
                    f"{st['unseen']}{' (+%d overwritten)' % st['superseded'] if st['superseded'] else ''} | "
                    f"{met} |"
                )
        if QUIET_PHASE in lat["phases"]:
            L.append(
                f"\n`{QUIET_PHASE}`: after the idle phase the writer pauses until every sink has caught up, waits 2 s, "
                f"then does {args.quiet_writes} single-row autocommit UPDATEs, one every {args.quiet_interval_s} s "
                f"(+-{QUIET_JITTER:.0%}, so that they meet the merger's trigger at every phase) "
                "(isolated changes on a quiet source), measured the same way."
            )
        if any("kafka" in per_sink for per_sink in lat["phases"].values()):
            L.append(
                "\n`kafka`: the write readable (read_committed) on its topic, i.e. the ingest part; "
                "`<sink> - kafka`: per write, the sink's first sight minus the topic's (the merger's part)."
            )
        for phase, c in (lat.get("cpu") or {}).items():
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(c["by_label"].items())[:8])
            L.append(
                f"\nCPU s in phase '{phase}' (machine busy {c['machine_busy_s']:.1f} of "
                f"{c['wall_s'] * (os.cpu_count() or 1):.1f} core-s): {top}."
            )
        if lat.get("snapshot"):
            s = lat["snapshot"]
            L.append(
                f"\nSnapshot during phase 2: {s['rows']:,} rows in {s['snapshot_s']:.1f} s = "
                f"{s['rows_per_s']:,.0f} rows/s; sink row counts {s['sink_counts']}."
            )
        polls = ", ".join(
            f"{k}: {v['polls']} polls, {v['avg_poll_ms'] or 0:.1f} ms each"
            + (f", {v['errors']} errors ({v['last_error']})" if v["errors"] else "")
            for k, v in lat["pollers"].items()
        )
        L.append("")
        L.append(
            f"First write visible {lat['first_visible_s']:.1f} s after the writer started (merger warm-up). "
            f"Pollers: {polls}."
        )
    rss_runs = [s["rss"] for s in snaps if "rss" in s] + ([lat["rss"]] if lat else [])
    if rss_runs:
        rss = merge_rss(rss_runs)
        L += [
            "",
            "Merger process tree, peak VmRSS (sampled every 0.5 s, max over all runs above):",
            "",
            "| process kind | peak of one process MB | peak sum of the kind MB | max processes |",
            "|---|---|---|---|",
        ]
        for kind, v in rss["kinds"].items():
            L.append(f"| {kind} | {v['peak_proc_mb']:.0f} | {v['peak_sum_mb']:.0f} | {v['max_count']} |")
        L.append(f"| whole tree | | {rss['peak_total_mb']:.0f} | |")
        per_run = "; ".join(
            f"{s['sink']} p{s['parallelism']}: {s['rss']['peak_total_mb']:.0f} MB" for s in snaps if "rss" in s
        )
        if lat:
            per_run += ("; " if per_run else "") + f"latency run: {lat['rss']['peak_total_mb']:.0f} MB"
        L.append(f"\nPeak tree RSS per run: {per_run}.")
    L += [
        "",
        f"Targets: snapshot into PostgreSQL >= {TARGET_PG_ROWS_S:,} rows/s at parallelism 2; "
        f"p99 commit -> sink <= {TARGET_P99_S:.0f} s, also while a snapshot runs; isolated changes on a quiet "
        f"source: p50 <= {TARGET_QUIET_P50_S} s and p99 <= {TARGET_QUIET_P99_S} s.",
    ]
    return L


def record(args, lines: list[str]) -> None:
    head = (
        f"### merger: snapshot, latency, memory — {time.strftime('%Y-%m-%d %H:%M')}, commit {commit_label()} "
        f"(`bench/merger_bench.py --rows {args.rows} --parallelism {args.parallelism} --sinks {args.sinks}"
        f"{' --skip-latency' if args.skip_latency else ''}"
        f"{f' --pg-mode {PG_MODE}' if PG_MODE != 'latest' else ''}"
        f"{f' --delta-mode {DELTA_MODE}' if DELTA_MODE != 'latest' else ''}`)"
    )
    append_results([head, "", *lines])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the snapshot table")
    ap.add_argument("--parallelism", default="1,2,4", help="snapshot.parallelism values, comma-separated")
    ap.add_argument("--sinks", default="delta,postgres", help="delta,postgres (each snapshot run: one sink)")
    ap.add_argument("--chunk-size", type=int, default=50_000)
    ap.add_argument("--trigger-ms", type=int, default=200, help="merger trigger_interval_ms (product default 200)")
    ap.add_argument("--snapshot-timeout", type=float, default=0, help="seconds; default 300 + rows/2000")
    ap.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra spark_conf of the merger (repeatable)",
    )
    ap.add_argument(
        "--snapshot-start",
        choices=["cold", "warm", "both"],
        default="both",
        help="cold: the snapshot starts with the merger; warm: requested after the merger has "
        "snapshotted a small table",
    )
    ap.add_argument("--skip-snapshots", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-latency-snapshot", action="store_true", help="latency: idle phase only")
    ap.add_argument("--latency-sinks", default=None, help="sinks of the latency run (default: --sinks)")
    ap.add_argument("--latency-seconds", type=float, default=60, help="length of the idle phase")
    ap.add_argument("--warmup-seconds", type=float, default=10)
    ap.add_argument("--drain-seconds", type=float, default=60)
    ap.add_argument("--latency-parallelism", type=int, default=2, help="parallelism of the phase-2 snapshot")
    ap.add_argument("--rate", type=float, default=1000, help="changes/s of the paced writer")
    ap.add_argument(
        "--quiet-writes",
        type=int,
        default=40,
        help="latency: after the idle phase, this many isolated single-row UPDATEs on the quiet source (0: none)",
    )
    ap.add_argument("--quiet-interval-s", type=float, default=0.5, help="seconds between the quiet phase's UPDATEs")
    ap.add_argument("--pg-poll-ms", type=int, default=100)
    ap.add_argument(
        "--pg-mode",
        choices=("latest", "changelog", "scd2"),
        default="latest",
        help="the PostgreSQL sink's mode for the bench's tables (sinks.postgres.tables; docs/history.md)",
    )
    ap.add_argument(
        "--delta-mode",
        choices=("latest", "changelog", "scd2"),
        default="latest",
        help="the Delta sink's mode for the bench's tables (sinks.delta.tables; docs/history.md)",
    )
    ap.add_argument(
        "--merger-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a merger config key (dotted, e.g. records_per_task=1) for every run",
    )
    ap.add_argument(
        "--kafka-probe",
        action="store_true",
        help="latency: also time each write's arrival on its topic (splits ingest from merger)",
    )
    ap.add_argument("--delta-poll-ms", type=int, default=20)
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--keep", action="store_true", help="keep work dirs (logs, state, Delta tables)")
    ap.add_argument("--down", action="store_true", help="stop the bench stack at the end")
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    ap.add_argument("--json", action="store_true", help="also print the raw figures as JSON")
    ap.add_argument(
        "--json-file",
        type=Path,
        metavar="PATH",
        help="write the raw figures as JSON to PATH (and the text report to stdout as always)",
    )
    args = ap.parse_args(argv)
    global PG_MODE, DELTA_MODE
    PG_MODE = args.pg_mode
    DELTA_MODE = args.delta_mode
    for kv in args.merger_set:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--merger-set wants KEY=VALUE, not {kv!r}")
        import yaml

        MERGER_SETTINGS[key] = yaml.safe_load(value)

    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    bad = [s for s in sinks if s not in ("delta", "postgres")]
    if bad or not sinks:
        ap.error(f"--sinks: unknown {bad}; use delta and/or postgres")
    lat_sinks = [s.strip() for s in (args.latency_sinks or args.sinks).split(",") if s.strip()]
    par = [int(p) for p in args.parallelism.split(",") if p.strip()]

    info = local_stack.up(Path(args.state_dir))
    work = Path(args.state_dir) / "merger-bench" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "cpus": os.cpu_count(),
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "mem_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
    }
    log(
        f"stack: MariaDB {info.mariadb.port}, Kafka {info.kafka.bootstrap}, PostgreSQL {info.postgres.port}; "
        f"work dir {work}"
    )
    snaps: list[dict] = []
    baseline = lat = None
    failed = False
    try:
        took = ensure_big_table(info, args.rows)
        log(f"{DB}.{BIG}: {args.rows:,} rows " + (f"loaded in {took:.1f}s" if took is not None else "(reused)"))
        baseline = pymysql_scan(info, f"{DB}.{BIG}")
        log(
            f"pymysql SSCursor SELECT *: {baseline['rows']:,} rows in {baseline['seconds']:.2f}s = "
            f"{baseline['rows_per_s']:,.0f} rows/s"
        )
        if not args.skip_snapshots:
            modes = {"cold": [False], "warm": [True], "both": [False, True]}[args.snapshot_start]
            if True in modes:
                ensure_warm_table(info)
            for sink in sinks:
                for p in par:
                    for warm in modes:
                        try:
                            snaps.append(run_snapshot(info, args, work, sink, p, warm))
                        except Exception as exc:
                            failed = True
                            log(f"snapshot {sink} p={p} FAILED: {exc}")
                            traceback.print_exc()
                            snaps.append(
                                {"sink": sink, "parallelism": p, "warm": warm, "error": str(exc).splitlines()[0][:200]}
                            )
        if not args.skip_latency:
            try:
                lat = run_latency(info, args, work, lat_sinks)
            except Exception as exc:
                failed = True
                log(f"latency FAILED: {exc}")
                traceback.print_exc()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        if args.down:
            local_stack.down(Path(args.state_dir))
    lines = report(args, env, baseline, snaps, lat)
    print("\n".join(lines), flush=True)
    figures = {"baseline": baseline, "snapshots": snaps, "latency": lat, "report": lines}
    if args.json:
        print(json.dumps({k: v for k, v in figures.items() if k != "report"}, default=str, indent=1))
    if args.json_file:
        args.json_file.write_text(json.dumps(figures, default=str, indent=1))
    if args.record:
        record(args, lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
