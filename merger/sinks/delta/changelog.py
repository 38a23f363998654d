"""The Delta sink's tables in mode ``changelog`` (``merger.history.modes``): one row
appended per change, never updated; the layout of the PostgreSQL change log
(merger/sinks/postgres/changelog.py, docs/history.md); the table's creation, versions, commits
and setting aside are the history tables' (merger/sinks/delta/history.py).

Layout of ``<base>/<db>/<table>`` (no tombstone table): the user columns (all nullable:
a delete keeps only its key, a truncate none, or its origin column), then ``__op``
(string: ``c u d r t``), ``__seq`` (int64), ``__at`` (timestamp[us, UTC]: the source
commit time, ``_cdc_commit_us``) and ``__version`` (int64: the merger's write that
appended the row). With image ``before_after`` each user column has a twin of its type,
``__before_<column>``, after the user columns: the row before the change (NULL for an
insert, a snapshot row, a truncate). The table configuration marks the mode (``cdc.mode
= changelog``) and the image (``cdc.image``; unmarked: ``after``), and names the key
columns (``cdc.keys``, JSON; their statistics and ``__seq``'s are kept:
``STATS_COLUMNS``): a table of another mode or image is refused (``TableFault``), never
written over, and the latest-state writer refuses a log.

A write is ONE commit: the rows appended with the app transaction
``(cdc-sink:<table id>, version)`` (and the writer epoch), so a batch replayed after a
crash is skipped whole. Which changes are appended is ``merger.history.changelog``'s
``appended_rows`` itself, given each key's last sequence read from the log: a change at
or below it is a replay and is not appended (sequence 0 is valid: a Kafka offset); of
equal (key, sequence) in one batch the first is kept.

Why an append after reading ``max(__seq)`` of the batch's keys, and not an insert-only
MERGE on ``(keys, __seq)``: the rule needs each key's last sequence anyway (a change
below it that the log lacks is dropped too; a MERGE on ``(keys, __seq)`` would append
it); the read is of the key and ``__seq`` columns of the rows since the batch's lowest
sequence only (none while the merger streams new changes: ``_held_sequences``); and an
append never rewrites a file, while a MERGE plans a join
over the log and rewrites every file it matches (copy-on-write; the plan alone was a
quarter of the merger's time with many small tables, issue 23). The atomicity is the
same: one commit carries the rows and the version.

A truncate is one ``t`` row: every key column null (of one origin: its origin column
set), at the truncate's sequence and time (``TableCut``; a DDL's reset, without its own
place: after every row of the log, at the clock's time); the same truncate read again
(a ``t`` row of that sequence and origin is there) appends nothing.

A log dropped at the source or rebuilt by the merger keeps its history: set aside (the
directory renamed ``<table>__until_<UTC time>``, a Delta table of its own) and a new
one starts. On object storage a directory cannot be renamed atomically: refused with a
message saying what to do.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from merger.history.change import Change
from merger.history.changelog import (
    AFTER,
    BEFORE_AFTER,
    BEFORE_PREFIX,
    LOG_AT,
    LOG_OP,
    LOG_SEQ,
    LOG_VERSION,
    appended_rows,
)
from merger.history.changelog_fresh import fresh_mask
from merger.history.modes import COMMIT_US, ChangelogMode
from merger.sinks.base import (
    DELETE_OP,
    OP,
    SEQ,
    Changes,
    SinkError,
    TableCut,
    TableId,
    before_as_log_columns,
    cast_columns,
    checked_changes,
    with_before_fields,
)
from merger.sinks.delta.arrow import delta_arrow_schema
from merger.sinks.delta.commits import Commits
from merger.sinks.delta.handles import DeltaHandles
from merger.sinks.delta.history import DeltaHistoryTables, HistoryLayout, HistoryTable

log = logging.getLogger(__name__)

IMAGE_PROPERTY = "cdc.image"  # a change log's image (``after`` when unmarked: logs made before images)
CHANGELOG = "changelog"

LOG_TYPES = {LOG_OP: pa.string(), LOG_SEQ: pa.int64(), LOG_AT: pa.timestamp("us", tz="UTC"), LOG_VERSION: pa.int64()}


class DeltaChangelogs:
    """The change logs, composed into ``DeltaSink``; ``mode_of(table)`` is the table's mode
    (``TableModes.of``: a ``ChangelogMode``, whose image the log is written with)."""

    def __init__(self, handles: DeltaHandles, commits: Commits, mode_of: Callable[[TableId], ChangelogMode]):
        self.mode_of = mode_of
        layout = HistoryLayout(
            mode=CHANGELOG,
            what="a change log",
            kind="change log",
            own_types=LOG_TYPES,
            per_row="change",
            stats=[LOG_SEQ],
            required=frozenset({LOG_OP, LOG_SEQ, LOG_VERSION}),
            marks=((IMAGE_PROPERTY, AFTER, self.image_of),),
        )
        self.tables = DeltaHistoryTables(handles, commits, layout)

    def image_of(self, table: TableId) -> str:
        """The image a table's log is configured with (``after``, ``before_after``)."""
        return getattr(self.mode_of(table), "image", AFTER)

    # ------------------------------------------------------------------ tables and versions

    def ensure(self, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        if self.image_of(table) == BEFORE_AFTER:  # each user column and its twin, __before_<column>
            arrow_schema = with_before_fields(table, arrow_schema)
        return self.tables.ensure(table, arrow_schema, key_columns)

    def applied_version(self, table: TableId) -> int | None:
        return self.tables.applied_version(table)

    def set_aside(self, table: TableId) -> str | None:
        return self.tables.set_aside(table)

    # ------------------------------------------------------------------ writes

    def write(self, table: TableId, version: int, changes: Changes) -> bool:
        """Append the batch's changes the log does not hold yet; False: a replayed version."""
        m = self.tables.table_for(table)
        src = checked_changes(table, changes, m.keys)
        if src.num_rows and COMMIT_US not in src.column_names:
            raise SinkError(f"table {table}: a change log batch without {COMMIT_US} (the merger adds it)")
        before = self.image_of(table) == BEFORE_AFTER
        if before and src.num_rows:
            src = before_as_log_columns(table, src)
        unknown = [c for c in src.column_names if not c.startswith("_cdc_") and c not in m.columns]
        if unknown:
            raise SinkError(
                f"table {table}: column(s) {unknown} not in the sink table; call ensure_table with the new schema first"
            )
        return self.tables.commit_version(
            table, version, lambda m: self._new_rows(m, src, version, before), self.tables.append_rows
        )

    def _new_rows(self, m: HistoryTable, src: pa.Table, version: int, before: bool = False) -> pa.Table | None:
        if not src.num_rows:
            return None
        src = cast_columns(src, {c: m.columns[c] for c in src.column_names if c in m.columns})
        fresh = src.filter(_fresh(src, self._held_sequences(m, src), m.keys))
        if not fresh.num_rows:
            return None
        fresh = fresh.take(pc.sort_indices(fresh, sort_keys=[(SEQ, "ascending")]))
        n, deletes = fresh.num_rows, pc.equal(fresh[OP], DELETE_OP)
        out = []
        for f in delta_arrow_schema(m.dt):
            if f.name == LOG_OP:
                col = fresh[OP]
            elif f.name == LOG_SEQ:
                col = fresh[SEQ]
            elif f.name == LOG_AT:
                col = pc.cast(fresh[COMMIT_US], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
            elif f.name == LOG_VERSION:
                col = pa.array([version] * n, pa.int64())
            elif f.name not in fresh.column_names:
                col = pa.nulls(n, f.type)
            elif f.name in m.keys or (before and f.name.startswith(BEFORE_PREFIX)):
                col = fresh[f.name]
            else:  # a delete keeps only its key
                col = pc.if_else(deletes, pa.nulls(n, fresh[f.name].type), fresh[f.name])
            out.append(col.cast(f.type) if col.type != f.type else col)
        return pa.Table.from_arrays(out, schema=delta_arrow_schema(m.dt))

    def _held_sequences(self, m: HistoryTable, src: pa.Table) -> pa.Table | None:
        """The key columns and ``__seq`` of the log's rows at or above the batch's lowest
        sequence (None: the log has no row): a key's last sequence below it drops none of
        the batch's changes, so older rows need not be read. The log's statistics of
        ``__seq`` (int64) are exact: files wholly older than the batch are not opened, which
        is every file while the merger streams new changes; a replayed suffix reads the
        files since it. Truncate rows have no key: they count for none."""
        if not m.dt.file_uris():
            return None
        lowest = pc.min(src[SEQ]).as_py()
        return m.dt.to_pyarrow_dataset().to_table(columns=[*m.keys, LOG_SEQ], filter=ds.field(LOG_SEQ) >= lowest)

    def truncate(self, table: TableId, version: int, cut: TableCut | None, origin: tuple[str, str] | None) -> bool:
        """A ``t`` row (``origin``: (column, value) of the rows it empties)."""

        def row(m: HistoryTable) -> pa.Table | None:
            schema = delta_arrow_schema(m.dt)
            if cut is None:  # a DDL's reset: after every change of the log
                held = _highest_sequence(m.dt)
                seq = 0 if held is None else held + 1
                at = int(time.time() * 1_000_000)
            else:
                seq, at = int(cut.sequence), cut.time_us
                if self._holds_truncate(m, seq, origin):
                    return None
            values = {LOG_OP: "t", LOG_SEQ: seq, LOG_AT: at, LOG_VERSION: version}
            if origin is not None:
                values[origin[0]] = origin[1]
            cols = [
                pa.array([values.get(f.name)], LOG_TYPES[f.name] if f.name in LOG_TYPES else f.type).cast(f.type)
                if f.name != LOG_AT
                else pa.array([values[LOG_AT]], pa.int64()).cast(f.type)
                for f in schema
            ]
            return pa.Table.from_arrays(cols, schema=schema)

        return self.tables.commit_version(table, version, row, self.tables.append_rows)

    @staticmethod
    def _holds_truncate(m: HistoryTable, seq: int, origin: tuple[str, str] | None) -> bool:
        columns = [LOG_OP, LOG_SEQ] + ([origin[0]] if origin else [])
        held = m.dt.to_pyarrow_dataset().to_table(
            columns=columns, filter=(ds.field(LOG_SEQ) == seq) & (ds.field(LOG_OP) == "t")
        )
        if origin is not None:
            return any(v == origin[1] for v in held[origin[0]].to_pylist())
        return held.num_rows > 0

    # ------------------------------------------------------------------ read back

    def rows(self, table: TableId) -> pa.Table:
        """The whole log (user columns and the log's), in sequence order."""
        t = self.tables.table_for(table).dt.to_pyarrow_table()
        return t.take(pc.sort_indices(t, sort_keys=[(LOG_SEQ, "ascending")]))

    def count(self, table: TableId) -> int:
        return self.tables.table_for(table).dt.count()


def _highest_sequence(dt: DeltaTable) -> int | None:
    """The log's highest ``__seq`` (None: no row), from the files' statistics (exact for
    int64), read from the rows where a file has none."""
    files = pa.table(dt.get_add_actions(flatten=True))
    if not files.num_rows:
        return None
    column = f"max.{LOG_SEQ}"
    if column in files.column_names and not files[column].null_count:
        return pc.max(files[column]).as_py()
    seqs = dt.to_pyarrow_dataset().to_table(columns=[LOG_SEQ])[LOG_SEQ]
    return pc.max(seqs).as_py() if len(seqs) else None


def _fresh(src: pa.Table, held: pa.Table | None, keys: list[str]) -> pa.Array:
    """Which changes the log takes, by the rule of ``merger.history.changelog``
    (``appended_rows``): above their key's last sequence in ``held``, the first of an equal
    (key, sequence) in the batch. Over Arrow columns (``changelog_fresh``) where that judges
    keys as Python does; else walked, only keys and sequences as Python objects."""
    mask = fresh_mask(src.select(keys), src[SEQ], held)
    if mask is not None:
        return mask
    return _walked(src, _last_sequences(held, keys), keys)


def _last_sequences(held: pa.Table | None, keys: list[str]) -> dict[tuple, int]:
    """``max(__seq)`` per key of ``held`` (a truncate row, without a key, is none)."""
    last: dict[tuple, int] = {}
    for row in held.to_pylist() if held is not None else ():
        key = tuple(row[k] for k in keys)
        if None not in key and row[LOG_SEQ] > last.get(key, -1):
            last[key] = row[LOG_SEQ]
    return last


def _walked(src: pa.Table, last: dict[tuple, int], keys: list[str]) -> pa.Array:
    """``_fresh`` by ``appended_rows`` itself, a Python object per change (measured ~1 s
    per 1M changes), the values kept in Arrow."""
    key_cols = [src[k].to_pylist() for k in keys]
    ops, seqs = src[OP].to_pylist(), src[SEQ].to_pylist()
    first: dict[tuple, int] = {}  # (key, sequence) -> its first row: the one the rule keeps
    changes = []
    for i, (op, seq) in enumerate(zip(ops, seqs)):
        key = tuple(c[i] for c in key_cols)
        first.setdefault((key, seq), i)
        changes.append(Change(key, op, seq, None, None if op == DELETE_OP else {}))
    keep = [False] * src.num_rows
    for row in appended_rows(last, changes, AFTER).rows:
        keep[first[(row.key, row.sequence)]] = True
    return pa.array(keep, pa.bool_())
