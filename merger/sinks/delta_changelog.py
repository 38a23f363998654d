"""The Delta sink's tables in mode ``changelog`` (``merger.history.modes``): one row
appended per change, never updated; the layout of the PostgreSQL change log
(merger/sinks/postgres/changelog.py, docs/history.md).

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
sequence only (none while the merger streams new changes: ``_last_sequences``); and an
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

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError

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
from merger.history.modes import COMMIT_US
from merger.sinks import types as T
from merger.sinks.base import (
    DELETE_OP,
    OP,
    SEQ,
    Changes,
    IncompatibleSchemaChange,
    SinkError,
    TableCut,
    TableFault,
    TableId,
    before_as_log_columns,
    cast_columns,
    check_keys,
    checked_changes,
    user_fields,
    with_before_fields,
)
from merger.sinks.delta_arrow import delta_arrow_schema

log = logging.getLogger(__name__)

MODE_PROPERTY = "cdc.mode"  # the table configuration entry that marks a sink table's mode
KEYS_PROPERTY = "cdc.keys"  # a change log's key columns, as a JSON list
IMAGE_PROPERTY = "cdc.image"  # a change log's image (``after`` when unmarked: logs made before images)
CHANGELOG = "changelog"
TARGET_FILE_SIZE = "delta.targetFileSize"
# the columns whose statistics the log keeps: by default only the first 32 columns have
# them, and ``__seq`` comes after the user columns; without them every file is read
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
COMMIT_RETRIES = 5  # appends in a row that may conflict with another writer's commit

LOG_TYPES = {LOG_OP: pa.string(), LOG_SEQ: pa.int64(), LOG_AT: pa.timestamp("us", tz="UTC"), LOG_VERSION: pa.int64()}


@dataclass(frozen=True)
class DeltaAccess:
    """What a change log takes from the Delta sink that holds it (merger/sinks/delta.py):
    its paths, handles, commits (``commit(version, *app ids)``: the app transactions, the
    writer epoch included), writer fence (``fence(tables, version, held)``) and errors."""

    table_path: Callable[[TableId], str]
    open: Callable[[str], "DeltaTable | None"]
    commit: Callable[..., CommitProperties]
    fence: Callable[..., None]
    io_error: Callable[[BaseException, str], SinkError]
    storage_options: dict[str, str] | None
    writer_properties: Any
    target_file_bytes: int
    compact_every_commits: int


@dataclass
class ChangeLog:
    dt: DeltaTable
    keys: list[str]
    columns: dict[str, pa.DataType]  # user column -> storage type
    table_id: str

    @property
    def app(self) -> str:
        return f"cdc-sink:{self.table_id}"  # the latest-state table's own (merger/sinks/delta.py)


def table_mode(dt: DeltaTable) -> str:
    """The mode a sink table's configuration marks (``latest`` when unmarked: tables of the
    latest state were created without the mark)."""
    return dt.metadata().configuration.get(MODE_PROPERTY) or "latest"


class DeltaChangelogs:
    """The change logs; ``merger.sinks.delta_scd2`` shares this machinery (tables, versions,
    commits, setting aside) for another layout: ``MODE`` (the mark), ``WHAT`` (named in
    messages), ``OWN_TYPES`` (the columns the mode adds after the user columns)."""

    MODE = CHANGELOG
    WHAT = "a change log"
    OWN_TYPES = LOG_TYPES

    def __init__(self, access: DeltaAccess, image_of: Callable[[TableId], str] = lambda table: AFTER):
        """``image_of``: the image a table's log is configured with (``after``, ``before_after``)."""
        self.access = access
        self.image_of = image_of
        self._logs: dict[TableId, ChangeLog] = {}
        self._writes: dict[TableId, int] = {}

    # ------------------------------------------------------------------ tables

    def _path(self, table: TableId) -> str:
        return self.access.table_path(table)

    def load(self, table: TableId) -> ChangeLog | None:
        """The log; None: no table. A table of another mode is refused."""
        dt = self.access.open(self._path(table))
        if dt is None:
            return None
        mode = table_mode(dt)
        if mode != self.MODE:
            raise TableFault(
                f"Delta table {self._path(table)} exists and is not {self.WHAT} (it is marked {mode}; its mode in "
                f"sinks.delta.tables is {self.MODE} now): move it away, then `cdc snapshot {table}`; a mode never "
                "changes silently"
            )
        image, wanted = dt.metadata().configuration.get(IMAGE_PROPERTY) or AFTER, self.image_of(table)
        if image != wanted:
            raise TableFault(
                f"Delta table {self._path(table)} is a change log with image {image} (its image in "
                f"sinks.delta.tables is {wanted} now): move it away, then `cdc snapshot {table}`; an image never "
                "changes silently"
            )
        keys = json.loads(dt.metadata().configuration.get(KEYS_PROPERTY) or "[]")
        columns = {f.name: f.type for f in delta_arrow_schema(dt) if f.name not in self.OWN_TYPES}
        return ChangeLog(dt, keys, columns, dt.metadata().id)

    def log_for(self, table: TableId) -> ChangeLog:
        m = self._logs.get(table)
        try:
            if m is None:
                m = self.load(table)
                if m is None:
                    raise SinkError(f"table {table}: no sink table yet; call ensure_table first")
                self._logs[table] = m
            else:
                m.dt.update_incremental()
        except (OSError, DeltaError) as exc:
            raise self.access.io_error(exc, self._path(table)) from None
        return m

    def ensure(self, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        keys = check_keys(table, arrow_schema, key_columns)
        if self.image_of(table) == BEFORE_AFTER:  # each user column and its twin, __before_<column>
            arrow_schema = with_before_fields(table, arrow_schema)
        wanted: dict[str, pa.DataType] = {}
        for f in user_fields(arrow_schema):
            if f.name in self.OWN_TYPES:
                raise SinkError(f"table {table}: column {f.name!r} is {self.WHAT}'s own (docs/history.md)")
            try:
                wanted[f.name] = T.delta_storage_type(f.type)
            except T.UnsupportedType as exc:
                raise SinkError(f"table {table}, column {f.name!r}: {exc}") from None
        self._logs.pop(table, None)
        try:
            return self._ensure(table, keys, wanted)
        except (OSError, DeltaError) as exc:
            raise self.access.io_error(exc, self._path(table)) from None

    def _ensure(self, table: TableId, keys: list[str], wanted: dict[str, pa.DataType]) -> list[str]:
        m = self.load(table)
        if m is None:
            self._create(table, keys, wanted)
            return ["created"]
        self.access.fence([m.dt])
        if list(m.keys) != list(keys):
            raise IncompatibleSchemaChange(
                f"incompatible schema change for {table}: key columns change from {m.keys} to {keys}"
            )
        added, widened = [], {}
        for c, new in wanted.items():
            if c not in m.columns:
                added.append(pa.field(c, new, nullable=True))
                continue
            verdict = T.compare(m.columns[c], new)
            if verdict is None:
                raise IncompatibleSchemaChange(
                    f"incompatible schema change for {table}: column {c!r} cannot change from {m.columns[c]} to {new}"
                )
            if verdict == T.WIDEN:
                widened[c] = new
        done = []
        if added:
            m.dt.alter.add_columns(DeltaSchema.from_arrow(pa.schema(added)).fields)
            done += [f"added column {f.name} {f.type}" for f in added]
        if widened:
            self._rewrite(m, widened)
            done += [f"widened {c} {m.columns[c]} -> {t}" for c, t in widened.items()]
        return done

    def _create(self, table: TableId, keys: list[str], wanted: dict[str, pa.DataType]) -> None:
        schema = pa.schema(
            [pa.field(c, t, nullable=True) for c, t in wanted.items()]
            + [pa.field(n, t, nullable=n == LOG_AT) for n, t in LOG_TYPES.items()]
        )
        self._create_marked(
            table,
            keys,
            schema,
            f"CDC change log of {table.database}.{table.table}; key {keys}; one row per change",
            [LOG_SEQ],
            {IMAGE_PROPERTY: self.image_of(table)},
        )

    def _create_marked(
        self,
        table: TableId,
        keys: list[str],
        schema: pa.Schema,
        description: str,
        stats: list[str],
        marks: dict[str, str] | None = None,
    ) -> None:
        """The table created, marked with ``MODE``, its keys and ``marks``; statistics kept
        for the key columns and ``stats``."""
        DeltaTable.create(
            self._path(table),
            schema,
            mode="error",
            name=table.table,
            description=description,
            configuration={
                MODE_PROPERTY: self.MODE,
                KEYS_PROPERTY: json.dumps(keys),
                TARGET_FILE_SIZE: str(self.access.target_file_bytes),
                STATS_COLUMNS: stats_columns(keys, stats),
                **(marks or {}),
            },
            storage_options=self.access.storage_options,
            raise_if_key_not_exists=False,  # delta-rs knows no cdc.* entries
        )

    def _rewrite(self, m: ChangeLog, new_types: dict[str, pa.DataType]) -> None:
        """The log with wider column types: one overwrite commit of every row (the rows
        are kept; the app-transaction versions and the configuration live in the log)."""
        old = delta_arrow_schema(m.dt)
        schema = pa.schema([pa.field(f.name, new_types.get(f.name, f.type), f.nullable) for f in old])
        dataset = m.dt.to_pyarrow_dataset()

        def batches():
            for b in dataset.to_batches(columns=schema.names):
                if b.num_rows:
                    yield b.cast(schema)

        write_deltalake(
            m.dt,
            pa.RecordBatchReader.from_batches(schema, batches()),
            mode="overwrite",
            schema_mode="overwrite",
            writer_properties=self.access.writer_properties,
        )

    def set_aside(self, table: TableId) -> str | None:
        """The log moved aside (its history kept, a Delta table of its own); its new path,
        None if there was none."""
        path = self._path(table)
        if self.access.open(path) is None:
            return None
        if "://" in path:
            raise SinkError(
                f"table {table}: {self.WHAT} in object storage cannot be set aside (a directory is not renamed "
                f"atomically there) and is never deleted: copy {path} elsewhere and delete it by hand, then "
                f"`cdc resume {table}`"
            )
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside, n = f"{path}__until_{stamp}", 1
        while os.path.exists(aside):  # two in one second
            n += 1
            aside = f"{path}__until_{stamp}_{n}"
        os.rename(path, aside)
        self._logs.pop(table, None)
        return aside

    # ------------------------------------------------------------------ versions

    def applied_version(self, table: TableId) -> int | None:
        m = self.log_for(table)
        return m.dt.transaction_version(m.app)

    def _claim(self, m: ChangeLog, version: int) -> bool:
        """Whether ``version`` is still to write (a replay is skipped); stops a fenced writer."""
        held = m.dt.transaction_version(m.app)
        held = -1 if held is None else held
        self.access.fence([m.dt], version, held)
        return version > held

    def _append(self, table: TableId, version: int, rows_of: Callable[[ChangeLog], pa.Table | None]) -> bool:
        """One commit of ``rows_of(log)`` (read again after a conflict) with ``version``;
        False if the version was written already."""
        for attempt in range(1, COMMIT_RETRIES + 1):
            m = self.log_for(table)
            try:
                if not self._claim(m, version):
                    return False
                rows = rows_of(m)
                if rows is None:
                    rows = delta_arrow_schema(m.dt).empty_table()  # an empty commit records the version
                self._write_rows(m, rows, self.access.commit(version, m.app))
                m.dt.update_incremental()
                if rows.num_rows:
                    self._compact_when_due(table, m)
                return True
            except CommitFailedError as exc:
                if attempt == COMMIT_RETRIES:
                    raise TableFault(
                        f"table {table}: {COMMIT_RETRIES} Delta commits in a row conflicted with another writer of "
                        f"{self._path(table)} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): stop "
                        f"the other writer, then `cdc resume {table}`"
                    ) from None
                log.warning("table %s: Delta commit conflict on %s; retrying", table, self.WHAT)
                time.sleep(0.1 * attempt)
                self._logs.pop(table, None)
            except (OSError, DeltaError) as exc:
                raise self.access.io_error(exc, self._path(table)) from None
        raise AssertionError("unreachable")

    def _write_rows(self, m: ChangeLog, rows: pa.Table, commit: CommitProperties) -> None:
        """One commit of ``rows`` carrying ``commit``'s transactions: an append."""
        write_deltalake(
            m.dt, rows, mode="append", commit_properties=commit, writer_properties=self.access.writer_properties
        )

    # ------------------------------------------------------------------ writes

    def write(self, table: TableId, version: int, changes: Changes) -> bool:
        """Append the batch's changes the log does not hold yet; False: a replayed version."""
        m = self.log_for(table)
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
        return self._append(table, version, lambda m: self._new_rows(m, src, version, before))

    def _new_rows(self, m: ChangeLog, src: pa.Table, version: int, before: bool = False) -> pa.Table | None:
        if not src.num_rows:
            return None
        src = cast_columns(src, {c: m.columns[c] for c in src.column_names if c in m.columns})
        fresh = src.filter(_fresh(src, self._last_sequences(m, src), m.keys))
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

    def _last_sequences(self, m: ChangeLog, src: pa.Table) -> dict[tuple, int]:
        """``max(__seq)`` per key of the batch's keys, among the log's rows at or above the
        batch's lowest sequence: a key's last sequence below it drops none of the batch's
        changes, so older rows need not be read. The log's statistics of ``__seq`` (int64)
        are exact: files wholly older than the batch are not opened, which is every file
        while the merger streams new changes; a replayed suffix reads the files since it.
        Truncate rows have no key: never among them."""
        if not m.dt.file_uris():
            return {}
        lowest = pc.min(src[SEQ]).as_py()
        held = m.dt.to_pyarrow_dataset().to_table(columns=[*m.keys, LOG_SEQ], filter=ds.field(LOG_SEQ) >= lowest)
        if not held.num_rows:
            return {}
        last: dict[tuple, int] = {}
        for row in held.to_pylist():
            key = tuple(row[k] for k in m.keys)
            if None not in key and row[LOG_SEQ] > last.get(key, -1):
                last[key] = row[LOG_SEQ]
        return last

    def truncate(self, table: TableId, version: int, cut: TableCut | None, origin: tuple[str, str] | None) -> bool:
        """A ``t`` row (``origin``: (column, value) of the rows it empties)."""

        def row(m: ChangeLog) -> pa.Table | None:
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

        return self._append(table, version, row)

    @staticmethod
    def _holds_truncate(m: ChangeLog, seq: int, origin: tuple[str, str] | None) -> bool:
        columns = [LOG_OP, LOG_SEQ] + ([origin[0]] if origin else [])
        held = m.dt.to_pyarrow_dataset().to_table(
            columns=columns, filter=(ds.field(LOG_SEQ) == seq) & (ds.field(LOG_OP) == "t")
        )
        if origin is not None:
            return any(v == origin[1] for v in held[origin[0]].to_pylist())
        return held.num_rows > 0

    def _compact_when_due(self, table: TableId, m: ChangeLog) -> None:
        """Every ``compact_every_commits`` appends, the log's small files are compacted (as
        a latest table's: merger/sinks/delta.py ``_compact_when_due``; an append adds a file)."""
        every = self.access.compact_every_commits
        if every <= 0:
            return
        n = self._writes.get(table, 0) + 1
        self._writes[table] = 0 if n >= every else n
        if n < every:
            return
        try:
            m.dt.optimize.compact(
                target_size=self.access.target_file_bytes,
                writer_properties=self.access.writer_properties,
                commit_properties=self.access.commit(0),
            )
            m.dt.update_incremental()
        except (OSError, DeltaError) as exc:  # the batch is written: a failed compaction is tried again later
            log.warning("table %s: compacting the change log's files failed (%s); tried again later", table, exc)

    # ------------------------------------------------------------------ read back

    def rows(self, table: TableId) -> pa.Table:
        """The whole log (user columns and the log's), in sequence order."""
        t = self.log_for(table).dt.to_pyarrow_table()
        return t.take(pc.sort_indices(t, sort_keys=[(LOG_SEQ, "ascending")]))

    def count(self, table: TableId) -> int:
        return self.log_for(table).dt.count()


def stats_columns(keys: list[str], own: list[str]) -> str:
    """The key columns and the mode's ``own`` (``__seq``), as the table property lists them
    (names quoted; a name with a backtick cannot be: then ``own`` alone, what the sink reads by)."""
    names = [*keys, *own] if not any("`" in k for k in keys) else list(own)
    return ",".join(f"`{n}`" for n in names)


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


def _fresh(src: pa.Table, last: dict[tuple, int], keys: list[str]) -> pa.Array:
    """Which changes the log takes, by the rule of ``merger.history.changelog`` itself
    (``appended_rows``): above their key's last sequence, the first of an equal (key,
    sequence) in the batch. Only keys and sequences go through it (a Python object per
    change: measured ~1 s per 1M changes), the values stay in Arrow."""
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
