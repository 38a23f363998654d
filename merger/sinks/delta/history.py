"""What the Delta sink's history tables share (``DeltaHistoryTables``): the change logs
(merger/sinks/delta/changelog.py) and the SCD type 2 histories (merger/sinks/delta/scd2.py)
are each one table ``<base>/<db>/<table>`` (no tombstone table) of the user columns and the
mode's own (a ``HistoryLayout``), marked with the mode (``cdc.mode``) and the keys
(``cdc.keys``, JSON) in its configuration; a table of another mode is refused
(``TableFault``), never written over.

Shared here: the table created, loaded and followed (columns added, types widened by one
overwrite commit), one commit per version with the app transaction
``(cdc-sink:<table id>, version)`` and the writer epoch (a replayed version is skipped
whole; a commit conflict is retried on the table read again), small files compacted every
``compact_every_commits`` writes of rows, and a table set aside (the directory renamed
``<table>__until_<UTC time>``, a Delta table of its own) when it is dropped at the source
or rebuilt: a history is never deleted. On object storage a directory cannot be renamed
atomically: refused with a message saying what to do.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError

from merger.sinks import types as T
from merger.sinks.base import IncompatibleSchemaChange, SinkError, TableFault, TableId, check_keys, user_fields
from merger.sinks.delta.arrow import delta_arrow_schema
from merger.sinks.delta.commits import Commits
from merger.sinks.delta.handles import DeltaHandles
from merger.sinks.delta.meta import MODE_PROPERTY, app_main, prunable_keys, table_mode, table_properties

log = logging.getLogger(__name__)

KEYS_PROPERTY = "cdc.keys"  # a history's key columns, as a JSON list
# the columns whose statistics the log keeps: by default only the first 32 columns have
# them, and the mode's own come after the user columns; without them every file is read
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
COMMIT_RETRIES = 5  # writes in a row that may conflict with another writer's commit


@dataclass(frozen=True)
class HistoryLayout:
    """What a mode's tables are made of: ``mode`` (the mark), ``what`` and ``kind`` (named in
    messages and descriptions: "a change log", "change log"), ``own_types`` (the columns the
    mode adds after the user columns), ``required`` (those of them never null), ``per_row``
    (what one row is: "change", "version"), ``stats`` (own columns whose statistics are
    kept), ``marks`` (more configuration entries a table is created with, and must hold
    when loaded: ``(entry, value when unmarked, the value wanted for a table)``)."""

    mode: str
    what: str
    kind: str
    own_types: dict[str, pa.DataType]
    per_row: str
    stats: list[str]
    required: frozenset[str] = frozenset()
    marks: tuple[tuple[str, str, Callable[[TableId], str]], ...] = field(default=())


@dataclass
class HistoryTable:
    dt: DeltaTable
    keys: list[str]
    columns: dict[str, pa.DataType]  # user column -> storage type
    table_id: str

    @property
    def app(self) -> str:
        return app_main(self.table_id)  # the latest-state table's own (merger/sinks/delta/meta.py)

    @property
    def prunable(self) -> bool:
        """Files may be skipped by their key statistics only for integer keys (``prunable_keys``)."""
        return prunable_keys(self.columns, self.keys)


# a write of one version's rows: (the table, its rows, the commit's transactions)
WriteRows = Callable[[HistoryTable, pa.Table, CommitProperties], None]


class DeltaHistoryTables:
    """The history tables of one layout, composed into a mode's writer (its ``tables``)."""

    def __init__(self, handles: DeltaHandles, commits: Commits, layout: HistoryLayout):
        self.handles = handles
        self.commits = commits
        self.layout = layout
        self._tables: dict[TableId, HistoryTable] = {}
        self._writes: dict[TableId, int] = {}

    # ------------------------------------------------------------------ tables

    def path(self, table: TableId) -> str:
        return self.handles.table_path(table)

    def load(self, table: TableId) -> HistoryTable | None:
        """The table; None: no table. A table of another mode (or mark) is refused."""
        dt = self.handles.open(self.path(table))
        if dt is None:
            return None
        mode, layout = table_mode(dt), self.layout
        if mode != layout.mode:
            raise TableFault(
                f"Delta table {self.path(table)} exists and is not {layout.what} (it is marked {mode}; its mode in "
                f"sinks.delta.tables is {layout.mode} now): move it away, then `cdc snapshot {table}`; a mode never "
                "changes silently"
            )
        configuration = dt.metadata().configuration
        for entry, unmarked, wanted_of in layout.marks:
            held, wanted = configuration.get(entry) or unmarked, wanted_of(table)
            if held != wanted:
                what = entry.removeprefix("cdc.")
                raise TableFault(
                    f"Delta table {self.path(table)} is {layout.what} with {what} {held} (its {what} in "
                    f"sinks.delta.tables is {wanted} now): move it away, then `cdc snapshot {table}`; an {what} never "
                    "changes silently"
                )
        keys = json.loads(configuration.get(KEYS_PROPERTY) or "[]")
        columns = {f.name: f.type for f in delta_arrow_schema(dt) if f.name not in layout.own_types}
        return HistoryTable(dt, keys, columns, dt.metadata().id)

    def table_for(self, table: TableId) -> HistoryTable:
        m = self._tables.get(table)
        try:
            if m is None:
                m = self.load(table)
                if m is None:
                    raise SinkError(f"table {table}: no sink table yet; call ensure_table first")
                self._tables[table] = m
            else:
                m.dt.update_incremental()
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, self.path(table)) from None
        return m

    def ensure(self, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        """``arrow_schema``'s user fields are the table's user columns (a before image's twins
        included: the caller adds them)."""
        keys = check_keys(table, arrow_schema, key_columns)
        wanted: dict[str, pa.DataType] = {}
        for f in user_fields(arrow_schema):
            if f.name in self.layout.own_types:
                raise SinkError(f"table {table}: column {f.name!r} is {self.layout.what}'s own (docs/history.md)")
            try:
                wanted[f.name] = T.delta_storage_type(f.type)
            except T.UnsupportedType as exc:
                raise SinkError(f"table {table}, column {f.name!r}: {exc}") from None
        self._tables.pop(table, None)
        try:
            return self._ensure(table, keys, wanted)
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, self.path(table)) from None

    def _ensure(self, table: TableId, keys: list[str], wanted: dict[str, pa.DataType]) -> list[str]:
        m = self.load(table)
        if m is None:
            self._create(table, keys, wanted)
            return ["created"]
        self.commits.fence([m.dt])
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
        """The table created, marked with the mode, its keys and the layout's marks;
        statistics kept for the key columns and the layout's ``stats``."""
        layout = self.layout
        schema = pa.schema(
            [pa.field(c, t, nullable=True) for c, t in wanted.items()]
            + [pa.field(n, t, nullable=n not in layout.required) for n, t in layout.own_types.items()]
        )
        DeltaTable.create(
            self.path(table),
            schema,
            mode="error",
            name=table.table,
            description=f"CDC {layout.kind} of {table}; key {keys}; one row per {layout.per_row}",
            configuration={
                MODE_PROPERTY: layout.mode,
                KEYS_PROPERTY: json.dumps(keys),
                **table_properties(self.handles.target_file_bytes),
                STATS_COLUMNS: stats_columns(keys, layout.stats),
                **{entry: wanted_of(table) for entry, _, wanted_of in layout.marks},
            },
            storage_options=self.handles.storage_options,
            raise_if_key_not_exists=False,  # delta-rs knows no cdc.* entries
        )

    def _rewrite(self, m: HistoryTable, new_types: dict[str, pa.DataType]) -> None:
        """The table with wider column types: one overwrite commit of every row (the rows
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
            writer_properties=self.handles.writer_properties,
        )

    def set_aside(self, table: TableId) -> str | None:
        """The table moved aside (its history kept, a Delta table of its own); its new path,
        None if there was none."""
        path = self.path(table)
        if self.handles.open(path) is None:
            return None
        if "://" in path:
            raise SinkError(
                f"table {table}: {self.layout.what} in object storage cannot be set aside (a directory is not renamed "
                f"atomically there) and is never deleted: copy {path} elsewhere and delete it by hand, then "
                f"`cdc resume {table}`"
            )
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside, n = f"{path}__until_{stamp}", 1
        while os.path.exists(aside):  # two in one second
            n += 1
            aside = f"{path}__until_{stamp}_{n}"
        os.rename(path, aside)
        self._tables.pop(table, None)
        return aside

    # ------------------------------------------------------------------ versions and commits

    def applied_version(self, table: TableId) -> int | None:
        m = self.table_for(table)
        return m.dt.transaction_version(m.app)

    def _claim(self, m: HistoryTable, version: int) -> bool:
        """Whether ``version`` is still to write (a replay is skipped); stops a fenced writer."""
        held = m.dt.transaction_version(m.app)
        held = -1 if held is None else held
        self.commits.fence([m.dt], version, held)
        return version > held

    def commit_version(
        self,
        table: TableId,
        version: int,
        rows_of: Callable[[HistoryTable], pa.Table | None],
        write_rows: WriteRows,
    ) -> bool:
        """One commit of ``rows_of(table)`` (read again after a conflict) with ``version``,
        written by ``write_rows``; False if the version was written already."""
        for attempt in range(1, COMMIT_RETRIES + 1):
            m = self.table_for(table)
            try:
                if not self._claim(m, version):
                    return False
                rows = rows_of(m)
                if rows is None:
                    rows = delta_arrow_schema(m.dt).empty_table()  # an empty commit records the version
                write_rows(m, rows, self.commits.properties(version, m.app))
                m.dt.update_incremental()
                if rows.num_rows:
                    self._compact_when_due(table, m)
                return True
            except CommitFailedError as exc:
                if attempt == COMMIT_RETRIES:
                    raise TableFault(
                        f"table {table}: {COMMIT_RETRIES} Delta commits in a row conflicted with another writer of "
                        f"{self.path(table)} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): stop "
                        f"the other writer, then `cdc resume {table}`"
                    ) from None
                log.warning("table %s: Delta commit conflict on %s; retrying", table, self.layout.what)
                time.sleep(0.1 * attempt)
                self._tables.pop(table, None)
            except (OSError, DeltaError) as exc:
                raise self.handles.io_error(exc, self.path(table)) from None
        raise AssertionError("unreachable")

    def append_rows(self, m: HistoryTable, rows: pa.Table, commit: CommitProperties) -> None:
        """One commit of ``rows`` carrying ``commit``'s transactions: an append."""
        write_deltalake(
            m.dt, rows, mode="append", commit_properties=commit, writer_properties=self.handles.writer_properties
        )

    def _compact_when_due(self, table: TableId, m: HistoryTable) -> None:
        """Every ``compact_every_commits`` writes of rows, the table's small files are
        compacted (as a latest table's: merger/sinks/delta/latest.py ``_compact_when_due``;
        an append adds a file)."""
        every = self.handles.compact_every_commits
        if every <= 0:
            return
        n = self._writes.get(table, 0) + 1
        self._writes[table] = 0 if n >= every else n
        if n < every:
            return
        try:
            m.dt.optimize.compact(
                target_size=self.handles.target_file_bytes,
                writer_properties=self.handles.writer_properties,
                commit_properties=self.commits.properties(0),
            )
            m.dt.update_incremental()
        except (OSError, DeltaError) as exc:  # the batch is written: a failed compaction is tried again later
            kind = self.layout.kind
            log.warning("table %s: compacting the %s's files failed (%s); tried again later", table, kind, exc)


def stats_columns(keys: list[str], own: list[str]) -> str:
    """The key columns and the mode's ``own`` (``__seq``), as the table property lists them
    (names quoted; a name with a backtick cannot be: then ``own`` alone, what the sink reads by)."""
    names = [*keys, *own] if not any("`" in k for k in keys) else list(own)
    return ",".join(f"`{n}`" for n in names)
