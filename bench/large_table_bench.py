"""One large table: its snapshot's wall time next to a plain `SELECT *` of it, and the
merger's memory against its configured bounds (issue 23, item 4).

On the local stack (real MariaDB, Tansu, PostgreSQL; started under --state-dir):

1. the table ``bench_large_<rows>.big`` (id INT PK, a INT, b VARCHAR(40), c DECIMAL(10,2),
   d DATETIME(3), e BIGINT, as bench/merger_bench.py's) with --rows rows, filled by
   INSERT ... SELECT from the sequence engine in pieces of 2,000,000 rows, outside the
   binlog (the run's ingest starts later); kept between runs;
2. the baseline, in the same run: one pymysql connection streaming `SELECT *` (SSCursor),
   and the `mariadb -e 'SELECT * FROM ...' > /dev/null` client if it is installed;
3. ingest (a new topic prefix) is started and waited for until it has caught up; then
   `cdc merge` with the product's default settings (snapshot, trigger, batch_memory_mb,
   spark.driver.memory) into --sinks (each its own Delta directory / PostgreSQL schema).
   Wall time: merger start -> status.json says the table is ``streaming`` with its
   snapshot finished, and -> every sink's row count equals the source's;
4. every 0.5 s the RSS of the merger's process tree (Python driver, Spark JVM, pyspark
   daemon and workers: bench/merger_bench.py's TreeSampler) and, every 10 s, the JVM's
   heap in use (jstat); peaks per kind against the bounds docs/operations/sizing.md ("Memory")
   states, and per quarter of the snapshot (by rows emitted: memory must not grow with
   the rows), with each quarter's rows/s and the size of the merger's state directory;
5. source and sinks compared by COUNT, SUM(id), SUM(a), SUM(c), MAX(d), read
   independently of the merger (plain SQL on MariaDB and PostgreSQL, deltalake/pyarrow
   on the Delta table).

    .venv/bin/python bench/large_table_bench.py [--rows 20000000] [--sinks delta,postgres]
        [--timeout 7200] [--keep] [--down] [--record]

Work files go to <state-dir>/large-table-bench/<run> (removed unless --keep); the
PostgreSQL schema is dropped at the end; the source table is kept for the next run.
--record appends the figures to bench/HISTORY.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from bench import commit_label, publish  # noqa: E402
from bench.merger_bench import (  # noqa: E402
    BIG,
    TreeSampler,
    drop_pg_schema,
    ensure_big_table,
    pg_conn,
    process_stat,
    pymysql_scan,
    root_conn,
)
from cdc import stack as local_stack  # noqa: E402
from merger.state.store import StateStore  # noqa: E402
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config  # noqa: E402
from tests.merger_harness import MergerProcess, write_merger_config  # noqa: E402
from tests.procfs import java_child, rss_kb  # noqa: E402

LOAD_STEP = 2_000_000  # rows per INSERT ... SELECT
# docs/operations/sizing.md, "Memory": the Python driver holds about 450-520 MB plus one
# micro-batch (batch_memory_mb, default 512); the JVM's heap is spark.driver.memory (the
# merger's default 2g); a snapshot read holds a chunk (snapshot.chunk_mb, default 128)
PY_BASE_MB = 520
BATCH_MEMORY_MB = 512
JVM_HEAP_MB = 2048
CHUNK_MB = 128
# the last quarter's peak more than 15 % and 64 MB over the first quarter's: grows with the rows
GROWTH_TOLERANCE = 0.15
GROWTH_MIN_MB = 64
KINDS = ("driver (python)", "JVM (spark)", "pyspark daemon", "pyspark worker")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load1() -> float:
    return os.getloadavg()[0]


def cpu_now(sampler: TreeSampler) -> dict[str, float]:
    """CPU seconds since the merger's start: its process tree, MariaDB, PostgreSQL."""
    for _ in range(5):
        try:
            by = sampler.cpu_report()["by_label"]
            break
        except RuntimeError:  # the sampler thread changed a dict meanwhile
            time.sleep(0.05)
    else:
        return {}
    return {
        "merger": sum(v for k, v in by.items() if k.startswith("merger: ")),
        "mariadb": sum(v for k, v in by.items() if k.startswith("machine: mariadbd")),
        "postgres": sum(v for k, v in by.items() if k.startswith("machine: postgres")),
    }


def anon_and_threads(pid: int) -> tuple[int, int]:
    """RssAnon of a process (KB: its own memory, without the shared libraries' pages that
    VmRSS also counts: pyarrow, ConnectorX, the JVM's files) and its threads; 0s when it
    is gone."""
    anon = threads = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return anon, threads


class SeriesSampler(TreeSampler):
    """TreeSampler that also keeps every sample, with its time: per kind the RSS summed
    over its processes, and the largest RSS and RssAnon (KB) of one of them; and the most
    threads one process of each kind had."""

    def __init__(self, root_pid: int, interval: float = 0.5):
        super().__init__(root_pid, interval)
        self.series: list[tuple[float, dict[str, int], dict[str, int], dict[str, int]]] = []
        self.threads: dict[str, int] = {}

    def sample(self) -> None:
        before = self.samples
        super().sample()
        if self.samples > before:
            largest: dict[str, int] = {}
            anon: dict[str, int] = {}
            for pid, (start, kind) in list(self.seen.items()):
                if (process_stat(pid) or (0, None))[1] != start:
                    continue  # gone (or its pid taken by another process)
                own, threads = anon_and_threads(pid)
                largest[kind] = max(largest.get(kind, 0), rss_kb(pid))
                anon[kind] = max(anon.get(kind, 0), own)
                self.threads[kind] = max(self.threads.get(kind, 0), threads)
            self.series.append((time.monotonic(), dict(self.last_sums), largest, anon))


class HeapSampler(threading.Thread):
    """The Spark JVM's heap in use (jstat -gc: survivors + eden + old, KB) every ``interval``
    s, garbage included (G1 collects when it likes); ``live_kb`` forces a full GC first
    (jcmd GC.run, a pause of well under a second), so what is left is what the JVM holds."""

    def __init__(self, merger_pid: int, interval: float = 5.0):
        super().__init__(name="heap-sampler", daemon=True)
        self.merger_pid, self.interval = merger_pid, interval
        self.jstat, self.jcmd = shutil.which("jstat"), shutil.which("jcmd")
        self.stop_event = threading.Event()
        self.series: list[tuple[float, int]] = []
        self.jvm: int | None = None

    def used_kb(self) -> int | None:
        self.jvm = self.jvm or java_child(self.merger_pid)
        if self.jvm is None or self.jstat is None:
            return None
        try:
            out = subprocess.run(
                [self.jstat, "-gc", str(self.jvm)], capture_output=True, text=True, timeout=20
            ).stdout.split("\n")
            cols = dict(zip(out[0].split(), out[1].split()))
            return int(sum(float(cols[k]) for k in ("S0U", "S1U", "EU", "OU")))
        except (subprocess.SubprocessError, OSError, IndexError, KeyError, ValueError):
            return None

    def live_kb(self) -> int | None:
        self.jvm = self.jvm or java_child(self.merger_pid)
        if self.jvm is None or self.jcmd is None:
            return None
        try:
            subprocess.run([self.jcmd, str(self.jvm), "GC.run"], capture_output=True, timeout=30)
        except (subprocess.SubprocessError, OSError):
            return None
        return self.used_kb()

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            used = self.used_kb()
            if used is not None:
                self.series.append((time.monotonic(), used))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


# ----------------------------------------------------------------------------- baseline


def client_scan(info, table: str, timeout_s: float) -> dict | None:
    """`mariadb -e 'SELECT * FROM table' > /dev/null` (TCP, as the merger connects)."""
    binary = shutil.which("mariadb") or shutil.which("mysql")
    if binary is None:
        return None
    m = info.mariadb
    cmd = [binary, "-h", m.host, "-P", str(m.port), "--protocol=TCP", "-u", "root", "-e", f"SELECT * FROM {table}"]
    t0 = time.perf_counter()
    res = subprocess.run(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, MYSQL_PWD=m.root_password),
        timeout=timeout_s,
    )
    took = time.perf_counter() - t0
    if res.returncode:
        raise RuntimeError(f"{os.path.basename(binary)} failed: {res.stderr.decode(errors='replace')[-500:]}")
    return {"binary": os.path.basename(binary), "seconds": took}


# ----------------------------------------------------------------------------- checksums


def source_sums(info, table: str) -> dict:
    conn = root_conn(info, read_timeout=3600)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*), SUM(id), SUM(a), SUM(c), MAX(d) FROM {table}")
            n, s_id, s_a, s_c, max_d = cur.fetchone()
    finally:
        conn.close()
    return {"count": n, "sum_id": int(s_id or 0), "sum_a": int(s_a or 0), "sum_c": Decimal(s_c or 0), "max_d": max_d}


def pg_sums(info, schema: str, table: str) -> dict:
    from psycopg import sql

    with pg_conn(info) as conn:
        n, s_id, s_a, s_c, max_d = conn.execute(
            sql.SQL("SELECT count(*), sum(id), sum(a), sum(c), max(d) FROM {}").format(sql.Identifier(schema, table))
        ).fetchone()
    return {"count": n, "sum_id": int(s_id or 0), "sum_a": int(s_a or 0), "sum_c": Decimal(s_c or 0), "max_d": max_d}


def delta_sums(path: Path) -> dict:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    dataset = DeltaTable(str(path)).to_pyarrow_dataset()
    n = s_id = s_a = 0
    s_c = Decimal(0)
    max_d = None
    for batch in dataset.to_batches(columns=["id", "a", "c", "d"], batch_size=1_000_000):
        n += batch.num_rows
        s_id += pc.sum(batch.column("id").cast("int64")).as_py() or 0
        s_a += pc.sum(batch.column("a").cast("int64")).as_py() or 0
        s_c += sum((v for v in batch.column("c").to_pylist() if v is not None), Decimal(0))
        top = pc.max(batch.column("d")).as_py()
        if top is not None and (max_d is None or top > max_d):
            max_d = top
    if max_d is not None and max_d.tzinfo is not None:
        max_d = max_d.replace(tzinfo=None)  # the source's DATETIME is zone-less (UTC in the sink)
    return {"count": n, "sum_id": s_id, "sum_a": s_a, "sum_c": s_c, "max_d": max_d}


def pg_count(info, schema: str, table: str) -> int | None:
    from psycopg import sql

    try:
        with pg_conn(info) as conn:
            return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))).fetchone()[0]
    except Exception:
        return None


def delta_count(path: Path) -> int | None:
    from deltalake import DeltaTable

    try:
        return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()
    except Exception:
        return None


# ----------------------------------------------------------------------------- the run


def tree_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under a directory."""
    size = files = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                pass
    return size, files


def merger_config(info, path: Path, prefix: str, db: str, work: Path, sinks: list[str], pg_schema: str) -> Path:
    """The harness's merger config with the product's defaults: no snapshot, trigger or
    driver memory settings of its own (only Spark's worker socket timeout, for a loaded
    machine), the chosen sinks."""
    write_merger_config(info, path, prefix, [db], work)
    cfg = yaml.safe_load(path.read_text())
    cfg.pop("snapshot", None)
    cfg.pop("trigger_interval_ms", None)
    cfg["spark_conf"] = {"spark.python.authenticate.socketTimeout": "120s"}
    cfg["table_include"] = [rf"{db}\.{BIG}"]
    cfg["sinks"] = {k: v for k, v in cfg["sinks"].items() if k in sinks}
    if "postgres" in cfg["sinks"]:
        cfg["sinks"]["postgres"]["schema"] = pg_schema
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_merge(info, args, db: str, work: Path, source_rows: int) -> dict:
    run = "lt" + uuid.uuid4().hex[:8]
    work = work / run
    work.mkdir(parents=True)
    pg_schema = f"bench_{run}"
    name = f"{db}.{BIG}"
    delta_path = work / "delta" / db / BIG
    icfg = write_config(info, work / "ingest.yaml", run, [db, "cdc"], topic_partitions=3)
    mcfg = merger_config(info, work / "merger.yaml", run, db, work, args.sinks, pg_schema)
    res: dict = {"run": run, "load_start": load1()}
    ingest = IngestProcess(icfg, work / "ingest.log").start()
    merger = sampler = heap = None
    try:
        wait_caught_up(info, run, timeout_s=180, proc=ingest)
        store = StateStore(work / "state")
        merger = MergerProcess(mcfg, work / "merger.log").start()
        t0, wall0 = time.monotonic(), time.time()
        sampler = SeriesSampler(merger.proc.pid)
        sampler.start()
        heap = HeapSampler(merger.proc.pid)
        heap.start()

        def alive() -> None:
            for p in (ingest, merger):
                if not p.alive():
                    raise RuntimeError(f"{p.config_path.stem} exited:\n{p.log_text()[-4000:]}")

        progress: list[tuple[float, int]] = []
        quarters: dict[int, dict] = {}
        plan = None
        deadline = t0 + args.timeout
        last_log = 0.0
        while True:
            alive()
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"the snapshot of {name} was not finished after {args.timeout:.0f}s")
            # the status first: a plan read after it counts at least the rows it says are in
            status = ((store.read_status() or {}).get("tables") or {}).get(name) or {}
            plan = store.load_plan(name) or plan
            rows = (plan or {}).get("rows", 0)
            progress.append((now, rows))
            if plan and 0 not in quarters:
                quarters[0] = {"t": now, "cpu": cpu_now(sampler)}  # the snapshot planned
            for q in (25, 50, 75, 100):
                if q not in quarters and rows >= source_rows * q / 100:
                    size, files = tree_bytes(work / "state")
                    plan_bytes = store.plan_path(name).stat().st_size if store.plan_path(name).exists() else 0
                    quarters[q] = {
                        "t": now,
                        "load": load1(),
                        "state_bytes": size,
                        "state_files": files,
                        "plan_bytes": plan_bytes,
                        "cpu": cpu_now(sampler),
                        "live_heap_kb": heap.live_kb(),
                    }
            if now - last_log > 30:
                last_log = now
                log(
                    f"  {now - t0:.0f}s: {status.get('phase')}, snapshot {status.get('snapshot')}, "
                    f"chunks {status.get('chunks_done')}/{status.get('chunks_total')}, rows {rows:,} "
                    f"(load {load1():.1f})"
                )
            if status.get("phase") == "streaming" and status.get("snapshot") == "finished":
                res["streaming_s"] = now - t0
                break
            time.sleep(0.5)
        log(f"  streaming after {res['streaming_s']:.1f}s; counting the sinks")
        counts: dict[str, int | None] = {}
        equal_deadline = time.monotonic() + 600
        while True:
            counts = {}
            if "postgres" in args.sinks:
                counts["postgres"] = pg_count(info, pg_schema, BIG)
            if "delta" in args.sinks:
                counts["delta"] = delta_count(delta_path)
            if all(c == source_rows for c in counts.values()):
                res["equal_s"] = time.monotonic() - t0
                break
            if time.monotonic() > equal_deadline:
                res["equal_s"] = None
                break
            alive()
            time.sleep(2)
        res["counts"] = counts
        res["load_end"] = load1()
        sampler.stop()
        heap.stop()
        plan = store.load_plan(name) or plan
        res["plan"] = {
            "chunks": len(plan.get("chunks", [])),
            "created_s": plan["created_at"] - wall0,
            "finished_s": plan["finished_at"] - wall0,
            "rows": plan.get("rows"),
        }
        res["state_end"] = tree_bytes(work / "state")
        res["quarters"] = quarters
        res["t0"] = t0
        res["progress"] = progress
        res["series"] = sampler.series
        res["heap"] = heap.series
        res["rss"] = sampler.report()
        res["threads"] = dict(sampler.threads)
        text = merger.log_text()
        res["expired"] = text.count("expired; its chunks will be read again")
        res["slow_batches"] = text.count("slow micro-batch")
        res["chunk_rows"] = next(
            (int(w) for w in _words_after(text, "chunks of at most", 1)),
            None,
        )
        merger.stop()
        log("  checksums: source, then each sink")
        res["sums"] = {"source": source_sums(info, name)}
        if "postgres" in args.sinks:
            res["sums"]["postgres"] = pg_sums(info, pg_schema, BIG)
        if "delta" in args.sinks:
            res["sums"]["delta"] = delta_sums(delta_path)
    finally:
        for stop in (
            lambda: heap and heap.stop(),
            lambda: merger and merger.stop(),
            lambda: sampler and (sampler.stop(), sampler.kill_leftovers()),
            ingest.stop,
        ):
            try:
                stop()
            except Exception as exc:
                log(f"  while stopping: {exc}")
        if "postgres" in args.sinks:
            try:
                drop_pg_schema(info, pg_schema)
            except Exception as exc:
                log(f"  could not drop PostgreSQL schema {pg_schema}: {exc}")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return res


def _words_after(text: str, marker: str, n: int) -> list[str]:
    i = text.find(marker)
    return text[i + len(marker) :].split()[:n] if i >= 0 else []


# ----------------------------------------------------------------------------- figures


def quarter_figures(res: dict, source_rows: int) -> list[dict]:
    """Per quarter of the snapshot (by rows emitted): its end time, rows/s, the peak RSS
    per kind (MB) and JVM heap in use among the samples taken while it ran."""
    t0 = res["t0"]
    start = t0 + res["plan"]["created_s"]
    out, prev_t = [], start
    prev_cpu = res["quarters"].get(0, {}).get("cpu", {})
    for q in (25, 50, 75, 100):
        info = res["quarters"].get(q)
        if info is None:
            continue
        lo = prev_t
        hi = info["t"]
        peaks = {k: 0 for k in KINDS}
        largest = {k: 0 for k in KINDS}
        anon = {k: 0 for k in KINDS}
        for t, sums, big, own in res["series"]:
            if lo <= t <= hi:
                for k in KINDS:
                    peaks[k] = max(peaks[k], sums.get(k, 0))
                    largest[k] = max(largest[k], big.get(k, 0))
                    anon[k] = max(anon[k], own.get(k, 0))
        heap = max((kb for t, kb in res["heap"] if lo <= t <= hi), default=None)
        secs = hi - lo
        out.append(
            {
                "q": q,
                "end_s": hi - t0,
                "rows_per_s": source_rows / 4 / secs if secs > 0 else 0.0,
                "peaks_mb": {k: v / 1024 for k, v in peaks.items()},
                "largest_mb": {k: v / 1024 for k, v in largest.items()},
                "anon_mb": {k: v / 1024 for k, v in anon.items()},
                "heap_mb": None if heap is None else heap / 1024,
                "live_heap_mb": None if info.get("live_heap_kb") is None else info["live_heap_kb"] / 1024,
                "load": info["load"],
                "state_mb": info["state_bytes"] / 2**20,
                "state_files": info["state_files"],
                "plan_kb": info["plan_bytes"] / 1024,
                # CPU seconds per million rows emitted in the quarter
                "cpu_per_m": {
                    k: (v - prev_cpu.get(k, 0.0)) / (source_rows / 4 / 1e6) for k, v in info.get("cpu", {}).items()
                },
            }
        )
        prev_t, prev_cpu = hi, info.get("cpu", {})
    return out


def memory_checks(res: dict) -> list[dict]:
    """Each kind's peak against its bound (docs/operations/sizing.md, "Memory")."""
    kinds = res["rss"]["kinds"]

    def peak(kind: str, field: str = "peak_proc_mb") -> float:
        return kinds.get(kind, {}).get(field, 0.0)

    # a worker's own memory: its largest RSS before the snapshot's first window (imports,
    # ConnectorX loaded by the warm-up read, the stream's first Kafka reads)
    start = res["t0"] + res["plan"]["created_s"]
    before = [(big, own) for t, _, big, own in res["series"] if t <= start]
    base = max((big.get("pyspark worker", 0) for big, _ in before), default=0) / 1024
    base_anon = max((own.get("pyspark worker", 0) for _, own in before), default=0) / 1024
    anon_peak = max((own.get("pyspark worker", 0) for _, _, _, own in res["series"]), default=0) / 1024
    heap_peak = max((kb for _, kb in res["heap"]), default=0) / 1024
    rows = [
        {
            "what": "Python driver RSS",
            "peak_mb": peak("driver (python)"),
            "bound_mb": PY_BASE_MB + BATCH_MEMORY_MB,
            "bound": f"{PY_BASE_MB} + batch_memory_mb {BATCH_MEMORY_MB}",
        },
        {
            "what": "Spark JVM heap in use (jstat)",
            "peak_mb": heap_peak,
            "bound_mb": JVM_HEAP_MB,
            "bound": "spark.driver.memory 2g",
        },
        {
            "what": "Spark JVM RSS (heap + metaspace, code, threads)",
            "peak_mb": peak("JVM (spark)"),
            "bound_mb": None,
            "bound": "heap bound above; no bound stated for the rest",
        },
        {
            "what": "one pyspark worker RSS",
            "peak_mb": peak("pyspark worker"),
            "bound_mb": base + CHUNK_MB if base else None,
            "bound": f"a worker before the snapshot {base:.0f} + snapshot.chunk_mb {CHUNK_MB}",
        },
        {
            "what": "one pyspark worker's own memory (RssAnon: RSS without shared library pages)",
            "peak_mb": anon_peak,
            "bound_mb": base_anon + CHUNK_MB if base_anon else None,
            "bound": f"a worker before the snapshot {base_anon:.0f} + snapshot.chunk_mb {CHUNK_MB}",
        },
        {
            "what": "pyspark daemon + workers, summed",
            "peak_mb": peak("pyspark daemon", "peak_sum_mb") + peak("pyspark worker", "peak_sum_mb"),
            "bound_mb": None,
            "bound": f"{kinds.get('pyspark worker', {}).get('max_count', 0)} workers at most",
        },
        {"what": "whole tree RSS", "peak_mb": res["rss"]["peak_total_mb"], "bound_mb": None, "bound": ""},
    ]
    for r in rows:
        r["under"] = None if r["bound_mb"] is None else r["peak_mb"] <= r["bound_mb"]
    return rows


def growth_checks(quarters: list[dict]) -> dict[str, bool | None]:
    """Per kind: does the last quarter's peak exceed the first's by more than the tolerance?"""
    if len(quarters) < 2:
        return {}
    first, last = quarters[0], quarters[-1]

    def grows(a: float | None, b: float | None) -> bool | None:
        return None if not a or b is None else b > a * (1 + GROWTH_TOLERANCE) and b - a > GROWTH_MIN_MB

    # the JVM: its heap after a full GC (its RSS and the heap in use grow as G1 expands the
    # heap towards spark.driver.memory, garbage included, which is not the rows' doing)
    out = {k: grows(first["largest_mb"][k], last["largest_mb"][k]) for k in ("driver (python)", "pyspark worker")}
    out["JVM heap after a full GC"] = grows(first["live_heap_mb"], last["live_heap_mb"])
    return out


def fmt_mb(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def report(args, env: dict, base: dict, client: dict | None, res: dict) -> list[str]:
    rows = args.rows
    quarters = quarter_figures(res, rows)
    mem = memory_checks(res)
    growth = growth_checks(quarters)
    wall = res["streaming_s"]
    rps = rows / wall
    snap_s = res["plan"]["finished_s"] - res["plan"]["created_s"]
    lines = [
        f"### Large table snapshot: {rows:,} rows, {time.strftime('%Y-%m-%d %H:%M')}, commit {commit_label()}",
        "",
        f"`bench/large_table_bench.py --rows {rows} --sinks {','.join(args.sinks)}`; {env['cpus']} CPUs, "
        f"{env['mem_gb']:.0f} GB RAM (shared with other work); merger with default settings "
        f"(chunks of {res.get('chunk_rows') or '?'} rows, {res['plan']['chunks']} chunks); "
        f"1-minute load: {res['load_start']:.1f} at ingest's start, "
        + ", ".join(f"{q['load']:.1f} at {q['q']} %" for q in quarters)
        + f", {res['load_end']:.1f} at the end.",
        "",
    ]

    def vs(seconds: float) -> str:
        out = f"{seconds / base['seconds']:.2f}x"
        return out + (f" | {seconds / client['seconds']:.2f}x" if client else " | -")

    equal = f"{res['equal_s']:.1f}" if res.get("equal_s") else "never"
    lines += [
        "| what | seconds | rows/s | vs pymysql `SELECT *` | vs `mariadb` client `SELECT *` | load |",
        "|---|---|---|---|---|---|",
        f"| baseline: pymysql SSCursor `SELECT *`, one connection | {base['seconds']:.1f} "
        f"| {base['rows_per_s']:,.0f} | {vs(base['seconds'])} | {base['load']:.1f} |",
    ]
    if client:
        lines.append(
            f"| baseline: `{client['binary']} -e 'SELECT * FROM ...' > /dev/null` | {client['seconds']:.1f} "
            f"| {rows / client['seconds']:,.0f} | {vs(client['seconds'])} | {client['load']:.1f} |"
        )
    lines += [
        f"| `cdc merge` start -> table `streaming`, snapshot finished (what a user waits) | {wall:.1f} "
        f"| {rps:,.0f} | {vs(wall)} | {res['load_end']:.1f} |",
        f"| `cdc merge` start -> sink counts equal the source | {equal} | | | | |",
        f"| snapshot plan created -> finished (after {res['plan']['created_s']:.1f} s of start) | {snap_s:.1f} "
        f"| {rows / snap_s:,.0f} | {vs(snap_s)} | |",
        "",
        "Per quarter of the snapshot (rows emitted): its rows/s and CPU (a rise with the rows would be "
        "superlinear work), the peak RSS (MB) of the samples taken in it, the merger's state directory when "
        "the quarter ended:",
        "",
        "| quarter | ends at s | rows/s | CPU s per M rows: merger / MariaDB / PostgreSQL | Python driver "
        "| JVM RSS | JVM heap used / after a full GC | largest pyspark worker RSS / RssAnon | pyspark workers (sum) "
        "| state dir MB / files | plan KB | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for q in quarters:
        p, big = q["peaks_mb"], q["largest_mb"]
        cpu = " / ".join(f"{q['cpu_per_m'].get(k, 0):.1f}" for k in ("merger", "mariadb", "postgres"))
        lines.append(
            f"| {q['q'] - 25}-{q['q']} % | {q['end_s']:.1f} | {q['rows_per_s']:,.0f} | {cpu} "
            f"| {big['driver (python)']:,.0f} "
            f"| {big['JVM (spark)']:,.0f} | {fmt_mb(q['heap_mb'])} / {fmt_mb(q['live_heap_mb'])} "
            f"| {big['pyspark worker']:,.0f} "
            f"/ {q['anon_mb']['pyspark worker']:,.0f} "
            f"| {p['pyspark worker']:,.0f} "
            f"| {q['state_mb']:.1f} / {q['state_files']} | {q['plan_kb']:.0f} | {q['load']:.1f} |"
        )
    lines += [
        "",
        'Memory against the bounds of docs/operations/sizing.md ("Memory"), whole run:',
        "",
        "| what | peak MB | bound MB | under? |",
        "|---|---|---|---|",
    ]
    for m in mem:
        under = "-" if m["under"] is None else ("yes" if m["under"] else "**NO**")
        lines.append(f"| {m['what']} | {m['peak_mb']:,.0f} | {fmt_mb(m['bound_mb'])} ({m['bound']}) | {under} |")
    grows = [k for k, v in growth.items() if v]
    lines += [
        "",
        "Memory with the rows (the largest process of each kind, last quarter's peak vs the first's; the JVM's "
        f"heap after a full GC at the quarter's end; tolerance {GROWTH_TOLERANCE:.0%} and {GROWTH_MIN_MB} MB): "
        + ", ".join(f"{k} {'GROWS' if v else 'flat'}" for k, v in growth.items() if v is not None)
        + (" — growth with the table's size is a defect." if grows else "."),
        "",
        "Source and sinks, read independently (MariaDB and PostgreSQL SQL, deltalake/pyarrow):",
        "",
        "| side | COUNT | SUM(id) | SUM(a) | SUM(c) | MAX(d) | equal to source |",
        "|---|---|---|---|---|---|---|",
    ]
    src = res["sums"]["source"]
    for side, s in res["sums"].items():
        same = "-" if side == "source" else ("yes" if s == src else "**NO**")
        lines.append(
            f"| {side} | {s['count']:,} | {s['sum_id']:,} | {s['sum_a']:,} | {s['sum_c']} | {s['max_d']} | {same} |"
        )
    sb, sf = res["state_end"]
    threads = ", ".join(f"{k} {v}" for k, v in sorted(res.get("threads", {}).items()) if k in KINDS)
    lines += [
        "",
        f"Most threads in one process of the merger's tree: {threads}.",
        "",
        f"Windows expired: {res['expired']}; slow micro-batches logged: {res['slow_batches']}; the merger's state "
        f"directory at the end: {sb / 2**20:.1f} MB in {sf} files.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--sinks", default="delta,postgres", help="delta,postgres or one of them")
    ap.add_argument("--timeout", type=float, default=0, help="seconds for the snapshot; default 600 + rows/5,000")
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, state, Delta table)")
    ap.add_argument("--down", action="store_true", help="stop the bench stack at the end")
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    ap.add_argument("--json", type=Path, help="also write the raw figures to this file")
    args = ap.parse_args(argv)
    args.sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    if not args.sinks or any(s not in ("delta", "postgres") for s in args.sinks):
        ap.error("--sinks: delta and/or postgres")
    args.timeout = args.timeout or 600 + args.rows / 5_000

    info = local_stack.up(Path(args.state_dir))
    work = Path(args.state_dir) / "large-table-bench"
    env = {
        "cpus": os.cpu_count(),
        "mem_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
    }
    db = f"bench_large_{args.rows}"
    table = f"{db}.{BIG}"
    try:
        took = ensure_big_table(info, args.rows, db=db, table=BIG, step=LOAD_STEP, binlog=False)
        log(f"{table}: {args.rows:,} rows " + (f"loaded in {took:.1f}s" if took is not None else "(reused)"))
        load = load1()
        base = pymysql_scan(info, table)
        base["load"] = load
        log(
            f"pymysql SSCursor SELECT *: {base['rows']:,} rows in {base['seconds']:.1f}s = "
            f"{base['rows_per_s']:,.0f} rows/s (load {load:.1f})"
        )
        load = load1()
        client = client_scan(info, table, timeout_s=max(600, args.rows / 10_000))
        if client:
            client["load"] = load
            log(f"{client['binary']} -e 'SELECT * ...' > /dev/null: {client['seconds']:.1f}s (load {load:.1f})")
        log(f"cdc merge into {','.join(args.sinks)}")
        res = run_merge(info, args, db, work, args.rows)
    finally:
        if args.down:
            local_stack.down(Path(args.state_dir))
    lines = report(args, env, base, client, res)
    if args.json:
        raw = {k: v for k, v in res.items() if k not in ("series", "progress")}
        args.json.write_text(json.dumps({"baseline": base, "client": client, "merge": raw}, default=str, indent=1))
    publish(lines, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
