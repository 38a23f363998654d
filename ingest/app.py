"""The ingest process: reads the binlog as a replica and writes Debezium-compatible change
events, watermark markers, schema changes and heartbeats to Kafka, exactly once. This module
is its lifecycle (start, resume point, commits, retries, leases, the checks of the source);
``ingest.writer`` writes the records, ``ingest.stream`` reads the events.

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
import logging
import os
import socket
import threading
import time
import uuid

import pymysql

from cdc.config import IngestConfig
from cdc.errors import BrokerError, CdcError
from cdc.metrics_http import serve as serve_metrics
from cdc.offsets_topic import OffsetsBlocked, read_offsets, source_key
from cdc.wire.resume_point import PositionVector, ResumePoint
from cdc.wire.topics import offsets_topic, schema_topic
from ingest import metrics
from ingest.binlog import open_reader
from ingest.checks import check_source, gtid_for_file_pos, read_server_state
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
    sharded_position_message,
    taken_over_message,
    too_large_message,
    unverifiable_failover_message,
)
from ingest.lease import RENEW_S, Lease, held_by_another, lease_key, lease_name, lease_transactional_id
from ingest.position import parse_gtid
from ingest.producer import (
    DEFAULT_MAX_MESSAGE_BYTES,
    ProducerFenced,
    RecordTooLarge,
    Topics,
    TransactionalProducer,
)
from ingest.stream import BinlogStream, CommitPolicy
from ingest.table_details import TableDetails
from ingest.writer import RecordWriter

log = logging.getLogger(__name__)


# how long a transaction open on the offsets partition (another producer's) is waited for
# before ingest stops: the positions behind it cannot be read
OFFSETS_WAIT_S = 15.0
KAFKA_TIMEOUT_S = 30.0  # one transaction call or flush, unless kafka.request_timeout_s says
# a lease transaction is short (one record): blocked this long, it is one a kill left open
LEASE_BLOCK_S = 3.0
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
    transactional.id are that shard's own). Its ``writer`` writes the records; the
    ``Ingest`` says where to start, commits the position, retries and holds the lease."""

    def __init__(self, config: IngestConfig, shard: str | None = None, followed: str | None = None):
        self.config = config
        self.shard = shard
        self.prefix = config.topic_prefix
        self.offsets_topic = offsets_topic(self.prefix)
        # the one-server source's key, or a sharded source's (one process, all shards), or
        # that of one shard followed by a process of its own (``followed``)
        self.source_key = source_key(self.prefix, followed)
        self.lease_name = lease_name(self.prefix, followed)
        self.kafka_conf = config.kafka.client_config()
        self.kafka_timeout_s = config.kafka.request_timeout_s or KAFKA_TIMEOUT_S
        self.committed: ResumePoint | None = None
        self.position_on_kafka = False  # the broker holds a committed position of ours
        self.server_id = 0  # @@server_id of the server streamed from (checked at every connect)
        self.epoch = 0  # EventPosition.epoch of the records written from that server
        self.stats = {"events": 0, "kafka_transactions": 0, "source_transactions": 0}
        self.backoff = 1.0  # seconds before the next retry; back to 1 once streaming again
        self.unavailable_since: float | None = None  # first failure of the current outage
        self.retries = 0
        # one connection for information_schema, shared by the writer's lookups and the
        # idle check of the source here
        self.table_details = TableDetails(config)
        self.writer = RecordWriter(config, shard, self.stats, self.table_details)
        self._lease: Lease | None = None  # this instance's, once claimed
        self._lease_producer: TransactionalProducer | None = None
        self._lease_renewed = 0.0
        self.renews_lease = True  # a shard's reader: False, the process holds the lease
        # a whole sharded ingest's: each shard's lease, which `cdc ingest --shard` takes (issue 41)
        self.shard_leases: list[Ingest] = []

    @property
    def producer(self) -> TransactionalProducer | None:
        """The producer of the open Kafka transaction: the writer sends into it, the
        lifecycle makes it, commits the position with it and aborts it."""
        return self.writer.producer

    @producer.setter
    def producer(self, producer: TransactionalProducer | None) -> None:
        self.writer.producer = producer

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
        raw = self.read_offsets_of(holder).lease
        holder._claim_lease(self.transactional_id, Lease.from_json(raw) if raw else None)
        self.shard_leases.append(holder)

    def read_offsets_of(self, holder: "Ingest"):
        """``holder``'s committed position and lease on the offsets topic (the ``OffsetsRead``).
        Blocked at first, the lease transactions that share the partition are fenced and the
        read tried again: an instance killed while renewing a lease leaves that transaction
        open, and only a new producer of its transactional.id aborts it (a live holder of that
        lease remakes its producer and goes on, see ``_remake_lease_producer``)."""
        try:
            return self._read_offsets(holder, LEASE_BLOCK_S)
        except OffsetsBlocked:
            pass
        for name in self.lease_names_on_partition():
            log.info("the offsets topic is blocked by an open transaction: fencing the lease producer %s", name)
            self._producer(lease_transactional_id(name)).discard()
        try:
            return self._read_offsets(holder, OFFSETS_WAIT_S)
        except OffsetsBlocked as exc:
            raise IngestError(offsets_blocked_message(self.prefix, LEASE_BLOCK_S + exc.waited_s)) from None

    def _read_offsets(self, holder: "Ingest", wait_s: float):
        return read_offsets(
            self.kafka_conf,
            self.offsets_topic,
            holder.source_key,
            lease_key(holder.lease_name),
            wait_s=wait_s,
            missing_ok=False,
        )

    def lease_names_on_partition(self) -> list[str]:
        """The leases this instance takes: its own and, for a whole sharded ingest, each shard's."""
        shards = [s.name for s in self.config.shards] if self.lease_name == self.prefix else []
        return [self.lease_name] + [lease_name(self.prefix, shard) for shard in shards]

    @property
    def transactional_id(self) -> str:
        name = f"cdc-ingest-{self.config.state_name or self.prefix}"
        return name if self.lease_name == self.prefix else f"{name}-{self.lease_name.rpartition('/')[2]}"

    def open_broker(self):
        """The topics made sure of, this instance's producer, the offsets topic read (the
        position committed, the lease), and the lease claimed; the ``OffsetsRead``."""
        topics = self.writer.topics = Topics(self.kafka_conf)
        topics.check_reachable()
        topics.partitions(self.offsets_topic, 1, compact=True)
        topics.partitions(schema_topic(self.prefix), 1)
        txn_id = self.transactional_id
        # fence the previous instance first: its transaction still open on the offsets
        # partition is aborted, so that a read_committed read sees the last committed point
        # (Tansu hides a partition's committed records while a transaction is open on it)
        self.max_message_bytes = (
            self.config.kafka.max_message_bytes or topics.broker_max_message_bytes() or DEFAULT_MAX_MESSAGE_BYTES
        )
        self.producer = self._producer(txn_id, self.max_message_bytes)
        offsets = self.read_offsets_of(self)
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
        self.writer.load_declared_types(self.kafka_conf)

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
        return self._producer(txn_id, self.max_message_bytes)

    def _producer(
        self, transactional_id: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> TransactionalProducer:
        """A transactional producer on this ingest's broker settings (``kafka.*``, the request
        timeout): the records' and the lease's."""
        return TransactionalProducer(self.kafka_conf, transactional_id, self.kafka_timeout_s, max_message_bytes)

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
        self._lease_producer = self._producer(lease_transactional_id(self.lease_name))
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
        return self._producer(lease_transactional_id(self.lease_name))

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
        verdict = continuation(self.committed, server, self.writer.sent)
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

    def check_source_still_ours(self, read: ResumePoint) -> None:
        """While idle: the server's binlog has not gone behind what ingest has read, and the
        source address still leads to the server streamed from (else reconnect: the new
        connection is checked like every one)."""
        server = read_server_state(self.table_details.connection())
        if server.server_id != self.server_id:
            raise ConnectionError(
                f"the source address leads to server_id {server.server_id} now, the binlog stream is on "
                f"server_id {self.server_id}: reconnecting"
            )
        verdict = continuation(read, server, self.writer.sent)
        if verdict.backwards:
            raise IngestError(backwards_message(self.prefix, verdict.backwards))
        if verdict.lost:
            raise IngestError(lost_changes_message(verdict.lost, verdict.lacks, self.committed.gtid_state))

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
        self.table_details.close()
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
            silence_s=self.config.binlog_silence_s,
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
        stream = BinlogStream(self, self.writer, policy)
        try:
            stream.consume(reader, stop)
        finally:
            reader.close()
            metrics.CONNECTED.set(0)
            if self.shard is not None:
                metrics.SHARD_CONNECTED.labels(self.shard).set(0)
        stream.finish()

    def commit(self, point: ResumePoint) -> None:
        """The open Kafka transaction committed with ``point``, stamped with the server and
        epoch read from (the lease renewed first when due)."""
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

    def reconnected(self) -> None:
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
