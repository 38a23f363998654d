"""One ingest process for a sharded source: a reader per shard, one Kafka transaction.

Each shard is read by an ``Ingest`` of its own, in a thread of its own. Their records go
into the one Kafka transaction this process keeps open, and each commit writes every
shard's position at once (``cdc.wire.resume_point.PositionVector``, on ``<prefix>.offsets``).
A shard's entry moves only at the end of one of its source transactions (or at a cut of a
large one), after its records up to there were sent: so whatever is committed holds every
change of every shard up to its entry, and a kill -9 anywhere resumes each shard where its
entry says. A shard's records past its entry that a commit takes along are sent again
after a restart; consumers drop them by position (``cdc.wire.position.ReplayFilter``,
per partition and shard).

Why one transaction and not a producer per shard: on the local broker, read_committed
readers of a partition that several producers' transactions overlap on get nothing until
the writes stop (measured: 80 of 2,940 records in 10 s with three producers).

Faults:

* a shard's source connection fails: that shard alone retries, from its latest entry
  (its records up to there are in the open transaction); the others go on;
* the broker fails, or the producer is fenced: the open transaction is lost for all, every
  shard goes back to the committed vector (``Rewind``) once a new producer is made;
* anything fatal in one shard stops every shard, and the process, with that error.

In key mode ``unique`` the readers share an ``ingest.cutover.ShardCutover``: every record
is stamped with the emission counter as it is sent, and the moves' control rows each shard
passed go into its entry of the vector.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from cdc.config import IngestConfig
from cdc.errors import BrokerError, CdcError
from cdc.metrics_http import serve as serve_metrics
from cdc.wire.headers import EMITTED_HEADER
from cdc.wire.resume_point import PositionVector, ResumePoint
from ingest import metrics
from ingest.app import SOURCE_ERRORS, Ingest, source_retry_reason
from ingest.checks import check_source
from ingest.cutover import BarrierInterrupted, ShardCutover
from ingest.errors import IngestError
from ingest.fatal import one_server_position_message, too_large_message
from ingest.producer import ProducerFenced, RecordTooLarge

log = logging.getLogger(__name__)

JOIN_S = 30.0  # a shard's reader wakes at least every second (server heartbeats)


class Rewind(Exception):
    """The open Kafka transaction was lost: the shard reads again from the committed vector."""


class ShardProducer:
    """A shard reader's producer: its records go into the process's open transaction, and
    its commit moves its entry of the position vector and commits every shard's."""

    fenced = False  # the process's producer is the one that may be

    def __init__(self, hub: "ShardedIngest", shard: str):
        self.hub = hub
        self.shard = shard
        self.generation = 0  # of the hub's transaction this reader's stream writes into

    def send(self, *args) -> None:
        self.hub.send(self, "send", args)

    def send_all(self, records: list[tuple]) -> None:
        self.hub.send(self, "send_all", (records,))

    def commit(self, offsets_topic: str, source_key: bytes, point: ResumePoint) -> None:
        self.hub.commit(self, point)

    def abort(self) -> None:
        """A shard's failure does not end the transaction the others write into."""

    def discard(self) -> None:
        """As ``abort``."""


class ShardedIngest:
    """``cdc ingest`` for a config with ``shards``: every shard followed by one process, or
    one shard (``only``) by a process of its own, with a position record of its own (on
    Kafka; on the local broker, see the module docstring)."""

    def __init__(self, config: IngestConfig, only: str | None = None):
        self.config = config
        self.prefix = config.topic_prefix
        self.only = only
        shards = [s for s in config.shards if only is None or s.name == only]
        if only is not None and config.key_mode == "unique":
            raise IngestError(
                f"--shard {only}: in key_mode unique one ingest process follows every shard (the order of a "
                "key moved between shards is decided across their binlogs); run `cdc ingest` without --shard"
            )
        if not shards:
            raise IngestError(
                f"--shard {only}: no such shard in the config (shards: {', '.join(s.name for s in config.shards)})"
            )
        # the process's own Ingest reads no binlog: it holds the lease, the producer, the offsets
        self.process = Ingest(config, followed=only)
        self.members = {s.name: Ingest(config.model_copy(update={"mysql": s.mysql}), shard=s.name) for s in shards}
        for member in self.members.values():
            member.renews_lease = False
        self.lock = threading.Condition()
        self.generation = 0
        self.committed = PositionVector({})
        self.pending: dict[str, ResumePoint] = {}  # every shard's latest entry
        self.fault: BaseException | None = None  # a broker error or fencing, to recover from
        self.fatal: BaseException | None = None
        self.interrupts = {name: threading.Event() for name in self.members}
        self.cutover: ShardCutover | None = None  # key mode unique, once the vector is read

    # ------------------------------------------------------------------ the shared transaction

    def _check(self, view: ShardProducer) -> None:
        # no producer: the process is remaking it (a fault) or stopping (a fence, a fatal
        # error); the shard waits at the top of its loop, which a new producer follows only
        # after ``broken`` moved every shard back to the committed vector
        if view.generation != self.generation or self.process.producer is None:
            raise Rewind()

    def send(self, view: ShardProducer, method: str, args: tuple) -> None:
        with self.lock:
            self._check(view)
            if self.cutover is not None:
                self._stamp([args] if method == "send" else args[0], method == "send")
            getattr(self.process.producer, method)(*args)

    def _stamp(self, records, stamped_maybe: bool) -> None:
        """Key mode unique: the emission counter on every record. A single record may be
        stamped already (the copies of one marker get one value as they are made); the
        held change records sent together never are."""
        stamp = self.cutover.counter.stamp
        for record in records:
            headers = record[4]
            if not (stamped_maybe and any(name == EMITTED_HEADER for name, _ in headers)):
                headers.append((EMITTED_HEADER, stamp()))

    def commit(self, view: ShardProducer, point: ResumePoint) -> None:
        with self.lock:
            self._check(view)
            emitted = 0
            if self.cutover is not None:
                point = dataclasses.replace(point, cutover=self.cutover.passed(view.shard))
                emitted = self.cutover.counter.last
            self.pending[view.shard] = point
            vector = PositionVector(dict(self.pending), emitted)
            self.process.renew_lease_if_due()
            self.process.producer.commit(self.process.offsets_topic, self.process.source_key, vector)
            moved = [n for n, p in vector.shards.items() if self.committed.shards.get(n) != p]
            self.committed = vector
            for name in moved:
                metrics.SHARD_COMMITTED_MS.labels(name).set(vector.shards[name].ts_ms or time.time() * 1000)
            self.process.position_on_kafka = True
            metrics.KAFKA_COMMITS.inc()

    def broken(self, view: ShardProducer, exc: BaseException) -> None:
        """The producer failed under a shard's call: every shard goes back to the committed vector."""
        with self.lock:
            if view.generation != self.generation:
                return  # already being recovered
            self.generation += 1
            self.pending = dict(self.committed.shards)
            self.fault = exc
            for event in self.interrupts.values():
                event.set()
            self.lock.notify_all()

    def _stop_if_taken_over(self) -> None:
        """Before a shard's source is read again: a newer instance that took over this
        prefix reads that shard too (with the same server_id, each connection ends the
        other's), so this one stops rather than win the binlog stream back."""
        with self.lock:
            if self.fault is None and self.fatal is None and self.process.producer is not None:
                self.process.stop_if_taken_over()

    def failed(self, exc: BaseException) -> None:
        with self.lock:
            if self.fatal is None:
                self.fatal = exc
            for event in self.interrupts.values():
                event.set()
            self.lock.notify_all()

    # ------------------------------------------------------------------ the process

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        facts = {name: check_source(member.config) for name, member in self.members.items()}
        serve_metrics(self.config.metrics_port, self.config.metrics_address)
        process = self.process
        offsets = process.open_broker()
        if self.only is None:
            for name in self.members:
                process.claim_shard_lease(name)
        if isinstance(offsets.point, ResumePoint):
            raise IngestError(one_server_position_message(self.prefix))
        vector = offsets.point or PositionVector({})
        process.position_on_kafka = offsets.point is not None  # a broker that loses it must stop us
        for name in sorted(set(vector.shards) - set(self.members)):
            log.warning(
                "shard %s is in the committed position but not in the config: not read (its entry is kept)", name
            )
        for name, member in self.members.items():
            # one admin client and one cache of partition counts for all: the shards write the
            # same logical tables' topics (a topic two of them create at once exists once)
            member.writer.topics = process.writer.topics
            member.start_at(vector.shards.get(name), facts[name])
        if self.config.key_mode == "unique":
            self.cutover = ShardCutover(vector, self.interrupts)
            for member in self.members.values():
                member.writer.cutover = self.cutover
        self.committed = vector
        self.pending = {**vector.shards, **{name: m.committed for name, m in self.members.items()}}
        threads = [
            threading.Thread(target=self._follow, args=(name, stop), name=f"ingest-{name}", daemon=True)
            for name in self.members
        ]
        for thread in threads:
            thread.start()
        try:
            self._supervise(stop)
        finally:
            for event in self.interrupts.values():
                event.set()
            stopping = time.monotonic() + JOIN_S
            for thread in threads:
                thread.join(max(0.1, stopping - time.monotonic()))
            with self.lock:
                if process.producer is not None:
                    process.producer.abort()
            process.release_lease()
        if self.fatal is not None:
            raise self.fatal

    def _supervise(self, stop: threading.Event) -> None:
        """Until stopped or a shard fails: makes a new producer after a broker error."""
        process = self.process
        while not stop.is_set():
            with self.lock:
                if self.fatal is not None:
                    return
                if self.fault is None:
                    self.lock.wait(0.5)
                    continue
                exc, self.fault = self.fault, None
                producer, process.producer = process.producer, None
            try:
                if isinstance(exc, ProducerFenced):
                    if producer is not None and not producer.fenced:
                        producer.abort()
                    process.stop_if_taken_over()
                    log.warning("ingest's producer was fenced by an instance that no longer holds the lease: taking it")
                else:
                    if producer is not None:
                        producer.discard()
                    process.retry_later(stop, f"broker error ({exc})", "broker")
                if stop.is_set():
                    return
                new = process.new_producer(process.transactional_id)
                process.producer = new
                process.check_position_kept()
            except (BrokerError, ProducerFenced) as again:
                with self.lock:
                    self.fault = again
                continue
            except CdcError as fatal:
                self.failed(fatal)
                return
            process.broker_back()
            with self.lock:
                self.lock.notify_all()  # the shards waiting for a producer go on

    def _follow(self, name: str, stop: threading.Event) -> None:
        """One shard's reader, in its thread, until stopped or fatal."""
        member, interrupt = self.members[name], self.interrupts[name]
        view = ShardProducer(self, name)
        member.producer = view
        member.backoff = 1.0
        try:
            while not stop.is_set():
                with self.lock:
                    while (self.fault is not None or self.process.producer is None) and self.fatal is None:
                        if stop.is_set():
                            return
                        self.lock.wait(0.5)  # the broker is recovered first
                    if self.fatal is not None:
                        return
                    interrupt.clear()
                    view.generation = self.generation
                    member.committed = self.pending[name]
                    if self.cutover is not None:
                        self.cutover.reset(name, member.committed.cutover)
                try:
                    member.stream(interrupt)
                    member.backoff = 1.0
                except (Rewind, BarrierInterrupted):
                    continue
                except SOURCE_ERRORS as exc:
                    reason = source_retry_reason(exc, f"{self.prefix} (shard {name})", member.committed)
                    member.source_lost(f"shard {name}: {reason}; retrying in {member.backoff:.0f}s")
                    interrupt.wait(member.backoff)
                    self._stop_if_taken_over()
                    member.backoff = min(member.backoff * 2, self.config.retry_max_s)
                except (BrokerError, ProducerFenced) as exc:
                    self.broken(view, exc)
                except RecordTooLarge as exc:
                    raise IngestError(too_large_message(self.prefix, exc)) from None
        except BaseException as exc:  # fatal for the process: every shard stops with it
            if isinstance(exc, IngestError) and not str(exc).startswith("shard "):
                exc = IngestError(f"shard {name}: {exc}")
            self.failed(exc)
