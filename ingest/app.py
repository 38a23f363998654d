"""The ingest process: reads the binlog as a replica and writes Debezium-compatible change
events, watermark markers, schema changes and heartbeats to Kafka, exactly once.

The loop is simple on purpose: it reads from the last committed ``ResumePoint``; events
go into an open Kafka transaction; at a source commit (or a row-event boundary inside a
large source transaction) when enough is pending, the transaction is committed together
with the new position. On any error the open Kafka transaction is aborted and, for
transient errors, the loop starts again from the last committed position: whatever was
not committed is read again, nothing is written twice (and on brokers that show aborted
records, consumers drop the replay by its ``cdc.position``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc.config import IngestConfig
from ingest import metrics
from ingest.checks import SourceError, check_source, connect, gtid_for_file_pos
from ingest.codec import CodecOptions, TableCodec, load_column_details
from ingest.ddl import parse_ddl
from ingest.filters import CaptureFilter
from ingest.partitioner import partition_for
from ingest.position import POSITION_HEADER, EventPosition, ResumePoint, advance_gtid_state
from ingest.producer import BrokerError, Topics, TransactionalProducer, read_resume_point

log = logging.getLogger("cdc.ingest")

WATERMARK_HEADER = "cdc.watermark"
_TRANSIENT_MYSQL = (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError,
                    OSError, EOFError)


class IngestError(RuntimeError):
    """Fatal, user-facing error (one line)."""


@dataclass
class _Trx:
    gtid: str
    ts_ms: int
    thread: int | None = None
    row_events: int = 0  # row events of this transaction seen so far
    skip_events: int = 0  # row events already committed by an earlier run
    events_written: int = 0
    tables: dict | None = None


class Ingest:
    def __init__(self, config: IngestConfig):
        self.config = config
        self.prefix = config.topic_prefix
        self.filter = CaptureFilter(config)
        self.options = CodecOptions.from_config(config)
        self.offsets_topic = f"{self.prefix}.offsets"
        self.heartbeat_topic = f"__debezium-heartbeat.{self.prefix}"
        self.transaction_topic = f"{self.prefix}.transaction"
        self.source_key = json.dumps({"server": self.prefix}, separators=(",", ":")).encode()
        self.kafka_conf = config.kafka.client_config()
        self._codecs: dict[tuple[str, str, int], TableCodec] = {}
        self._details: dict[tuple[str, str], dict] = {}
        self.committed: ResumePoint | None = None
        self.stats = {"events": 0, "kafka_transactions": 0, "source_transactions": 0}

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        facts = check_source(self.config)
        metrics.serve(self.config.metrics_port)
        self.topics = Topics(self.kafka_conf)
        self.topics.check_reachable()
        self.topics.partitions(self.offsets_topic, 1, compact=True)
        self.topics.partitions(self.prefix, 1)
        self.committed = read_resume_point(self.kafka_conf, self.offsets_topic, self.source_key)
        if self.committed is None:
            self.committed = ResumePoint(gtid_state=self._start_gtid(facts))
            log.info("no committed position: starting at GTID %s", self.committed.gtid_state or "<empty>")
        else:
            log.info("resuming at GTID %s (+%d row events of %s)", self.committed.gtid_state,
                     self.committed.trx_events, self.committed.trx_gtid)
        txn_id = f"cdc-ingest-{self.config.state_name or self.prefix}"
        self.producer = TransactionalProducer(self.kafka_conf, txn_id)
        backoff = 1.0
        while not stop.is_set():
            try:
                self._stream(stop)
                backoff = 1.0
            except _TRANSIENT_MYSQL as exc:
                self._recover(f"source connection lost ({exc}); retrying in {backoff:.0f}s", "source")
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except pymysql.err.InternalError as exc:
                if exc.args and exc.args[0] == 1236:
                    raise IngestError(
                        f"the source no longer has the binlog for GTID {self.committed.gtid_state} "
                        f"(purged?): re-snapshot, or start with start.mode=current") from None
                raise
            except BrokerError as exc:
                self._recover(f"broker error ({exc}); retrying in {backoff:.0f}s", "broker")
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                self.producer = TransactionalProducer(self.kafka_conf, txn_id)
        self.producer.abort()

    def _recover(self, message: str, kind: str) -> None:
        log.warning(message)
        metrics.ERRORS.labels(kind).inc()
        metrics.CONNECTED.set(0)
        try:
            self.producer.abort()
        except Exception:  # the producer may be unusable; it is recreated by the caller
            pass

    def _start_gtid(self, facts: dict) -> str:
        start = self.config.start
        if start.mode == "gtid":
            if not start.gtid:
                raise IngestError("start.gtid: required when start.mode is gtid")
            return start.gtid
        if start.mode == "file":
            if not start.file or start.pos is None:
                raise IngestError("start.file and start.pos: required when start.mode is file")
            return gtid_for_file_pos(self.config, start.file, start.pos)
        return facts["gtid_binlog_pos"]

    # ------------------------------------------------------------------ streaming

    def _reader(self) -> BinLogStreamReader:
        kw = self.config.mysql.connect_kwargs()
        settings = {"host": kw["host"], "port": kw["port"], "user": kw["user"],
                    "passwd": kw["password"], "connect_timeout": kw["connect_timeout"]}
        if "ssl" in kw:
            settings["ssl"] = kw["ssl"]
        return BinLogStreamReader(
            connection_settings=settings, server_id=self.config.server_id, is_mariadb=True,
            auto_position=self.committed.gtid_state or "", blocking=True,
            resume_stream=True, slave_heartbeat=1.0,
            only_events=[MariadbGtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
                         WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )

    def _stream(self, stop: threading.Event) -> None:
        cfg = self.config
        reader = self._reader()
        metrics.CONNECTED.set(1)
        point = self.committed
        gtid_state = point.gtid_state
        file, trx = None, None
        pending, txn_started = 0, 0.0
        last_heartbeat = time.monotonic()
        try:
            for event in reader:
                if stop.is_set():
                    break
                now = time.monotonic()
                if isinstance(event, RotateEvent):
                    file = event.next_binlog
                    continue
                end_pos = event.packet.log_pos
                start_pos = end_pos - event.packet.event_size
                if isinstance(event, MariadbGtidEvent):
                    trx = _Trx(event.gtid, event.timestamp * 1000, tables={})
                    if point.trx_gtid == event.gtid:
                        trx.skip_events = point.trx_events
                    continue
                if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    if trx is None:  # cannot happen with GTIDs on; be safe
                        continue
                    trx.row_events += 1
                    if trx.row_events <= trx.skip_events:
                        continue
                    if not pending:
                        txn_started = now
                    n = self._rows(event, trx, EventPosition(file, start_pos))
                    pending += n
                    trx.events_written += n
                    if pending >= cfg.commit_every_events:
                        # a large source transaction: commit at this row-event boundary
                        self._commit(ResumePoint(gtid_state, file, end_pos, trx.gtid, trx.row_events,
                                                 trx.ts_ms))
                        pending = 0
                    continue
                if isinstance(event, QueryEvent):
                    query = event.query.strip()
                    upper = query[:10].upper()
                    if upper.startswith("BEGIN") or upper.startswith("XA "):
                        continue
                    if trx is not None and not upper.startswith("COMMIT"):
                        if not pending:
                            txn_started = now
                        pending += self._ddl(event, query, trx, EventPosition(file, start_pos))
                    event = "commit"
                if isinstance(event, XidEvent) or event == "commit":
                    if trx is not None:
                        gtid_state = advance_gtid_state(gtid_state, trx.gtid)
                        metrics.TRANSACTIONS.inc()
                        self.stats["source_transactions"] += 1
                        if cfg.provide_transaction_metadata and trx.events_written:
                            pending += self._transaction_end(trx)
                        trx = None
                        point = ResumePoint(gtid_state, file, end_pos, None, 0)
                        if pending and (pending >= cfg.commit_every_events
                                        or (now - txn_started) * 1000 >= cfg.commit_every_ms):
                            self._commit(point)
                            pending = 0
                    continue
                # heartbeat from the server (idle source) or anything else: time-based work
                if pending and trx is None and (now - txn_started) * 1000 >= cfg.commit_every_ms:
                    self._commit(point)
                    pending = 0
                if cfg.heartbeat_interval_ms and trx is None and \
                        (now - last_heartbeat) * 1000 >= cfg.heartbeat_interval_ms:
                    self._heartbeat()
                    self._commit(point)
                    pending = 0
                    last_heartbeat = now
        finally:
            reader.close()
            metrics.CONNECTED.set(0)
        if pending and trx is None:
            self._commit(point)

    def _commit(self, point: ResumePoint) -> None:
        point = ResumePoint(point.gtid_state, point.file, point.pos, point.trx_gtid,
                            point.trx_events, int(time.time() * 1000))
        self.producer.commit(self.offsets_topic, self.source_key, point)
        self.committed = point
        self.stats["kafka_transactions"] += 1
        metrics.KAFKA_COMMITS.inc()
        if point.file and point.pos:
            metrics.BINLOG_POSITION.labels(point.file).set(point.pos)
        for gtid in point.gtid_state.split(","):
            if gtid:
                domain, _, seq = gtid.split("-")
                metrics.GTID_SEQ.labels(domain).set(int(seq))

    # ------------------------------------------------------------------ rows

    def _codec(self, event) -> TableCodec | None:
        db, table = event.schema, event.table
        key = (db, table, event.table_id)
        codec = self._codecs.get(key)
        if codec is None:
            details = self._details.get((db, table))
            if details is None:
                details = self._load_details(db, table)
            codec = TableCodec.create(self.prefix, event, details, self.filter, self.options)
            self._codecs[key] = codec
        return codec

    def _load_details(self, db: str, table: str) -> dict:
        conn = connect(self.config)
        try:
            details = load_column_details(conn, db, table)
        finally:
            conn.close()
        self._details[(db, table)] = details
        return details

    def _rows(self, event, trx: _Trx, position: EventPosition) -> int:
        db, table = event.schema, event.table
        if (db, table) == self.filter.watermark_table:
            return self._watermark(event, trx, position)
        if not self.filter.captures_table(db, table):
            return 0
        codec = self._codec(event)
        if event.timestamp:
            metrics.BEHIND.set(max(0, time.time() * 1000 - event.timestamp * 1000))
        topic = codec.topic
        partitions = self.topics.partitions(
            topic, self.config.topic_partitions_per_table.get(f"{db}.{table}", self.config.topic_partitions))
        source = codec.source(trx.ts_ms, event.packet.server_id, trx.gtid, position.file,
                              position.pos, trx.thread)
        if self.config.provide_transaction_metadata and not trx.events_written:
            self._transaction_begin(trx)
        written = 0
        send = self.producer.send
        tombstones = self.config.tombstones_on_delete
        if isinstance(event, WriteRowsEvent):
            op, kind = "c", 0
        elif isinstance(event, UpdateRowsEvent):
            op, kind = "u", 1
        else:
            op, kind = "d", 2
        for row_index, row in enumerate(event.rows):
            pos_header = (POSITION_HEADER, EventPosition(position.file, position.pos, row_index).encode())
            if kind == 0:
                after = row["values"]
                key = codec.key(after)
                send(topic, key, codec.value("c", None, after, source, row_index, trx),
                     partition_for(key, partitions), [pos_header])
                written += 1
            elif kind == 2:
                before = row["values"]
                key = codec.key(before)
                part = partition_for(key, partitions)
                send(topic, key, codec.value("d", before, None, source, row_index, trx), part, [pos_header])
                written += 1
                if tombstones:
                    send(topic, key, None, part, [pos_header])
                    written += 1
            else:
                before, after = row["before_values"], row["after_values"]
                old_key, new_key = codec.key(before), codec.key(after)
                if old_key == new_key:
                    send(topic, new_key, codec.value("u", before, after, source, row_index, trx),
                         partition_for(new_key, partitions), [pos_header])
                    written += 1
                else:
                    # PK change: delete of the old key, then create of the new one (Debezium)
                    part = partition_for(old_key, partitions)
                    send(topic, old_key, codec.value("d", before, None, source, row_index, trx), part,
                         [pos_header, ("__debezium.newkey", new_key)])
                    written += 1
                    if tombstones:
                        send(topic, old_key, None, part, [pos_header])
                        written += 1
                    create_pos = (POSITION_HEADER,
                                  EventPosition(position.file, position.pos, row_index, 1).encode())
                    send(topic, new_key, codec.value("c", None, after, source, row_index, trx),
                         partition_for(new_key, partitions), [create_pos, ("__debezium.oldkey", old_key)])
                    written += 1
            metrics.EVENTS.labels(f"{db}.{table}", op).inc()
        if trx.tables is not None:
            trx.tables[f"{db}.{table}"] = trx.tables.get(f"{db}.{table}", 0) + written
        self.stats["events"] += written
        return written

    # ------------------------------------------------------------------ markers, DDL, heartbeats

    def _watermark(self, event, trx: _Trx, position: EventPosition) -> int:
        """A write to the watermark table becomes a marker in every partition of the
        target table's topic, in binlog order with that table's data events."""
        if isinstance(event, DeleteRowsEvent):
            return 0
        written = 0
        for row_index, row in enumerate(event.rows):
            values = row.get("after_values") or row.get("values")
            target = values.get("table_name")
            if not target or "." not in target:
                continue
            db, table = target.split(".", 1)
            if not self.filter.captures_table(db, table):
                log.warning("watermark for %s ignored: table not captured", target)
                continue
            topic = f"{self.prefix}.{db}.{table}"
            partitions = self.topics.partitions(
                topic, self.config.topic_partitions_per_table.get(target, self.config.topic_partitions))
            marker = {"table": target, "window": values.get("window_id"), "kind": values.get("kind"),
                      "chunks": values.get("chunks")}
            payload = json.dumps(marker, separators=(",", ":")).encode()
            value = TableCodec.marker_value(self.prefix, db, table, trx.ts_ms, event.packet.server_id,
                                            trx.gtid, position.file, position.pos, row_index, payload,
                                            self.options)
            headers = [(POSITION_HEADER, EventPosition(position.file, position.pos, row_index).encode()),
                       (WATERMARK_HEADER, payload)]
            for p in range(partitions):
                self.producer.send(topic, None, value, p, headers)
            written += partitions
            metrics.MARKERS.labels(target, str(values.get("kind"))).inc()
        return written

    def _ddl(self, event, query: str, trx: _Trx, position: EventPosition) -> int:
        default_db = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or "")
        ddl = parse_ddl(query, default_db)
        written = 0
        for db, table in ddl.tables:
            for key in [k for k in self._codecs if k[0] == db and k[1] == table]:
                del self._codecs[key]
            self._details.pop((db, table), None)
        captured = [(db, t) for db, t in ddl.tables if self.filter.captures_table(db, t)]
        database = ddl.database or (captured[0][0] if captured else default_db)
        if ddl.kind == "OTHER" or (ddl.tables and not captured) or \
                (ddl.kind == "DATABASE" and not self.filter.captures_database(database or "")):
            return 0
        if ddl.kind == "TRUNCATE":
            for db, table in captured:
                written += self._truncate(db, table, trx, position, event)
        tables = []
        if ddl.kind in ("CREATE", "ALTER", "RENAME"):
            conn = connect(self.config)
            try:
                for db, table in captured:
                    details = load_column_details(conn, db, table)
                    if details.get("columns"):
                        tables.append(("ALTER" if ddl.kind != "CREATE" else "CREATE", db, table, details))
            finally:
                conn.close()
        elif ddl.kind == "DROP":
            tables = [("DROP", db, table, None) for db, table in captured]
        value = TableCodec.schema_change_value(
            self.prefix, database, query, tables, trx.ts_ms, event.packet.server_id, trx.gtid,
            position.file, position.pos, getattr(event, "slave_proxy_id", None), self.options)
        key = TableCodec.schema_change_key(database, self.options)
        self.producer.send(self.prefix, key, value, 0,
                           [(POSITION_HEADER, EventPosition(position.file, position.pos, 0).encode())])
        return written + 1

    def _truncate(self, db: str, table: str, trx: _Trx, position: EventPosition, event) -> int:
        """Debezium writes one truncate record; we write it to every partition so that it
        cuts each partition's order like a watermark (a consumer applies it idempotently)."""
        topic = f"{self.prefix}.{db}.{table}"
        partitions = self.topics.partitions(
            topic, self.config.topic_partitions_per_table.get(f"{db}.{table}", self.config.topic_partitions))
        value = TableCodec.truncate_value(self.prefix, db, table, trx.ts_ms, event.packet.server_id,
                                          trx.gtid, position.file, position.pos,
                                          getattr(event, "slave_proxy_id", None), self.options)
        headers = [(POSITION_HEADER, EventPosition(position.file, position.pos, 0).encode())]
        for p in range(partitions):
            self.producer.send(topic, None, value, p, headers)
        metrics.EVENTS.labels(f"{db}.{table}", "t").inc()
        return partitions

    def _heartbeat(self) -> None:
        self.topics.partitions(self.heartbeat_topic, 1)
        key, value = TableCodec.heartbeat(self.prefix, self.options)
        self.producer.send(self.heartbeat_topic, key, value, 0)

    def _transaction_begin(self, trx: _Trx) -> None:
        self.topics.partitions(self.transaction_topic, 1)
        key, value = TableCodec.transaction_begin(trx.gtid, trx.ts_ms, self.options)
        self.producer.send(self.transaction_topic, key, value, 0)

    def _transaction_end(self, trx: _Trx) -> int:
        self.topics.partitions(self.transaction_topic, 1)
        key, value = TableCodec.transaction_end(trx.gtid, trx.events_written, trx.tables or {},
                                                trx.ts_ms, self.options)
        self.producer.send(self.transaction_topic, key, value, 0)
        return 1
