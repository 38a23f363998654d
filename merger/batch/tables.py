"""The merger's runtime of each captured table, and the registry that holds them.

The registry's lock serialises the two threads that change a table's runtime: the batch
(``merger.batch.processor``, which holds it for a whole micro-batch) and the snapshot runner
(``merger.snapshot.runner``, which holds it for each step of a window through the methods
below). The lock is re-entrant: the batch may call methods that take it again.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

from cdc.tablespec import ColumnSpec, TableSpec
from merger.batch.read_through import ReadThroughTargets
from merger.batch.shard_ddl import ShardDdl
from merger.dblog import Reconciler
from merger.schema.canonical import SourceModes, arrow_schema, json_converters
from merger.verify.windows import VerifyWindows


@dataclass
class TableRuntime:
    name: str
    spec: TableSpec
    keys: list[str]
    partitions: int
    reconciler: Reconciler
    phase: str = "streaming"  # snapshotting | streaming | paused | failed | dropped
    error: str | None = None
    rows_applied: int = 0
    snapshot_rows: int = 0
    last_offsets: dict = field(default_factory=dict)
    lag_ms: float | None = None
    shard_lag_ms: dict = field(default_factory=dict)  # a sharded source's: shard -> its lag (not saved)
    blocked_on_sink: str | None = None
    truncated_through: int = 0  # the order of the last cut (truncate, drop, reset): older changes are void
    # a logical table's: origin -> the order of its last TRUNCATE (orders of the origin's server)
    origin_truncated: dict = field(default_factory=dict)
    emitted: dict = field(default_factory=dict)  # window id -> staged rows already emitted
    ddl_through: int = 0  # the order of the last DDL marker applied (one per partition)
    spec_since: int = 0  # the order of the DDL the spec comes from: older changes decode leniently
    windows_expired: int = 0  # snapshot windows expired in a row (since one was emitted)
    # a sharded source's: each origin's definition, each shard's last DDL (merger.batch.shard_ddl)
    shard_ddl: ShardDdl = field(default_factory=ShardDdl)
    # the markers of `cdc verify`'s windows read (not saved: a verify waits seconds)
    verify_windows: VerifyWindows = field(default_factory=VerifyWindows)
    # positional windows: where the reader must be for each partition to be read through
    # their HIGH (merger.batch.read_through; not saved: the runner sets them again)
    read_through: ReadThroughTargets = field(default_factory=ReadThroughTargets)

    def __post_init__(self):
        self.schema = arrow_schema(self.spec)
        self.converters = None
        self._spec_dict: tuple[TableSpec, dict] | None = None  # saved with every batch: built once per spec

    def set_spec(self, spec: TableSpec, modes: SourceModes) -> None:
        self.spec = spec
        self.schema = arrow_schema(spec)
        self.converters = json_converters(spec, modes)

    def columns(self) -> list[tuple[str, str]]:
        """The columns as (name, Arrow type): what a staged window records it was read with."""
        return [(f.name, str(f.type)) for f in self.schema]

    def to_dict(self) -> dict:
        """The runtime as saved with a batch (lag and sink blocking are not saved)."""
        return {
            "spec": self._saved_spec(),
            "keys": self.keys,
            "partitions": self.partitions,
            "reconciler": self.reconciler.to_dict(),
            "phase": self.phase,
            "error": self.error,
            "rows_applied": self.rows_applied,
            "snapshot_rows": self.snapshot_rows,
            "last_offsets": self.last_offsets,
            "truncated_through": self.truncated_through,
            **({"origin_truncated": self.origin_truncated} if self.origin_truncated else {}),
            "ddl_through": self.ddl_through,
            "spec_since": self.spec_since,
            "windows_expired": self.windows_expired,
            **({"shard_ddl": self.shard_ddl.to_dict(spec_to_dict)} if self.shard_ddl.kept() else {}),
            "emitted": {w: n for w, n in self.emitted.items() if w in self.reconciler.windows},
        }

    def _saved_spec(self) -> dict:
        """``spec_to_dict(spec)``, kept while the spec is the same object (specs are
        replaced, never changed): with hundreds of tables, building it for every table in
        every batch was 5% of the merger's time."""
        if self._spec_dict is None or self._spec_dict[0] is not self.spec:
            self._spec_dict = (self.spec, spec_to_dict(self.spec))
        return self._spec_dict[1]

    @classmethod
    def from_dict(cls, name: str, t: dict, modes: SourceModes) -> "TableRuntime":
        rt = cls(
            name,
            spec_from_dict(t["spec"]),
            t["keys"],
            t["partitions"],
            Reconciler.from_dict(t["reconciler"]),
            t["phase"],
            t.get("error"),
            t.get("rows_applied", 0),
            t.get("snapshot_rows", 0),
            {int(k): v for k, v in t.get("last_offsets", {}).items()},
        )
        rt.truncated_through = t.get("truncated_through", 0)
        rt.origin_truncated = dict(t.get("origin_truncated", {}))
        rt.ddl_through, rt.spec_since = t.get("ddl_through", 0), t.get("spec_since", 0)
        rt.windows_expired = t.get("windows_expired", 0)
        rt.shard_ddl = ShardDdl.from_dict(t.get("shard_ddl"), spec_from_dict)  # absent in older states
        rt.emitted = dict(t.get("emitted", {}))
        rt.set_spec(rt.spec, modes)
        return rt


class TableRegistry:
    """Table name -> TableRuntime, read like a dict; its lock serialises the batch against
    the snapshot runner (take it with ``locked()`` around any change of a runtime)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._tables: dict[str, TableRuntime] = {}

    def locked(self) -> threading.RLock:
        """``with registry.locked():`` one critical section."""
        return self._lock

    def try_lock(self) -> bool:
        """Take the lock if nobody holds it (then ``unlock()``); False if a batch runs."""
        return self._lock.acquire(blocking=False)

    def unlock(self) -> None:
        self._lock.release()

    # -- the mapping (the batch, under the lock)

    def get(self, name: str) -> TableRuntime | None:
        return self._tables.get(name)

    def __getitem__(self, name: str) -> TableRuntime:
        return self._tables[name]

    def __contains__(self, name: str) -> bool:
        return name in self._tables

    def __iter__(self) -> Iterator[str]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def items(self):
        return self._tables.items()

    def values(self):
        return self._tables.values()

    def add(self, rt: TableRuntime) -> None:
        self._tables[rt.name] = rt

    def replace(self, tables: dict[str, TableRuntime]) -> None:
        """All runtimes at once (a restored state)."""
        self._tables = dict(tables)

    def status(self, plans: dict[str, dict]) -> dict:
        """Every table's status (``plans``: table -> its latest snapshot plan's summary,
        ``StateStore.plan_summaries``)."""
        tables = {}
        none = {"snapshot": None, "chunks_done": 0, "chunks_total": 0}
        for name, rt in sorted(self._tables.items()):
            plan = plans.get(name) or none
            tables[name] = {
                "phase": rt.phase,
                "error": rt.error,
                "blocked_on_sink": rt.blocked_on_sink,
                "snapshot": plan["snapshot"],
                "chunks_done": plan["chunks_done"],
                "chunks_total": plan["chunks_total"],
                "snapshot_rows": rt.snapshot_rows,
                "rows_applied": rt.rows_applied,
                "lag_ms": rt.lag_ms,
                "last_offsets": rt.last_offsets,
                "open_windows": len(rt.reconciler.windows),
                "partitions": rt.partitions,
                "verify_windows": rt.verify_windows.status(),
            }
            shards = {
                shard: {"lag_ms": lag, "chunks_done": 0, "chunks_total": 0} for shard, lag in rt.shard_lag_ms.items()
            }
            for shard, (done, total) in (plan.get("shards") or {}).items():
                shards.setdefault(shard, {"lag_ms": None})
                shards[shard].update(chunks_done=done, chunks_total=total)
            if shards:
                tables[name]["shards"] = dict(sorted(shards.items()))
        return tables

    # -- the snapshot runner's steps (each one critical section)

    def lookup(self, name: str) -> TableRuntime | None:
        with self._lock:
            return self._tables.get(name)

    def open_window(self, rt: TableRuntime, wid: str, chunk_ids: list[str], now: float) -> None:
        with self._lock:
            rt.reconciler.open_window(wid, chunk_ids, now)

    def open_positional_window(self, rt: TableRuntime, wid: str, chunk_ids: list[str], now: float) -> None:
        with self._lock:
            rt.reconciler.open_positional_window(wid, chunk_ids, now)

    def set_position(self, rt: TableRuntime, wid: str, kind: str, sequence: int, time_us: int | None = None) -> bool:
        """A positional window's LOW or HIGH (``kind``); False if the window is gone."""
        with self._lock:
            if wid not in rt.reconciler.windows:
                return False
            if kind == "LOW":
                rt.reconciler.position_low(wid, sequence)
            else:
                rt.reconciler.position_high(wid, sequence, time_us)
            return True

    def window_positions(self, rt: TableRuntime, wid: str):
        """A positional window's ``Positions`` (None: the window is gone)."""
        with self._lock:
            window = rt.reconciler.windows.get(wid)
            return None if window is None else window.positions

    def fail_window(self, rt: TableRuntime, wid: str, why: str) -> None:
        """The window cannot be closed (``why``): the next batch expires it and its chunks are
        read again with new watermarks."""
        with self._lock:
            window = rt.reconciler.windows.get(wid)
            if window is not None and window.problem is None:
                window.problem = why
                window.seen.clear()

    def expect_read_through(self, rt: TableRuntime, sequence: int, ends: dict[int, int]) -> None:
        """The table's topic is read through ``sequence`` once its reader passed ``ends``."""
        with self._lock:
            rt.read_through.add(sequence, ends)

    def mark_staged(self, rt: TableRuntime, wid: str) -> bool:
        """The window's rows are staged; False if the window expired meanwhile."""
        with self._lock:
            if wid not in rt.reconciler.windows:
                return False
            rt.reconciler.mark_staged(wid)
            return True

    def window_chunks(self, name: str, wid: str) -> tuple[str, ...] | None:
        """The chunk ids of the table's open window (None: not open, or no such table)."""
        with self._lock:
            rt = self._tables.get(name)
            window = None if rt is None else rt.reconciler.windows.get(wid)
            return None if window is None else window.chunk_ids

    def window_open(self, rt: TableRuntime, wid: str) -> bool:
        """Whether the window is still open (not emitted, expired or dropped by a new plan)."""
        with self._lock:
            return wid in rt.reconciler.windows

    def finish_window(self, rt: TableRuntime, wid: str, forget: Callable[[str], None]) -> None:
        """Give up one window; ``forget(wid)`` (delete its staged rows) inside the lock."""
        with self._lock:
            rt.reconciler.finish(wid)
            forget(wid)

    def finish_windows(self, name: str, forget: Callable[[str], None]) -> None:
        """Give up every open window of a table, each as ``finish_window``."""
        with self._lock:
            rt = self._tables.get(name)
            if rt is None:
                return
            for wid in list(rt.reconciler.windows):
                rt.reconciler.finish(wid)
                forget(wid)

    def definition(self, rt: TableRuntime) -> tuple[TableSpec, list[tuple[str, str]]]:
        """The table's definition and its columns as (name, Arrow type): one for a whole read."""
        with self._lock:
            return rt.spec, rt.columns()

    def set_phase(self, rt: TableRuntime | None, phase: str, when: str) -> None:
        """``rt.phase = phase`` if it is ``when`` (snapshotting <-> streaming)."""
        with self._lock:
            if rt is not None and rt.phase == when:
                rt.phase = phase


def spec_to_dict(spec: TableSpec) -> dict:
    return asdict(spec)


def spec_from_dict(d: dict) -> TableSpec:
    cols = tuple(
        ColumnSpec(**{**c, "enum_values": tuple(c["enum_values"]) if c.get("enum_values") else c.get("enum_values")})
        for c in d["columns"]
    )
    return TableSpec(d["db"], d["table"], cols, tuple(d["primary_key"]), d.get("default_charset"), d.get("comment"))
