"""Running a seed of the fuzzer's workload (tests/fuzz_sql.py) on the stack's MariaDB: its
own database, the setup, then the statements, paced, with a hook before each DDL."""

from __future__ import annotations

import time
from pathlib import Path

from tests.fuzz_sql import Features, RunStats, Workload, execute, is_ddl, opens_transaction
from tests.merger_harness import root_conn as root


class SeedRun:
    """One seed in its own database: setup, then the statements (paced)."""

    def __init__(self, stack, db: str, seed: int, statements: int, features: Features):
        self.stack, self.db, self.seed = stack, db, seed
        self.workload = Workload(seed, features)
        self.setup_sql = self.workload.setup()
        self.sql = list(self.workload.statements(statements)) + self.workload.finish()
        self.stats = RunStats()

    def create(self) -> None:
        conn = root(self.stack)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
                cur.execute(f"CREATE DATABASE `{self.db}` CHARACTER SET utf8mb4")
                cur.execute(f"USE `{self.db}`")
                execute(cur, self.setup_sql, self.stats)
        finally:
            conn.close()

    def run(self, pace_s: float = 0.0, before_ddl=None, after_ddl=None) -> RunStats:
        """``before_ddl(sql)``, if given, is called before each DDL statement, after an open
        transaction was committed explicitly (the DDL's implicit commit, written the same
        way to the binlog); ``after_ddl(sql)`` after each DDL statement that succeeded."""
        conn = root(self.stack, self.db)
        in_tx = False
        try:
            with conn.cursor() as cur:
                for sql in self.sql:
                    ddl = is_ddl(sql)
                    if ddl and (before_ddl or after_ddl) and in_tx:
                        cur.execute("COMMIT")
                    if ddl and before_ddl is not None:
                        before_ddl(sql)
                    failed = self.stats.failed
                    execute(cur, [sql], self.stats)
                    if ddl and after_ddl is not None and self.stats.failed == failed:
                        after_ddl(sql)
                    in_tx = opens_transaction(sql) if opens_transaction(sql) is not None else in_tx
                    if pace_s:
                        time.sleep(pace_s)
        finally:
            conn.close()
        return self.stats

    def save(self, directory: Path) -> Path:
        path = directory / f"fuzz-seed{self.seed}.sql"
        path.write_text(
            f"-- seed {self.seed}, database {self.db}\n" + "".join(s + ";\n" for s in self.setup_sql + self.sql)
        )
        return path

    def drop(self) -> None:
        conn = root(self.stack)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
        finally:
            conn.close()
