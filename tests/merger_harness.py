"""Runs the merger as a real process (Spark local mode) against the stack, and compares its
sinks with the source."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Callable

import pymysql
import yaml

from cdc import stack as local_stack
from cdc.quoting import quote_ident
from merger.schema.catalog import SourceCatalog
from merger.sinks.delta import DeltaSink
from merger.sinks.postgres import PostgresSink
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sinks.postgres import PostgresReader
from merger.verify.source import SourceReader
from merger.verify.table import compare_tables
from tests.ingest_harness import IngestProcess, set_dotted
from tests.support import readback

ROOT = Path(__file__).resolve().parents[1]


def write_merger_config(
    stack: local_stack.StackInfo, path: Path, prefix: str, databases: list[str], work: Path, **extra
) -> Path:
    cfg = {
        "topic_prefix": prefix,
        "mysql": {
            "host": stack.mariadb.host,
            "port": stack.mariadb.port,
            "user": "root",
            "password_file": str(local_stack.secret_file(stack, "mysql_root_password")),
        },
        "kafka": {"bootstrap_servers": stack.kafka.bootstrap},
        "table_include": [f"{db}\\..*" for db in databases],
        "state_dir": str(work / "state"),
        "sinks": {
            "delta": {"path": str(work / "delta")},
            "postgres": {
                "host": stack.postgres.host,
                "port": stack.postgres.port,
                "user": stack.postgres.user,
                "dbname": stack.postgres.database,
                "password_file": str(local_stack.secret_file(stack, "postgres_password")),
            },
        },
        "snapshot": {"chunk_size": 20000, "chunks_per_window": 2, "window_timeout_s": 180},
        "trigger_interval_ms": 300,
        "retry_max_s": 4,  # the tests' outages are short: reconnect within seconds of the end
        # a loaded machine can take more than Spark's 15 s to start a Python worker
        "spark_conf": {"spark.driver.memory": "1g", "spark.python.authenticate.socketTimeout": "120s"},
    }
    set_dotted(cfg, extra)
    path.write_text(yaml.safe_dump(cfg))
    return path


class MergerProcess(IngestProcess):
    """Same process handling as ingest, running `cdc merge`."""

    def start(self) -> "MergerProcess":
        import os
        import subprocess
        import sys

        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli", "merge", "-c", str(self.config_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        return self


class CrashingMerger(MergerProcess):
    """`cdc merge` killed by itself (SIGKILL) at a named crash point (merger/crashpoints.py,
    ``CDC_CRASH_AT``), or a plain merger when ``crash_at`` is None."""

    def __init__(self, config_path: Path, log_path: Path, crash_at: str | None):
        super().__init__(config_path, log_path)
        self.crash_at = crash_at

    def start(self) -> "CrashingMerger":
        import os
        import subprocess
        import sys

        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("CDC_CRASH_AT", None)
        if self.crash_at:
            env["CDC_CRASH_AT"] = self.crash_at
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli", "merge", "-c", str(self.config_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        return self

    def wait_killed(self, timeout_s: float) -> None:
        import subprocess

        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"the merger did not reach {self.crash_at} in {timeout_s}s:\n{self.log_text()[-3000:]}"
            ) from None
        assert self.proc.returncode == -9, (self.proc.returncode, self.log_text()[-3000:])
        self._log.close()


class SinkChecker:
    """The tests' oracle: the sinks compared with the source independently of the
    pipeline (plain SELECTs, each sink's own client, one canonical form:
    ``merger.verify``)."""

    def __init__(self, stack: local_stack.StackInfo, work: Path, nul_policy: str = "strip"):
        self.stack = stack
        self.work = work
        self.nul_policy = nul_policy
        self._pg = None
        from cdc.config import MySQLConfig

        self.catalog = SourceCatalog(
            MySQLConfig(
                host=stack.mariadb.host,
                port=stack.mariadb.port,
                user="root",
                password_file=str(local_stack.secret_file(stack, "mysql_root_password")),
            )
        )

    def _source(self) -> SourceReader:
        m = self.stack.mariadb
        return SourceReader(
            lambda: pymysql.connect(
                ssl_disabled=True, host=m.host, port=m.port, user="root", password=m.root_password, autocommit=True
            )
        )

    def readers(self) -> dict:
        pg = self.stack.postgres
        return {
            "delta": DeltaReader(str(self.work / "delta")),
            "postgres": PostgresReader(
                {"host": pg.host, "port": pg.port, "user": pg.user, "dbname": pg.database, "password": pg.password},
                nul_policy=self.nul_policy,
            ),
        }

    def compare(self, db: str, table: str, keys: list[str] | None = None) -> list:
        """[(sink name, Comparison or None, error text or None)] for both sinks."""
        source = self._source()
        readers = self.readers()
        try:
            found = compare_tables(source, readers, db, table, keys)
        finally:
            source.close()
            for r in readers.values():
                r.close()
        return [(n, None, c) if isinstance(c, str) else (n, c, None) for n, c in found.items()]

    def differences(self, db: str, tables: list[str]) -> list[str]:
        """``compare`` of many tables over one set of connections: what differs, one line
        per table and sink (empty: every table equal in both sinks)."""
        source = self._source()
        readers = self.readers()
        out = []
        try:
            for table in tables:
                for sink, found in compare_tables(source, readers, db, table).items():
                    if isinstance(found, str):
                        out.append(f"{db}.{table} ({sink}): {found}")
                    elif not found.ok:
                        out.append(found.summary())
        finally:
            source.close()
            for r in readers.values():
                r.close()
        return out

    def verify(
        self,
        db: str,
        table: str,
        keys: list[str] | None = None,
        chunk_size: int = 10_000,
        retries: int = 0,
        retry_wait: float = 1.0,
    ) -> list:
        """`cdc verify`'s chunked comparison (merger.verify.chunked), both sinks: TableResults
        (``.verdict``, ``.missing``, ``.extra``, ``.different``). Memory bounded by the
        chunk size, so it suits large tables better than ``compare``."""
        from merger.verify.chunked import TableVerifier

        source = self._source()
        readers = self.readers()
        try:
            t = source.describe(db, table)
            return TableVerifier(
                source, t, keys or list(t.primary_key), readers, chunk_size, retries=retries, retry_wait=retry_wait
            ).run()
        finally:
            source.close()
            for r in readers.values():
                r.close()

    # sink objects cache table metadata (right for the one process that writes): a
    # reader in another process opens fresh ones to see columns added meanwhile
    @property
    def delta(self):
        return DeltaSink(str(self.work / "delta"))

    @property
    def pg(self):
        if self._pg is not None:
            self._pg.close()
        self._pg = PostgresSink(
            {
                "host": self.stack.postgres.host,
                "port": self.stack.postgres.port,
                "user": self.stack.postgres.user,
                "dbname": self.stack.postgres.database,
                "password": self.stack.postgres.password,
            }
        )
        return self._pg

    def counts(self, db: str, table: str) -> dict:
        conn = pymysql.connect(
            ssl_disabled=True,
            host=self.stack.mariadb.host,
            port=self.stack.mariadb.port,
            user="root",
            password=self.stack.mariadb.root_password,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {quote_ident(db)}.{quote_ident(table)}")
                out = {"source": cur.fetchone()[0]}
        finally:
            conn.close()
        for name, sink in (("delta", self.delta), ("postgres", self.pg)):
            try:
                out[name] = readback.count(sink, (db, table))
            except Exception:
                out[name] = None
        return out

    def wait_equal(self, db: str, table: str, timeout_s: float = 240, proc=None, keys=None) -> None:
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            if proc is not None and not proc.alive():
                raise AssertionError(f"merger exited:\n{proc.log_text()[-4000:]}")
            counts = self.counts(db, table)
            if len(set(counts.values())) == 1:  # cheap first: the full compare costs CPU
                results = self.compare(db, table, keys)
                if all(c is not None and c.ok for _, c, _ in results):
                    return
                last = [(n, c.summary() if c else err) for n, c, err in results]
                pause = 3.0  # a full compare differed: not again at once
            else:
                last = counts
                pause = 1.0  # the counts are three cheap queries: look again soon
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        raise AssertionError(
            f"sinks did not converge for {db}.{table} within {timeout_s}s: {last}"
            + (f"\n{proc.log_text()[-3000:]}" if proc else "")
        )

    def close(self):
        if self._pg is not None:
            self._pg.close()


def create_mixed_tables(conn: pymysql.Connection, db: str, big_rows: int) -> None:
    """(Re)creates database ``db`` with three tables: num (integer key, ``big_rows`` rows),
    skey (string key in a case-insensitive collation), comp (composite key)."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        cur.execute("CREATE TABLE num (id INT PRIMARY KEY, v VARCHAR(30), n BIGINT, d DECIMAL(12,2), ts DATETIME(3))")
        cur.execute(
            f"INSERT INTO num SELECT seq, CONCAT('v', seq), seq * 7, seq / 100, "
            f"'2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_{big_rows}"
        )
        cur.execute(
            "CREATE TABLE skey (code VARCHAR(40) PRIMARY KEY, v INT) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
        )
        cur.execute("INSERT INTO skey SELECT CONCAT(CHAR(65 + seq % 26), 'é-', seq), seq FROM seq_1_to_20000")
        cur.execute("CREATE TABLE comp (a INT, b VARCHAR(10), c BIGINT, PRIMARY KEY (a, b))")
        cur.execute("INSERT INTO comp SELECT seq % 100, CONCAT('b', seq), seq FROM seq_1_to_20000")


class MixedTablesWriter(threading.Thread):
    """Inserts, updates, deletes and primary-key changes across the whole key range of
    ``create_mixed_tables``' tables, a few hundred a second (root: also on a read_only server)."""

    def __init__(self, stack, db: str, big_rows: int, seed: int = 3):
        super().__init__(daemon=True)
        self.conn = root_conn(stack, db)
        self.rnd = random.Random(seed)
        self.big = big_rows
        self.stop = threading.Event()
        self.error = None
        self.statements = 0

    def run(self):
        r = self.rnd
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    k = r.randint(1, self.big + 1000)
                    op = r.random()
                    if op < 0.3:
                        cur.execute("INSERT IGNORE INTO num VALUES (%s, 'ins', %s, 1.5, NOW(3))", (k, k))
                    elif op < 0.6:
                        cur.execute("UPDATE num SET v = %s, n = n + 1 WHERE id BETWEEN %s AND %s", (f"u{k}", k, k + 5))
                    elif op < 0.75:
                        cur.execute("DELETE FROM num WHERE id BETWEEN %s AND %s", (k, k + 3))
                    elif op < 0.85:
                        try:
                            cur.execute("UPDATE num SET id = %s WHERE id = %s", (self.big + 5000 + k, k))
                        except pymysql.err.IntegrityError:
                            pass
                    elif op < 0.93:
                        code = f"{chr(65 + k % 26)}é-{k % 25000}"
                        cur.execute("INSERT INTO skey VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = v + 1", (code, k))
                    else:
                        cur.execute("UPDATE comp SET c = c + 1 WHERE a = %s", (k % 100,))
                    self.statements += 1
                    # a steady few hundred changes per second: a busy OLTP table, and a
                    # load two cores can carry next to MariaDB, ingest, Spark and PostgreSQL
                    time.sleep(0.004)
        except BaseException as exc:  # reported by the test
            self.error = exc


def root_conn(stack: local_stack.StackInfo, db: str | None = None) -> pymysql.Connection:
    """An autocommit root connection to the stack's MariaDB (the tests' writes and checks)."""
    m = stack.mariadb
    return pymysql.connect(
        ssl_disabled=True, host=m.host, port=m.port, user="root", password=m.root_password, database=db, autocommit=True
    )


def pg_conn(stack: local_stack.StackInfo):
    """An autocommit psycopg connection to the stack's PostgreSQL (a sink changed by hand)."""
    import psycopg

    pg = stack.postgres
    return psycopg.connect(
        host=pg.host, port=pg.port, user=pg.user, dbname=pg.database, password=pg.password, autocommit=True
    )


def run_cdc(*args: str, timeout: float = 600):
    """`cdc ARGS` as a user runs it: a subprocess in the checkout, output captured."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


class Workload(threading.Thread):
    """A steady write workload: ``statement(rnd)`` gives each statement as (SQL, params), run
    one per autocommit statement on one connection to ``db`` (after the ``session``
    statements), paced to ``rate`` a second, until ``stop``. The statements decide which
    rows it touches, so a test can keep rows out of its reach (the ones it damages)."""

    def __init__(
        self,
        stack: local_stack.StackInfo,
        db: str,
        statement: Callable[[random.Random], tuple[str, tuple]],
        rate: float = 1000,
        seed: int = 3,
        session: tuple[str, ...] = (),
    ):
        super().__init__(daemon=True)
        self.conn = root_conn(stack, db)
        self.statement = statement
        self.target = rate
        self.seed = seed
        self.session = session
        self.stop_event = threading.Event()
        self.statements = 0
        self.started = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        rnd = random.Random(self.seed)
        self.started = time.monotonic()
        try:
            with self.conn.cursor() as cur:
                for s in self.session:
                    cur.execute(s)
                while not self.stop_event.is_set():
                    cur.execute(*self.statement(rnd))
                    self.statements += 1
                    ahead = self.statements / self.target - (time.monotonic() - self.started)
                    if ahead > 0:
                        time.sleep(ahead)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.conn.close()

    def rate(self) -> float:
        """Statements a second so far."""
        return self.statements / max(1e-9, time.monotonic() - self.started)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert self.error is None, self.error
