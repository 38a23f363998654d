"""One micro-batch of the merger, without Spark: Kafka records in, sink writes out.

For each batch (an Arrow table of records, as the Kafka source delivers them):

1. records of a partition are checked against the highest source position already taken
   from it (``ReplayFilter``): a replayed suffix after an ingest crash is dropped;
2. schema changes (the ``<prefix>`` topic) update the table definitions and the sinks;
3. each table's changes are decoded into the table's canonical Arrow schema, fed to the
   table's DBLog ``Reconciler`` (markers and keys) and applied to every sink in binlog
   order; a truncate cuts the batch and empties the sink tables at its place;
4. snapshot windows that became ready are emitted: their staged rows minus the keys seen
   since LOW, as ``r`` changes at the HIGH watermark's sequence (decided once per batch
   and written down first, so a re-run of the batch emits exactly the same);
5. the state (reconcilers, replay filter, phases) is saved under the batch id.

Sequences: a change's sequence is its binlog position (``EventPosition.sequence``),
which orders the changes of a key across partitions, and lets a snapshot row carry the
HIGH watermark's position. Sink writes carry ``version = batch_id * 1e6 + step``, so a
re-run batch is skipped by every sink.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.position import POSITION_HEADER, EventPosition, ReplayFilter
from ingest.types import TableSpec
from merger.catalog import SourceCatalog, parse_table_id, spec_from_table_change
from merger.dblog import Reconciler
from merger.errors import MergerError
from merger.schema import SourceModes, arrow_schema, from_snapshot, json_converters, rows_to_arrow
from merger.sinks.base import IncompatibleSchemaChange, SinkUnavailable
from merger.state import StateStore

log = logging.getLogger("cdc.merger")

WATERMARK_HEADER = "cdc.watermark"
STEP = 1_000_000
EMIT_BATCH_ROWS = 200_000


class BadRecord(ValueError):
    pass


@dataclass
class TableRuntime:
    name: str
    spec: TableSpec
    keys: list[str]
    partitions: int
    reconciler: Reconciler
    phase: str = "streaming"  # snapshotting | streaming | paused | failed
    error: str | None = None
    rows_applied: int = 0
    snapshot_rows: int = 0
    last_offsets: dict = field(default_factory=dict)
    lag_ms: float | None = None
    blocked_on_sink: str | None = None
    truncated_through: int = 0

    def __post_init__(self):
        self.schema = arrow_schema(self.spec)
        self.converters = None

    def set_spec(self, spec: TableSpec, modes: SourceModes) -> None:
        self.spec = spec
        self.schema = arrow_schema(spec)
        self.converters = json_converters(spec, modes)


def _headers(raw) -> dict[str, bytes]:
    if not raw:
        return {}
    return {h["key"]: h["value"] for h in raw}


def _payload(value: bytes) -> dict:
    try:
        v = json.loads(value)
    except ValueError as exc:
        raise BadRecord(f"value is not JSON: {exc}") from None
    if isinstance(v, dict) and "schema" in v and "payload" in v:
        v = v["payload"]
    if not isinstance(v, dict):
        raise BadRecord("value is not a JSON object")
    return v


def _position(headers: dict, payload: dict | None) -> EventPosition | None:
    raw = headers.get(POSITION_HEADER)
    if raw is not None:
        return EventPosition.decode(raw)
    src = (payload or {}).get("source") or {}
    if "file" in src and "pos" in src:  # topics written by Debezium itself
        return EventPosition(src["file"], int(src["pos"]), int(src.get("row") or 0))
    return None


class BatchProcessor:
    def __init__(self, prefix: str, store: StateStore, sinks: list, catalog: SourceCatalog | None,
                 partitions_of: Callable[[str], int], modes: SourceModes = SourceModes(),
                 accepts: Callable[[str], bool] = lambda name: True,
                 chunk_keys: dict[str, list[str]] | None = None,
                 on_bad_record: str = "dead_letter", dead_letter: Callable | None = None,
                 window_timeout_s: float = 120.0, on_new_table: Callable[[str], None] | None = None):
        self.prefix = prefix
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
        self.tables: dict[str, TableRuntime] = {}
        self.replay = ReplayFilter()
        self.lock = threading.RLock()
        self.restored = False
        self.bad_records = 0
        self.last_batch: int | None = None
        self.batch_started: float | None = None
        self._replaying: set = set()
        self._pool = None
        self._spill_done: list = []

    # ------------------------------------------------------------------ state

    def _state(self) -> dict:
        return {
            "replay": [[t, p, pos.encode().decode(), tomb] for (t, p), (pos, tomb) in self.replay.highest.items()],
            "bad_records": self.bad_records,
            "tables": {name: {"spec": _spec_to_dict(t.spec), "keys": t.keys, "partitions": t.partitions,
                              "reconciler": t.reconciler.to_dict(), "phase": t.phase, "error": t.error,
                              "rows_applied": t.rows_applied, "snapshot_rows": t.snapshot_rows,
                              "last_offsets": t.last_offsets, "truncated_through": t.truncated_through}
                       for name, t in self.tables.items()},
        }

    def _restore(self, state: dict) -> None:
        self.replay = ReplayFilter()
        for topic, part, pos, tomb in state.get("replay", []):
            self.replay.highest[(topic, int(part))] = (EventPosition.decode(pos), bool(tomb))
        self.bad_records = state.get("bad_records", 0)
        self.tables = {}
        for name, t in state.get("tables", {}).items():
            rt = TableRuntime(name, _spec_from_dict(t["spec"]), t["keys"], t["partitions"],
                              Reconciler.from_dict(t["reconciler"]), t["phase"], t.get("error"),
                              t.get("rows_applied", 0), t.get("snapshot_rows", 0),
                              {int(k): v for k, v in t.get("last_offsets", {}).items()})
            rt.truncated_through = t.get("truncated_through", 0)
            rt.set_spec(rt.spec, self.modes)
            self.tables[name] = rt

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
        keys = list(spec.primary_key) or list(self.chunk_keys.get(name, []))
        rt = TableRuntime(name, spec, keys, self.partitions_of(f"{self.prefix}.{name}"),
                          Reconciler(self.partitions_of(f"{self.prefix}.{name}")))
        rt.set_spec(spec, self.modes)
        if not keys:
            rt.phase, rt.error = "failed", (f"{name} has no primary key: set snapshot.chunk_keys"
                                            f"['{name}'] to the columns that identify a row")
        else:
            self._ensure_sinks(rt)
        self.tables[name] = rt
        if self.on_new_table and rt.phase != "failed":
            self.on_new_table(name)
        return rt

    def _ensure_sinks(self, rt: TableRuntime) -> None:
        db, table = rt.name.split(".", 1)
        for sink in self.sinks:
            try:
                sink.ensure_table((db, table), rt.schema, rt.keys)
            except IncompatibleSchemaChange as exc:
                rt.phase, rt.error = "paused", str(exc)
                log.error("table %s paused: %s", rt.name, exc)
                return

    def refresh_spec(self, rt: TableRuntime, spec: TableSpec | None = None) -> None:
        if spec is None and self.catalog is not None:
            db, table = rt.name.split(".", 1)
            spec = self.catalog.table_spec(db, table)
        if spec is None:
            return
        rt.set_spec(spec, self.modes)
        if rt.phase != "paused":
            self._ensure_sinks(rt)

    # ------------------------------------------------------------------ the batch

    def process(self, batch_id: int, records: pa.Table) -> None:
        with self.lock:
            self.batch_started = time.monotonic()
            if not self.restored:
                state = self.store.load_before(batch_id)
                if state:
                    self._restore(state)
                self.restored = True
            step = [0]
            rows = records.sort_by([("topic", "ascending"), ("partition", "ascending"),
                                    ("offset", "ascending")]).to_pylist() if records.num_rows else []
            per_table: dict[str, list] = {}
            schema_records = []
            now_ms = time.time() * 1000
            for r in rows:
                topic = r["topic"]
                headers = _headers(r.get("headers"))
                value = r.get("value")
                try:
                    payload = _payload(value) if value is not None else None
                    pos = _position(headers, payload)
                except (BadRecord, ValueError) as exc:
                    self._bad(r, str(exc))
                    continue
                if not self.replay.accept(topic, r["partition"], pos, value is None):
                    continue
                if value is None:
                    continue  # tombstone: the delete before it carries the change
                if topic == self.prefix:
                    schema_records.append(payload)
                    continue
                name = topic[len(self.prefix) + 1:]
                if not self.accepts(name):
                    continue
                per_table.setdefault(name, []).append((r, headers, payload, pos))
            for payload in schema_records:
                self._schema_change(payload)
            for name, items in per_table.items():
                rt = self.table(name)
                if rt is None:
                    for r, *_ in items:
                        self._bad(r, f"table {name} not found in the source")
                    continue
                self._table_batch(batch_id, rt, items, step, now_ms)
            self._emit_ready(batch_id, step)
            for rt in self.tables.values():
                for wid in rt.reconciler.expired(time.time(), self.window_timeout_s):
                    log.warning("snapshot window %s of %s expired; its chunks will be read again", wid, rt.name)
                    rt.reconciler.finish(wid)
                    shutil.rmtree(self.store.staging_dir(rt.name, wid), ignore_errors=True)
            self.store.save_batch(batch_id, self._state())
            for spill in self._spill_done:
                shutil.rmtree(spill, ignore_errors=True)
            self._spill_done = []
            self.last_batch = batch_id
            self.batch_started = None

    def _bad(self, record: dict, reason: str) -> None:
        self.bad_records += 1
        if self.on_bad_record == "stop":
            raise MergerError(f"bad record at {record['topic']}[{record['partition']}]@{record['offset']}: "
                              f"{reason}")
        log.warning("bad record at %s[%s]@%s: %s", record["topic"], record["partition"], record["offset"], reason)
        if self.dead_letter is not None:
            self.dead_letter(record, reason)

    def _schema_change(self, payload: dict) -> None:
        for change in payload.get("tableChanges") or []:
            db, table = parse_table_id(change.get("id", ""))
            name = f"{db}.{table}"
            if not self.accepts(name):
                continue
            rt = self.tables.get(name)
            if change.get("type") in ("CREATE", "ALTER"):
                spec = spec_from_table_change(change)
                if rt is not None and spec is not None:
                    before = {c.name for c in rt.spec.columns}
                    self.refresh_spec(rt, spec)
                    added = [c for c in spec.columns if c.name not in before]
                    if any(c.default is not None for c in added) and self.on_new_table is not None:
                        # existing rows got the new column's DEFAULT without any row event:
                        # read the table again so that the sink has it too
                        log.info("%s: column(s) %s added with a default; re-snapshotting", name,
                                 [c.name for c in added])
                        self.store.request("snapshot", name, where=None)
                elif rt is None and spec is not None and self.on_new_table is not None:
                    self.table(name, spec)

    # ------------------------------------------------------------------ changes of one table

    def _spill_dir(self, rt: TableRuntime) -> Path:
        from merger.state import safe_name

        return self.store.root / "paused" / safe_name(rt.name)

    def _table_batch(self, batch_id: int, rt: TableRuntime, items: list, step: list, now_ms: float) -> None:
        if rt.phase in ("paused", "failed"):
            # a paused table keeps its changes on disk, in order, until `cdc resume`
            spill = self._spill_dir(rt)
            spill.mkdir(parents=True, exist_ok=True)
            rows = [{**r, "headers": r.get("headers")} for r, *_ in items]
            pq.write_table(pa.Table.from_pylist(rows), spill / f"batch-{batch_id:012d}.parquet")
            return
        spill = self._spill_dir(rt)
        if spill.exists() and spill not in self._replaying:
            self._replay_spill(batch_id, rt, step, now_ms)
        needed = max(it[0]["partition"] for it in items) + 1
        if needed > rt.partitions:
            # the topic was created (by the first marker or event) after we first met the table
            rt.partitions = max(needed, self.partitions_of(f"{self.prefix}.{rt.name}"))
            rt.reconciler.num_partitions = rt.partitions
        items.sort(key=lambda it: (it[3].sequence() if it[3] else 0, it[0]["partition"]))
        events = []  # (partition, seq, op, image, marker)
        for r, headers, payload, pos in items:
            seq = pos.sequence() if pos else r["offset"]
            rt.last_offsets[r["partition"]] = r["offset"]
            marker = headers.get(WATERMARK_HEADER)
            if marker is not None or payload.get("op") == "m":
                if marker is None:
                    content = (payload.get("message") or {}).get("content")
                    marker = base64.b64decode(content) if content else b"{}"
                m = json.loads(marker)
                events.append((r["partition"], seq, "m", m, r))
                continue
            op = payload.get("op")
            if op in ("c", "u", "r"):
                image = payload.get("after")
            elif op == "d":
                image = payload.get("before")
            elif op == "t":
                image = None
            else:
                self._bad(r, f"unknown op {op!r}")
                continue
            if op != "t" and not isinstance(image, dict):
                self._bad(r, f"op {op} without an image")
                continue
            if image and any(k not in rt.converters for k in image):
                self.refresh_spec(rt)  # a column we do not know yet: the schema changed
            src_ts = (payload.get("source") or {}).get("ts_ms")
            if src_ts:
                rt.lag_ms = max(0.0, now_ms - src_ts)
            events.append((r["partition"], seq, op, image, r))
        # decode every data event of the batch into the canonical schema at once
        data = self._decode([ev for ev in events if ev[2] not in ("m", "t")], rt)
        decoded = {id(ev): i for i, ev in enumerate(data[0])} if data else {}
        keys = data[2] if data else []
        # then feed the reconciler in binlog order (markers, events, truncates interleaved:
        # a key counts as seen only for windows whose LOW came before it) and apply the
        # decoded rows in slices cut at truncates
        start, taken = 0, []
        for ev in events:
            partition, seq, op, image, r = ev
            if op == "m":
                kind = str(image.get("kind", "")).upper()
                if image.get("window") and kind in ("LOW", "HIGH"):
                    rt.reconciler.on_marker(partition, seq, image["window"], kind)
                continue
            if op == "t":
                rt.reconciler.on_event(partition, seq, None, "t")
                if seq > rt.truncated_through:  # one truncate record per partition
                    self._apply_rows(batch_id, rt, data, taken, step)
                    taken = []
                    self._truncate(batch_id, rt, step)
                    rt.truncated_through = seq
                continue
            i = decoded.get(id(ev))
            if i is None:
                continue  # could not be decoded: sent to the dead-letter topic
            rt.reconciler.on_event(partition, seq, keys[i], op)
            if seq < rt.truncated_through:
                continue  # older than a truncate already applied (a lagging partition)
            taken.append(i)
        self._apply_rows(batch_id, rt, data, taken, step)

    def _decode(self, evs: list, rt: TableRuntime):
        """(events that decoded, their Arrow table with _cdc_op/_cdc_seq, their keys)."""
        if not evs:
            return None
        try:
            table = rows_to_arrow(rt.spec, rt.schema, rt.converters, [ev[3] for ev in evs], extra={
                "_cdc_op": (pa.string(), [ev[2] for ev in evs]),
                "_cdc_seq": (pa.int64(), [ev[1] for ev in evs]),
            })
        except (ValueError, TypeError, pa.ArrowException) as exc:
            good = []
            for ev in evs:  # find the bad ones
                try:
                    rows_to_arrow(rt.spec, rt.schema, rt.converters, [ev[3]])
                    good.append(ev)
                except (ValueError, TypeError, pa.ArrowException) as one:
                    self._bad(ev[4], f"cannot decode for {rt.name}: {one}")
            if len(good) == len(evs):
                raise MergerError(f"cannot decode a batch of {rt.name}: {exc}") from None
            return self._decode(good, rt)
        keys = list(zip(*[table.column(k).to_pylist() for k in rt.keys]))
        return evs, table, keys

    def _apply_rows(self, batch_id: int, rt: TableRuntime, data, taken: list, step: list) -> None:
        if not taken:
            return
        table = data[1]
        if len(taken) != table.num_rows:
            table = table.take(pa.array(taken, pa.int64()))
        self._apply(batch_id, rt, table, step)
        rt.rows_applied += table.num_rows

    def _apply(self, batch_id: int, rt: TableRuntime, table: pa.Table, step: list) -> None:
        version = batch_id * STEP + step[0]
        step[0] += 1
        db, name = rt.name.split(".", 1)
        self._each_sink(rt, lambda s: s.apply((db, name), version, table))

    def _each_sink(self, rt: TableRuntime, call) -> None:
        """The same write to every sink, at the same time (they wait on I/O, not the GIL)."""
        if len(self.sinks) == 1:
            self._with_retry(rt, self.sinks[0], lambda: call(self.sinks[0]))
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(len(self.sinks), thread_name_prefix="sink")
        futures = [self._pool.submit(self._with_retry, rt, s, lambda s=s: call(s)) for s in self.sinks]
        for f in futures:
            f.result()

    def _truncate(self, batch_id: int, rt: TableRuntime, step: list) -> None:
        version = batch_id * STEP + step[0]
        step[0] += 1
        db, name = rt.name.split(".", 1)
        self._each_sink(rt, lambda s: s.truncate((db, name), version))

    def _with_retry(self, rt: TableRuntime, sink, call) -> None:
        delay = 1.0
        while True:
            try:
                call()
                if rt.blocked_on_sink:
                    log.info("sink %s reachable again", type(sink).__name__)
                rt.blocked_on_sink = None
                return
            except SinkUnavailable as exc:
                rt.blocked_on_sink = f"{type(sink).__name__}: {exc}"
                log.warning("table %s blocked on sink: %s; retrying in %.0fs", rt.name, exc, delay)
                self.publish_status()
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    # ------------------------------------------------------------------ snapshot windows

    def _emit_ready(self, batch_id: int, step: list) -> None:
        intent = self.store.intent(batch_id)
        if intent is None:
            ready = [[name, wid] for name, rt in sorted(self.tables.items()) if rt.phase != "paused"
                     for wid in rt.reconciler.ready_windows()]
            intent = {"emit": ready}
            if ready:
                self.store.save_intent(batch_id, intent)
        for name, wid in intent["emit"]:
            rt = self.tables.get(name)
            if rt is None or wid not in rt.reconciler.windows:
                continue
            self._emit_window(batch_id, rt, wid, step)

    def _emit_window(self, batch_id: int, rt: TableRuntime, wid: str, step: list) -> None:
        window = rt.reconciler.window(wid)
        path = self.store.staging_dir(rt.name, wid)
        emitted = 0
        if rt.reconciler.is_ready(wid):
            files = sorted(path.glob("*.parquet")) if path.exists() else []
            for batch in _staged_batches(files):
                if True:
                    table = from_snapshot(rt.spec, rt.schema, _fill_missing(batch, rt.spec))
                    keys = list(zip(*[table.column(k).to_pylist() for k in rt.keys]))
                    keep = [False] * len(keys)
                    seqs = [0] * len(keys)
                    for (i, _), seq in rt.reconciler.emit(wid, enumerate(keys), key_of=lambda r: r[1],
                                                          partition_of=lambda k: next(iter(window.high))):
                        keep[i] = True
                        seqs[i] = seq
                    mask = pa.array(keep)
                    table = table.filter(mask)
                    if table.num_rows == 0:
                        continue
                    kept_seqs = [s for s, k in zip(seqs, keep) if k]
                    if kept_seqs and kept_seqs[0] < rt.truncated_through:
                        continue  # the window predates a truncate: nothing of it survives
                    table = table.append_column("_cdc_op", pa.array(["r"] * table.num_rows)) \
                        .append_column("_cdc_seq", pa.array(kept_seqs, pa.int64()))
                    self._apply(batch_id, rt, table, step)
                    emitted += table.num_rows
        rt.snapshot_rows += emitted
        plan = self.store.load_plan(rt.name)
        if plan is not None:
            done = set(plan.get("done", []))
            done.update(window.chunk_ids)
            plan["done"] = sorted(done)
            plan["rows"] = plan.get("rows", 0) + emitted
            if len(done) >= len(plan.get("chunks", [])):
                plan["finished_at"] = time.time()
                if rt.phase == "snapshotting":
                    rt.phase = "streaming"
            self.store.save_plan(rt.name, plan)
        rt.reconciler.finish(wid)  # after the plan says done: the runner must not read it again
        shutil.rmtree(path, ignore_errors=True)
        log.info("snapshot window %s of %s emitted: %d rows", wid, rt.name, emitted)

    # ------------------------------------------------------------------ status

    def status(self) -> dict:
        plans = self.store.all_plans()
        tables = {}
        for name, rt in sorted(self.tables.items()):
            plan = plans.get(name) or {}
            tables[name] = {
                "phase": rt.phase, "error": rt.error, "blocked_on_sink": rt.blocked_on_sink,
                "chunks_done": len(plan.get("done", [])), "chunks_total": len(plan.get("chunks", [])),
                "snapshot_rows": rt.snapshot_rows, "rows_applied": rt.rows_applied,
                "lag_ms": rt.lag_ms, "last_offsets": rt.last_offsets,
                "open_windows": len(rt.reconciler.windows),
            }
        return {"updated_at": time.time(), "last_batch": self.last_batch, "bad_records": self.bad_records,
                "tables": tables}

    def publish_status(self) -> None:
        self.store.write_status(self.status())


def _staged_batches(files: list[Path]):
    """The staged rows in pieces of about EMIT_BATCH_ROWS (few, large sink writes; the
    driver never holds more than one piece)."""
    pending, count = [], 0
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=EMIT_BATCH_ROWS):
            pending.append(batch)
            count += batch.num_rows
            if count >= EMIT_BATCH_ROWS:
                yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
                pending, count = [], 0
    if count:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def _fill_missing(batch: pa.RecordBatch, spec: TableSpec) -> pa.Table:
    t = pa.Table.from_batches([batch])
    for c in spec.columns:
        if c.name not in t.column_names:
            t = t.append_column(c.name, pa.nulls(t.num_rows))
    return t


def _spec_to_dict(spec: TableSpec) -> dict:
    from dataclasses import asdict

    return asdict(spec)


def _spec_from_dict(d: dict) -> TableSpec:
    from ingest.types import ColumnSpec

    cols = tuple(ColumnSpec(**{**c, "enum_values": tuple(c["enum_values"]) if c.get("enum_values") else
                               c.get("enum_values")}) for c in d["columns"])
    return TableSpec(d["db"], d["table"], cols, tuple(d["primary_key"]), d.get("default_charset"), d.get("comment"))
