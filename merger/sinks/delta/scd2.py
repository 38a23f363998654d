"""The Delta sink's tables in mode ``scd2`` (``merger.history.modes``): every version of
each row, by the rules of ``merger.history.scd2`` (the pure core, which this module only
feeds and writes); the layout of the PostgreSQL SCD2 table (merger/sinks/postgres/scd2.py).

Layout of ``<base>/<db>/<table>`` (no tombstone table, no side table): the user columns,
then ``__start_at`` / ``__end_at`` (timestamp[us, UTC]: the source commit times the
version starts and ends at; null end: open), ``__start_seq`` / ``__end_seq`` (int64, the
same as sequences; null end: open), ``__last_seq`` (int64: the last change written into
the version) and ``__current`` (bool, ``__end_seq`` is null: written by the sink, Delta
has no generated columns here). A version is named by ``(keys, __start_seq)``. The table
configuration marks the mode (``cdc.mode = scd2``) and the keys (``cdc.keys``); a table
of another mode is refused (``TableFault``) and the latest-state writer refuses this one.

A write is ONE commit: each of the batch's keys' latest version (open or closed) is read
from the history itself, ``scd2.apply_changes`` gives the plan, and the plan is MERGEd on
``(keys, __start_seq)`` (matched: rewritten; else inserted) with the app transaction
``(cdc-sink:<table id>, version)`` (and the writer epoch). A replayed version is skipped
whole; a crash (kill -9) leaves the commit made or not, nothing in between; a change
read again under a new version changes nothing (the core's replay rule, against the
versions read).

Why the latest versions are read from the history and not from a side table
(``<base>/_cdc/scd2_latest/...``, docs/history.md §3): correctness first, a single table
has a single commit, so there is no crash between two writes to repair and no "side table
lags" state to refuse; the design's side table needed a second transaction and a replay
rule for it. Cost: the read is of the batch's keys only, filtered by the first key column
(``isin``); the key columns' statistics are kept (``delta.dataSkippingStatsColumns``), so
for integer keys files outside the batch's keys are not opened; for other key types the
log's statistics are inexact and Parquet's own statistics alone prune
(``without_log_statistics``), which may read much of the history: measure before using
it for big tables of string keys. The MERGE rewrites every file holding a version it
closes (copy-on-write), as the design's side table would have.

A truncate closes every current version (of one origin: its rows) whose ``__last_seq`` is
below the truncate's sequence, at its time (never before the version's start), in one
MERGE commit with the version; read again, it finds nothing left to close. A DDL's reset
(no cut) closes after every change the table holds, at the clock's time.

Added columns are added (older versions hold null); versions are read and compared with
the batch's columns only, so a column the source dropped opens nothing. A history dropped
at the source or rebuilt by the merger is set aside (``<table>__until_<UTC time>``) as a
change log is, and refused on object storage.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, write_deltalake

from cdc.quoting import quote_ident
from merger.history.change import Change
from merger.history.modes import COMMIT_US, SCD2Mode
from merger.history.scd2 import (
    CURRENT,
    END_AT,
    END_SEQ,
    LAST_SEQ,
    START_AT,
    START_SEQ,
    HistoryOptionsError,
    Version,
    apply_changes,
)
from merger.history.scd2_opened import only_opens, opened_versions
from merger.sinks.base import (
    DELETE_OP,
    OP,
    SEQ,
    Changes,
    SinkError,
    TableCut,
    TableFault,
    TableId,
    cast_columns,
    checked_changes,
)
from merger.sinks.delta.arrow import delta_arrow_schema, without_log_statistics
from merger.sinks.delta.commits import Commits
from merger.sinks.delta.handles import DeltaHandles
from merger.sinks.delta.history import DeltaHistoryTables, HistoryLayout, HistoryTable
from merger.sinks.key_ranges import range_filter

log = logging.getLogger(__name__)

SCD2 = "scd2"
UTC_US = pa.timestamp("us", tz="UTC")
SCD2_TYPES = {
    START_AT: UTC_US,
    END_AT: UTC_US,
    START_SEQ: pa.int64(),
    END_SEQ: pa.int64(),
    LAST_SEQ: pa.int64(),
    CURRENT: pa.bool_(),
}


class DeltaSCD2Tables:
    """SCD type 2 histories, composed into ``DeltaSink``; ``mode_of(table)`` is the table's
    mode (``TableModes.of``: an ``SCD2Mode``, whose options say what opens a version).
    Tables, versions and commits are the history tables' (the write is a MERGE where a
    change log appends)."""

    def __init__(self, handles: DeltaHandles, commits: Commits, mode_of: Callable[[TableId], SCD2Mode]):
        self.mode_of = mode_of
        layout = HistoryLayout(
            mode=SCD2,
            what="an SCD type 2 history",
            kind="SCD type 2 history",
            own_types=SCD2_TYPES,
            per_row="version",
            stats=[START_SEQ, END_SEQ, LAST_SEQ],
        )
        self.tables = DeltaHistoryTables(handles, commits, layout)
        self.writer_properties = handles.writer_properties

    # ------------------------------------------------------------------ tables and versions

    def check(self, table: TableId, keys, columns) -> None:
        """The mode's options against the table (a mistake pauses the table, saying which)."""
        try:
            self.mode_of(table).options(keys).validate(list(columns))
        except HistoryOptionsError as exc:
            raise TableFault(f"table {table}: sinks.delta.tables.{table}: {exc}") from None

    def ensure(self, table: TableId, arrow_schema: pa.Schema, key_columns) -> list[str]:
        done = self.tables.ensure(table, arrow_schema, key_columns)
        m = self.tables.table_for(table)
        self.check(table, m.keys, list(m.columns))
        return done

    def applied_version(self, table: TableId) -> int | None:
        return self.tables.applied_version(table)

    def set_aside(self, table: TableId) -> str | None:
        return self.tables.set_aside(table)

    def _merge_rows(self, m: HistoryTable, rows: pa.Table, commit: CommitProperties) -> None:
        """One commit: the versions MERGEd on ``(keys, __start_seq)`` (rewritten when held,
        inserted otherwise); an empty append when there are none (it records the version)."""
        schema = delta_arrow_schema(m.dt)
        if not rows.num_rows or not m.dt.file_uris():
            full = [
                rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                for f in schema
            ]
            write_deltalake(
                m.dt,
                pa.Table.from_arrays(full, schema=schema),
                mode="append",
                commit_properties=commit,
                writer_properties=self.writer_properties,
            )
            return
        rows = pa.Table.from_arrays(
            [rows[n].cast(schema.field(n).type) for n in rows.column_names], names=rows.column_names
        )
        names = [*m.keys, START_SEQ]
        on = " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in names)
        prunable = m.prunable
        ranges = range_filter(rows[m.keys[0]], f"t.{quote_ident(m.keys[0])}") if prunable else None
        if ranges is not None:
            on = f"{on} AND {ranges}"
        (
            m.dt.merge(
                rows,
                predicate=on,
                source_alias="s",
                target_alias="t",
                streamed_exec=not prunable,
                writer_properties=self.writer_properties,
                commit_properties=commit,
            )
            .when_matched_update({quote_ident(c): f"s.{quote_ident(c)}" for c in rows.column_names if c not in names})
            .when_not_matched_insert({quote_ident(c): f"s.{quote_ident(c)}" for c in rows.column_names})
            .execute()
        )

    # ------------------------------------------------------------------ writes

    def write(self, table: TableId, version: int, changes: Changes) -> bool:
        """Apply the batch's changes; False: a replayed version."""
        m = self.tables.table_for(table)
        src = checked_changes(table, changes, m.keys)
        if src.num_rows and (COMMIT_US not in src.column_names or src[COMMIT_US].null_count):
            raise SinkError(
                f"table {table}: an SCD type 2 batch needs {COMMIT_US} on every change (the merger adds it)"
            )
        unknown = [c for c in src.column_names if not c.startswith("_cdc_") and c not in m.columns]
        if unknown:
            raise SinkError(
                f"table {table}: column(s) {unknown} not in the sink table; call ensure_table with the new schema first"
            )
        self.check(table, m.keys, list(m.columns))
        return self.tables.commit_version(table, version, lambda m: self._plan_rows(table, m, src), self._merge_rows)

    def _plan_rows(self, table: TableId, m: HistoryTable, src: pa.Table) -> pa.Table | None:
        if not src.num_rows:
            return None
        cols = [c for c in m.columns if c in src.column_names]  # the batch's columns, in the table's order
        stored = {c: m.columns[c] for c in cols}
        typed = cast_columns(src.select(cols), stored)
        latest = self._latest(m, cols, typed.select(m.keys))  # the keys, cast with the batch's columns
        if not latest and only_opens(typed.select(m.keys), src[OP], src[SEQ]):
            # keys without a history, each changed once (a snapshot's rows, a backlog of
            # inserts): the versions they open, over columns (merger.history.scd2_opened)
            opened = opened_versions(
                typed, src[OP], src[SEQ], src[COMMIT_US], START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ
            )
            return _opened_rows(opened) if opened.num_rows else None
        values = typed.to_pylist()
        ops, seqs, times = src[OP].to_pylist(), src[SEQ].to_pylist(), src[COMMIT_US].to_pylist()
        batch = [
            Change(tuple(row[k] for k in m.keys), op, seq, at, None if op == DELETE_OP else row)
            for row, op, seq, at in zip(values, ops, seqs, times)
        ]
        plan = apply_changes(latest, batch, self.mode_of(table).options(m.keys))
        for note in plan.notes:
            log.warning("table %s: %s", table, note.text)
        if not plan:
            return None
        return _version_rows(plan.upserts, cols, stored)

    def _dataset(self, m: HistoryTable) -> ds.Dataset:
        dataset = m.dt.to_pyarrow_dataset()
        return dataset if m.prunable else without_log_statistics(dataset)

    def _latest(self, m: HistoryTable, cols: list[str], keys: pa.Table) -> dict[tuple, Version]:
        """The latest version (greatest ``__start_seq``) of each of the batch's keys that
        has a history, read from the history filtered by the batch's first key column."""
        if not m.dt.file_uris():
            return {}
        dataset = self._dataset(m)
        first = m.keys[0]
        field, ftype = ds.field(first), dataset.schema.field(first).type
        if pa.types.is_string(ftype) or pa.types.is_binary(ftype) or pa.types.is_large_string(ftype):
            field = field.cast(ftype)  # files written by MERGE hold string_view (as latest.py's tombstone read)
        own = [START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ]
        held = dataset.to_table(columns=[*cols, *own], filter=field.isin(pc.unique(keys[first])))
        if not held.num_rows:
            return {}
        held = cast_columns(held, {c: m.columns[c] for c in cols})
        for c in (START_AT, END_AT):
            held = held.set_column(held.schema.get_field_index(c), c, pc.cast(held[c], pa.int64()))
        wanted = {tuple(r.values()) for r in keys.to_pylist()}
        latest: dict[tuple, Version] = {}
        for row in held.to_pylist():
            key = tuple(row[k] for k in m.keys)
            if key not in wanted or (key in latest and latest[key].start_sequence >= row[START_SEQ]):
                continue
            latest[key] = Version(
                key,
                {c: row[c] for c in cols},
                row[START_SEQ],
                row[START_AT],
                row[LAST_SEQ],
                row[END_SEQ],
                row[END_AT],
            )
        return latest

    def truncate(self, table: TableId, version: int, cut: TableCut | None, origin: tuple[str, str] | None) -> bool:
        """Every current version applied before the truncate closes at it (of one origin:
        its rows only). Without the truncate's own place (a DDL's reset), after every change."""

        def closing(m: HistoryTable) -> pa.Table | None:
            if not m.dt.file_uris():
                return None
            if origin is not None and origin[0] not in m.columns:
                return None
            dataset = without_log_statistics(m.dt.to_pyarrow_dataset())
            if cut is None:
                seqs = dataset.to_table(columns=[LAST_SEQ, END_SEQ])
                highest = [pc.max(seqs[c]).as_py() for c in (LAST_SEQ, END_SEQ)]
                seq = max([h for h in highest if h is not None], default=-1) + 1
                at = int(time.time() * 1_000_000)
            else:
                seq = int(cut.sequence)
                at = int(cut.time_us) if cut.time_us is not None else int(time.time() * 1_000_000)
            where = ds.field(END_SEQ).is_null() & (ds.field(LAST_SEQ) < seq)
            if origin is not None:
                # cast: files written by MERGE hold string_view, which pyarrow does not compare with a string
                where = where & (ds.field(origin[0]).cast(dataset.schema.field(origin[0]).type) == origin[1])
            open_ = dataset.to_table(columns=[*m.keys, START_AT, START_SEQ, LAST_SEQ], filter=where)
            if not open_.num_rows:
                return None
            starts = pc.cast(open_[START_AT], pa.int64()).to_pylist()
            n = open_.num_rows
            return pa.table(
                {
                    **{k: open_[k] for k in m.keys},
                    START_SEQ: open_[START_SEQ],
                    END_SEQ: pa.array([seq] * n, pa.int64()),
                    END_AT: pa.array([max(at, s) for s in starts], pa.int64()).cast(UTC_US),
                    CURRENT: pa.array([False] * n, pa.bool_()),
                }
            )

        return self.tables.commit_version(table, version, closing, self._merge_rows)

    # ------------------------------------------------------------------ read back

    def rows(self, table: TableId) -> pa.Table:
        """Every version (user columns and the history's), by key and start."""
        m = self.tables.table_for(table)
        t = m.dt.to_pyarrow_table()
        return t.take(pc.sort_indices(t, sort_keys=[(k, "ascending") for k in [*m.keys, START_SEQ]]))

    def count(self, table: TableId) -> int:
        return self.tables.table_for(table).dt.count()


def _opened_rows(opened: pa.Table) -> pa.Table:
    """Open versions (``scd2_opened.opened_versions``) as ``_version_rows`` gives them."""
    for c in (START_AT, END_AT):
        opened = opened.set_column(opened.schema.get_field_index(c), c, opened[c].cast(UTC_US))
    return opened.append_column(CURRENT, pa.array([True] * opened.num_rows, pa.bool_()))


def _version_rows(versions: list[Version], cols: list[str], stored: dict[str, pa.DataType]) -> pa.Table:
    """The versions as rows: the batch's columns and the history's own."""
    arrays: dict[str, Any] = {c: pa.array([v.values.get(c) for v in versions], stored[c]) for c in cols}
    arrays[START_AT] = pa.array([v.start_time for v in versions], pa.int64()).cast(UTC_US)
    arrays[END_AT] = pa.array([v.end_time for v in versions], pa.int64()).cast(UTC_US)
    arrays[START_SEQ] = pa.array([v.start_sequence for v in versions], pa.int64())
    arrays[END_SEQ] = pa.array([v.end_sequence for v in versions], pa.int64())
    arrays[LAST_SEQ] = pa.array([v.last_sequence for v in versions], pa.int64())
    arrays[CURRENT] = pa.array([v.end_sequence is None for v in versions], pa.bool_())
    return pa.table(arrays)
