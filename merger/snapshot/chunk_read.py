"""Snapshot chunk reads as Spark tasks that fetch with ConnectorX and write Parquet.

The default reader of a window (``snapshot.reader: connectorx``). Spark still schedules
the reads: one task per run of chunks (``parallelism`` per window), so they spread over
a cluster's executors like the JDBC reads. Inside a task, ConnectorX (Rust) fetches the
rows straight into Arrow and pyarrow writes them to the window's staging directory; the
JVM only sees the row counts. Measured here: 1,000,000 rows of the benchmark table in
0.64 s over one connection, where Spark JDBC spent ~7 CPU seconds on them (row by row
through the JVM, plus JIT compilation).

The columns are ``snapshot_expression`` of each column (as for JDBC), except that values
MariaDB returns as DECIMAL are fetched as text: ConnectorX would hand them over as
decimal(38, 10), which can't hold every scale. ``merger.schema.canonical.from_snapshot`` casts
them back exactly.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from urllib.parse import quote

import pyarrow.parquet as pq

from cdc.quoting import quote_ident
from cdc.tablespec import ColumnSpec, TableSpec
from merger.schema.canonical import constant_expression, snapshot_expression

DEFAULT_MASTER = "local[2]"  # cdc.config's spark_master default: the merger sizes it


def launched_locally(environ=None) -> bool:
    """The merger starts Spark itself (local mode), not spark-submit."""
    import os

    env = os.environ if environ is None else environ
    return "SPARK_SUBMIT" not in env and not env.get("SPARK_ENV_LOADED")


def local_default_master(config, environ=None) -> bool:
    """The merger starts Spark itself with the default spark_master, so it decides the
    task slots."""
    return launched_locally(environ) and config.spark_master == DEFAULT_MASTER


def read_parallelism(config, cores: int | None = None, environ=None) -> int:
    """Snapshot reads at once: ``snapshot.parallelism``, but in local mode with the default
    master at most the machine's cores. Each read is a Python worker converting rows next
    to the sinks, the JVM and the stream on the same cores: more reads than cores only
    contend (measured on 2 cores: parallelism 4 read 1M rows 10-20% slower than 2)."""
    import os

    wanted = config.snapshot.parallelism
    if not local_default_master(config, environ):
        return wanted
    return max(1, min(wanted, cores if cores is not None else (os.cpu_count() or 1)))


# the text a task's error carries when the source is unreachable: merger.mysql.source retries it
UNAVAILABLE_MARK = "cdc-source-unavailable"
# what ConnectorX says when the connection fails or breaks (no server error code)
CONNECTION_TROUBLE = (
    "IO error",
    "IoError",
    "DriverError",
    "os error",
    "bytes remaining on stream",
    "timed out waiting for connection",
    "Connection",
    "connection",
    "Broken pipe",
)


def select_expression(c: ColumnSpec) -> str:
    expr = snapshot_expression(c)
    t = c.type_name
    if t in ("decimal", "numeric") or (t == "bigint" and c.unsigned) or t == "bit":
        return f"CAST({expr} AS CHAR)"
    return expr


def chunk_query(spec: TableSpec, where: str | None, ranges: str, constants: dict[str, str] | None = None) -> str:
    """The SELECT of one read: ``ranges`` is the SQL predicate on the key columns;
    ``constants``: columns read as literal texts (``merger.schema.canonical.snapshot_select``)."""
    select = ", ".join(
        f"{constant_expression(constants[c.name]) if constants and c.name in constants else select_expression(c)}"
        f" AS {quote_ident(c.name)}"
        for c in spec.columns
    )
    cond = f"({where}) AND ({ranges})" if where else ranges
    # the comment names the read in the server's process list
    return f"SELECT /* cdc_snapshot */ {select} FROM {quote_ident(spec.db)}.{quote_ident(spec.table)} WHERE {cond}"


def source_url(host: str, port: int, user: str, password: str) -> str:
    return f"mysql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}"


def stage_query(source: dict, query: str, path: str, batch_rows: int) -> int:
    """Run ``query`` and write its rows to the Parquet file ``path``; the row count.
    ``source``: host, port, user, password, connect_timeout_s. Runs in a Spark task, the
    read itself in a child process of the task's Python worker (``in_child``): every
    ConnectorX read (0.4.6, MySQL) leaves its connection pool's 3 threads behind, and in
    a Python worker that Spark reuses for task after task they piled up, with the memory
    they held (measured during a 20M-row snapshot, bench/large_table_bench.py: up to 59
    threads and 175-200 MB of a worker's own memory; in a child, 7 threads and 94 MB;
    the fork costs ~30 ms of CPU per read)."""
    import connectorx  # noqa: F401 (loaded once in the worker: the children inherit it; starts no thread)

    return in_child(_stage_query_here, source, query, path, batch_rows)


def in_child(fn, *args):
    """``fn(*args)`` in a forked child process: its result (JSON-able) returned, its
    error raised again here as a RuntimeError with the same text (``ValueError: ...``
    for an error other than a RuntimeError). Whatever the call leaves behind (threads,
    memory) ends with the child; the child ends with this process. Where ``os.fork`` is
    missing, ``fn(*args)`` runs here."""
    if not hasattr(os, "fork"):
        return fn(*args)
    parent = os.getpid()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs this process's exit handlers
        code = 1
        try:
            os.close(read_fd)
            _die_with(parent)
            try:
                answer = {"result": fn(*args)}
            except BaseException as exc:  # noqa: BLE001 (handed to the parent)
                text = str(exc) if type(exc) is RuntimeError else f"{type(exc).__name__}: {exc}"
                answer = {"error": text}
            data = memoryview(json.dumps(answer).encode())
            while data:
                data = data[os.write(write_fd, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    parts = []
    try:
        while part := os.read(read_fd, 1 << 16):
            parts.append(part)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if not parts:
        raise RuntimeError(f"cdc-source-error: the read's child process ended without an answer ({_ended(status)})")
    answer = json.loads(b"".join(parts))
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return answer["result"]


def _die_with(parent: int) -> None:
    """The calling (child) process gets SIGKILL when its parent ends (Linux), so a read
    never outlives the Spark task that wanted it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent ended before prctl
        os._exit(1)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _stage_query_here(source: dict, query: str, path: str, batch_rows: int) -> int:
    """``stage_query`` in this process."""
    import connectorx as cx
    import pymysql

    from merger.mysql.source import UNAVAILABLE_CODES, is_transient

    # ConnectorX's pool retries a refused or denied connection for 30 s before it says
    # so: a plain connection first fails at once, and says which it is
    try:
        pymysql.connect(
            host=source["host"],
            port=source["port"],
            user=source["user"],
            password=source["password"],
            connect_timeout=source["connect_timeout_s"],
        ).close()
    except Exception as exc:
        mark = UNAVAILABLE_MARK if is_transient(exc) else "cdc-source-error"
        raise RuntimeError(f"{mark}: {exc}") from None
    url = source_url(source["host"], source["port"], source["user"], source["password"])
    try:
        reader = cx.read_sql(
            url,
            query,
            return_type="arrow_stream",
            batch_size=batch_rows,
            pre_execution_query=["SET time_zone = '+00:00'"],
        )
        rows, writer = 0, None
        try:
            for batch in reader:
                if writer is None:
                    writer = pq.ParquetWriter(path, batch.schema, compression="none")
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
    except BaseException as exc:  # ConnectorX fails mid-stream with a pyo3 PanicException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        text = f"{type(exc).__name__}: {exc}"
        code = re.search(r"ERROR (\d+)", text)
        lost = (int(code.group(1)) in UNAVAILABLE_CODES) if code else any(s in text for s in CONNECTION_TROUBLE)
        if lost:
            raise RuntimeError(f"{UNAVAILABLE_MARK}: {text}") from None  # retried
        raise RuntimeError(f"cdc-source-error: {text}") from None  # to fix (privilege, SQL, a type): no retry
    return rows


def warm_up_workers(spark, source: dict, directory: Path, tasks: int | None = None) -> int:
    """One task per read slot (default: every task slot), at the merger's start: each starts
    a Python worker (they are reused), loads ConnectorX with a one-row read, and imports
    what the stream's Kafka reads need, so that neither the first window nor the first
    micro-batches pay for it."""
    slots = max(1, tasks or spark.sparkContext.defaultParallelism)
    directory.mkdir(parents=True, exist_ok=True)

    def warm(i: int) -> int:
        import confluent_kafka  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import pyspark.sql.pandas.types  # noqa: F401

        import merger.kafka.datasource  # noqa: F401

        return stage_query(source, "SELECT 1 AS x", str(directory / f"part-{i:05d}.parquet"), 10)

    return sum(spark.sparkContext.parallelize(range(slots), slots).map(warm).collect())


def stage_window(spark, source: dict, queries: list[str], directory: Path, batch_rows: int) -> int:
    """The window's reads as one Spark job, a task per query; the rows staged."""
    directory.mkdir(parents=True, exist_ok=True)
    jobs = [(query, str(directory / f"part-{i:05d}.parquet")) for i, query in enumerate(queries)]
    counts = (
        spark.sparkContext.parallelize(jobs, len(jobs))
        .map(lambda job: stage_query(source, job[0], job[1], batch_rows))
        .collect()
    )
    return sum(counts)
