"""One ingest and one merger per test worker, shared by the scenario tests that neither stop,
kill nor reconfigure them (the suite's budget: a merger's start costs ~10 core-s).

Each such test writes a database of its own, ``database(unique_name)`` (``shr_...``), which
both processes follow by pattern: its tables are new to the running merger, which snapshots
them (``snapshot.auto_new_tables``) and streams their changes, as for any table created while
it runs. A test checks the sinks with ``SinkChecker(stack, pipeline.work)`` and the processes'
log with ``merger_log_since`` (what it wrote during that test). A process found dead is started
again for the next test, and the test that found it fails with its log."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

from cdc import stack as local_stack
from cdc.quoting import quote_ident
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import MergerProcess, root_conn, write_merger_config

DATABASE_PREFIX = "shr_"


class SharedPipeline:
    def __init__(self, stack: local_stack.StackInfo, work: Path):
        self.stack = stack
        self.work = work
        self.prefix = "shr" + uuid.uuid4().hex[:8]
        pattern = DATABASE_PREFIX + ".*"
        # a table a test wants left out of the capture (an EXCHANGE PARTITION's other table)
        excluded = [DATABASE_PREFIX + r".*\.excluded_.*"]
        ingest_yaml = work / "ingest.yaml"
        self.ingest_config = write_config(
            stack, ingest_yaml, self.prefix, [pattern, "cdc"], topic_partitions=2, table_exclude=excluded
        )
        self.metrics_port = _free_port()  # the merger's metrics (labelled by table: each test reads its own)
        merger_yaml = work / "merger.yaml"
        self.merger_config = write_merger_config(
            stack, merger_yaml, self.prefix, [pattern], work, metrics_port=self.metrics_port, table_exclude=excluded
        )
        self.ingest = IngestProcess(self.ingest_config, work / "ingest.log")
        self.merger = MergerProcess(self.merger_config, work / "merger.log")
        self.starts = 0

    def drop_leftovers(self) -> None:
        """Databases of an earlier run on this stack (a developer's reused stack): a new
        ingest would make their topics and the merger snapshot them."""
        conn = root_conn(self.stack)
        try:
            with conn.cursor() as cur:
                like = DATABASE_PREFIX.replace("_", "\\_") + "%"
                cur.execute("SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE %s", (like,))
                for (name,) in cur.fetchall():
                    cur.execute(f"DROP DATABASE {quote_ident(name)}")
        finally:
            conn.close()

    def ensure_running(self) -> None:
        """Starts what is not running. Ingest first, and on to a committed position: a
        database created before ingest knows where it starts would never reach it."""
        if not self.ingest.alive():
            if self.starts == 0:
                self.drop_leftovers()
            self.ingest.start()
            self.starts += 1
            wait_caught_up(self.stack, self.prefix, timeout_s=120, proc=self.ingest)
        if not self.merger.alive():
            self.merger.start()
            self.starts += 1

    @staticmethod
    def database(unique_name: str) -> str:
        return DATABASE_PREFIX + unique_name

    def mark(self) -> int:
        """Where the merger's log ends now (when a test begins)."""
        return _size(self.merger.log_path)

    def merger_log_since(self, mark: int) -> str:
        """What the merger wrote to its log since ``mark``."""
        with open(self.merger.log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        self.merger.stop()
        self.ingest.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
