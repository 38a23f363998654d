"""Delta Lake sink, written with ``deltalake`` (delta-rs; no JVM).

What a table keeps is its mode (``modes``, from ``sinks.delta.tables``): the latest state
(``latest.LatestTables``: the table and its tombstones, MERGEd), an append-only change
log (``changelog.DeltaChangelogs``) or an SCD type 2 history (``scd2.DeltaSCD2Tables``);
the two histories share their tables, versions and commits (``history.DeltaHistoryTables``).

Layout (``base`` is a local path or an object-store URI; ``paths`` names the components)::

    <base>/<db>/<table>                      the user-visible table
    <base>/_cdc/tombstones/<db>/<table>      a latest table's deleted keys (key columns + _cdc_seq)
    <base>/_cdc/writers                      the writer claims (``writers``)

Every table is a plain Delta table (no column mapping, no deletion vectors), readable by
Spark, DuckDB, Polars. Every write records its version atomically with its data (a Delta
app transaction), so a replayed batch is a no-op, and carries the writer epoch the merger
claimed at start (``claim_writer``): a table written by a newer epoch stops an older
merger (``SinkFenced``). On S3, commits are conditional puts (cdc/object_store.py).

The sink is composed of parts, each of its own module: ``handles`` (paths, opening,
errors), ``commits`` (app transactions, writer fence), the mode writers, ``reads`` (read
back: verify, owner checks, tests) and ``origins`` (``cdc shard remove``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import pyarrow as pa
from deltalake.exceptions import DeltaError

from merger.history.modes import ChangelogMode, LatestMode, SCD2Mode, TableModes
from merger.sinks.base import Changes, KeepsRows, Sink, SinkError, TableCut, TableId, as_table_id
from merger.sinks.delta.changelog import DeltaChangelogs
from merger.sinks.delta.commits import Commits
from merger.sinks.delta.handles import DeltaHandles
from merger.sinks.delta.latest import LatestTables
from merger.sinks.delta.origins import DeltaOrigins
from merger.sinks.delta.reads import DeltaReads
from merger.sinks.delta.scd2 import DeltaSCD2Tables

log = logging.getLogger(__name__)

AVAILABLE_MODES = (LatestMode, ChangelogMode, SCD2Mode)

# small-file compaction (DeltaSinkConfig's compact_every_commits / compact_target_mb)
COMPACT_EVERY_COMMITS = 100
COMPACT_TARGET_MB = 4


class DeltaSink(KeepsRows, Sink):
    def __init__(
        self,
        base_path: str | os.PathLike,
        storage_options: dict[str, str] | None = None,
        writer_properties=None,
        compact_every_commits: int = COMPACT_EVERY_COMMITS,
        compact_target_mb: int = COMPACT_TARGET_MB,
        modes: TableModes | None = None,
    ):
        """``modes``: what each table keeps (default: the latest state of every table;
        ``merger.history.modes``)."""
        self.base = str(base_path).rstrip("/")
        self.handles = DeltaHandles(
            self.base, storage_options, writer_properties, compact_target_mb << 20, compact_every_commits
        )
        if not self.handles.remote:
            Path(self.base).mkdir(parents=True, exist_ok=True)
        self.commits = Commits(self.handles)
        self.latest = LatestTables(self.handles, self.commits)
        self.origins = DeltaOrigins(self.handles)
        self.modes = modes or TableModes()
        for name, mode in self.modes.by_table.items():
            if not isinstance(mode, AVAILABLE_MODES):
                raise SinkError(f"sinks.delta.tables.{name}: mode {mode.name} is not available in the delta sink")
        self.histories = {
            ChangelogMode: DeltaChangelogs(self.handles, self.commits, self.modes.of),
            SCD2Mode: DeltaSCD2Tables(self.handles, self.commits, self.modes.of),
        }
        self.reads = DeltaReads(self.latest.meta_for, self._history)  # read back (verify, owner checks, tests)

    def _history(self, table: TableId):
        """The writer of the table's history (``changelog``, ``scd2``); None: latest state."""
        return self.histories.get(type(self.modes.of(table)))

    @property
    def writer_epoch(self) -> int | None:
        """The epoch ``claim_writer`` took (None: commits carry no epoch)."""
        return self.commits.writer_epoch

    # ------------------------------------------------------------------ paths

    def table_path(self, table) -> str:
        return self.handles.table_path(table)

    def tombstone_path(self, table) -> str:
        return self.handles.tombstone_path(table)

    def forget_missing_files(self, table) -> list[str]:
        """Remove from the table's log the data files storage no longer holds (Delta's FSCK):
        their rows are gone from the table, for a repair to read again; the files removed.
        Nothing when every file is there."""
        path = self.table_path(table)
        dt = self.handles.open(path)
        if dt is None:
            return []
        try:
            found = dt.repair(dry_run=True).get("files_removed", [])
            if not found:
                return []
            removed = dt.repair(dry_run=False).get("files_removed", [])
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, path) from None
        self.latest.forget(as_table_id(table))
        log.warning("Delta table %s: %d data files missing from storage removed from its log", path, len(removed))
        return list(removed)

    # ------------------------------------------------------------------ the contract

    def claim_writer(self, owner: str) -> None:
        """Take (or keep) the writer epoch of these tables (merger/sinks/delta/writers.py)."""
        self.commits.claim(owner)

    def ensure_table(self, table, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        table = as_table_id(table)
        history = self._history(table)
        if history is not None:
            return history.ensure(table, arrow_schema, key_columns)
        return self.latest.ensure(table, arrow_schema, key_columns)

    def applied_version(self, table) -> int | None:
        table = as_table_id(table)
        history = self._history(table)
        return (history or self.latest).applied_version(table)

    def apply(self, table, version: int, changes: Changes) -> bool:
        table = as_table_id(table)
        history = self._history(table)
        return (history or self.latest).write(table, int(version), changes)

    def truncate(self, table, version: int, cut: TableCut | None = None) -> bool:
        """``cut``: where the truncate is in the stream (a history writes it down)."""
        table = as_table_id(table)
        history = self._history(table)
        if history is not None:
            return history.truncate(table, int(version), cut, None)
        return self.latest.truncate(table, int(version))

    def truncate_origin(self, table, version: int, column: str, origin: str, cut: TableCut | None = None) -> bool:
        table = as_table_id(table)
        history = self._history(table)
        if history is not None:
            return history.truncate(table, int(version), cut, (column, origin))
        return self.latest.truncate_origin(table, int(version), column, origin)

    def drop_table(self, table) -> None:
        table = as_table_id(table)
        history = self._history(table)
        if history is not None:  # a history is never dropped: set aside, a new one starts
            try:
                aside = history.set_aside(table)
            except (OSError, DeltaError) as exc:
                raise self.handles.io_error(exc, self.table_path(table)) from None
            if aside:
                log.warning("history of %s set aside as %s (kept); a new one starts", table, aside)
            return
        self.latest.drop(table)

    # ------------------------------------------------------------------ read back

    def rows_in_range(self, table, key_columns: Sequence[str], lo, hi) -> pa.Table:
        return self.reads.rows_in_range(table, key_columns, lo, hi)

    def rows_with_keys(self, table, key_columns: Sequence[str], keys) -> pa.Table:
        return self.reads.rows_with_keys(table, key_columns, keys)

    def has_table(self, table) -> bool:
        return self.handles.open(self.table_path(as_table_id(table))) is not None

    # ------------------------------------------------------------------ rows of one origin

    def count_origin(self, table, column: str, prefix: str) -> int | None:
        return self.origins.count(as_table_id(table), column, prefix)

    def delete_origin(self, table, column: str, prefix: str) -> int | None:
        """The rows by their exact origin values, then the same origins' tombstones if the
        tombstones are keyed by it. A history keeps its rows: nothing is deleted (None)."""
        table = as_table_id(table)
        if self._history(table) is not None:
            log.warning("table %s: a history keeps its rows of origins %s*", table, prefix)
            return None
        deleted = self.origins.delete(table, column, prefix)
        if deleted is not None:
            self.latest.forget(table)
        return deleted
