"""Writing one server's records into the open Kafka transaction: rows events become
Debezium change records (held in their source transaction until it ends or grows too
large), DDL becomes schema-change records and DDL markers, writes to the watermark table
become watermark markers, and heartbeats and transaction metadata records go out.

``RecordWriter`` knows nothing of positions, commits, retries or leases: ``ingest.app``'s
``Ingest`` (the lifecycle) gives it the producer and the topics, and commits what it sent;
``ingest.stream``'s ``BinlogStream`` hands it the events.
"""

from __future__ import annotations

import logging
import time

from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc.config import IngestConfig, routes_of
from cdc.ddl import ALTERED, CREATED, DROPPED, RENAMED, ddl_marker, parse_ddl, table_effects, unclassified_tables
from cdc.declared import DeclaredTypes
from cdc.routes import ORIGIN_COLUMN, origin_of
from cdc.table_changes import table_change_json
from cdc.tablespec import TableSpec
from cdc.wire.headers import DDL_HEADER, EMITTED_HEADER, POSITION_HEADER, WATERMARK_HEADER
from cdc.wire.markers import encode_marker, watermark_marker
from cdc.wire.position import EventPosition, position_bytes
from cdc.wire.topics import schema_topic, table_topic
from ingest import metrics
from ingest.codec import TableCodec, apply_column_filters, envelope_config, spec_from_details
from ingest.control_records import context_headers, heartbeat_record, message_record
from ingest.cutover import ShardCutover, move_of
from ingest.envelope import PhysicalTable, SourceInfo, TableEncoder, source_json
from ingest.errors import IngestError
from ingest.fatal import routed_change_message, unclassified_ddl_message
from ingest.filters import CaptureFilter
from ingest.position import highest_gtid_state
from ingest.producer import UNASSIGNED_PARTITION, Topics, TransactionalProducer, read_all_values
from ingest.schema_change_records import schema_change_record
from ingest.stream import SourceTransaction
from ingest.table_details import TableDetails
from ingest.transaction_control import TransactionControl
from ingest.transaction_records import TransactionTracker

log = logging.getLogger(__name__)


def _operation(event) -> str:
    """The Debezium op of a rows event's changes."""
    if isinstance(event, WriteRowsEvent):
        return "c"
    return "u" if isinstance(event, UpdateRowsEvent) else "d"


class RecordWriter:
    """The records of one server (or one shard's server) into the producer it is given."""

    def __init__(
        self,
        config: IngestConfig,
        shard: str | None = None,
        stats: dict | None = None,
        table_details: TableDetails | None = None,
    ):
        self.config = config
        self.shard = shard
        self.routes = routes_of(config)
        self.prefix = config.topic_prefix
        self.filter = CaptureFilter(config)
        self.env = envelope_config(config)
        # the process's counters: the writer counts the records it sends ("events")
        self.stats = stats if stats is not None else {"events": 0}
        self.table_details = table_details or TableDetails(config)
        self._tracker = TransactionTracker(self.env)
        # Debezium 3.x puts these context headers on every record
        self._context = [(k, v.encode()) for k, v in context_headers(self.env)]
        self._behind_ts, self._behind_due = 0, 0  # when the lag gauge was last set
        self._table_maps: dict[int, object] = {}
        self._codecs: dict[tuple[str, str, int], TableCodec] = {}
        self._last_spec: dict[tuple[str, str], TableSpec] = {}
        self.declared = DeclaredTypes()
        self.transactions = TransactionControl(config)  # savepoints, rollbacks, XA across reconnects
        # the GTID state of the transactions whose records (any of them) this process handed
        # to the broker, kept across retries: records past the committed position may be
        # published by another shard's commit, or shown by a broker that shows aborted ones
        # (issue 41); every server ingest connects to must hold them (``Ingest`` checks)
        self.sent = ""
        self._sent_last: str | None = None
        # given by the lifecycle: made again after a broker error, a shard's view of the
        # process's transaction (``ingest.shards``), the topics shared by a sharded source's readers
        self.producer: TransactionalProducer | None = None
        self.topics: Topics | None = None
        self.cutover: ShardCutover | None = None  # key mode unique of a sharded source: the process's

    def load_declared_types(self, kafka_conf: dict) -> None:
        """Declared column types from the schema-change topic (our DDL history)."""
        for payload in read_all_values(kafka_conf, schema_topic(self.prefix)):
            ddl_text = payload.get("ddl")
            if not ddl_text:
                continue
            source = payload.get("source") or {}
            if source.get("shard") != self.shard:
                continue  # another shard's (or, sharded, a one-server ingest's) statement
            default_db = source.get("db") or payload.get("databaseName") or ""
            self.declared.observe(parse_ddl(ddl_text, default_db), ddl_text)

    def note_table_map(self, event) -> None:
        """A table map event: the rows events after it name its table id."""
        self._table_maps[event.table_id] = event

    def note_sent(self, gtid: str) -> None:
        """Records of source transaction ``gtid`` were handed to the broker (``self.sent``)."""
        if gtid != self._sent_last:
            self._sent_last = gtid
            self.sent = highest_gtid_state(self.sent, gtid)

    # ------------------------------------------------------------------ rows

    def _partitions(self, db: str, table: str) -> int:
        """The partition count of the topic of physical table ``db.table`` (its logical
        table's topic), which is made if missing."""
        ldb, ltable = self.routes.logical(db, table)
        return self.topics.partitions(table_topic(self.prefix, ldb, ltable), self._partition_count(ldb, ltable))

    def _partition_count(self, ldb: str, ltable: str) -> int:
        return self.config.topic_partitions_per_table.get(f"{ldb}.{ltable}", self.config.topic_partitions)

    def _logical(self, spec: TableSpec) -> tuple[TableSpec, PhysicalTable | None]:
        """A physical table's spec as its logical table's, and the physical table when the
        two differ (routes, shards): the source block names it."""
        try:
            logical = self.routes.logical_spec(spec)
        except ValueError as exc:
            raise IngestError(str(exc)) from None
        if logical is spec and self.shard is None:
            return spec, None
        return logical, PhysicalTable(self.shard, spec.db, spec.table)

    def _codec(self, event) -> TableCodec:
        key = (event.schema, event.table, event.table_id)
        codec = self._codecs.get(key)
        if codec is None:
            table_map = self._table_maps.get(event.table_id)
            details = self.table_details.get(event.schema, event.table)
            spec = spec_from_details(
                event.schema, event.table, details, table_map, self.declared.get(event.schema, event.table)
            )
            spec, masked = apply_column_filters(spec, self.filter)
            logical, physical = self._logical(spec)
            codec = TableCodec(logical, self.env, masked, physical)
            if self.routes.adds_origin(event.schema, event.table):
                codec.origin = origin_of(self.shard, event.schema, event.table)
            self._codecs[key] = codec
            self._last_spec[(event.schema, event.table)] = spec
        return codec

    def holds_records_of(self, event) -> str | None:
        """The table (db.table) whose change records a rows event becomes, held in its source
        transaction until sent; None if it becomes none (a table not captured, an operation
        not emitted, the watermark table's markers, which are sent at once)."""
        db, table = event.schema, event.table
        if (db, table) in (self.filter.watermark_table, self.filter.cutover_table) or not self.filter.captures_table(
            db, table
        ):
            return None
        return f"{db}.{table}" if self.env.emits(_operation(event)) else None

    def write_rows(self, event, trx: SourceTransaction, position: EventPosition) -> int:
        """A rows event: change records held in ``trx`` (0 returned, counted when
        released), or the watermark markers and a move's control rows, sent at once (their
        count returned)."""
        db, table = event.schema, event.table
        if (db, table) == self.filter.watermark_table:
            return self.write_watermark_markers(event, trx, position)
        if (db, table) == self.filter.cutover_table:
            return self._cutover_rows(event, trx)
        if not self.filter.captures_table(db, table):
            return 0
        codec = self._codec(event)
        if event.timestamp and (event.timestamp != self._behind_ts or self.stats["events"] >= self._behind_due):
            # the gauge moves with the event's time (whole seconds): set once per second of
            # source time, or every 1,000 events, not per event
            self._behind_ts, self._behind_due = event.timestamp, self.stats["events"] + 1000
            behind = max(0, time.time() * 1000 - event.timestamp * 1000)
            metrics.BEHIND.set(behind)
            if self.shard is not None:
                metrics.SHARD_BEHIND.labels(self.shard).set(behind)
        partitions = codec.partitions
        if partitions is None:
            partitions = codec.partitions = self._partitions(db, table)  # also creates the topic
        op = _operation(event)
        if not self.env.emits(op):
            return 0
        enc = codec.encoder
        mask = codec.mask if codec.masked else None
        hold = trx.held.append
        tracker = self._tracker if self.config.provide_transaction_metadata else None
        if tracker is not None and trx.events_written == 0 and tracker.tx_id != trx.gtid:
            self._send_record(tracker.begin(trx.gtid, trx.ts_ms), 0)
        server_id = event.packet.server_id
        # the row event's own time (its statement's), as Debezium: the GTID event of a
        # transaction is stamped at commit, which may be seconds later
        ts_ms = event.timestamp * 1000 if event.timestamp else trx.ts_ms
        context = self._context
        topic = codec.topic
        rows = event.rows
        held_bytes = 0
        src_head, src_tail = enc.source_split(ts_ms, server_id, position.file, position.pos, trx.gtid, trx.thread)
        origin = codec.origin
        cutover = self.cutover if self.cutover is not None and codec.spec.primary_key else None
        for row_index, row in enumerate(rows):
            if op == "u":
                before, after = row["before_values"], row["after_values"]
                bns, ans = row.get("before_none_sources"), row.get("after_none_sources")
            elif op == "c":
                before, after, bns, ans = None, row["values"], None, row.get("none_sources")
            else:
                before, after, bns, ans = row["values"], None, row.get("none_sources"), None
            moved = moved_after = None
            if cutover is not None:  # key mode unique: the moves' copies and cleanups are not emitted
                first = codec.spec.primary_key[0]
                moved = cutover.headers(self.shard, codec.name, (before or after)[first], op != "d")
                moved_after = (
                    moved
                    if after is None or before is None
                    else cutover.headers(self.shard, codec.name, after[first], True)
                )
                if moved is None and moved_after is None:
                    continue
            if origin is not None:
                if before is not None:
                    before[ORIGIN_COLUMN] = origin
                if after is not None:
                    after[ORIGIN_COLUMN] = origin
            if mask is not None:
                before, after = mask(before), mask(after)
            source = f"{src_head}{row_index}{src_tail}"
            transaction = tracker.event(codec.name) if tracker is not None else "null"
            records = enc.change(
                op, before, after, source, transaction=transaction, before_none_sources=bns, after_none_sources=ans
            )
            pos_bytes = position_bytes(position.file, position.pos, row_index, 0, position.epoch, position.shard)
            for i, rec in enumerate(records):
                # the create half of a primary-key change sorts after its delete half
                create_half = op == "u" and i and rec.value is not None
                pb = (
                    pos_bytes
                    if not create_half
                    else position_bytes(position.file, position.pos, row_index, 1, position.epoch, position.shard)
                )
                if cutover is not None:
                    # a key change across a moved range's bound: each half by its own key
                    moved_headers = moved_after if create_half or len(records) == 1 else moved
                    if moved_headers is None:
                        continue
                if rec.key is not None:
                    # librdkafka's murmur2_random partitioner: Kafka's Java default (see producer.py)
                    key, part = rec.key.encode(), UNASSIGNED_PARTITION
                else:
                    key, part = None, row_index % partitions
                if rec.headers:
                    headers = [(POSITION_HEADER, pb), *[(k, v.encode()) for k, v in rec.headers], *context]
                else:
                    headers = [(POSITION_HEADER, pb), *context]
                if cutover is not None and moved_headers:
                    headers.extend(moved_headers)
                value = rec.value.encode() if rec.value is not None else None
                held_bytes += (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
                hold((topic, key, value, part, headers))
        trx.held_bytes += held_bytes
        codec.events_counter(op).inc(len(rows))
        trx.tables.add(codec.name)
        return 0  # held: counted when sent

    def release_held(self, trx: SourceTransaction) -> int:
        """Send the group's held records (at its end, or a large group's first pieces)."""
        self.producer.send_all(trx.held)
        n = len(trx.held)
        trx.held = []
        trx.held_bytes = 0
        trx.released += n
        trx.events_written += n
        self.stats["events"] += n
        return n

    def _marker_source(self, db: str, table: str, trx, event, position, row: int) -> dict:
        """The ``source`` block of a marker (watermark or DDL) written for ``db.table`` at
        ``position``, row ``row`` of its event."""
        return source_json(
            self.env,
            SourceInfo(
                db,
                table,
                trx.ts_ms,
                event.packet.server_id,
                position.file,
                position.pos,
                row,
                trx.gtid,
                shard=self.shard,
            ),
        )

    def _stamp(self) -> bytes | None:
        """One emission counter value for the copies of one marker or truncate (key mode
        unique; the others' records are stamped as they are sent: ``ingest.shards``)."""
        return self.cutover.counter.stamp() if self.cutover is not None else None

    def _send_record(self, rec, partition: int, position: bytes | None = None, emitted: bytes | None = None) -> None:
        headers = [(k, v.encode()) for k, v in rec.headers] + self._context
        if position is not None:
            headers.insert(0, (POSITION_HEADER, position))
        if emitted is not None:
            headers.append((EMITTED_HEADER, emitted))
        self.producer.send(
            rec.topic,
            rec.key.encode() if rec.key is not None else None,
            rec.value.encode() if rec.value is not None else None,
            partition,
            headers,
        )

    # ------------------------------------------------------------------ markers, DDL, heartbeats

    def write_watermark_markers(self, event, trx: SourceTransaction, position: EventPosition) -> int:
        """A write to the watermark table becomes a marker in every partition of the
        target table's topic, in binlog order with that table's data events."""
        if isinstance(event, DeleteRowsEvent):
            return 0
        self._prepare_topics(event)
        written = 0
        for row_index, row in enumerate(event.rows):
            values = row.get("after_values") or row.get("values")
            target = values.get("table_name")
            if not target or "." not in target:
                continue
            db, table = target.split(".", 1)  # a captured database's name has no '.' (ingest.filters)
            if not self.filter.captures_table(db, table):
                log.warning("watermark for %s ignored: table not captured", target)
                continue
            # a physical table's window is its logical table's (the merger names the physical
            # table it reads; the marker, in the logical topic, names the logical one)
            ldb, ltable = self.routes.logical(db, table)
            topic = table_topic(self.prefix, ldb, ltable)
            partitions = self._partitions(db, table)
            cutover = self.cutover.marker_cutover(self.shard, f"{ldb}.{ltable}") if self.cutover is not None else None
            payload = watermark_marker(f"{ldb}.{ltable}", values.get("window_id"), values.get("kind"), cutover)
            source = self._marker_source(db, table, trx, event, position, row_index)
            pos = position_bytes(position.file, position.pos, row_index, 0, position.epoch, position.shard)
            rec = message_record(
                self.env, topic, source, "cdc.watermark", payload, headers=[(WATERMARK_HEADER, payload)]
            )
            emitted = self._stamp()
            for p in range(partitions):
                self._send_record(rec, p, pos, emitted)
            written += partitions
            metrics.MARKERS.labels(target, str(values.get("kind"))).inc()
        return written

    def _cutover_rows(self, event, trx: SourceTransaction) -> int:
        """A move's control row (key mode unique): the filter and the barrier learn of it
        (``ingest.cutover``). Before a switch, the transaction's records up to here are sent,
        so the barrier holds every change the source made before it."""
        if self.cutover is None or not isinstance(event, WriteRowsEvent):
            return 0
        written = self.release_held(trx) if trx.held else 0
        for row in event.rows:
            control = move_of(row.get("values") or {}, self.shard)
            if control is not None:
                # what is emitted after it depends on it, as on a record sent (issue 41)
                self.note_sent(trx.gtid)
                self.cutover.meet(self.shard, *control)
        return written

    def _prepare_topics(self, event) -> None:
        """The topics of every table a group of watermark rows names, made sure of at once."""
        wanted = {}
        for row in event.rows:
            target = (row.get("after_values") or row.get("values") or {}).get("table_name")
            if target and "." in target:
                db, table = target.split(".", 1)
                if self.filter.captures_table(db, table):
                    ldb, ltable = self.routes.logical(db, table)
                    wanted[table_topic(self.prefix, ldb, ltable)] = self._partition_count(ldb, ltable)
        self.topics.prepare(wanted)

    def write_ddl(self, event, query: str, trx: SourceTransaction, position: EventPosition) -> int:
        """A statement of the binlog (not transaction control): for a DDL of captured tables
        the schema-change record and its DDL markers, for a TRUNCATE the truncate records;
        the number of records sent."""
        default_db = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or "")
        ddl = parse_ddl(query, default_db)
        self.declared.observe(ddl, query)
        for db, table in ddl.tables:
            for key in [k for k in self._codecs if k[0] == db and k[1] == table]:
                del self._codecs[key]
            self.table_details.forget(db, table)
        captured = [(db, t) for db, t in ddl.tables if self.filter.captures_table(db, t)]
        if ddl.kind == "OTHER":
            self._refuse_unclassified(query, default_db, position)
            return 0
        if ddl.tables and not captured:
            return 0
        if ddl.kind == "DATABASE" and not self.filter.captures_database(ddl.database or ""):
            return 0
        # a logical table of several origins: a TRUNCATE, DROP or RENAME (also ALTER ...
        # RENAME TO) of one is that origin's rows, which the origin column names (key mode
        # origin: docs/sharding.md); without that column ingest cannot say which rows go
        renamed = {t for t, effect in table_effects(ddl) if effect in (DROPPED, RENAMED)} if ddl.kind == "ALTER" else ()
        routed = [
            (db, t)
            for db, t in captured
            if self.routes.routed(db, t)
            and not self.routes.origin_in_key
            and (ddl.kind not in ("CREATE", "ALTER") or (db, t) in renamed)
        ]
        if routed:
            where = f"binlog {position.file}:{position.pos}" + (f" of shard {self.shard}" if self.shard else "")
            raise IngestError(routed_change_message(self.prefix, routed, ddl.kind, where, query))
        database = ddl.database or (captured[0][0] if captured else default_db)
        thread = getattr(event, "slave_proxy_id", None)
        pos = position_bytes(position.file, position.pos, 0, 0, position.epoch, position.shard)
        written = 0
        if ddl.kind == "TRUNCATE":
            # a truncate record per partition, and no schema change: Debezium writes none
            for db, table in captured:
                written += self._truncate(db, table, trx, position, event, thread)
            return written
        changes = []
        if ddl.kind in ("CREATE", "ALTER", "RENAME"):
            for db, table in captured:
                details = self.table_details.get(db, table)
                spec = spec_from_details(db, table, details, None, self.declared.get(db, table))
                if spec is not None:
                    spec, _ = apply_column_filters(spec, self.filter)
                    # a TRUNCATE before the next row event carries this version, as Debezium's does
                    self._last_spec[(db, table)] = spec
                    logical, _ = self._logical(spec)
                    created = ddl.kind == "CREATE" and not self.routes.routed(db, table)
                    changes.append(table_change_json("CREATE" if created else "ALTER", logical))
        elif ddl.kind == "DROP":
            changes = [table_change_json("DROP", None, db, table) for db, table in captured]
            for key in captured:
                self._last_spec.pop(key, None)
        source = SourceInfo(
            database or "",
            captured[0][1] if captured else None,
            trx.ts_ms,
            event.packet.server_id,
            position.file,
            position.pos,
            0,
            trx.gtid,
            thread,
            query,
            shard=self.shard,
        )
        rec = schema_change_record(self.env, source, query, changes, database=database)
        self._send_record(rec, 0, pos)
        written += self.write_ddl_markers(ddl, query, trx, position, event)
        return written + 1

    def _refuse_unclassified(self, query: str, default_db: str, position: EventPosition) -> None:
        """A table statement the parser cannot classify that names a captured table (one
        ingest has met, or that the source has now) stops ingest before it."""
        names = [n for n in unclassified_tables(query, default_db) if self.filter.captures_table(*n)]
        touched = [n for n in names if n in self._last_spec or self.table_details.exists(*n)]
        if touched:
            where = f"binlog {position.file}:{position.pos}"
            raise IngestError(unclassified_ddl_message(self.prefix, touched, where, query))

    def write_ddl_markers(self, ddl, query: str, trx: SourceTransaction, position: EventPosition, event) -> int:
        """A DDL marker into every partition of each captured table the statement dropped,
        created, renamed or altered: the schema-change topic cannot be ordered against a
        table's data events, the marker cuts each partition where the DDL fell, so the
        merger knows which changes came before it (see ``merger.schema.change``)."""
        written = 0
        for row, ((db, table), kind) in enumerate(table_effects(ddl)):
            if not self.filter.captures_table(db, table):
                continue
            spec = None
            if kind != DROPPED:
                spec = spec_from_details(
                    db, table, self.table_details.get(db, table), None, self.declared.get(db, table)
                )
                if spec is not None:
                    spec, _ = apply_column_filters(spec, self.filter)
                    spec, _ = self._logical(spec)
            ldb, ltable = self.routes.logical(db, table)
            if kind == CREATED and self.routes.routed(db, table):
                kind = ALTERED  # one more origin of the logical table, which may have rows of others
            payload = encode_marker(ddl_marker(ldb, ltable, kind, query, spec))
            source = self._marker_source(db, table, trx, event, position, row)
            rec = message_record(
                self.env,
                table_topic(self.prefix, ldb, ltable),
                source,
                DDL_HEADER,
                payload,
                headers=[(DDL_HEADER, payload)],
            )
            # one row index per table: tables whose names share a topic keep distinct positions
            pos = position_bytes(position.file, position.pos, row, 0, position.epoch, position.shard)
            partitions = self._partitions(db, table)
            emitted = self._stamp()
            for p in range(partitions):
                self._send_record(rec, p, pos, emitted)
            written += partitions
            log.info("%s %s.%s: DDL marker in %d partition(s)", kind, db, table, partitions)
        return written

    def _truncate(
        self, db: str, table: str, trx: SourceTransaction, position: EventPosition, event, thread: int | None
    ) -> int:
        """Debezium writes one truncate record; we write it to every partition so that it
        cuts each partition's order like a watermark (consumers apply it idempotently)."""
        if not self.env.emits("t"):
            return 0
        partitions = self._partitions(db, table)
        # the last version we encoded rows with (the table may be renamed or dropped by
        # the time we read this TRUNCATE), else what the server has now, else no columns
        spec = (
            self._last_spec.get((db, table))
            or spec_from_details(db, table, self.table_details.get(db, table))
            or TableSpec(db, table, ())
        )
        # a routed table's truncate goes to its logical table's topic, its source naming the
        # physical table (and shard): the merger empties that origin's rows only
        logical, physical = self._logical(spec)
        enc = TableEncoder(logical, self.env, physical)
        ts_ms = event.timestamp * 1000 if event.timestamp else trx.ts_ms  # the statement's, as Debezium
        rec = enc.truncate(
            SourceInfo(db, table, ts_ms, event.packet.server_id, position.file, position.pos, 0, trx.gtid, thread)
        )
        pos = position_bytes(position.file, position.pos, 0, 0, position.epoch, position.shard)
        emitted = self._stamp()
        for p in range(partitions):
            self._send_record(rec, p, pos, emitted)
        metrics.EVENTS.labels(f"{db}.{table}", "t").inc()
        return partitions

    def write_heartbeat(self) -> None:
        """A heartbeat record (``heartbeat_interval_ms``), committed by the caller."""
        self.topics.partitions(self.env.hb_topic, 1)
        self._send_record(heartbeat_record(self.env), 0)

    def write_transaction_end(self, trx: SourceTransaction) -> int:
        """The END record of transaction metadata, if ``trx`` wrote its BEGIN; 1 if sent."""
        if self._tracker.tx_id != trx.gtid:
            return 0
        self.topics.partitions(self.env.tx_topic, 1)
        self._send_record(self._tracker.end(trx.ts_ms), 0)
        return 1
