"""Paused tables in the batch: a table whose values a sink cannot store (or whose change
cannot be applied) is paused, its changes kept on disk in order (``merger.batch.kept``) and
applied first, before anything newer, once `cdc resume` resumed it; `cdc snapshot` of a
paused table rebuilds its sink tables instead."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Callable

from merger.batch.kept import keep, kept_batches, kept_dir, tables_with_kept
from merger.batch.shard_ddl import ShardDdl
from merger.batch.sink_writer import SinkWriter
from merger.batch.tables import TableRegistry, TableRuntime
from merger.errors import BadChange
from merger.sinks.base import SinkError, TableFault
from merger.state.store import StateStore

log = logging.getLogger(__name__)

# a table's changes of a batch applied in order: (batch id, table, records, now in ms)
ApplyChanges = Callable[[int, TableRuntime, list, float], None]


class PausedTables:
    def __init__(self, store: StateStore, writer: SinkWriter, tables: TableRegistry, apply_changes: ApplyChanges):
        self.store = store
        self.writer = writer
        self.tables = tables
        self.apply_changes = apply_changes  # the batch's own way to apply a table's changes
        self.replaying: set[Path] = set()  # kept changes being applied now (not applied again inside)
        self.applied: list[Path] = []  # kept changes applied in this batch: deleted once its state is saved

    def resume(self, rt: TableRuntime) -> None:
        """``cdc resume``: after an operator fixed the sink tables. The changes kept on
        disk while the table was paused are applied first by the next batch; a sink table
        the operator dropped is created again and filled by a new snapshot."""
        rt.phase, rt.error = "streaming", None
        # a sharded table paused at a schema change its shards disagree on: the marker is taken as it is
        rt.shard_ddl.accepted = rt.shard_ddl.conflict
        rt.windows_expired = 0  # the operator fixed what made its snapshot windows expire
        if self.writer.ensure_tables(rt) and rt.phase != "paused":
            log.info("table %s: a sink table was created again; re-snapshotting", rt.name)
            self.store.request("snapshot", rt.name, where=None)
        if rt.phase == "paused":
            log.error("table %s is still paused: %s", rt.name, rt.error)
        else:
            log.info("table %s resumed", rt.name)
            if self.kept_dir(rt).exists():  # the kept changes are applied by the next batch: ask for one
                try:
                    self.store.raise_tick(self.store.tick() + 1)
                except OSError as exc:
                    log.warning("cannot write the emission tick: %s", exc)

    def rebuild(self, rt: TableRuntime) -> bool:
        """``cdc snapshot`` of a paused table: drop its sink tables, create them with the
        current schema, and forget the kept changes (the snapshot that follows covers them).
        False (the table stays paused, the reason in its error) if a sink cannot drop."""
        try:
            self.writer.drop_tables(rt)
        except SinkError as exc:
            rt.error = f"{rt.error}; cannot rebuild: {exc}"
            log.error("table %s stays paused: %s", rt.name, exc)
            return False
        shutil.rmtree(self.kept_dir(rt), ignore_errors=True)
        rt.phase, rt.error = "streaming", None
        rt.shard_ddl = ShardDdl()  # the origins' definitions are learnt again (the snapshot reads them all)
        self.writer.ensure_tables(rt)
        log.info("table %s: sink tables dropped and created again for a new snapshot", rt.name)
        return rt.phase != "paused"

    def kept_dir(self, rt: TableRuntime) -> Path:
        return kept_dir(self.store, rt.name)

    def keep(self, batch_id: int, rt: TableRuntime, records: list[dict], suffix: str = "") -> None:
        """Keep records of the paused table on disk, in order (``merger.batch.kept.keep``)."""
        keep(self.store, batch_id, rt.name, records, suffix)

    def pause(self, batch_id: int, rt: TableRuntime, exc: Exception, items: list, now_ms: float) -> None:
        """A sink cannot store a value of the table (e.g. a NUL with ``nul_policy: pause``), or
        a change cannot be applied (``on_bad_record: pause``):
        pause the table, and keep its records of this batch on disk like those of any
        paused table. Some of them may be applied already (by another sink, or before the
        failing write): applying them again on `cdc resume` changes nothing."""
        rt.phase, rt.error = "paused", str(exc)
        log.error("table %s paused: %s", rt.name, exc)
        if items:
            self.apply_changes(batch_id, rt, items, now_ms)

    def kept_waiting(self, rt: TableRuntime) -> bool:
        """The table has kept changes not being applied right now: they come first."""
        spill = self.kept_dir(rt)
        return spill.exists() and spill not in self.replaying

    def apply_kept_of(self, batch_id: int, rt: TableRuntime, now_ms: float) -> None:
        """Apply the changes a paused table kept on disk, in their order, before anything
        newer. The files are deleted only after the batch's state is saved: a re-run batch
        applies them again with the same versions, which the sinks skip."""
        spill = self.kept_dir(rt)
        self.replaying.add(spill)
        try:
            for file_name, items in kept_batches(spill):
                if items:
                    log.info(
                        "table %s: applying %d changes kept while it was paused (%s)", rt.name, len(items), file_name
                    )
                    self.apply_changes(batch_id, rt, items, now_ms)
                if rt.phase == "paused":
                    return  # paused again: what is left stays kept (re-applying is harmless)
        finally:
            self.replaying.discard(spill)
        self.applied.append(spill)

    def apply_kept(self, batch_id: int, per_table: dict, now_ms: float) -> None:
        """A resumed table without new records: its kept changes are due now."""
        for name in tables_with_kept(self.store, list(self.tables)):
            rt = self.tables.get(name)
            if rt is not None and name not in per_table and rt.phase not in ("paused", "failed"):
                try:
                    self.apply_kept_of(batch_id, rt, now_ms)
                except (TableFault, BadChange) as exc:
                    self.pause(batch_id, rt, exc, [], now_ms)
