"""Paused tables in the batch: pausing a table whose values a sink cannot store, keeping
its changes on disk (merger/batch/kept.py), applying them again first on cdc resume."""

from __future__ import annotations

import logging
from pathlib import Path

from merger.batch.kept import kept_batches, kept_dir, tables_with_kept
from merger.batch.tables import TableRuntime
from merger.errors import BadChange
from merger.sinks.base import TableFault

log = logging.getLogger(__name__)


class PausedTables:
    """BatchProcessor's methods for this job (the rest of the class is in merger/batch/processor.py)."""

    def resume_table(self, rt: TableRuntime) -> None:
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
            if self._spill_dir(rt).exists():  # the kept changes are applied by the next batch: ask for one
                try:
                    self.store.raise_tick(self.store.tick() + 1)
                except OSError as exc:
                    log.warning("cannot write the emission tick: %s", exc)

    def _spill_dir(self, rt: TableRuntime) -> Path:
        return kept_dir(self.store, rt.name)

    def _pause_unstorable(
        self, batch_id: int, rt: TableRuntime, exc: Exception, items: list, step: list, now_ms: float
    ) -> None:
        """A sink cannot store a value of the table (e.g. a NUL with ``nul_policy: pause``), or
        a change cannot be applied (``on_bad_record: pause``):
        pause the table, and keep its records of this batch on disk like those of any
        paused table. Some of them may be applied already (by another sink, or before the
        failing write): applying them again on `cdc resume` changes nothing."""
        rt.phase, rt.error = "paused", str(exc)
        log.error("table %s paused: %s", rt.name, exc)
        if items:
            self._table_batch(batch_id, rt, items, step, now_ms)

    def _replay_spill(self, batch_id: int, rt: TableRuntime, step: list, now_ms: float) -> None:
        """Apply the changes a paused table kept on disk, in their order, before anything
        newer. The files are deleted only after the batch's state is saved: a re-run batch
        applies them again with the same versions, which the sinks skip."""
        spill = self._spill_dir(rt)
        self._replaying.add(spill)
        try:
            for file_name, items in kept_batches(spill):
                if items:
                    log.info(
                        "table %s: applying %d changes kept while it was paused (%s)", rt.name, len(items), file_name
                    )
                    self._table_batch(batch_id, rt, items, step, now_ms)
                if rt.phase == "paused":
                    return  # paused again: what is left stays kept (re-applying is harmless)
        finally:
            self._replaying.discard(spill)
        self._spill_done.append(spill)

    def _apply_kept(self, batch_id: int, per_table: dict, step: list, now_ms: float) -> None:
        """A resumed table without new records: its kept changes are due now."""
        for name in tables_with_kept(self.store, list(self.tables)):
            rt = self.tables.get(name)
            if rt is not None and name not in per_table and rt.phase not in ("paused", "failed"):
                try:
                    self._replay_spill(batch_id, rt, step, now_ms)
                except (TableFault, BadChange) as exc:
                    self._pause_unstorable(batch_id, rt, exc, [], step, now_ms)
