"""A table's sink tables follow a DDL of the source: ``merger.schema.change`` decides
(nothing, a new column, a reset, a re-snapshot, a rebuild, a drop); this module does it,
at the DDL marker's place in the stream, and forgets the snapshot windows read with the
old definition."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from cdc.ddl import CREATED, RENAMED
from cdc.tablespec import TableSpec
from merger.batch.sink_writer import SinkWriter
from merger.batch.tables import TableRuntime
from merger.schema.canonical import SourceModes
from merger.schema.change import DROP, NONE, RESET, RESNAPSHOT, decide
from merger.state.store import StateStore

log = logging.getLogger(__name__)


class DdlFollower:
    def __init__(
        self, store: StateStore, writer: SinkWriter, chunk_keys: dict[str, list[str]], modes: SourceModes, on_drop: str
    ):
        self.store = store
        self.writer = writer
        self.chunk_keys = chunk_keys
        self.modes = modes
        self.on_drop = on_drop  # truncate | keep: the sink tables of a dropped table

    def apply(
        self,
        rt: TableRuntime,
        kind: str,
        spec: TableSpec | None,
        sql: str | None,
        order: int | None,
        done: list[Path],
        old: TableSpec | None = None,
    ) -> None:
        """Make the sink tables follow a DDL (``merger.schema.change`` decides how). With
        ``order`` (the DDL marker's place in the stream) the sink tables are emptied exactly
        there, and changes older than it that a lagging partition brings later are void
        (after a reset) or decoded leniently (after a re-snapshot). ``old``: the definition
        to compare with, in the same form as ``spec`` (default: the table's). ``done``
        collects the staging directories of the windows dropped (deleted once the batch is
        saved)."""
        decision = decide(kind, old or rt.spec, spec, sql)
        if decision.action == NONE and not decision.rebuild and spec == (old or rt.spec):
            return
        log.info("table %s: %s: %s", rt.name, kind, decision)
        if decision.action == DROP:
            self.drop_windows(rt, done)
            self._cancel_plan(rt)
            if self.on_drop == "truncate" and rt.phase not in ("paused", "failed"):
                self.writer.truncate(rt)
                rt.truncated_through = max(rt.truncated_through, order or 0)
            rt.phase, rt.error = "dropped", None
            return
        rt.set_spec(spec, self.modes)
        keys = list(spec.primary_key) or list(self.chunk_keys.get(rt.name, []))
        if not keys:
            rt.phase, rt.error = (
                "failed",
                (
                    f"{rt.name} has no primary key: set snapshot.chunk_keys"
                    f"['{rt.name}'] to the columns that identify a row"
                ),
            )
            log.error("table %s: %s", rt.name, rt.error)
            return
        rt.keys = keys
        if rt.phase in ("dropped", "failed"):
            rt.phase, rt.error = "streaming", None
        if rt.phase == "paused":
            return  # `cdc snapshot` rebuilds it with the definition it has now
        keep = self.on_drop == "keep" and kind in (CREATED, RENAMED)
        rebuild, action = decision.rebuild, decision.action
        if not rebuild:
            incompatible = self.writer.follow_schema(rt)
            if incompatible is not None:
                log.info("table %s: %s: the sink tables are rebuilt", rt.name, incompatible)
                rebuild = True
        if rebuild:
            if keep:
                rt.phase, rt.error = (
                    "paused",
                    (
                        f"{rt.name} was re-created with a definition its sink tables cannot hold, and on_drop is "
                        f"keep: move the sink tables away (or set on_drop: truncate), then `cdc snapshot {rt.name}`"
                    ),
                )
                log.error("table %s paused: %s", rt.name, rt.error)
                return
            if not self.writer.rebuild_tables(rt):
                return
        emptied = rebuild
        if action == RESET and not rebuild and not keep:
            self.writer.truncate(rt)
            emptied = True
        if emptied and order is not None:
            rt.truncated_through = max(rt.truncated_through, order)  # older changes are void
        if rebuild or action in (RESNAPSHOT, RESET):
            if order is not None:
                rt.spec_since = max(rt.spec_since, order)
            self.drop_windows(rt, done)  # their rows were read with the old definition
            self.store.request("snapshot", rt.name, where=None)

    def drop_windows(self, rt: TableRuntime, done: list[Path]) -> None:
        """Forget the table's open snapshot windows: their late markers are ignored, their
        staged rows deleted once the batch is saved, their chunks read again."""
        for wid in list(rt.reconciler.windows):
            rt.reconciler.finish(wid)
            rt.emitted.pop(wid, None)
            done.append(self.store.staging_dir(rt.name, wid))

    def _cancel_plan(self, rt: TableRuntime) -> None:
        plan = self.store.load_plan(rt.name)
        if plan is not None and not plan.get("finished_at") and not plan.get("cancelled"):
            plan["cancelled"] = time.time()
            self.store.save_plan(rt.name, plan)
