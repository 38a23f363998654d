"""One micro-batch of the merger, without Spark: Kafka records in, sink writes out.

For each batch (an Arrow table of records, as the Kafka source delivers them):

1. records of a partition are checked against the highest source position already taken
   from it (``ReplayFilter``): a replayed suffix after an ingest crash is dropped;
2. schema changes of the ``<prefix>`` topic update the table definitions and the sinks
   (topics written by Debezium only: ingest's DDL markers do that in order, step 3);
3. each table's changes are decoded into the table's canonical Arrow schema, fed to the
   table's DBLog ``Reconciler`` (markers and keys) and applied to every sink in binlog
   order; a truncate cuts the batch and empties the sink tables at its place; a DDL
   marker cuts it too, and the sink tables follow the DDL there (``merger.batch.table_ddl``);
4. snapshot windows that became ready are emitted: their staged rows minus the keys seen
   since LOW, as ``r`` changes at the HIGH watermark's sequence (``dblog.emitted_rows``;
   which windows, decided once per batch and written down first, so a re-run of the
   batch emits exactly the same);
5. the state (reconcilers, replay filter, phases) is saved under the batch id.

Sequences: a change's sequence is its binlog position (``EventPosition.sequence``),
which orders the changes of a key across partitions, and lets a snapshot row carry the
HIGH watermark's position. Sink writes carry ``version = base + batch_id * 1e6 + n``, n
counting the batch's writes, so a re-run batch is skipped by every sink
(``merger.batch.versions``). What depends on the writer of the topics (``source_connector``) is its kind's
(``merger.sources``): the replay rule, the sequence (the Kafka offset on topics written
by Debezium itself), how schema changes, truncates and snapshots reach the merger.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from typing import Callable

import pyarrow as pa

from cdc.ddl import ALTERED, CREATED, DROPPED, RENAMED, spec_from_marker
from cdc.routes import ORIGIN_COLUMN
from cdc.table_changes import table_change_json
from cdc.tablespec import TableSpec
from cdc.wire.headers import DDL_HEADER, WATERMARK_HEADER
from cdc.wire.position import EventPosition
from cdc.wire.topics import schema_topic, table_topic, topic_table_part
from merger import crashpoints
from merger.batch.clock import BatchClock
from merger.batch.emission import WindowEmitter
from merger.batch.origins import Origins
from merger.batch.owner_check import OwnerCheck
from merger.batch.pausing import PausedTables
from merger.batch.records import (
    MARKER,
    SCHEMA,
    BadRecord,
    ChangeEvent,
    ParsedRecord,
    change_event,
    decode,
    headers_of,
    payload_of,
    position_of,
    rows_of,
)
from merger.batch.sink_writer import SinkWriter
from merger.batch.table_ddl import DdlFollower
from merger.batch.tables import TableRegistry, TableRuntime
from merger.dblog import Reconciler
from merger.errors import BadChange, MergerError
from merger.kafka.admission import learn, observed_sizes, record_bytes
from merger.schema.canonical import SourceModes
from merger.schema.catalog import SourceCatalog, parse_table_id, spec_from_table_change
from merger.sinks.base import TableCut, TableFault
from merger.sinks.fanout import SinkRetry
from merger.snapshot.chunking import resolve_chunk_key, window_origin
from merger.sources import source_kind
from merger.state.store import StateStore
from merger.verify.windows import is_verify_window

log = logging.getLogger(__name__)

# a table whose snapshot windows expire this many times in a row (none emitted between)
# is paused with the reason: retrying for ever would look like a snapshot that runs
WINDOW_EXPIRIES_LIMIT = 3
# on an idle source a batch emits this many times snapshot.emit_rows_per_batch: each batch
# costs ~0.4 s of Spark's own work (offsets, the Kafka read job, the log), and nobody waits
IDLE_EMIT_FACTOR = 5


class BatchProcessor:
    def __init__(
        self,
        prefix: str,
        store: StateStore,
        sinks: list,
        catalog: SourceCatalog | None,
        partitions_of: Callable[[str], int],
        modes: SourceModes = SourceModes(),
        accepts: Callable[[str], bool] = lambda name: True,
        chunk_keys: dict[str, list[str]] | None = None,
        on_bad_record: str = "pause",
        dead_letter: Callable | None = None,
        window_timeout_s: float = 120.0,
        on_new_table: Callable[[str], None] | None = None,
        emit_rows_per_batch: int = 200_000,
        source_connector: str = "ingest",
        on_drop: str = "truncate",
        sharded: bool = False,
        key_mode: str = "origin",
        sink_retry: SinkRetry = SinkRetry(),
    ):
        self.prefix = prefix
        self.schema_topic = schema_topic(prefix)
        # what wrote the topics: its replay rule, sequences, order, DDL, truncates, snapshots
        self.source_kind = source_kind(source_connector, sharded, key_mode)
        self.on_drop = on_drop  # truncate | keep: the sink tables of a dropped table
        self.store = store
        self.sinks = sinks
        self.catalog = catalog
        self.partitions_of = partitions_of
        self.modes = modes
        self.accepts = accepts
        self.chunk_keys = chunk_keys or {}
        self.on_bad_record = on_bad_record
        self.dead_letter = dead_letter
        self.window_timeout_s = window_timeout_s
        self.on_new_table = on_new_table
        # topic -> its partitions that hold records the stream has not read yet (set by the
        # app from the query's progress): a window's markers may wait there, unread
        self.reader_behind: Callable[[], set[tuple[str, int]]] = lambda: set()
        # the next offset the reader reads in each (topic, partition), as of the last batch
        # done (set by the app; positional windows' read-through, merger.batch.read_through)
        self.reader_ends: Callable[[], dict[tuple[str, int], int]] = lambda: {}
        # the tables' runtimes; its lock serialises a batch against the snapshot runner
        self.tables = TableRegistry()
        self.replay = self.source_kind.replay_filter()
        # whether the first batch restored the state, when batches run, whether changes stream in
        self.clock = BatchClock()
        self.record_sizes: dict[str, float] | None = None  # merger.kafka.admission, loaded at first use
        self.last_batch_bytes = 0  # keys and values of the last batch's records
        self.bad_records = 0
        self.last_batch: int | None = None
        self.writer = SinkWriter(sinks, store, on_blocked=self.publish_status, retry=sink_retry)
        self.verify_passes: dict[str, dict] = {}  # table -> its last background verify pass (its thread's)
        self.emitter = WindowEmitter(store, self.tables, self.writer, emit_rows_per_batch)
        # key mode unique: a key's changes from a second origin pause its table (merger.batch.owner_check)
        self.owners = OwnerCheck(sinks, self.writer.fanout.read) if key_mode == "unique" else None
        self.ddl = DdlFollower(store, self.writer, self.chunk_keys, modes, on_drop)
        self._staging_done: list = []  # windows consumed or dropped: deleted once the batch's state is saved
        # the physical tables of a logical table, each one's DDL, drop, rename and truncate
        self.origins = Origins(self.source_kind, store, self.writer, self.ddl, catalog, on_drop, self._staging_done)
        # paused tables: their changes kept on disk, applied first once resumed
        self.paused = PausedTables(store, self.writer, self.tables, self._table_batch)
        self.last_timing: dict = {}  # the last batch's time split (diagnostics)
        self.fatal: MergerError | None = None  # why the last batch failed (on_bad_record: stop)
        self.unparseable: dict[str, list[tuple[dict, str]]] = {}  # this batch's unreadable records, per table
        self._replay_cache: dict = {}  # partition -> (its filter entry, the saved entry built from it)

    # ------------------------------------------------------------------ state

    def _state(self) -> dict:
        return {
            "replay": self._replay_entries(),
            "bad_records": self.bad_records,
            "tables": {name: t.to_dict() for name, t in self.tables.items()},
        }

    def _replay_entries(self) -> list[list]:
        """``[topic, partition, position, tombstone]`` per partition. An entry is built again
        only when its partition's (position, tombstone) changed (the filter replaces that
        tuple): the same list object then lets the state chain reuse its text too. 1,500
        partitions encoded on every batch were ~10 ms of it at 500 tables."""
        cache = self._replay_cache
        out = []
        for key, value in self.replay.highest.items():
            hit = cache.get(key)
            if hit is None or hit[0] is not value:
                hit = (value, [key[0], key[1], value[0].encode().decode(), value[1]])
                cache[key] = hit
            out.append(hit[1])
        if len(cache) > 2 * len(out) + 100:
            self._replay_cache = {k: v for k, v in cache.items() if k in self.replay.highest}
        return out

    def _restore(self, state: dict) -> None:
        self.replay = self.source_kind.replay_filter()
        for topic, part, pos, tomb in state.get("replay", []):
            position = EventPosition.decode(pos)
            self.replay.highest[(topic, int(part), position.shard)] = (position, bool(tomb))
        self.bad_records = state.get("bad_records", 0)
        tables = {}
        for name, t in state.get("tables", {}).items():
            rt = TableRuntime.from_dict(name, t, self.modes)
            # "staged" is set in memory when the rows are on disk, maybe after this state was
            # saved: the marker file beside the rows says so for a restarted merger
            for wid, window in rt.reconciler.windows.items():
                if not window.staged and self.store.is_staged(name, wid):
                    rt.reconciler.mark_staged(wid)
            tables[name] = rt
        self.tables.replace(tables)

    # ------------------------------------------------------------------ tables

    def table(self, name: str, spec: TableSpec | None = None) -> TableRuntime | None:
        rt = self.tables.get(name)
        if rt is not None:
            return rt
        db, table = name.split(".", 1)
        if spec is None and self.catalog is not None:
            spec = self.catalog.table_spec(db, table)
        if spec is None:
            return None
        try:
            keys, error = list(resolve_chunk_key(name, spec.primary_key, self.chunk_keys.get(name))), None
        except ValueError as exc:
            keys, error = [], str(exc)
        partitions = self.partitions_of(self.topic_of(name))
        rt = TableRuntime(name, spec, keys, partitions, Reconciler(partitions))
        rt.set_spec(spec, self.modes)
        if error is not None:
            rt.phase, rt.error = "failed", error
        else:
            self.writer.ensure_tables(rt)
        self.tables.add(rt)
        if self.on_new_table and rt.phase != "failed":
            self.on_new_table(name)
        return rt

    def topic_of(self, name: str) -> str:
        """The topic of table ``db.table`` (names made topic-safe like Debezium does)."""
        db, table = name.split(".", 1)
        return table_topic(self.prefix, db, table)

    def _table_name(self, topic: str, payload: dict) -> str:
        """The table a record belongs to: its ``source.db``/``source.table`` when the
        record sits on that table's topic (topic names are sanitized, so several tables
        may share one), else the topic name without the prefix."""
        src = payload.get("source")
        if isinstance(src, dict) and src.get("db") and src.get("table"):
            db, table = str(src["db"]), str(src["table"])
            if table_topic(self.prefix, db, table) == topic:
                return f"{db}.{table}"
        return topic_table_part(self.prefix, topic)

    def rebuild_table(self, rt: TableRuntime) -> bool:
        """``cdc snapshot`` of a paused table (``PausedTables.rebuild``)."""
        return self.paused.rebuild(rt)

    def resume_table(self, rt: TableRuntime) -> None:
        """``cdc resume`` of a paused table (``PausedTables.resume``)."""
        self.paused.resume(rt)

    def refresh_spec(self, rt: TableRuntime, spec: TableSpec | None = None) -> None:
        """A definition met outside the stream's order (a column no event had before, or
        Debezium's schema-change topic): judged by the definitions alone."""
        if spec is None and self.catalog is not None:
            db, table = rt.name.split(".", 1)
            spec = self.catalog.table_spec(db, table)
        if spec is None:
            return
        self.ddl.apply(rt, ALTERED, spec, None, None, self._staging_done)

    # ------------------------------------------------------------------ the batch

    def process(self, batch_id: int, records: pa.Table | list[dict]) -> None:
        """Applies a micro-batch's records: Spark's Arrow, or the rows the driver read
        (``records.rows_of``)."""
        rows = rows_of(records)
        with self.tables.locked():
            self.clock.started = time.monotonic()
            if not self.clock.restored:
                state = self.store.load_before(batch_id)
                if state:
                    self._restore(state)
                self.clock.restored = True
            self.writer.start_batch(batch_id)
            now_ms = time.time() * 1000
            per_table, schema_records = self._route(rows)
            for payload in schema_records:
                self._schema_change(batch_id, payload)
            self.paused.apply_kept(batch_id, per_table, now_ms)
            self._apply_changes(batch_id, per_table, now_ms)
            streamed_s = time.monotonic() - self.clock.started
            # no streamed change in this batch: nobody waits behind the emission, and a
            # batch of an idle source costs a watermark tick round trip: emit
            # IDLE_EMIT_FACTOR times as much
            if any(WATERMARK_HEADER not in it.headers for items in per_table.values() for it in items):
                self.clock.last_change_at = time.monotonic()
            # a batch that the tick brought while changes stream in may hold none of them:
            # it only counts as idle when no change came for a few seconds
            self._note_read_through()
            self._emit_ready(batch_id, 1 if self.clock.changes_streaming() else IDLE_EMIT_FACTOR)
            self._expire_windows()
            crashpoints.reached("before_state_save")
            self.store.save_batch(batch_id, self._state())
            now = time.time()
            for rt in self.tables.values():
                rt.reconciler.mark_saved()
                rt.verify_windows.commit(now)
            self._learn_record_sizes(rows)
            self._finish_batch(batch_id, len(rows), streamed_s)

    def _learn_record_sizes(self, rows: list[dict]) -> None:
        """Each topic's bytes per record, for the Kafka source's admission of the next
        batches (``batch_memory_mb``); written only when an estimate moved by 5 %."""
        self.last_batch_bytes = sum(map(record_bytes, rows))
        observed = observed_sizes(rows, (WATERMARK_HEADER, DDL_HEADER))
        if not observed:
            return
        if self.record_sizes is None:
            self.record_sizes = self.store.load_record_sizes()
        new = learn(self.record_sizes, observed)
        moved = any(abs(b - self.record_sizes.get(t, -1.0)) > 0.05 * b for t, b in new.items())
        self.record_sizes = new
        if moved:
            try:
                self.store.save_record_sizes(new)
            except OSError as exc:  # the planner goes on with the estimates it has
                log.warning("cannot write the record sizes: %s", exc)

    def _route(self, rows: list[dict]) -> tuple[dict[str, list[ParsedRecord]], list[dict]]:
        """The batch's records, parsed, without replays and tombstones: per table (in
        offset order per partition), and the schema-change topic's payloads."""
        per_table: dict[str, list[ParsedRecord]] = {}
        schema_records = []
        # looked up once: the loop runs per record
        accept, shards, schema_topic = self.replay.accept_record, self.source_kind.shards, self.schema_topic
        for r in rows:
            topic = r["topic"]
            headers = headers_of(r.get("headers"))
            value = r.get("value")
            try:
                payload = payload_of(value) if value is not None else None
                pos = position_of(headers, payload)
            except (BadRecord, ValueError) as exc:
                name = self._table_name(topic, {})
                if self.on_bad_record == "pause" and topic != schema_topic and self.accepts(name):
                    # the table pauses here (its later changes kept in order), not only a warning
                    self.unparseable.setdefault(name, []).append((r, str(exc)))
                else:
                    self._bad(r, str(exc))
                continue
            if pos is not None and bool(pos.shard) != shards:
                self._stop_at_other_kind(topic, r, pos)
            if not accept(topic, r["partition"], pos, payload):
                continue
            if value is None:
                continue  # tombstone: the delete before it carries the change
            if topic == schema_topic:
                schema_records.append(payload)
                continue
            name = self._table_name(topic, payload)
            if not self.accepts(name):
                continue
            per_table.setdefault(name, []).append(ParsedRecord(r, headers, payload, pos))
        return per_table, schema_records

    def _stop_at_other_kind(self, topic: str, r: dict, pos: EventPosition) -> None:
        """A sharded source's change where the merger lists no shards, or the reverse: a
        sharded source's topics need the shards in the merger's config (its snapshots read
        them), and a one-server merger would mix them up."""
        self.fatal = MergerError(
            f"topic {topic} holds changes of shard {pos.shard} of a sharded source (partition "
            f"{r['partition']}, offset {r['offset']}), and the merger's config lists no shards: list them "
            "under `shards`, with ingest's `routes` and `key_mode` (docs/sharding.md). It stops before "
            "them; nothing of them is applied"
            if pos.shard
            else f"topic {topic} holds changes of a one-server source (partition {r['partition']}, offset "
            f"{r['offset']}), and the merger's config lists shards: a sharded source needs its own "
            "topic_prefix. It stops before them; nothing of them is applied"
        )
        raise self.fatal from None

    def _apply_changes(self, batch_id: int, per_table: dict, now_ms: float) -> None:
        self._pause_unparseable(batch_id, per_table, now_ms)
        for name, items in per_table.items():
            rt = self.tables.get(name) or self._first_met(name, items)
            if rt is None:
                changes = [it for it in items if DDL_HEADER not in it.headers]  # a gone table's DDL: nothing to do
                if changes:
                    self._refuse_unreadable(name)
                for it in changes:
                    self._bad(it.record, f"table {name} not found in the source")
                continue
            try:
                self._table_batch(batch_id, rt, items, now_ms)
            except (TableFault, BadChange) as exc:
                self.paused.pause(batch_id, rt, exc, items, now_ms)

    def _refuse_unreadable(self, name: str) -> None:
        """Changes of a table the merger's user may not read: stop with the GRANT to run,
        rather than send them to the dead-letter topic as if the table were gone."""
        denied = self.catalog.select_denied(*name.split(".", 1)) if self.catalog is not None else None
        if denied:
            self.fatal = MergerError(
                f"the topics hold changes of {name}, but {denied}; the merger stops here and resumes at "
                f"these changes once it may read the table"
            )
            raise self.fatal from None

    def _pause_unparseable(self, batch_id: int, per_table: dict, now_ms: float) -> None:
        """``on_bad_record: pause``: a table with a record that cannot be parsed pauses at
        it; the record goes to the dead-letter topic (confirmed) and the table's other
        changes are kept on disk in order until `cdc resume` or `cdc snapshot`."""
        bad, self.unparseable = self.unparseable, {}
        for name, records in bad.items():
            rt = self.tables.get(name) or self.table(name)
            if rt is None:
                for r, reason in records:
                    self._bad(r, reason)
                continue
            for r, reason in records:
                self.bad_records += 1
                self._to_dead_letter(r, reason)
            r, reason = records[0]
            exc = BadChange(
                f"the record at topic {r['topic']} partition {r['partition']} offset {r['offset']} cannot be "
                f"read: {reason}. It is in the dead-letter topic; the table's later changes are kept: "
                f"`cdc snapshot {name}` reads the table again, `cdc resume {name}` goes on without the record"
            )
            if rt.phase in ("paused", "failed"):
                continue  # already paused: its changes are kept
            self.paused.pause(batch_id, rt, exc, per_table.pop(name, []), now_ms)

    def _expire_windows(self) -> None:
        now = time.time()
        lagging: set[tuple[str, int]] | None = None  # asked once, only when a window timed out
        for rt in self.tables.values():
            if not rt.reconciler.expired(now, self.window_timeout_s):
                continue  # the common case: no broker question
            topic = self.topic_of(rt.name)
            if lagging is None:
                lagging = self.reader_behind()
            behind = {p for t, p in lagging if t == topic}
            for wid in rt.reconciler.expired(now, self.window_timeout_s, behind):
                window = rt.reconciler.window(wid)
                missing = sorted(set(range(rt.reconciler.num_partitions)) - set(window.high))
                rt.reconciler.finish(wid)
                shutil.rmtree(self.store.staging_dir(rt.name, wid), ignore_errors=True)
                rt.windows_expired += 1
                if rt.windows_expired >= WINDOW_EXPIRIES_LIMIT and rt.phase not in ("paused", "failed"):
                    late = "its HIGH watermark marker did not reach"
                    ask = "Is ingest running and capturing the watermark table?"
                    if window.positions is not None:
                        late, ask = "the reader did not get past its HIGH position in", "Is ingest running?"
                    why = window.problem or (
                        f"{late} partition(s) {missing} of topic {topic} within snapshot.window_timeout_s "
                        f"({self.window_timeout_s:.0f}s), and the merger had read everything there"
                    )
                    rt.phase = "paused"
                    rt.error = (
                        f"snapshot of {rt.name}: {rt.windows_expired} windows in a row expired ({why}). {ask} "
                        f"Fix that, then `cdc resume {rt.name}` (its snapshot goes on)"
                    )
                    log.error("table %s paused: %s", rt.name, rt.error)
                    continue
                log.warning(
                    "snapshot window %s of %s expired (%d in a row; paused at %d); its chunks will be read again",
                    wid,
                    rt.name,
                    rt.windows_expired,
                    WINDOW_EXPIRIES_LIMIT,
                )

    def _note_read_through(self) -> None:
        """Positional windows: the partitions where the reader passed a target of the runner
        (merger.batch.read_through) are read through its sequence."""
        waiting = [rt for rt in self.tables.values() if len(rt.read_through)]
        if not waiting:
            return
        consumed = self.reader_ends()
        for rt in waiting:
            topic = self.topic_of(rt.name)
            mine = {p: offset for (t, p), offset in consumed.items() if t == topic}
            for partition, sequence in rt.read_through.passed(mine):
                if partition >= rt.partitions:  # the broker knows more partitions than a record showed yet
                    rt.partitions = partition + 1
                    rt.reconciler.num_partitions = rt.partitions
                rt.reconciler.on_read_through(partition, sequence)

    def _finish_batch(self, batch_id: int, num_records: int, streamed_s: float) -> None:
        """After the batch's state is saved: delete what it consumed, ask for the next
        batch if windows wait, record the timing."""
        # only now: a re-run of this batch (crash before save_batch) reads them again
        for done in self.paused.applied + self._staging_done:
            shutil.rmtree(done, ignore_errors=True)
        self.paused.applied.clear()
        self._staging_done.clear()
        self.last_batch = batch_id
        # windows still to emit (over the batch's budget): they need another batch
        self.clock.emission_pending = next(
            (
                name
                for name, rt in sorted(self.tables.items())
                if rt.phase != "paused" and rt.reconciler.ready_windows()
            ),
            None,
        )
        # (or the reader must pass a positional window's targets: on a quiet source no
        # record would bring the batch that sees it)
        if self.clock.emission_pending is not None or any(len(rt.read_through) for rt in self.tables.values()):
            self._ask_for_batch(batch_id)
        self.clock.finished_at = time.monotonic()
        took = self.clock.finished_at - self.clock.started
        self.last_timing = {
            "changesMs": int(1000 * streamed_s),
            "windowsMs": int(1000 * (took - streamed_s)),
            "recordBytes": self.last_batch_bytes,
        }
        (log.info if took > 2.0 else log.debug)(
            "batch %d: %d records (%.1f MB) in %.2fs (changes %.2fs, snapshot windows %.2fs)",
            batch_id,
            num_records,
            self.last_batch_bytes / 1e6,
            took,
            streamed_s,
            took - streamed_s,
        )
        self.clock.started = None

    def _ask_for_batch(self, batch_id: int) -> None:
        """Spark runs a micro-batch only for new offsets: raise the tick pseudo-partition's."""
        try:
            self.store.raise_tick(batch_id + 1)
        except OSError as exc:  # the runner's watermark tick remains
            log.warning("cannot write the emission tick: %s", exc)

    def _bad(self, record: dict, reason: str, rt: TableRuntime | None = None) -> None:
        self.bad_records += 1
        if self.on_bad_record == "pause" and rt is not None:
            # a change of a captured table that cannot be applied: the table stops here,
            # its changes kept on disk in order, rather than lose this one
            raise BadChange(
                f"the change at topic {record['topic']} partition {record['partition']} offset "
                f"{record['offset']} cannot be applied: {reason}. The table's changes are kept; `cdc snapshot "
                f"{rt.name}` reads the table again (or on_bad_record: dead_letter, then `cdc resume "
                f"{rt.name}`, moves this change to the dead-letter topic)"
            )
        if self.on_bad_record == "stop":
            self.fatal = MergerError(
                f"bad record in topic {record['topic']} partition {record['partition']} offset "
                f"{record['offset']}: {reason} (on_bad_record: stop; use dead_letter to skip such records)"
            )
            raise self.fatal from None
        log.warning("bad record at %s[%s]@%s: %s", record["topic"], record["partition"], record["offset"], reason)
        self._to_dead_letter(record, reason)

    def _to_dead_letter(self, record: dict, reason: str) -> None:
        """The record to the dead-letter topic, acknowledged by the broker, or the batch fails."""
        if self.dead_letter is None:
            return
        try:
            self.dead_letter(record, reason)
        except MergerError as exc:
            self.fatal = exc
            raise

    def _schema_change(self, batch_id: int, payload: dict) -> None:
        """A record of the schema-change topic. Ingest also writes each DDL as a marker
        into the table's own topic, in order with its changes, and the merger acts on that
        one (``_table_batch``); topics without DDL markers (Debezium's) have only this
        record, acted on where it is read (``merger.sources.debezium_topics``)."""
        if self.source_kind.ddl_markers:
            return
        for change in payload.get("tableChanges") or []:
            db, table = parse_table_id(change.get("id", ""))
            name = f"{db}.{table}"
            if not self.accepts(name):
                continue
            rt = self.tables.get(name)
            kind = str(change.get("type") or "")
            spec = spec_from_table_change(change)
            if rt is None:
                if kind in ("CREATE", "ALTER") and spec is not None and self.on_new_table is not None:
                    self.table(name, spec)
                continue
            if kind == "DROP":
                self.ddl.apply(rt, DROPPED, None, payload.get("ddl"), None, self._staging_done)
            elif spec is not None:
                # compared in the form of tableChanges (which lacks collations, generation, ...);
                # Debezium reports CREATE for every table at its initial snapshot, and for a
                # table created again after a DROP
                same_form = spec_from_table_change(table_change_json("ALTER", rt.spec))
                if spec == same_form:
                    continue
                self.ddl.apply(
                    rt,
                    CREATED if rt.phase == "dropped" else ALTERED,
                    spec,
                    payload.get("ddl") if kind == "ALTER" else None,
                    None,
                    self._staging_done,
                    old=same_form,
                )

    def _first_met(self, name: str, items: list) -> TableRuntime | None:
        """The runtime of a table met for the first time: with the definition of its first
        DDL marker in the batch (the table may be gone from the source by now), else from
        the source. Changes before that marker (an earlier table under the name) decode
        leniently; the marker counts as applied only if nothing came before it."""
        orders = [self._order_or_none(it) for it in items]
        for i in sorted(range(len(items)), key=lambda i: orders[i] or 0):
            raw = items[i].headers.get(DDL_HEADER)
            if raw is None:
                continue
            spec = spec_from_marker(json.loads(raw))
            if spec is None:
                continue
            rt = self.table(name, spec)
            order = orders[i]
            if rt is not None and order is not None:
                rt.spec_since = order
                if not any(o is not None and o < order for o in orders):
                    rt.ddl_through = order  # the table starts with it
            return rt
        if all(DDL_HEADER in headers for _, headers, *_ in items):
            return None  # only markers of a table that is gone: nothing to apply
        return self.table(name)

    def _order_or_none(self, item: ParsedRecord) -> int | None:
        """A record's order (the kind's); None without a position, or when it lacks what
        the kind orders by (it is a bad record where its change is met)."""
        if item.position is None:
            return None
        try:
            return self.source_kind.order_of(item)
        except BadRecord:
            return None

    # ------------------------------------------------------------------ changes of one table

    def _table_batch(self, batch_id: int, rt: TableRuntime, items: list[ParsedRecord], now_ms: float) -> None:
        if rt.phase in ("paused", "failed"):
            # a paused table keeps its changes on disk, in order, until `cdc resume`
            self.paused.keep(batch_id, rt, [it.record for it in items])
            crashpoints.reached("paused_spill")
            return
        if self.paused.kept_waiting(rt):
            self.paused.apply_kept_of(batch_id, rt, now_ms)
        # the topic may have been created (by the first marker or event) after we first met
        # the table (asked of the broker once it exists, then cached): asked on every batch,
        # for a batch may hold records of partition 0 only, and a window counted as ready
        # with its HIGH marker in fewer partitions than the topic has would miss changes
        needed = max(max(it.record["partition"] for it in items) + 1, self.partitions_of(self.topic_of(rt.name)))
        if needed > rt.partitions:
            rt.partitions = needed
            rt.reconciler.num_partitions = rt.partitions
        items = self.source_kind.in_order(items)
        events = self._events(rt, items, now_ms)
        # the events between two DDL markers are decoded with the definition in force there
        start = 0
        for i, ev in enumerate(events):
            if ev.op != SCHEMA:
                continue
            self._walk(batch_id, rt, events[start:i])
            start = i + 1
            order, marker = ev.order, ev.image
            kind = str(marker.get("kind"))
            if kind == DROPPED and ORIGIN_COLUMN in rt.schema.names:
                self.origins.dropped(rt, ev)  # one physical table of the logical table
                continue
            if kind == RENAMED and ORIGIN_COLUMN in rt.schema.names:
                if self.origins.renamed_in(rt, ev):
                    self.paused.keep(batch_id, rt, [kept.record for kept in events[i:]], "-ddl")
                    return
                continue
            if self.source_kind.shards:  # per shard, against the other shards' definitions (merger.batch.shard_ddl)
                if self.origins.shard_marker(rt, ev):
                    # paused at this marker: it and what follows are kept, until `cdc resume` or `cdc snapshot`
                    self.paused.keep(batch_id, rt, [kept.record for kept in events[i:]], "-ddl")
                    return
                continue
            if order <= rt.ddl_through:
                continue  # the same statement, read from another partition
            rt.ddl_through = order
            self.ddl.apply(
                rt, str(marker.get("kind")), spec_from_marker(marker), marker.get("ddl"), order, self._staging_done
            )
            if rt.phase in ("paused", "failed"):  # what follows the DDL is kept until `cdc resume`
                # sorts before this batch's own file, which may follow
                self.paused.keep(batch_id, rt, [ev.record for ev in events[start:]], "-ddl")
                return
        self._walk(batch_id, rt, events[start:])

    def _events(self, rt: TableRuntime, items: list[ParsedRecord], now_ms: float) -> list[ChangeEvent]:
        """The changes of the table's records, in their order (a bad one: ``_bad``)."""
        events = []
        for item in items:
            r, payload = item.record, item.payload
            rt.last_offsets[r["partition"]] = r["offset"]
            try:
                ev = change_event(item, self.source_kind)
            except BadRecord as exc:
                self._bad(r, str(exc), rt)
                continue
            if ev.op not in (SCHEMA, MARKER):
                src_ts = (payload.get("source") or {}).get("ts_ms")
                if src_ts:
                    rt.lag_ms = max(0.0, now_ms - src_ts)
                    if item.position is not None and item.position.shard:
                        rt.shard_lag_ms[item.position.shard] = rt.lag_ms
                if ev.op == "r" and not self.source_kind.watermark_windows:
                    rt.snapshot_rows += 1  # a row of the writer's own snapshot (Debezium's initial or incremental)
            events.append(ev)
        return events

    def _walk(self, batch_id: int, rt: TableRuntime, events: list) -> None:
        """Decode a run of events and apply them in binlog order: markers to the
        reconciler, data events to the sinks, in slices cut at truncates."""
        current = max(rt.truncated_through, rt.spec_since)
        known = rt.converters.keys()
        if any(
            ev.image and ev.order >= current and not ev.image.keys() <= known
            for ev in events
            if ev.op not in (MARKER, "t")
        ):
            self.refresh_spec(rt)  # a column we do not know: the schema changed
        # decode every data event at once
        data = decode(
            [ev for ev in events if ev.op not in (MARKER, "t")],
            rt,
            lambda ev, reason: self._bad(ev.record, reason, rt),
            self.writer.extra_columns(rt),
        )
        decoded = {id(ev): i for i, ev in enumerate(data[0])} if data else {}
        keys = data[2] if data else []
        # then feed the reconciler in binlog order (markers, events, truncates interleaved:
        # a key counts as seen only for windows whose LOW came before it) and apply the
        # decoded rows in slices cut at truncates
        taken = []
        reconciler_order = self.source_kind.reconciler_order
        for ev in events:
            partition, seq, op, image, _, order, *_ = ev
            # what rises along a partition: the sequence, or a sharded source's Kafka offset
            seq, sequence = reconciler_order(ev.record["offset"], seq)
            if op == MARKER:
                kind = str(image.get("kind", "")).upper()
                if is_verify_window(image.get("window")) and kind in ("LOW", "HIGH"):
                    # `cdc verify`'s: where the sinks stand (merger.verify.windows)
                    rt.verify_windows.on_marker(image["window"], kind, partition, ev.seq, time.time())
                elif image.get("window") and kind in ("LOW", "HIGH"):
                    rt.reconciler.on_marker(
                        partition,
                        seq,
                        image["window"],
                        kind,
                        sequence,
                        image.get("cutover"),
                        ev.commit_us,
                        getattr(self.source_kind, "counted_markers", False),
                    )
                continue
            if op == "t":
                rt.verify_windows.on_truncate(partition)
                origin = self.origins.truncated_by(rt, ev)
                if origin is not None:  # one origin of a logical table: its rows only
                    of_origin = lambda w, o=origin: window_origin(w, rt.name) == o  # noqa: E731
                    rt.reconciler.on_event(partition, seq, None, "t", of_origin)
                    if order > rt.origin_truncated.get(origin, 0):  # one truncate record per partition
                        self._apply_rows(rt, data, taken)
                        taken = []
                        self.origins.cut(rt, origin, order, TableCut(ev.seq, ev.commit_us))
                        log.info("%s: the rows of origin %s emptied (TRUNCATE of that table)", rt.name, origin)
                    continue
                rt.reconciler.on_event(partition, seq, None, "t")
                if order > rt.truncated_through:  # one truncate record per partition
                    self._apply_rows(rt, data, taken)
                    taken = []
                    self.writer.truncate(rt, TableCut(ev.seq, ev.commit_us))
                    rt.truncated_through = order
                    if not self.source_kind.truncate_in_every_partition:
                        # one truncate record, in one partition (Debezium's): a change
                        # committed after it but read from another partition in an earlier
                        # batch was just wiped too. The writer's snapshot brings such rows back.
                        self.store.request("snapshot", rt.name, where=None)
                continue
            i = decoded.get(id(ev))
            if i is None:
                continue  # could not be decoded: sent to the dead-letter topic
            rt.reconciler.on_event(partition, seq, keys[i], op)
            if order < rt.truncated_through:
                continue  # older than a truncate already applied (a lagging partition)
            if rt.origin_truncated and order < rt.origin_truncated.get((image or {}).get(ORIGIN_COLUMN), 0):
                continue  # older than its origin's truncate (orders of one origin compare)
            taken.append(i)
        self._apply_rows(rt, data, taken)

    def _apply_rows(self, rt: TableRuntime, data, taken: list) -> None:
        if not taken:
            return
        if self.owners is not None and ORIGIN_COLUMN in rt.schema.names:
            version = self.writer.next_version(rt)
            events, keys = data[0], data[2]
            self.owners.check(rt, version, [events[i] for i in taken], [keys[i] for i in taken], self.origins.of_record)
        table = data[1]
        if len(taken) != table.num_rows:
            table = table.take(pa.array(taken, pa.int64()))
        self.writer.apply(rt, table)
        rt.rows_applied += table.num_rows

    # ------------------------------------------------------------------ snapshot windows

    def _emit_ready(self, batch_id: int, budget_factor: int = 1) -> None:
        def pause(rt: TableRuntime, exc: TableFault) -> None:  # the window stays, emitted after `cdc resume`
            self.paused.pause(batch_id, rt, exc, [], 0.0)

        self.emitter.emit_ready(batch_id, budget_factor, self._staging_done, pause)

    # ------------------------------------------------------------------ status

    def status(self) -> dict:
        guard = getattr(self.catalog, "guard", None)
        return {
            "updated_at": time.time(),
            "last_batch": self.last_batch,
            "bad_records": self.bad_records,
            # set while a source access waits for the database to come back
            "source_unavailable": guard.status() if guard is not None else None,
            "tables": self._with_verify_passes(self._with_nul_counts(self.tables.status(self.store.plan_summaries()))),
        }

    def _with_verify_passes(self, tables: dict) -> dict:
        """Each table's last background verify pass (merger.verify.continuous), if any."""
        for name, t in tables.items():
            t["verified"] = self.verify_passes.get(name)
        return tables

    def _with_nul_counts(self, tables: dict) -> dict:
        """Each table's count of values a sink's NUL rule changed (0 when none)."""
        for t in tables.values():
            t["nul_values_changed"] = 0
        for sink in self.sinks:
            for name, n in sink.nul_values_changed().items():
                if name in tables:
                    tables[name]["nul_values_changed"] += n
        return tables

    def publish_status(self) -> None:
        self.store.write_status(self.status())
