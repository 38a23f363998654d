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

import dataclasses
import gc
import json
import logging
import os
import socket
import threading
import time
import uuid

import pymysql
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc.config import IngestConfig, routes_of
from cdc.ddl import ALTERED, CREATED, DROPPED, RENAMED, ddl_marker, parse_ddl, table_effects, unclassified_tables
from cdc.declared import DeclaredTypes
from cdc.errors import CdcError
from cdc.infoschema import load_table_details
from cdc.metrics_http import serve as serve_metrics
from cdc.routes import ORIGIN_COLUMN, origin_of
from cdc.table_changes import table_change_json
from cdc.tablespec import TableSpec
from cdc.wire.headers import DDL_HEADER, EMITTED_HEADER, POSITION_HEADER, WATERMARK_HEADER
from cdc.wire.markers import encode_marker, watermark_marker
from cdc.wire.position import EventPosition, position_bytes
from cdc.wire.topics import offsets_topic, schema_topic, table_topic
from ingest import metrics
from ingest.binlog import open_reader
from ingest.checks import check_source, gtid_for_file_pos, read_server_state
from ingest.codec import TableCodec, apply_column_filters, envelope_config, spec_from_details
from ingest.control_records import context_headers, heartbeat_record, message_record
from ingest.cutover import ShardCutover, move_of
from ingest.envelope import PhysicalTable, SourceInfo, TableEncoder, source_json
from ingest.errors import IngestError
from ingest.failover import continuation
from ingest.fatal import (
    backwards_message,
    binlog_gone_message,
    broker_outage_message,
    instance_running_message,
    lost_changes_message,
    offsets_blocked_message,
    position_lost_message,
    routed_change_message,
    sharded_position_message,
    taken_over_message,
    too_large_message,
    unclassified_ddl_message,
    unverifiable_failover_message,
)
from ingest.filters import CaptureFilter
from ingest.lease import RENEW_S, Lease, held_by_another, lease_key, lease_transactional_id
from ingest.position import PositionVector, ResumePoint, file_number, highest_gtid_state, parse_gtid
from ingest.producer import (
    DEFAULT_MAX_MESSAGE_BYTES,
    UNASSIGNED_PARTITION,
    BrokerError,
    OffsetsBlocked,
    ProducerFenced,
    RecordTooLarge,
    Topics,
    TransactionalProducer,
    read_all_values,
    read_offsets,
)
from ingest.schema_change_records import schema_change_record
from ingest.stream import BinlogStream, CommitPolicy, SourceTransaction
from ingest.transaction_control import TransactionControl
from ingest.transaction_records import TransactionTracker

log = logging.getLogger(__name__)


def _operation(event) -> str:
    """The Debezium op of a rows event's changes."""
    if isinstance(event, WriteRowsEvent):
        return "c"
    return "u" if isinstance(event, UpdateRowsEvent) else "d"


# how long a transaction open on the offsets partition (another producer's) is waited for
# before ingest stops: the positions behind it cannot be read
OFFSETS_WAIT_S = 15.0
_TRANSIENT_MYSQL = (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError, OSError, EOFError)
SOURCE_ERRORS = (pymysql.err.InternalError, *_TRANSIENT_MYSQL)


def source_retry_reason(exc: BaseException, prefix: str, committed: ResumePoint | None) -> str:
    """Why the stream is read again after ``exc`` (one of ``SOURCE_ERRORS``); raises what
    cannot be retried."""
    if isinstance(exc, pymysql.err.OperationalError) and exc.args and exc.args[0] == 1236:
        # the binlog was purged past our position: retrying cannot bring it back
        raise IngestError(binlog_gone_message(prefix, committed, exc)) from None
    if isinstance(exc, pymysql.err.InternalError):
        raise exc
    # also 4052: another replica with our server_id (another ingest?) took the stream
    return f"source connection lost ({exc})"


class Ingest:
    """Ingest of one server: the whole process for a one-server source, or one shard's
    reader inside ``ingest.shards.ShardedIngest`` (``shard`` names it; the producer it is
    given then commits every shard's position together), or the process of a sharded
    source that follows one shard alone (``followed``: its position record, lease and
    transactional.id are that shard's own)."""

    def __init__(self, config: IngestConfig, shard: str | None = None, followed: str | None = None):
        self.config = config
        self.shard = shard
        self.routes = routes_of(config)
        self.prefix = config.topic_prefix
        self.filter = CaptureFilter(config)
        self.env = envelope_config(config)
        self._tracker = TransactionTracker(self.env)
        # Debezium 3.x puts these context headers on every record
        self._context = [(k, v.encode()) for k, v in context_headers(self.env)]
        self._behind_ts, self._behind_due = 0, 0  # when the lag gauge was last set
        self._table_maps: dict[int, object] = {}
        self.offsets_topic = offsets_topic(self.prefix)
        # the one-server source's key, or a sharded source's (one process, all shards), or
        # that of one shard followed by a process of its own (``followed``)
        source = {"server": self.prefix} if followed is None else {"server": self.prefix, "shard": followed}
        self.source_key = json.dumps(source, separators=(",", ":")).encode()
        self.lease_name = self.prefix if followed is None else f"{self.prefix}/{followed}"
        self.kafka_conf = config.kafka.client_config()
        self._codecs: dict[tuple[str, str, int], TableCodec] = {}
        self._table_details: dict[tuple[str, str], dict] = {}
        self._last_spec: dict[tuple[str, str], TableSpec] = {}
        self.declared = DeclaredTypes()
        self.committed: ResumePoint | None = None
        # the GTID state of the transactions whose records (any of them) this process handed
        # to the broker, kept across retries: records past the committed position may be
        # published by another shard's commit, or shown by a broker that shows aborted ones
        # (issue 41); every server ingest connects to must hold them
        self.sent = ""
        self._sent_last: str | None = None
        self.position_on_kafka = False  # the broker holds a committed position of ours
        self.server_id = 0  # @@server_id of the server streamed from (checked at every connect)
        self.epoch = 0  # EventPosition.epoch of the records written from that server
        self.stats = {"events": 0, "kafka_transactions": 0, "source_transactions": 0}
        self.backoff = 1.0  # seconds before the next retry; back to 1 once streaming again
        self.unavailable_since: float | None = None  # first failure of the current outage
        self.retries = 0
        self._details_conn: pymysql.Connection | None = None
        self.transactions = TransactionControl(config)  # savepoints, rollbacks, XA across reconnects
        self._lease: Lease | None = None  # this instance's, once claimed
        self._lease_producer: TransactionalProducer | None = None
        self._lease_renewed = 0.0
        self.renews_lease = True  # a shard's reader: False, the process holds the lease
        # a whole sharded ingest's: each shard's lease, which `cdc ingest --shard` takes (issue 41)
        self.shard_leases: list[Ingest] = []
        self.cutover: ShardCutover | None = None  # key mode unique of a sharded source: the process's

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        facts = check_source(self.config)
        serve_metrics(self.config.metrics_port, self.config.metrics_address)
        offsets = self.open_broker()
        txn_id = self.transactional_id
        if isinstance(offsets.point, PositionVector):
            raise IngestError(sharded_position_message(self.prefix, sorted(offsets.point.shards)))
        self.position_on_kafka = offsets.point is not None  # a broker that loses it must stop us
        self.start_at(offsets.point, facts)
        self.backoff = 1.0
        while not stop.is_set():
            try:
                if self.producer is None:  # after a broker error: made here, so that failing again is retried
                    self.producer = self.new_producer(txn_id)
                    self.check_position_kept()
                self.stream(stop)
                self.backoff = 1.0
            except SOURCE_ERRORS as exc:
                self.retry_later(stop, source_retry_reason(exc, self.prefix, self.committed), "source")
            except BrokerError as exc:
                self.retry_later(stop, f"broker error ({exc})", "broker")
            except RecordTooLarge as exc:
                self.producer.abort()
                raise IngestError(too_large_message(self.prefix, exc)) from None
            except IngestError:
                self.producer.abort()  # what the stream refuses: nothing of the open transaction stays
                raise
            except ProducerFenced:
                # another producer with our transactional.id: the lease says who goes on. A new
                # producer of ours would fence the other one back, so only the lease holder
                # makes one (the other one, a zombie, stops at its next lease renewal)
                if not self.producer.fenced:  # the lease producer was fenced, not this one
                    self.producer.abort()
                self.stop_if_taken_over()
                log.warning(
                    "ingest's producer was fenced by an instance that no longer holds the lease: taking it back"
                )
                self.producer = None
        if self.producer is not None:
            self.producer.abort()
        self.release_lease()

    def release_lease(self) -> None:
        """At a clean stop: the lease's open transaction ends (the lease stays until it expires)."""
        if self._lease_producer is not None:
            self._lease_producer.abort()
        for holder in self.shard_leases:
            holder.release_lease()

    def claim_shard_lease(self, shard: str) -> None:
        """A whole sharded ingest also holds ``shard``'s lease, the one ``cdc ingest --shard``
        takes, as this instance (the same identity): the two exclude each other, at start by
        the lease, later by the fencing of its producer (issue 41)."""
        holder = Ingest(self.config, followed=shard)
        try:
            raw = read_offsets(
                self.kafka_conf,
                self.offsets_topic,
                holder.source_key,
                lease_key(holder.lease_name),
                wait_s=OFFSETS_WAIT_S,
                missing_ok=False,
            ).lease
        except OffsetsBlocked as exc:
            raise IngestError(offsets_blocked_message(self.prefix, exc.waited_s)) from None
        holder._claim_lease(self.transactional_id, Lease.from_json(raw) if raw else None)
        self.shard_leases.append(holder)

    @property
    def transactional_id(self) -> str:
        name = f"cdc-ingest-{self.config.state_name or self.prefix}"
        return name if self.lease_name == self.prefix else f"{name}-{self.lease_name.rpartition('/')[2]}"

    def open_broker(self):
        """The topics made sure of, this instance's producer, the offsets topic read (the
        position committed, the lease), and the lease claimed; the ``OffsetsRead``."""
        self.topics = Topics(self.kafka_conf)
        self.topics.check_reachable()
        self.topics.partitions(self.offsets_topic, 1, compact=True)
        self.topics.partitions(schema_topic(self.prefix), 1)
        txn_id = self.transactional_id
        # fence the previous instance first: its transaction still open on the offsets
        # partition is aborted, so that a read_committed read sees the last committed point
        # (Tansu hides a partition's committed records while a transaction is open on it)
        self.max_message_bytes = (
            self.config.kafka.max_message_bytes or self.topics.broker_max_message_bytes() or DEFAULT_MAX_MESSAGE_BYTES
        )
        self.producer = TransactionalProducer(self.kafka_conf, txn_id, max_message_bytes=self.max_message_bytes)
        try:
            offsets = read_offsets(
                self.kafka_conf,
                self.offsets_topic,
                self.source_key,
                lease_key(self.lease_name),
                wait_s=OFFSETS_WAIT_S,
                missing_ok=False,
            )
        except OffsetsBlocked as exc:
            raise IngestError(offsets_blocked_message(self.prefix, exc.waited_s)) from None
        self._claim_lease(txn_id, Lease.from_json(offsets.lease) if offsets.lease else None)
        return offsets

    def start_at(self, point: ResumePoint | None, facts: dict) -> None:
        """Where the stream starts: the committed ``point``, or where ``start`` says for a
        source (or shard) without one. ``facts``: ``checks.check_source``'s of the server."""
        where = f"shard {self.shard}: " if self.shard else ""
        if point is None:
            point = ResumePoint(gtid_state=self._start_gtid(facts))
            log.info("%sno committed position: starting at GTID %s", where, point.gtid_state or "<empty>")
        else:
            log.info(
                "%sresuming at GTID %s (+%d row events of %s)",
                where,
                point.gtid_state,
                point.trx_events,
                point.trx_gtid,
            )
        self.committed = point
        # the server's binlog is checked against this point on every connect of the stream
        self.server_id, self.epoch = facts["server_id"], point.epoch
        self._load_ddl_history()

    def check_position_kept(self) -> None:
        """After a broker error: the broker still holds a committed position, if ingest had one
        there. A broker restarted without its storage has lost every topic; writing on would
        fill new, auto-created topics that no consumer's offsets fit (a silent loss)."""
        if not self.position_on_kafka:
            return
        try:
            found = read_offsets(
                self.kafka_conf, self.offsets_topic, self.source_key, wait_s=OFFSETS_WAIT_S, missing_ok=True
            ).point
        except OffsetsBlocked as exc:
            raise BrokerError(f"cannot read {self.offsets_topic}: {exc}") from None
        if found is None:
            raise IngestError(position_lost_message(self.prefix, self.offsets_topic, self.committed))

    def new_producer(self, txn_id: str) -> TransactionalProducer:
        # a discarded producer's handle may still be held by the failed call's frames (a
        # reference cycle through the exception): destroyed before the new one starts
        gc.collect()
        return TransactionalProducer(self.kafka_conf, txn_id, max_message_bytes=self.max_message_bytes)

    def retry_later(self, stop: threading.Event, what: str, kind: str) -> None:
        bound = self.config.kafka.outage_max_s
        if kind == "broker" and bound and self.unavailable_since is not None:
            waited = time.monotonic() - self.unavailable_since
            if waited >= bound:
                raise IngestError(broker_outage_message(self.prefix, waited, bound, what))
        self._recover(f"{what}; retrying in {self.backoff:.0f}s", kind)
        stop.wait(self.backoff)
        self.backoff = min(self.backoff * 2, self.config.retry_max_s)
        self.stop_if_taken_over()

    def stop_if_taken_over(self) -> None:
        """Before a retry: stop if a newer instance fenced our lease. Two instances with one
        server_id take the binlog stream from each other, and a producer that librdkafka
        reports fenced only as a fatal error would be made again, fencing the newer one."""
        try:
            self._renew_lease()
        except ProducerFenced:
            raise IngestError(taken_over_message(self.lease_name, self._newest_lease())) from None
        except BrokerError:
            self._drop_lease_producer()  # the broker is away: the next retry checks again

    def _claim_lease(self, identity: str, held: Lease | None) -> None:
        """Stop if another instance runs for this prefix; else fence any earlier one and say
        that this one writes it now (``ingest.lease``)."""
        now_ms = int(time.time() * 1000)
        if held_by_another(held, identity, now_ms):
            raise IngestError(instance_running_message(self.lease_name, held, (now_ms - held.renewed_ms) / 1000))
        self._lease_producer = TransactionalProducer(self.kafka_conf, lease_transactional_id(self.lease_name))
        self._lease = Lease(identity, self.config.state_name, socket.gethostname(), os.getpid(), uuid.uuid4().hex, 0)
        self._renew_lease()

    def renew_lease_if_due(self) -> None:
        """Before a commit (a shard's reader leaves it to the process: ``renews_lease``)."""
        if self.renews_lease and time.monotonic() - self._lease_renewed >= RENEW_S:
            self._renew_lease()  # fenced (another instance took over): nothing more is committed

    def _renew_lease(self) -> None:
        if self._lease_producer is None:
            self._lease_producer = self._remake_lease_producer()
        self._lease = dataclasses.replace(self._lease, renewed_ms=int(time.time() * 1000))
        self._lease_producer.commit_with(self.offsets_topic, lease_key(self.lease_name), self._lease.to_json())
        for holder in self.shard_leases:
            try:
                holder._renew_lease()
            except ProducerFenced:
                raise IngestError(taken_over_message(holder.lease_name, holder._newest_lease())) from None
        self._lease_renewed = time.monotonic()

    def _drop_lease_producer(self) -> None:
        """After a broker error: thrown away like the event producer (its abort could need an
        epoch bump the local broker refuses, which would leave it unusable for good)."""
        if self._lease_producer is not None:
            self._lease_producer.discard()
            self._lease_producer = None
        for holder in self.shard_leases:
            holder._drop_lease_producer()

    def _remake_lease_producer(self) -> TransactionalProducer:
        """A new lease producer, only while the lease on the offsets topic is still ours:
        starting it fences the lease producer of whichever instance holds that
        transactional.id, so a newer instance's lease means this one stops."""
        try:
            raw = read_offsets(
                self.kafka_conf, self.offsets_topic, self.source_key, lease_key(self.lease_name), timeout_s=5
            ).lease
        except OffsetsBlocked:
            # most likely our own discarded lease transaction, which only a new lease producer
            # aborts; an instance starting right now would then stop at its next renewal
            raw = None
        except CdcError as exc:
            raise BrokerError(f"cannot read the lease on {self.offsets_topic}: {exc}") from None
        lease = Lease.from_json(raw) if raw else None
        if lease is not None and lease.run != self._lease.run:
            raise IngestError(taken_over_message(self.lease_name, lease))
        gc.collect()  # the discarded one destroyed first (see _new_producer)
        return TransactionalProducer(self.kafka_conf, lease_transactional_id(self.lease_name))

    def _newest_lease(self) -> Lease | None:
        """The lease of the instance that took over, if it is readable (for the message)."""
        try:
            raw = read_offsets(
                self.kafka_conf, self.offsets_topic, self.source_key, lease_key(self.lease_name), timeout_s=5
            ).lease
        except CdcError:
            return None
        lease = Lease.from_json(raw) if raw else None
        return lease if lease is not None and lease.run != self._lease.run else None

    def _source_connected(self, conn) -> None:
        """On every (re)connect of the binlog stream, on its connection, before the first
        event: the server continues what ingest committed, either the same binlog or, after
        a failover, another server's that holds every transaction ingest has read (then the
        positions go on at the next epoch). Anything else stops ingest with the way out."""
        server = read_server_state(conn)
        verdict = continuation(self.committed, server, self.sent)
        if verdict.backwards:
            raise IngestError(backwards_message(self.prefix, verdict.backwards))
        if verdict.unverifiable:
            raise IngestError(unverifiable_failover_message(verdict.unverifiable))
        if verdict.lost:
            raise IngestError(lost_changes_message(verdict.lost, verdict.lacks, self.committed.gtid_state))
        if verdict.moved:
            log.warning(
                "the source is server_id %d now (ingest's position is on server_id %s); its binlog holds every "
                "transaction ingest has read (GTID %s): continuing there, positions at epoch %d",
                server.server_id,
                self.committed.server_id,
                self.committed.gtid_state,
                verdict.epoch,
            )
        self.server_id, self.epoch = server.server_id, verdict.epoch

    def _check_source_still_ours(self, read: ResumePoint) -> None:
        """While idle: the server's binlog has not gone behind what ingest has read, and the
        source address still leads to the server streamed from (else reconnect: the new
        connection is checked like every one)."""
        if self._details_conn is None or not self._details_conn.open:
            self._details_conn = pymysql.connect(**self.config.mysql.connect_kwargs(), autocommit=True)
        server = read_server_state(self._details_conn)
        if server.server_id != self.server_id:
            raise ConnectionError(
                f"the source address leads to server_id {server.server_id} now, the binlog stream is on "
                f"server_id {self.server_id}: reconnecting"
            )
        verdict = continuation(read, server, self.sent)
        if verdict.backwards:
            raise IngestError(backwards_message(self.prefix, verdict.backwards))
        if verdict.lost:
            raise IngestError(lost_changes_message(verdict.lost, verdict.lacks, self.committed.gtid_state))

    def note_sent(self, gtid: str) -> None:
        """Records of source transaction ``gtid`` were handed to the broker (``self.sent``)."""
        if gtid != self._sent_last:
            self._sent_last = gtid
            self.sent = highest_gtid_state(self.sent, gtid)

    def _load_ddl_history(self) -> None:
        """Declared column types from the schema-change topic (our DDL history)."""
        for payload in read_all_values(self.kafka_conf, schema_topic(self.prefix)):
            ddl_text = payload.get("ddl")
            if not ddl_text:
                continue
            source = payload.get("source") or {}
            if source.get("shard") != self.shard:
                continue  # another shard's (or, sharded, a one-server ingest's) statement
            default_db = source.get("db") or payload.get("databaseName") or ""
            self.declared.observe(parse_ddl(ddl_text, default_db), ddl_text)

    def source_lost(self, message: str) -> None:
        """The source connection failed: said, counted, and cleaned up for a retry."""
        self._recover(message, "source")

    def _recover(self, message: str, kind: str) -> None:
        log.warning(message)
        metrics.ERRORS.labels(kind).inc()
        metrics.CONNECTED.set(0)
        metrics.UNAVAILABLE.labels(kind).set(1)
        if self.shard is not None:
            metrics.SHARD_CONNECTED.labels(self.shard).set(0)
            metrics.SHARD_UNAVAILABLE.labels(self.shard).set(1)
        metrics.RETRY_DELAY.set(self.backoff)
        self.retries += 1
        if self.unavailable_since is None:
            self.unavailable_since = time.monotonic()
        self._close_details_conn()
        if kind == "broker" and self.producer is not None:
            # made again by the streaming loop once the broker answers; its start aborts
            # the open transaction (an abort now would wait for the broker, then fail)
            self.producer.discard()
            self.producer = None
        try:
            if self.producer is not None:
                self.producer.abort()
        except Exception:  # the producer may be unusable; it is recreated by the caller
            pass
        if kind == "broker":
            self._drop_lease_producer()  # remade only while the lease is still ours
        elif self._lease_producer is not None:
            self._lease_producer.abort()

    def _start_gtid(self, facts: dict) -> str:
        start = self.config.start
        if start.mode == "gtid":
            if not start.gtid:
                raise IngestError("start.gtid: required when start.mode is gtid")
            if self.shard is not None:
                return self._shard_start_gtid(start.gtid, facts["gtid_binlog_pos"])
            return start.gtid
        if start.mode == "file":
            if not start.file or start.pos is None:
                raise IngestError("start.file and start.pos: required when start.mode is file")
            return gtid_for_file_pos(self.config, start.file, start.pos)
        return facts["gtid_binlog_pos"]

    def _shard_start_gtid(self, gtid: str, binlog_pos: str) -> str:
        """A shard's part of ``start.gtid``, which lists the positions of every shard: the
        entries of the GTID domains the shard's binlog has."""
        domains = {parse_gtid(g)[0] for g in binlog_pos.split(",") if g.strip()}
        try:
            mine = [g for g in gtid.split(",") if g.strip() and parse_gtid(g.strip())[0] in domains]
        except ValueError as exc:
            raise IngestError(f"start.gtid: {exc}") from None
        if not mine:
            raise IngestError(
                f"start.gtid {gtid!r} has no position in the GTID domains of shard {self.shard} "
                f"({binlog_pos or 'none'}): list one for each shard"
            )
        return ",".join(g.strip() for g in mine)

    # ------------------------------------------------------------------ streaming

    def _reader(self, heartbeat_s: float):
        return open_reader(
            self.config.mysql.connect_kwargs(),
            self.config.server_id,
            self.committed.gtid_state,
            heartbeat_s,
            on_connect=self._source_connected,
        )

    def stream(self, stop: threading.Event) -> None:
        cfg = self.config
        policy = CommitPolicy(
            cfg.commit_every_events, cfg.commit_every_ms, cfg.heartbeat_interval_ms, cfg.hold_max_mb << 20
        )
        reader = self._reader(policy.server_heartbeat_s())
        try:
            reader.open()  # checks the server (_source_connected) before the first event
        except BaseException:
            reader.close()
            raise
        metrics.CONNECTED.set(1)
        if self.shard is not None:
            metrics.SHARD_CONNECTED.labels(self.shard).set(1)
        stream = BinlogStream(self, policy)
        try:
            stream.consume(reader, stop)
        finally:
            reader.close()
            metrics.CONNECTED.set(0)
            if self.shard is not None:
                metrics.SHARD_CONNECTED.labels(self.shard).set(0)
        stream.finish()

    def _check_file_forward(self, file: str | None, next_file: str) -> None:
        if file is not None and file_number(next_file) < file_number(file):
            raise IngestError(
                backwards_message(
                    self.prefix, f"the source's binlog went from {file} back to {next_file} (RESET MASTER?)"
                )
            )

    def _commit(self, point: ResumePoint) -> None:
        point = ResumePoint(
            point.gtid_state,
            point.file,
            point.pos,
            point.trx_gtid,
            point.trx_events,
            int(time.time() * 1000),
            self.server_id,
            self.epoch,
        )
        self.renew_lease_if_due()
        self.producer.commit(self.offsets_topic, self.source_key, point)
        self.committed = point
        self.position_on_kafka = True
        self.stats["kafka_transactions"] += 1
        metrics.KAFKA_COMMITS.inc()
        if point.file and point.pos:
            metrics.BINLOG_POSITION.labels(point.file).set(point.pos)
        for gtid in point.gtid_state.split(","):
            if gtid:
                domain, _, seq = gtid.split("-")
                metrics.GTID_SEQ.labels(domain).set(int(seq))

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

    def _details(self, db: str, table: str) -> dict:
        details = self._table_details.get((db, table))
        if details is None:
            # one connection for every lookup (a database of thousands of tables is met
            # one table at a time); a failure reaches the streaming loop, which retries
            if self._details_conn is None or not self._details_conn.open:
                self._details_conn = pymysql.connect(**self.config.mysql.connect_kwargs(), autocommit=True)
            try:
                details = load_table_details(self._details_conn, db, table)
            except BaseException:
                self._close_details_conn()
                raise
            self._table_details[(db, table)] = details
        return details

    def _close_details_conn(self) -> None:
        conn, self._details_conn = self._details_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def broker_back(self) -> None:
        """A sharded source's process: its new producer works and the position is still on
        the broker, so the broker outage is over (each shard's stream then goes on)."""
        if self.unavailable_since is not None:
            log.info(
                "broker reachable again after %.0fs (%d retries): every shard goes on from the committed position",
                time.monotonic() - self.unavailable_since,
                self.retries,
            )
        self.unavailable_since, self.retries, self.backoff = None, 0, 1.0
        metrics.UNAVAILABLE.labels("broker").set(0)
        metrics.RETRY_DELAY.set(0)

    def _reconnected(self) -> None:
        """The first event after an outage: say so, and start the backoff again at 1 s."""
        log.info(
            "source and broker reachable again after %.0fs (%d retries); streaming from GTID %s",
            time.monotonic() - self.unavailable_since,
            self.retries,
            self.committed.gtid_state,
        )
        self.unavailable_since, self.retries, self.backoff = None, 0, 1.0
        metrics.UNAVAILABLE.labels("source").set(0)
        metrics.UNAVAILABLE.labels("broker").set(0)
        if self.shard is not None:
            metrics.SHARD_UNAVAILABLE.labels(self.shard).set(0)
        metrics.RETRY_DELAY.set(0)

    def _codec(self, event) -> TableCodec:
        key = (event.schema, event.table, event.table_id)
        codec = self._codecs.get(key)
        if codec is None:
            table_map = self._table_maps.get(event.table_id)
            details = self._details(event.schema, event.table)
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

    def _rows(self, event, trx: SourceTransaction, position: EventPosition) -> int:
        db, table = event.schema, event.table
        if (db, table) == self.filter.watermark_table:
            return self._watermark(event, trx, position)
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

    def _release_held(self, trx: SourceTransaction) -> int:
        """Send the group's held records (at its end, or a large group's first pieces)."""
        self.producer.send_all(trx.held)
        n = len(trx.held)
        trx.held = []
        trx.held_bytes = 0
        trx.released += n
        trx.events_written += n
        self.stats["events"] += n
        return n

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

    def _watermark(self, event, trx: SourceTransaction, position: EventPosition) -> int:
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
            source = source_json(
                self.env,
                SourceInfo(
                    db,
                    table,
                    trx.ts_ms,
                    event.packet.server_id,
                    position.file,
                    position.pos,
                    row_index,
                    trx.gtid,
                    shard=self.shard,
                ),
            )
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
        written = self._release_held(trx) if trx.held else 0
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

    def _ddl(self, event, query: str, trx: SourceTransaction, position: EventPosition) -> int:
        default_db = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or "")
        ddl = parse_ddl(query, default_db)
        self.declared.observe(ddl, query)
        for db, table in ddl.tables:
            for key in [k for k in self._codecs if k[0] == db and k[1] == table]:
                del self._codecs[key]
            self._table_details.pop((db, table), None)
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
                details = self._details(db, table)
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
        written += self._ddl_markers(ddl, query, trx, position, event)
        return written + 1

    def _refuse_unclassified(self, query: str, default_db: str, position: EventPosition) -> None:
        """A table statement the parser cannot classify that names a captured table (one
        ingest has met, or that the source has now) stops ingest before it."""
        names = [n for n in unclassified_tables(query, default_db) if self.filter.captures_table(*n)]
        touched = [n for n in names if n in self._last_spec or self._table_exists(*n)]
        if touched:
            where = f"binlog {position.file}:{position.pos}"
            raise IngestError(unclassified_ddl_message(self.prefix, touched, where, query))

    def _table_exists(self, db: str, table: str) -> bool:
        if self._details_conn is None or not self._details_conn.open:
            self._details_conn = pymysql.connect(**self.config.mysql.connect_kwargs(), autocommit=True)
        with self._details_conn.cursor() as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, table)
            )
            return cur.fetchone() is not None

    def _ddl_markers(self, ddl, query: str, trx: SourceTransaction, position: EventPosition, event) -> int:
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
                spec = spec_from_details(db, table, self._details(db, table), None, self.declared.get(db, table))
                if spec is not None:
                    spec, _ = apply_column_filters(spec, self.filter)
                    spec, _ = self._logical(spec)
            ldb, ltable = self.routes.logical(db, table)
            if kind == CREATED and self.routes.routed(db, table):
                kind = ALTERED  # one more origin of the logical table, which may have rows of others
            payload = encode_marker(ddl_marker(ldb, ltable, kind, query, spec))
            source = source_json(
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
            or spec_from_details(db, table, self._details(db, table))
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

    def _heartbeat(self) -> None:
        self.topics.partitions(self.env.hb_topic, 1)
        self._send_record(heartbeat_record(self.env), 0)

    def _transaction_end(self, trx: SourceTransaction) -> int:
        if self._tracker.tx_id != trx.gtid:
            return 0
        self.topics.partitions(self.env.tx_topic, 1)
        self._send_record(self._tracker.end(trx.ts_ms), 0)
        return 1
