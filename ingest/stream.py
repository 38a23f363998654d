"""The binlog loop of one source connection: a handler per event type, and the commit
policy that says when the open Kafka transaction is committed with the position.

``CommitPolicy`` is pure (unit tested in tests/unit/test_commit_policy.py). ``BinlogStream``
keeps the loop's state (the binlog file, the open source transaction, what is pending in
the open Kafka transaction) and turns each event into calls on the ``RecordWriter``, which
writes the records (ingest/writer.py), and on the ``Ingest`` process, which commits them
with the position and checks the source (ingest/app.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, RotateEvent, XAPrepareEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from cdc.wire.position import EventPosition
from cdc.wire.resume_point import ResumePoint
from ingest import metrics, statements
from ingest.errors import IngestError
from ingest.fatal import backwards_message, position_wrapped_message
from ingest.position import advance_gtid_state, event_start, file_number

SOURCE_CHECK_S = 10.0  # while idle, how often ingest checks that the source's binlog did not go back
_FL_STANDALONE = 1  # MariaDB GTID event flag: a group of one statement (DDL), no BEGIN/COMMIT


@dataclass
class SourceTransaction:
    """The source transaction (binlog event group) being read."""

    gtid: str
    ts_ms: int
    thread: int | None = None
    row_events: int = 0  # row events of this transaction seen so far
    skip_events: int = 0  # row events already committed by an earlier run
    events_written: int = 0
    began: bool = False  # a BEGIN / XA START opened the group (else: one standalone statement)
    # the group's records not sent yet (args of producer.send), so that a ROLLBACK or
    # ROLLBACK TO later in the group can drop them; sent when the group ends or when
    # commit_every_events of them, or hold_max_mb, are held (a large transaction, cut in pieces)
    held: list = field(default_factory=list)
    held_bytes: int = 0  # keys and values of the held records (bounded by hold_max_mb)
    released: int = 0  # records of the group sent already (the first ones)
    savepoints: dict = field(default_factory=dict)  # name -> records of the group before it
    xid: str | None = None  # XA transaction id (XA START ... XA PREPARE)
    tables: set = field(default_factory=set)  # db.table of the changes written

    def written_before_resume(self, table: str) -> None:
        """A row event of this group whose records an earlier run committed to Kafka
        (skipped on resume). It counts as released, so that a ROLLBACK TO a savepoint set
        before it is refused as it is without a resume (a count of one per event is
        enough: only whether records were sent after a savepoint matters)."""
        self.released += 1
        self.tables.add(table)


@dataclass(frozen=True)
class CommitPolicy:
    """When the open Kafka transaction is committed together with the position. Times are
    ``time.monotonic()`` seconds; ``last_commit`` is when the last one was committed.

    ``every_ms`` spaces the commits, it does not delay a change: a source transaction that
    ends ``every_ms`` or more after the last commit is committed at once (on a quiet source
    an isolated change goes out without waiting for a timer), one that ends sooner waits
    with the rest until the first transaction end or server heartbeat past that mark."""

    every_events: int
    every_ms: int
    heartbeat_ms: int = 0  # 0: no heartbeats
    hold_max_bytes: int = 64 << 20

    def release_held(self, held: int, held_bytes: int) -> bool:
        """A source transaction's held records are sent before its end (then a ROLLBACK TO
        cannot reach them any more): at commit_every_events of them, or hold_max_mb."""
        return held >= self.every_events or held_bytes >= self.hold_max_bytes

    def inside_transaction(self, pending: int) -> bool:
        """At a row-event boundary of a large source transaction."""
        return pending >= self.every_events

    def at_transaction_end(self, pending: int, now: float, last_commit: float) -> bool:
        """Records pending or not (then the position alone moves on), at most one commit
        per ``every_ms`` unless ``every_events`` records are pending."""
        return pending >= self.every_events or (now - last_commit) * 1000 >= self.every_ms

    def while_idle(self, pending: int, dirty: bool, in_transaction: bool, now: float, last_commit: float) -> bool:
        """Between events (a server heartbeat, an event of no interest): the position is
        committed even without records, so that it always catches up with the source."""
        if in_transaction or not (pending or dirty):
            return False
        return (now - last_commit) * 1000 >= self.every_ms

    def server_heartbeat_s(self) -> float:
        """The server's heartbeat period asked for: while the source is quiet a heartbeat is
        what wakes the loop, so a change that had to wait for the next commit waits at most
        about ``every_ms`` (and never more than a second, the reader's former default)."""
        return min(1.0, self.every_ms / 1000)

    def heartbeat_due(self, in_transaction: bool, now: float, last_heartbeat: float) -> bool:
        return bool(self.heartbeat_ms) and not in_transaction and (now - last_heartbeat) * 1000 >= self.heartbeat_ms


class BinlogStream:
    """Reads one connection's events into ``writer`` (a ``RecordWriter``) until stopped;
    ``ingest`` (the ``Ingest`` process) commits and checks the source."""

    def __init__(self, ingest, writer, policy: CommitPolicy):
        self.ingest = ingest
        self.writer = writer
        self.policy = policy
        self.point: ResumePoint = ingest.committed
        self.epoch = ingest.epoch  # of this connection's server (set when it connected)
        self.shard = ingest.shard or ""
        self.gtid_state = self.point.gtid_state
        self.file: str | None = None
        self.file_end = 0  # the highest event end read in self.file (what a wrap goes below)
        self.trx: SourceTransaction | None = None
        self.pending = 0  # records in the open Kafka transaction
        self.dirty = False  # the position moved past what is committed (even with no events)
        self.now = time.monotonic()
        self.last_heartbeat = self.last_commit = self.last_source_check = self.now
        self._handlers = {
            RotateEvent: self.on_rotate,
            TableMapEvent: self.on_table_map,
            MariadbGtidEvent: self.on_gtid,
            WriteRowsEvent: self.on_rows,
            UpdateRowsEvent: self.on_rows,
            DeleteRowsEvent: self.on_rows,
            QueryEvent: self.on_query,
            XAPrepareEvent: self.on_xa_prepare,
            XidEvent: self.on_xid,
        }

    def _handler(self, event):
        cls = type(event)
        handler = self._handlers.get(cls)
        if handler is None:  # a subclass (the reader's own event classes) or an event of no interest
            handler = next((self._handlers[c] for c in cls.__mro__ if c in self._handlers), self.on_other)
            self._handlers[cls] = handler
        return handler

    def consume(self, reader, stop: threading.Event) -> None:
        ingest = self.ingest
        handler_of = self._handlers.get  # per event: one dict lookup, no extra call
        for event in reader:
            if stop.is_set():
                break
            if ingest.unavailable_since is not None:
                ingest.reconnected()
            self.now = time.monotonic()
            (handler_of(type(event)) or self._handler(event))(event)

    def finish(self) -> None:
        """After the loop ended without error: what is pending is committed."""
        if (self.pending or self.dirty) and self.trx is None:
            self.ingest.commit(self.point)

    def _committed(self, point: ResumePoint) -> None:
        self.ingest.commit(point)
        # spaced from the commit's end: time spent committing is not reading time
        self.pending, self.dirty, self.last_commit = 0, False, time.monotonic()

    def _add(self, n: int) -> None:
        self.pending += n

    # ------------------------------------------------------------------ handlers

    def on_rotate(self, event) -> None:
        self._check_file_forward(event.next_binlog)
        if event.next_binlog != self.file:
            self.file_end = 0
        self.file = event.next_binlog

    def _moved_to(self, log_pos: int | None) -> None:
        """Between transactions, an event of no interest (a server heartbeat, the events a
        rotation writes) moves the position read up to; committed while idle like a
        transaction's end, so that on a quiet source the committed position reaches the
        source's (the merger's positional snapshot windows wait for that). Never while a
        resumed transaction's committed part is still to be skipped (``trx_gtid``)."""
        point = self.point
        if not log_pos or self.file is None or point.trx_gtid:
            return
        if point.file is not None and (file_number(self.file), log_pos) <= (file_number(point.file), point.pos or 0):
            return
        self.point = ResumePoint(self.gtid_state, self.file, log_pos, None, 0)
        self.dirty = True
        if point.file is None:
            # the first position of a start with nothing committed: at once, not a commit
            # interval later (so the interval counts from the start, as before)
            self._committed(self.point)

    def _check_file_forward(self, next_file: str) -> None:
        """The binlog never goes back to an earlier file (RESET MASTER): the changes after
        it would sort before those already written."""
        if self.file is not None and file_number(next_file) < file_number(self.file):
            raise IngestError(
                backwards_message(
                    self.ingest.prefix, f"the source's binlog went from {self.file} back to {next_file} (RESET MASTER?)"
                )
            )

    def _position(self, event) -> EventPosition:
        """The event's position; a file past 4 GiB (its header's 4-byte position wrapped)
        stops ingest here: the changes after it would sort before those already written."""
        end = event.packet.log_pos
        start = event_start(end, event.packet.event_size, self.file_end)
        if start is None:
            raise IngestError(position_wrapped_message(self.ingest.prefix, self.file, end, self.file_end))
        self.file_end = end
        return EventPosition(self.file, start, epoch=self.epoch, shard=self.shard)

    def on_table_map(self, event) -> None:
        self.writer.note_table_map(event)

    def on_gtid(self, event) -> None:
        # MariaDB writes no BEGIN: a GTID without FL_STANDALONE opens a transaction
        self.trx = SourceTransaction(event.gtid, event.timestamp * 1000, began=not event.flags & _FL_STANDALONE)
        if self.point.trx_gtid == event.gtid:
            self.trx.skip_events = self.point.trx_events

    def on_rows(self, event) -> None:
        trx = self.trx
        if trx is None:  # cannot happen with GTIDs on; be safe
            return
        trx.row_events += 1
        writer = self.writer
        if trx.row_events <= trx.skip_events:
            table = writer.holds_records_of(event)
            if table is not None:
                trx.written_before_resume(table)
            return
        end_pos = event.packet.log_pos
        n = writer.write_rows(event, trx, self._position(event))
        if self.policy.release_held(len(trx.held), trx.held_bytes):
            n += writer.release_held(trx)
        if n:
            writer.note_sent(trx.gtid)
        self.pending += n
        if self.policy.inside_transaction(self.pending) and not trx.held:
            # a large source transaction: commit at this row-event boundary (the position
            # of an earlier group, if not committed yet, stays to be committed: dirty).
            # Never while records of events read are still held: the point says every row
            # event up to here is in Kafka, and a resume would skip the held ones
            self.ingest.commit(ResumePoint(self.gtid_state, self.file, end_pos, trx.gtid, trx.row_events, trx.ts_ms))
            self.pending, self.last_commit = 0, time.monotonic()

    def on_query(self, event) -> None:
        trx = self.trx
        if trx is None:  # cannot happen with GTIDs on
            return
        position = self._position(event)
        stmt = statements.classify(event.query)
        if stmt.kind == statements.STATEMENT:
            n = self.writer.write_ddl(event, event.query.strip(), trx, position)
            if n:
                self.writer.note_sent(trx.gtid)
            self._add(n)
            if trx.began:
                return  # a statement inside a transaction does not end it
        else:
            self.writer.transactions.apply(stmt, trx, position)
            if not stmt.ends_group:
                return
        self._end_group(event)

    def on_xa_prepare(self, event) -> None:
        # ends the group of an XA transaction's rows
        if self.trx is not None and event.one_phase:
            self.trx.xid = None  # XA COMMIT ... ONE PHASE: committed, not prepared
        self._end_group(event)

    def on_xid(self, event) -> None:
        self._end_group(event)

    def _end_group(self, event) -> None:
        trx = self.trx
        if trx is None:
            return
        ingest, writer = self.ingest, self.writer
        if trx.held:
            self.pending += writer.release_held(trx)
            writer.note_sent(trx.gtid)
        if trx.xid is not None:  # prepared: known, with the captured tables it changed (maybe none)
            writer.transactions.prepared[trx.xid] = sorted(trx.tables)
        self.gtid_state = advance_gtid_state(self.gtid_state, trx.gtid)
        metrics.TRANSACTIONS.inc()
        ingest.stats["source_transactions"] += 1
        if ingest.config.provide_transaction_metadata and trx.events_written:
            self.pending += writer.write_transaction_end(trx)
        self.trx = None
        self.point = ResumePoint(self.gtid_state, self.file, event.packet.log_pos, None, 0)
        self.dirty = True
        if self.policy.at_transaction_end(self.pending, self.now, self.last_commit):
            self._committed(self.point)

    def on_other(self, event) -> None:
        """A heartbeat from the server (idle source) or anything else: time-based work."""
        now, idle = self.now, self.trx is None
        if idle:
            self._moved_to(event.packet.log_pos)
        if self.policy.while_idle(self.pending, self.dirty, not idle, now, self.last_commit):
            self._committed(self.point)
        if idle and now - self.last_source_check >= SOURCE_CHECK_S:
            # idle: is the source still the binlog we read? (after RESET MASTER the server
            # streams nothing more on this connection, and says nothing)
            self.last_source_check = now
            read = ResumePoint(
                self.gtid_state, self.file, event.packet.log_pos, server_id=self.ingest.server_id, epoch=self.epoch
            )
            self.ingest.check_source_still_ours(read)
        if self.policy.heartbeat_due(not idle, now, self.last_heartbeat):
            self.writer.write_heartbeat()
            self._committed(self.point)
            self.last_heartbeat = now
