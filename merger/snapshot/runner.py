"""Lock-free DBLog snapshots: plan key-range chunks, then per window write LOW, read the
window's chunks in parallel through Spark JDBC into staged Parquet files, write HIGH.

The reconciliation itself (which staged rows survive, at which sequence) happens in the
stream (``merger.batch.processor`` with ``merger.dblog.emitted_rows``); this module only produces
windows. It changes the tables' runtimes only through the registry (``merger.batch.tables``),
whose lock serialises it against the batch.
Progress is persisted per chunk in the plan file; a restarted merger continues with the
first unfinished chunk.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import threading
import time
import uuid

import pymysql

from cdc.config import MergerConfig, MySQLConfig
from cdc.quoting import quote_ident
from cdc.routes import ORIGIN_COLUMN
from merger.batch.processor import BatchProcessor
from merger.batch.tables import TableRegistry
from merger.dblog import decode_key, encode_key
from merger.errors import MergerError
from merger.mysql.source import SourceGuard, connect
from merger.schema.canonical import snapshot_select
from merger.schema.catalog import Origin
from merger.snapshot.chunk_read import chunk_query, read_parallelism, stage_window, warm_up_workers
from merger.snapshot.chunking import (
    boundary_sql,
    make_chunks,
    plan_by_boundaries,
    rows_per_chunk,
    sql_predicate_literal,
)
from merger.snapshot.direct_read import is_whole_table, stage_table
from merger.snapshot.positional import PositionalWatermarks, PositionsUnavailable
from merger.snapshot.repair import RepairError, is_key_list, repair_plan, window_where
from merger.snapshot.watermarks import WatermarkRows, WindowRef
from merger.sources import source_kind
from merger.state.store import StateStore, batch_prompter, plan_state

log = logging.getLogger(__name__)

UNFINISHED = ("running", "paused")  # plan_state of a snapshot (or repair) still under way

MAX_OPEN_WINDOWS = 3
# while changes stream in (one in the last few seconds), read at most one window ahead of
# the one being emitted: reading ahead takes the CPU the streamed changes wait for. Measured
# on 2 cores at 1,000 changes/s (bench/RESULTS.md): 3 windows ahead gave p99 commit -> sink
# 6.5 s (session 6); none ahead 96-100k snapshot rows/s at p99 1.1-1.2 s; one ahead
# 124-132k rows/s at p99 1.3-1.45 s (the next window is read while this one is emitted)
MAX_OPEN_WINDOWS_STREAMING = 2
# and read each window with one task (one source connection) instead of `parallelism`
STREAMING_READ_TASKS = 1
# snapshots start once the stream has finished its first trigger, or after this long
STREAM_READY_WAIT_S = 30
# small tables (read whole by one SELECT each) share their watermark writes, this many per
# source transaction: ingest turns each watermark transaction into one Kafka transaction,
# ~7 a second here, and with a LOW and a HIGH transaction per table hundreds of small
# tables waited for their markers (issue 23)
SMALL_TABLES_PER_WATERMARK = 16


def watermark_ddl(table: str) -> str:
    db, name = table.split(".", 1)
    return (
        f"CREATE TABLE IF NOT EXISTS {quote_ident(db)}.{quote_ident(name)} ("
        "table_name VARCHAR(512) NOT NULL PRIMARY KEY, window_id VARCHAR(64) NOT NULL, "
        "kind VARCHAR(8) NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
        "ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
    )


_TABLE_CHANGED = re.compile(
    r"Unknown column|doesn't exist|\(1054,|\(1146,|Unknown table"
    # a value wider than the column type the merger knows: the column was
    # widened (MODIFY d DECIMAL(13,2), INT to BIGINT) and the ALTER has not
    # reached the merger yet
    r"|Decimal value does not fit in precision|Integer value .{1,80} not in range"
    r"|Rescaling Decimal value would cause data loss"
)


def table_changed(exc: BaseException) -> bool:
    """The read failed because the table's definition changed under it (a column renamed,
    dropped or widened, the table dropped or renamed): the DDL reaches the merger through
    the stream, which then replans or cancels the snapshot. Not an error to stop for, as
    long as that DDL arrives (else `_table_changed` stops the merger after a while)."""
    return bool(_TABLE_CHANGED.search(f"{type(exc).__name__}: {exc}"))


def split_evenly(items: list, parts: int) -> list[list]:
    """``items`` in at most ``parts`` consecutive runs whose lengths differ by one at most."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def _ranges_predicate(key_columns: list[str], chunks: list[dict]) -> str:
    """The SQL predicate of a run of chunks: the OR of their key ranges."""
    ranges = [sql_predicate_literal(key_columns, decode_key(c["lo"]), decode_key(c["hi"])) for c in chunks]
    return ranges[0] if len(ranges) == 1 else " OR ".join(f"({r})" for r in ranges)


class SnapshotRunner(threading.Thread):
    def __init__(
        self,
        config: MergerConfig,
        spark,
        store: StateStore,
        processor: BatchProcessor,
        guard: SourceGuard | None = None,
    ):
        super().__init__(name="snapshots", daemon=True)
        self.config = config
        self.spark = spark
        self.store = store
        self.processor = processor
        self.stop_event = threading.Event()
        # every source access (planning, watermarks, chunk reads) is retried by the guard
        self.guard = guard or SourceGuard(self.stop_event)
        # what asks the writer of the topics for snapshots (Debezium's signal table: its
        # incremental snapshots replace our watermark windows), or None (merger.sources)
        self.signals = source_kind(config.source_connector).snapshot_signals(config, store, self.guard)
        self.error: BaseException | None = None
        self.parallelism = read_parallelism(config)  # reads at once (capped at the cores in local mode)
        if self.parallelism < config.snapshot.parallelism:
            log.info(
                "snapshot.parallelism %d: %d reads at once, the machine's cores (local mode); set spark_master to "
                "choose the task slots yourself",
                config.snapshot.parallelism,
                self.parallelism,
            )
        m = config.mysql
        # ConnectorX has no TLS settings here: TLS asked for -> Spark JDBC
        self.reader = config.snapshot.reader
        if self.reader == "connectorx" and m.effective_ssl_mode() not in ("disabled", "preferred"):
            log.info("snapshot reads through Spark JDBC: mysql.ssl_mode %s", m.effective_ssl_mode())
            self.reader = "jdbc"
        self.source = connectorx_source(m)
        self.pending_windows: dict[str, list[str]] = {}  # table -> open window ids
        self.started_at = time.time()  # a window opened before is one a restart restored
        # set by the app: True once the streaming query has finished its first trigger
        self.stream_ready = lambda: True
        self._last_tick = 0.0
        self._waiting_checked = 0.0  # when the windows waiting for HIGH were last looked at
        self._waiting_reported: set[str] = set()
        self._resume_waits = False  # a resume request waits for the processor's tables
        self._resume_tick = False  # the tick that brings the batch restoring them was raised
        # per server (a sharded source's shard, None for the one server): the connection kept
        # for planning and small-table reads; a new one cost ~40 ms of CPU (pymysql builds a
        # TLS context each time), 40% of the merger's time when hundreds of small tables were
        # snapshotted (issue 23)
        self._read_conns: dict[str | None, pymysql.Connection] = {}
        self._changed: dict[str, float] = {}  # table -> when a read first met a changed definition
        self._retries: dict[str, list] = {}
        self.watermarks = self._watermark_kind(config, store, processor)

    def _watermark_kind(self, config: MergerConfig, store: StateStore, processor: BatchProcessor):
        """What makes LOW and HIGH (``snapshot.watermarks``): rows written to the watermark
        table, or the source's positions read (merger.snapshot.watermarks)."""
        if config.snapshot.watermarks == "positions":
            return PositionalWatermarks(
                config.kafka.client_config(),
                config.topic_prefix,
                self.stop_event,
                config.snapshot.window_timeout_s,
                processor.tables,
                self._kept_read_connection,
                processor.topic_of,
                lambda: store.raise_tick(store.tick() + 1),
            )
        return WatermarkRows(
            config.watermark_table,
            processor.tables if processor is not None else None,
            self._connect,
            batch_prompter(store, config.min_batch_gap_ms) if store is not None else None,
        )

    # ------------------------------------------------------------------ requests

    @property
    def tables(self) -> TableRegistry:
        """The processor's table registry: its lock serialises this thread against the batch."""
        return self.processor.tables

    def request(self, table: str, where: str | None = None) -> None:
        """Plan a snapshot of ``table`` (a new plan replaces an unfinished one)."""
        self.store.request("snapshot", table, where=where)

    def _server(self, shard: str | None) -> MySQLConfig:
        """The MySQL settings of a shard (None: the one server)."""
        if shard is None:
            return self.config.mysql
        return next(s.mysql for s in self.config.shards if s.name == shard)

    def _connect(self, shard: str | None = None) -> pymysql.Connection:
        return connect(self._server(shard))

    def ensure_watermark_table(self) -> None:
        if not self.watermarks.writes_to_source:
            return  # snapshot.watermarks positions
        if self.signals is not None:
            self.signals.check()  # Debezium mode: no watermark table, its signal table instead
            return
        for shard in [s.name for s in self.config.shards] or [None]:
            where = f" on shard {shard}" if shard else ""
            self.guard.call(f"creating the watermark table{where}", self._ensure_watermark_table, shard)

    def _ensure_watermark_table(self, shard: str | None = None) -> None:
        conn = self._connect(shard)
        try:
            with conn.cursor() as cur:
                db, name = self.config.watermark_table.split(".", 1)
                # a least-privileged merger user may not CREATE (MySQL and MariaDB check the
                # privilege before IF NOT EXISTS): an existing table is all we need
                cur.execute(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, name)
                )
                if cur.fetchone():
                    return
                try:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_ident(db)}")
                    cur.execute(watermark_ddl(self.config.watermark_table))
                except pymysql.err.OperationalError as exc:
                    if exc.args[0] in (1044, 1142):
                        raise MergerError(
                            f"cannot create the watermark table {self.config.watermark_table}: ask an "
                            f"administrator to run: {watermark_ddl(self.config.watermark_table)}"
                        ) from None
                    raise
        finally:
            conn.close()

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._warm_up()
            self._wait_for_stream()
            self._restore_tables()
            while not self.stop_event.is_set():
                self._handle_requests()
                progressed = False
                small: list[tuple] = []  # windows of small tables, written in groups
                for table, plan in sorted(self.store.unfinished_plans().items()):
                    if self.stop_event.is_set():
                        break
                    if plan.get("finished_at") or plan.get("cancelled") or plan.get("paused"):
                        continue
                    window = self._next_window(table, plan)
                    if window is None:
                        continue
                    if not is_whole_table(window[2]) or "origin" in window[2][0]:
                        # (an origin's watermarks go to its own server: no shared writes)
                        progressed |= self._run_window(*window)
                        continue
                    small.append(window)
                    if len(small) >= SMALL_TABLES_PER_WATERMARK:
                        progressed |= self._small_windows(small)
                        small = []
                if small and not self.stop_event.is_set():
                    progressed |= self._small_windows(small)
                self._tick_if_idle()
                self._report_waiting_windows()
                if not progressed:
                    self.stop_event.wait(0.2)
        except BaseException as exc:  # reported by the app's main loop
            if self.stop_event.is_set():
                return  # stopping: a retry given up is no failure
            self.error = exc
            log.exception("snapshot runner failed")
        finally:
            self.watermarks.close()
            for conn in self._read_conns.values():
                try:
                    conn.close()
                except Exception:
                    pass

    def _wait_for_stream(self) -> None:
        """The stream's first micro-batch costs seconds (query planning, Python workers,
        the first sink writes): windows opened before it ends would wait for it with their
        watermarks open and their rows staged. Waited for at most STREAM_READY_WAIT_S."""
        deadline = time.monotonic() + STREAM_READY_WAIT_S
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            try:
                if self.stream_ready():
                    return
            except Exception as exc:  # the query's own failure is reported by the app
                log.debug("stream readiness unknown: %s", exc)
                return
            self.stop_event.wait(0.1)
        if not self.stop_event.is_set():
            log.info("the stream's first micro-batch takes over %ds: snapshots start anyway", STREAM_READY_WAIT_S)

    def _restore_tables(self) -> None:
        """The tables, their open windows among them, come back with the first micro-batch,
        and on a source with no writes Spark runs none: with a snapshot unfinished, the
        tick brings it (a window staged before a restart may wait for its HIGH)."""
        if self.processor.clock.restored or not self.store.unfinished_plans():
            return
        self._resume_tick = True
        self.store.raise_tick(self.store.tick() + 1)

    def _tick_if_idle(self) -> None:
        """Spark runs a micro-batch only for new offsets. Windows left over by the emission
        budget need one more: the processor's tick file normally brings it (see
        ``BatchProcessor._ask_for_batch``); if no batch came for 2 s, a TICK write to the
        watermark table brings a marker (ignored by the reconciler) and so a batch."""
        clock = self.processor.clock
        table = clock.emission_pending
        now = time.monotonic()
        if table is None or clock.started is not None:
            return
        if now - clock.finished_at < 2.0 or now - self._last_tick < 2.0:
            return
        self._last_tick = now
        try:
            self.watermarks.tick(table, self._any_origin(table))
        except Exception as exc:  # the next tick tries again
            log.warning("watermark tick for %s failed: %s", table, exc)

    def _report_waiting_windows(self) -> None:
        """A window whose HIGH marker has not come for ``window_timeout_s`` expires in the
        next batch; when no batch came for as long (no writes, and no markers either: ingest
        is down or does not capture the watermark table), say so, once per window, rather
        than wait in silence."""
        now = time.time()
        if now - self._waiting_checked < 5.0:
            return
        self._waiting_checked = now
        timeout = self.config.snapshot.window_timeout_s
        if time.monotonic() - self.processor.clock.finished_at < timeout:
            return  # batches run: theirs is the expiry (``BatchProcessor._expire_windows``)
        with self.tables.locked():
            # the batch's own expiry rule (``Reconciler.expired``), staged windows only
            waiting = [
                (name, wid, now - rt.reconciler.window(wid).opened_at)
                for name, rt in self.tables.items()
                for wid in rt.reconciler.expired(now, timeout)
                if rt.reconciler.window(wid).staged
            ]
        for name, wid, age in waiting:
            if wid in self._waiting_reported:
                continue
            self._waiting_reported.add(wid)
            log.warning(
                "snapshot window %s of %s has waited %.0fs for its HIGH watermark marker: is ingest running "
                "and capturing the watermark table %s?",
                wid,
                name,
                age,
                self.config.watermark_table,
            )

    def _waits(self, req: dict) -> bool:
        """Whether a request must wait (left in the store, so a restart keeps it): a resume
        until the processor restored its tables (paused ones too) in its first micro-batch,
        else it would find no table; a repair until the table's running snapshot or repair
        is done."""
        if req.get("action") == "resume":
            self._resume_waits = not self.processor.clock.restored
            return self._resume_waits
        if req.get("action") != "repair":
            return False
        plan = self.store.load_plan(req.get("table", ""))
        return plan_state(plan) in UNFINISHED and plan.get("repair_id") != req.get("args", {}).get("id")

    def _handle_requests(self) -> None:
        self._resume_waits = False
        requests = self.store.take_requests(leave=self._waits)
        if self._resume_waits and not self._resume_tick:
            # the batch that restores the tables: a tick brings it (Spark runs none without new offsets)
            self._resume_tick = True
            self.store.raise_tick(self.store.tick() + 1)
        for req in requests:
            table, action = req["table"], req["action"]
            plan = self.store.load_plan(table)
            rt = self.tables.lookup(table)
            if action == "repair":
                if plan_state(plan) in UNFINISHED:
                    continue  # this very repair, already running
                self._plan_repair(table, rt, req.get("args", {}))
            elif self.signals is not None:
                self.signals.handle(req)  # Debezium snapshots the table; we only ask
            elif action == "snapshot":
                args = req.get("args", {})
                if args.get("auto") and plan is not None:
                    continue  # a table seen again after a restart: its plan is already there
                if plan_state(plan) in UNFINISHED:
                    self._drop_open_windows(table)
                if rt is not None and rt.phase == "paused" and args.get("shard"):
                    # its sink tables are rebuilt: every shard's rows are read again
                    log.info(
                        "snapshot of %s: the table is paused, every shard is read (not only %s)", table, args["shard"]
                    )
                    args = {k: v for k, v in args.items() if k != "shard"}
                if rt is not None and rt.phase == "paused" and not args.get("auto"):
                    # paused by a change its sink tables cannot follow: rebuild them
                    self._drop_open_windows(table)
                    with self.tables.locked():
                        if not self.processor.rebuild_table(rt):
                            continue
                self._changed.pop(table, None)
                self._retries.pop(table, None)
                try:
                    self._plan(table, args.get("where"), args.get("shard"))
                except Exception as exc:
                    if not table_changed(exc):
                        raise
                    # dropped or renamed meanwhile: its DDL marker cancels, or asks again
                    log.info("snapshot of %s not planned: the table changed (%s)", table, _changed_line(exc))
            elif action in ("pause", "resume", "cancel") and plan is not None:
                if action == "pause":
                    plan["paused"] = True
                elif action == "resume":
                    plan.pop("paused", None)
                else:
                    plan["cancelled"] = time.time()
                self.store.save_plan(table, plan)
                if action == "cancel":
                    self._drop_open_windows(table)
                    self.tables.set_phase(rt, "streaming", when="snapshotting")
                log.info("snapshot of %s: %s", table, action)
            if action == "resume" and rt is not None and rt.phase == "paused":
                with self.tables.locked():
                    rt.phase, rt.error = "streaming", None
                    self.processor.resume_table(rt)

    def _drop_open_windows(self, table: str) -> None:
        """A new plan replaces a running one: forget its open windows (their late markers
        are ignored, their staged rows deleted)."""
        self.tables.finish_windows(table, lambda wid: self._unstage(table, wid))
        self.pending_windows.pop(table, None)

    def _unstage(self, table: str, wid: str) -> None:
        shutil.rmtree(self.store.staging_dir(table, wid), ignore_errors=True)

    def _abandon(self, table: str, rt, wid: str) -> None:
        """Give up one window (a source failure in the middle of it): its late markers are
        ignored, its staged rows deleted, its chunks read again in a new window."""
        self.tables.finish_window(rt, wid, lambda w: self._unstage(table, w))
        if wid in self.pending_windows.get(table, []):
            self.pending_windows[table].remove(wid)

    # ------------------------------------------------------------------ planning

    def _plan(self, table: str, where: str | None, shard: str | None = None) -> dict | None:
        with self.tables.locked():
            rt = self.processor.table(table)
        if rt is None:
            log.error("snapshot of %s: table not found", table)
            return None
        if not rt.keys:
            log.error("snapshot of %s: %s", table, rt.error)
            return None
        if rt.phase == "dropped":
            log.info("snapshot of %s not planned: the table was dropped", table)
            return None
        origins = self.guard.call(f"listing where {table} is read", self.processor.catalog.origins, table)
        if shard is not None:  # `cdc snapshot --shard`: that shard's tables only
            origins = [o for o in origins if o.shard == shard]
        if not origins:
            log.error("snapshot of %s: no source table is it (routes%s)", table, f", shard {shard}" if shard else "")
            return None
        chunks = []
        for origin in origins:
            chunks += self._plan_origin(table, rt, origin)
        plan = {
            "table": table,
            "where": where,
            "created_at": time.time(),
            "rows": 0,
            "done": [],
            "chunks": chunks,
        }
        self.store.save_plan(table, plan)
        self.tables.set_phase(rt, "snapshotting", when="streaming")
        if len(origins) > 1 or origins[0].shard is not None:
            log.info("snapshot of %s planned: %d chunks over %d source tables", table, len(chunks), len(origins))
        return plan

    def _plan_repair(self, table: str, rt, args: dict) -> None:
        """A repair's key-list plan (merger.snapshot.repair); why a repair cannot run is
        written down beside the plans (``StateStore.refuse_repair``), for `cdc repair` to report."""
        repair_id = str(args.get("id") or "")
        try:
            if self.signals is not None:
                raise RepairError(f"repair of {table}: needs the merger's own snapshots (source_connector: ingest)")
            if rt is None or not rt.keys:
                raise RepairError(f"repair of {table}: the merger has no such table with a key")
            if rt.phase in ("paused", "failed", "dropped"):
                raise RepairError(f"repair of {table}: the table is {rt.phase}; `cdc status` says why")
            origins = self.guard.call(f"listing where {table} is read", self.processor.catalog.origins, table)
            if len(origins) != 1 or origins[0].shard is not None or origins[0].name is not None:
                raise RepairError(f"repair of {table}: a sharded or routed table cannot be repaired yet")
            plan = repair_plan(table, repair_id, [tuple(decode_key(k)) for k in args.get("keys", [])])
        except RepairError as exc:
            log.error("%s", exc)
            self.store.refuse_repair(table, repair_id, str(exc))
            return
        self.store.save_plan(table, plan)
        self.tables.set_phase(rt, "snapshotting", when="streaming")
        log.info(
            "repair of %s planned: %d keys in %d windows",
            table,
            sum(len(c["keys"]) for c in plan["chunks"]),
            len(plan["chunks"]),
        )

    def _plan_origin(self, table: str, rt, origin: Origin) -> list[dict]:
        """The chunks of one source table of ``table`` (for a routed table, each names its
        origin: the window reads that server's table and writes that server's watermarks)."""
        db, name = origin.db, origin.table
        keys = read_keys(rt.keys)
        settings = self.config.snapshot
        chunk_size = settings.chunk_size

        def plan_ranges():
            nonlocal chunk_size
            conn = self._kept_read_connection(origin.shard)
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT AVG_ROW_LENGTH FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                        (db, name),
                    )
                    found = cur.fetchone()
                    avg = int(found[0]) if found and found[0] else None
                    chunk_size = rows_per_chunk(settings.chunk_size, settings.chunk_mb, avg)
                    if chunk_size < settings.chunk_size:
                        log.info(
                            "snapshot of %s: rows of %d bytes on average: chunks of %d rows (snapshot.chunk_mb %d)",
                            table,
                            avg,
                            chunk_size,
                            settings.chunk_mb,
                        )

                    def next_boundary(lo, hi=None):
                        sql, params = boundary_sql((db, name), keys, lo, chunk_size, hi)
                        cur.execute(sql, params)
                        row = cur.fetchone()
                        return None if row is None else tuple(row)

                    return list(plan_by_boundaries(next_boundary))
            except BaseException:
                self._drop_read_connection(origin.shard)
                raise

        itself = origin.shard is None and origin.name is None and (db, name) == tuple(table.split(".", 1))
        what = table if itself else origin.describe()
        ranges = self.guard.call(f"planning the snapshot of {what}", plan_ranges)
        chunks = make_chunks(table if itself else f"{table}@{origin.name or origin.describe()}", ranges)
        log.info("snapshot of %s planned: %d chunks of at most %d rows", what, len(chunks), chunk_size)
        described = None if itself else {"name": origin.name, "shard": origin.shard, "db": db, "table": name}
        return [
            {"id": c.id, "lo": encode_key(c.range.lo), "hi": encode_key(c.range.hi)}
            | ({"origin": described} if described else {})
            for c in chunks
        ]

    # ------------------------------------------------------------------ windows

    def _step(self, table: str, plan: dict) -> bool:
        """The table's next window, if it may open one now; True if it did."""
        window = self._next_window(table, plan)
        return window is not None and self._run_window(*window)

    def _next_window(self, table: str, plan: dict) -> tuple | None:
        """``(table, rt, chunks, where, tasks)`` of the table's next window (``where``: the
        plan's condition), or None when it has none to open now."""
        with self.tables.locked():
            plan = self.store.load_plan(table) or plan  # fresh: windows finish meanwhile
            if plan.get("finished_at") or plan.get("cancelled") or plan.get("paused"):
                return None
            rt = self.tables.get(table)
            if rt is None or rt.phase in ("paused", "failed", "dropped"):
                return None
            unclosed = self._forget_dead_windows(table, rt)
            # every open window holds its chunks, one restored from before a restart too:
            # its HIGH may be in the topic already, and its chunks read again in a new
            # window would be emitted twice (a change log would hold their rows twice)
            open_ids = list(rt.reconciler.windows)
            self.pending_windows[table] = open_ids
            busy = {c for w in rt.reconciler.windows.values() for c in w.chunk_ids}
            if rt.phase == "streaming":
                rt.phase = "snapshotting"
        for wid in unclosed:
            self._close_restored_window(table, wid, plan)
        streaming = self.processor.clock.changes_streaming()
        if len(open_ids) >= (MAX_OPEN_WINDOWS_STREAMING if streaming else MAX_OPEN_WINDOWS):
            return None
        done = set(plan["done"])
        todo = [c for c in plan["chunks"] if c["id"] not in done and c["id"] not in busy]
        if not todo:
            return None
        # a window reads one origin (one server's table, its watermarks on that server)
        todo = [c for c in todo if c.get("origin") == todo[0].get("origin")]
        # a window holds at least `parallelism` chunks, one read each at least; a key list
        # (a repair) is read alone, by one SELECT
        per_window = 1 if is_key_list(todo[0]) else max(self.config.snapshot.chunks_per_window, self.parallelism)
        chunks = todo[:per_window]
        # while changes stream in, one read task: the other core serves the stream
        tasks = STREAMING_READ_TASKS if streaming else self.parallelism
        since = self._changed.get(table)
        if since is not None and time.monotonic() - since < 2.0 * len(self._changed_retries(table)):
            return None
        return table, rt, chunks, plan.get("where"), tasks

    def _forget_dead_windows(self, table: str, rt) -> list[str]:
        """Give up the windows a restart restored that were never staged: their reads died
        with the process before, so they can never be emitted; their chunks are free to be
        read again at once (not after ``window_timeout_s``). Returns the restored windows
        that were staged but lack HIGH in some partition: the process before may have died
        before it wrote HIGH, and nothing else would ever close them on a quiet source.
        Called under the tables' lock."""
        mine = self.pending_windows.get(table, [])
        unclosed = []
        for wid, w in list(rt.reconciler.windows.items()):
            if w.opened_at >= self.started_at or wid in mine:
                continue
            # (a positional window saved before its LOW was read: that LOW is lost with the
            # process, and without it the window cannot be checked nor closed)
            if not w.staged or (w.positions is not None and w.positions.low is None):
                rt.reconciler.finish(wid)
                self._unstage(table, wid)
                log.info("snapshot window %s of %s was being read when the merger stopped: read again", wid, table)
            elif w.problem is None and len(w.high) < rt.reconciler.num_partitions:
                unclosed.append(wid)
        return unclosed

    def _close_restored_window(self, table: str, wid: str, plan: dict) -> None:
        """Write HIGH (again) for a restored staged window. Its rows were read after LOW
        committed, so any HIGH written now is after the read ended, as the DBLog rule asks;
        the window is only longer (more changes seen, fewer rows emitted, those keys' rows
        come from the stream). If the first HIGH was written after all, each partition keeps
        the first copy it reads (``Reconciler.on_marker``) and this one is ignored."""
        chunk_ids = self.tables.window_chunks(table, wid)
        if chunk_ids is None:
            return
        chunks = [c for c in plan.get("chunks", []) if c["id"] in chunk_ids]
        origin = origin_of_chunks(chunks) if chunks else None
        ref = WindowRef(table, self.tables[table], wid, origin)
        self.guard.call(f"snapshot of {table}", self.watermarks.high, [ref])
        log.info(
            "snapshot window %s of %s was staged when the merger stopped, its HIGH watermark perhaps not "
            "written: written now",
            wid,
            table,
        )

    def _run_window(self, table: str, rt, chunks: list[dict], where: str | None, tasks: int) -> bool:
        try:
            self.guard.call(f"snapshot of {table}", self._window, table, rt, chunks, where, tasks)
        except PositionsUnavailable as exc:
            log.warning("snapshot of %s: %s", table, exc)
            return False
        except Exception as exc:
            if not table_changed(exc):
                raise
            self._table_changed(table, exc)
            return False
        self._changed.pop(table, None)
        self._retries.pop(table, None)
        return True

    def _changed_retries(self, table: str) -> list:
        return self._retries.setdefault(table, [])

    def _table_changed(self, table: str, exc: BaseException) -> None:
        """A window's read met a changed definition (the window is abandoned). Its DDL
        marker is on its way and will replan or cancel the snapshot; until then the read is
        tried again, less and less often, for at most ``window_timeout_s``."""
        now = time.monotonic()
        first = self._changed.setdefault(table, now)
        self._changed_retries(table).append(now)
        if now - first > self.config.snapshot.window_timeout_s:
            raise MergerError(
                f"snapshot of {table}: the source's rows do not fit the table definition the "
                f"merger knows, and no schema change reached it within "
                f"{self.config.snapshot.window_timeout_s:.0f}s (is ingest running? does the "
                f"table's topic carry its DDL?): {_changed_line(exc)}"
            ) from None
        log.info(
            "snapshot of %s: the table changed under the read (%s); waiting for its schema change",
            table,
            _changed_line(exc),
        )

    def _dropped_while_read(self, table: str, rt, wid: str, exc: BaseException) -> bool:
        """Whether a window whose read failed had been given up meanwhile (a new plan after
        a schema change drops the open windows and deletes their staged files, under a read
        that is still writing them): its failure is then no failure of the snapshot."""
        if self.tables.window_open(rt, wid):
            return False
        self._unstage(table, wid)
        log.info("snapshot window %s of %s: given up while it was read (%s)", wid, table, _changed_line(exc))
        return True

    def _window(self, table: str, rt, chunks: list[dict], where: str | None, tasks: int | None = None) -> None:
        """One window: open it, write LOW, read its chunks, write HIGH. If the source
        fails on the way the window is abandoned and the guard retries the chunks in a
        new window with new watermarks (a read must start after its LOW committed and end
        before its HIGH: a half-read window cannot be continued)."""
        wid = uuid.uuid4().hex[:16]
        self.watermarks.open(rt, wid, [c["id"] for c in chunks], time.time())
        self.pending_windows.setdefault(table, []).append(wid)
        started = time.monotonic()
        rows, expired = 0, True
        try:
            ref = WindowRef(table, rt, wid, origin_of_chunks(chunks))
            if self.watermarks.low([ref]):  # (a positional LOW may find the window expired)
                rows = self._read_chunks(table, rt, chunks, where, wid, tasks)
                # staged before HIGH is written: the batch that reads HIGH must find the window
                # ready, for on an idle source no other batch may follow
                expired = not self.tables.mark_staged(rt, wid)
                if not expired:
                    self.watermarks.high([ref])
        except Exception as exc:
            if self._dropped_while_read(table, rt, wid, exc):
                return
            self._abandon(table, rt, wid)
            raise
        except BaseException:
            self._abandon(table, rt, wid)
            raise
        if expired:  # markers too late: its chunks are read again
            shutil.rmtree(self.store.staging_dir(table, wid), ignore_errors=True)
        log.info(
            "snapshot window %s of %s: %d chunks, %d rows staged in %.1fs",
            wid,
            table,
            len(chunks),
            rows,
            time.monotonic() - started,
        )

    def _small_windows(self, group: list[tuple]) -> bool:
        """Windows of small tables, each read whole by one SELECT, with shared watermark
        writes (``_shared_windows``); True if any was staged."""
        names = ", ".join(w[0] for w in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
        try:
            staged = self.guard.call(f"snapshot of {names}", self._shared_windows, group)
        except PositionsUnavailable as exc:
            log.warning("snapshot of %s: %s", names, exc)
            return False
        for table in staged:
            self._changed.pop(table, None)
            self._retries.pop(table, None)
        return bool(staged)

    def _shared_windows(self, group: list[tuple]) -> list[str]:
        """One window per table of ``group``: the LOW rows of all in one transaction, then
        each table's SELECT (each starts after its LOW committed), then the HIGH rows of all
        in one transaction (each written after its table's SELECT ended): the DBLog
        conditions of every window hold. A table whose definition changed under its read is
        left out (``_table_changed``); any other failure abandons every window of the
        group, for the guard to retry with new ones. Returns the tables staged."""
        opened = []
        try:
            for table, rt, chunks, _where, _tasks in group:
                wid = uuid.uuid4().hex[:16]
                self.watermarks.open(rt, wid, [c["id"] for c in chunks], time.time())
                self.pending_windows.setdefault(table, []).append(wid)
                opened.append((table, rt, wid))
            low = {w.wid for w in self.watermarks.low([WindowRef(table, rt, wid) for table, rt, wid in opened])}
            staged = []
            for (table, rt, wid), (_, _, chunks, where, _) in zip(opened, group):
                if wid not in low:
                    continue
                started = time.monotonic()
                try:
                    rows = self._read_chunks(table, rt, chunks, where, wid)
                except Exception as exc:
                    if self._dropped_while_read(table, rt, wid, exc):
                        continue
                    if not table_changed(exc):
                        raise
                    self._abandon(table, rt, wid)
                    self._table_changed(table, exc)
                    continue
                if not self.tables.mark_staged(rt, wid):  # expired meanwhile: read again
                    shutil.rmtree(self.store.staging_dir(table, wid), ignore_errors=True)
                    continue
                staged.append((table, wid))
                log.info(
                    "snapshot window %s of %s: %d chunks, %d rows staged in %.1fs",
                    wid,
                    table,
                    len(chunks),
                    rows,
                    time.monotonic() - started,
                )
            self.watermarks.high([WindowRef(table, self.tables[table], wid) for table, wid in staged])
        except BaseException:
            for table, rt, wid in opened:
                self._abandon(table, rt, wid)
            raise
        return [table for table, _ in staged]

    def _any_origin(self, table: str) -> dict | None:
        """An origin of the table's snapshot plan (a tick's marker may come from any)."""
        plan = self.store.load_plan(table) or {}
        return origin_of_chunks(plan.get("chunks") or [{}])

    def _kept_read_connection(self, shard: str | None = None) -> pymysql.Connection:
        """The runner's connection for planning and small-table reads (autocommit: each
        SELECT starts after the LOW watermark committed)."""
        if shard not in self._read_conns:
            self._read_conns[shard] = self._connect(shard)
        return self._read_conns[shard]

    def _drop_read_connection(self, shard: str | None = None) -> None:
        """After a failure the connection's state is unknown: the next use opens a new one."""
        conn = self._read_conns.pop(shard, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def jdbc_url(self, m: MySQLConfig | None = None) -> str:
        m = m or self.config.mysql
        # jdbc:mysql with permitMysqlScheme: Spark then quotes identifiers with backticks
        url = (
            f"jdbc:mysql://{m.host}:{m.port}/?permitMysqlScheme&sessionVariables=time_zone='+00:00'"
            f"&connectTimeout={int(m.connect_timeout_s * 1000)}&useCompression=false"
        )
        return url + m.jdbc_ssl_params()  # TLS settings; their secrets go in the properties

    def _warm_up(self) -> None:
        """A first Spark JDBC read costs seconds (class loading, JIT, the first job): pay
        them at start, not inside the first window, which holds its watermarks open."""
        if self.signals is not None:
            return
        started = time.monotonic()
        path = self.store.root / "warm-up"
        try:
            if self.reader == "connectorx":  # starts the Python workers, loads ConnectorX
                # the reads' slots only: the stream's first micro-batch runs meanwhile
                warm_up_workers(self.spark, self.source, path, self.parallelism)
            else:
                props = {**self.config.mysql.jdbc_secret_properties(), "driver": "org.mariadb.jdbc.Driver"}
                df = self.spark.read.jdbc(self.jdbc_url(), "(SELECT 1 AS x) AS cdc_warm_up", properties=props)
                df.write.mode("overwrite").option("compression", "none").parquet(str(path))  # as a window does
        except Exception as exc:  # the first window says what is wrong, with retries
            log.debug("snapshot reader warm-up failed: %s", exc)
            return
        finally:
            shutil.rmtree(path, ignore_errors=True)
        log.info("snapshot reader (%s) ready in %.1fs", self.reader, time.monotonic() - started)

    def _read_chunks(
        self, table: str, rt, chunks: list[dict], where: str | None, wid: str, tasks: int | None = None
    ) -> int:
        # one definition for the whole read, recorded with the rows
        spec, read_with = self.tables.definition(rt)
        keys, constants, shard = rt.keys, None, None
        origin = origin_of_chunks(chunks)
        if origin is not None:
            # a routed table's origin: its physical table on its server, the origin column a constant
            spec = dataclasses.replace(spec, db=origin["db"], table=origin["table"])
            keys, shard = read_keys(rt.keys), origin["shard"]
            constants = {ORIGIN_COLUMN: origin["name"]} if origin["name"] else None
        if is_whole_table(chunks):
            # a table smaller than one chunk, or a repair's key list: one streamed SELECT in
            # the driver (a Spark job per small table would cost more than the read, see
            # merger.snapshot.direct_read), the keys as parameters
            condition, params = window_where(where, chunks, read_keys(rt.keys))
            conn = self._kept_read_connection(shard)
            try:
                rows = stage_table(
                    conn,
                    spec,
                    condition,
                    self.store.staging_dir(table, wid),
                    self.config.snapshot.fetch_size,
                    constants,
                    params,
                )
            except BaseException:
                self._drop_read_connection(shard)
                raise
            self.store.mark_staged(table, wid, read_with)
            return rows
        if is_key_list(chunks[0]):  # a key list is one chunk without bounds, read above
            raise AssertionError(f"a repair window of {table} with {len(chunks)} chunks")
        path = self.store.staging_dir(table, wid)
        groups = split_evenly(chunks, tasks or self.parallelism)
        server = self._server(shard)
        if self.reader == "connectorx":
            ranges = [_ranges_predicate(keys, group) for group in groups]
            self.spark.sparkContext.setJobDescription(f"snapshot {table} window {wid}")
            rows = stage_window(
                self.spark,
                connectorx_source(server),
                [chunk_query(spec, where, r, constants) for r in ranges],
                path,
                self.config.snapshot.fetch_size,
            )
            self.store.mark_staged(table, wid, read_with)
            return rows
        db, name = spec.db, spec.table
        key_alias = [f"__cdc_k{i}" for i in range(len(keys))]
        select = snapshot_select(spec, constants)
        raw_keys = ", ".join(f"{quote_ident(k)} AS {a}" for k, a in zip(keys, key_alias))
        source = (
            f"(SELECT {select}, {raw_keys} FROM {quote_ident(db)}.{quote_ident(name)}"
            f"{' WHERE ' + where if where else ''}) AS cdc_snapshot"
        )
        # exactly `parallelism` reads (Spark partitions, source connections) per window,
        # each over a run of the window's chunks
        predicates = [_ranges_predicate(key_alias, group) for group in groups]
        props = {
            **server.jdbc_secret_properties(),  # user, password, keyStorePassword
            "driver": "org.mariadb.jdbc.Driver",
            "fetchsize": str(self.config.snapshot.fetch_size),
        }
        df = self.spark.read.jdbc(self.jdbc_url(server), source, predicates=predicates, properties=props)
        df = df.drop(*key_alias)
        self.spark.sparkContext.setJobDescription(f"snapshot {table} window {wid}")
        # uncompressed: the files live for seconds, and both ends spend less CPU
        df.write.mode("overwrite").option("compression", "none").parquet(str(path))
        self.store.mark_staged(table, wid, read_with)  # before HIGH: a restarted merger knows the rows are complete
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(p).metadata.num_rows for p in path.glob("*.parquet"))


def connectorx_source(m: MySQLConfig) -> dict:
    """What a ConnectorX read connects with (``merger.snapshot.chunk_read.stage_query``)."""
    return {
        "host": m.host,
        "port": m.port,
        "user": m.user,
        "password": m.password().get_secret_value(),
        "connect_timeout_s": m.connect_timeout_s,
    }


def origin_of_chunks(chunks: list[dict]) -> dict | None:
    """The origin a window's chunks are read from (one per window), None for the table itself."""
    return chunks[0].get("origin") if chunks else None


def read_keys(keys: list[str]) -> list[str]:
    """The key columns of a routed table's physical tables: its key without the origin column."""
    return [k for k in keys if k != ORIGIN_COLUMN]


def _changed_line(exc: BaseException) -> str:
    """The line of an error (often a Spark worker's long traceback) that says what changed."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return next((line.strip() for line in lines if _TABLE_CHANGED.search(line)), lines[0])[:300]
