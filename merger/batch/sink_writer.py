"""The merger's writes to its sinks, for one table at a time: the sink tables' lifecycle
(create, follow the definition, drop) and the versioned writes of a batch (changes and
truncates), each to every sink through the fan-out (``merger.sinks.fanout``). The writer
holds the batch's versions (``merger.batch.versions``), started with each batch."""

from __future__ import annotations

import logging
from typing import Callable

import pyarrow as pa

from cdc.routes import ORIGIN_COLUMN
from merger.batch.tables import TableRuntime
from merger.batch.versions import BatchVersions
from merger.history.modes import LatestMode
from merger.sinks.base import IncompatibleSchemaChange, SinkError, TableCut, TableFault
from merger.sinks.fanout import SinkFanout, SinkRetry
from merger.state.store import StateStore

log = logging.getLogger(__name__)


class SinkWriter:
    def __init__(self, sinks: list, store: StateStore, on_blocked: Callable[[], None], retry: SinkRetry = SinkRetry()):
        self.sinks = sinks
        self.store = store
        self.fanout = SinkFanout(sinks, on_blocked, retry)
        self._version_bases: dict[str, int] = {}
        self.versions = BatchVersions(0)  # the current batch's (``start_batch``)

    def start_batch(self, batch_id: int) -> None:
        """The writes that follow are the batch's: their versions count from its first."""
        self.versions = BatchVersions(batch_id)

    def extra_columns(self, rt: TableRuntime) -> frozenset[str]:
        """The columns the table's batches carry for the sinks' modes (``merger.history.modes``)."""
        db, table = rt.name.split(".", 1)
        modes = [getattr(s, "modes", None) for s in self.sinks]  # a sink without modes keeps the latest state
        return frozenset().union(*(m.extra_columns((db, table)) for m in modes if m is not None))

    # ------------------------------------------------------------------ sink tables

    def ensure_tables(self, rt: TableRuntime) -> bool:
        """Create the sink tables or follow the schema; pauses the table on a change a sink
        cannot follow. True if some sink created the table (it holds no rows yet)."""
        db, table = rt.name.split(".", 1)
        created: list[bool] = []
        for sink in self.sinks:
            try:
                self.fanout.with_retry(
                    rt,
                    sink,
                    lambda s=sink: created.append("created" in (s.ensure_table((db, table), rt.schema, rt.keys) or [])),
                )
            except (IncompatibleSchemaChange, TableFault) as exc:
                # a table fault: the sink table is not one this sink may write (another mode,
                # a history option that does not fit): only this table stops
                rt.phase, rt.error = "paused", str(exc)
                log.error("table %s paused: %s", rt.name, exc)
                return any(created)
        return any(created)

    def follow_schema(self, rt: TableRuntime) -> IncompatibleSchemaChange | None:
        """Every sink follows the table's definition; the first change one cannot follow."""
        db, table = rt.name.split(".", 1)
        for sink in self.sinks:
            try:
                self.fanout.with_retry(rt, sink, lambda s=sink: s.ensure_table((db, table), rt.schema, rt.keys))
            except IncompatibleSchemaChange as exc:
                return exc
        return None

    def drop_tables(self, rt: TableRuntime) -> None:
        """Drop the table in every sink (raises SinkError if a sink cannot)."""
        db, table = rt.name.split(".", 1)
        for sink in self.sinks:
            self.fanout.with_retry(rt, sink, lambda s=sink: s.drop_table((db, table)))

    def rebuild_tables(self, rt: TableRuntime) -> bool:
        """Drop the sink tables and create them with the current definition (a snapshot
        fills them). False, with the table paused, if a sink cannot drop tables."""
        db, table = rt.name.split(".", 1)
        try:
            for sink in self.sinks:
                self.fanout.with_retry(rt, sink, lambda s=sink: s.drop_table((db, table)))
                self.fanout.with_retry(rt, sink, lambda s=sink: s.ensure_table((db, table), rt.schema, rt.keys))
        except SinkError as exc:
            rt.phase, rt.error = "paused", f"the sink tables must be rebuilt for a schema change: {exc}"
            log.error("table %s paused: %s", rt.name, rt.error)
            return False
        return True

    # ------------------------------------------------------------------ writes

    def apply(self, rt: TableRuntime, table: pa.Table) -> None:
        """Changes (an Arrow table with ``_cdc_op``/``_cdc_seq``) to every sink."""
        version = self.version(rt)
        db, name = rt.name.split(".", 1)
        self.fanout.each(rt, lambda s: s.apply((db, name), version, table))

    def truncate(self, rt: TableRuntime, cut: TableCut | None = None) -> None:
        """Empty the table; ``cut``: the truncate's place in the stream, for the sinks whose
        table keeps a history (None: a DDL's reset, whose own place the sinks take)."""
        version = self.version(rt)
        t = tuple(rt.name.split(".", 1))
        self.fanout.each(
            rt, lambda s: s.truncate(t, version, cut=cut) if _keeps_history(s, t) else s.truncate(t, version)
        )

    def truncate_origin(self, rt: TableRuntime, origin: str, cut: TableCut | None = None) -> None:
        """Empty one origin of a logical table (``Sink.truncate_origin``)."""
        version = self.version(rt)
        t = tuple(rt.name.split(".", 1))
        self.fanout.each(
            rt,
            lambda s: (
                s.truncate_origin(t, version, ORIGIN_COLUMN, origin, cut=cut)
                if _keeps_history(s, t)
                else s.truncate_origin(t, version, ORIGIN_COLUMN, origin)
            ),
        )

    def version(self, rt: TableRuntime) -> int:
        """The version of the batch's next write of the table, counted."""
        return self.versions.take(self._version_base(rt))

    def next_version(self, rt: TableRuntime) -> int:
        """The version the batch's next write will get (a sink at or above it skips it)."""
        return self.versions.peek(self._version_base(rt))

    def _version_base(self, rt: TableRuntime) -> int:
        """Added to every sink version of the table. Sinks skip a write whose version is
        at or below the one they recorded, and batch ids start again at 0 with a new
        state_dir (a new Spark checkpoint): a merger started with a new state_dir against
        existing sink tables would have its writes skipped until its batch ids caught up.
        So the first write of a table in a state_dir starts above what the sinks recorded
        for it. The base is fixed in state_dir before that write, so a re-run batch gets
        the same versions and is still skipped. (Scoping the sinks' records by a run id
        would need a new record format in all three sinks; a base needs none.)"""
        base = self._version_bases.get(rt.name)
        if base is None:
            base = self._version_bases[rt.name] = self.store.version_base(
                rt.name, lambda: self._recorded_version(rt) + 1
            )
        return base

    def _recorded_version(self, rt: TableRuntime) -> int:
        """The highest version any sink recorded for the table (-1: none)."""
        db, name = rt.name.split(".", 1)
        held = [-1]
        for sink in self.sinks:
            self.fanout.with_retry(rt, sink, lambda s=sink: held.append(s.applied_version((db, name))))
        return max(v for v in held if v is not None)


def _keeps_history(sink, table: tuple) -> bool:
    """Whether the sink's table is a history (its truncate takes the cut)."""
    modes = getattr(sink, "modes", None)
    return modes is not None and not isinstance(modes.of(table), LatestMode)
