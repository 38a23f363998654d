"""The sink contract shared by the Delta Lake, PostgreSQL and Kafka-changelog sinks.

The merger calls a sink from Spark's ``foreachBatch`` on the driver with Arrow data; sinks
never see Spark.

Changes
-------
For one table, a batch of changes is a ``pyarrow.Table`` (or RecordBatch, RecordBatchReader
or iterable of RecordBatches) with the table's columns plus

* ``_cdc_op`` (string): ``c``/``u``/``r`` = upsert with the after image, ``d`` = delete
  (key columns set, other columns may be null);
* ``_cdc_seq`` (int64): orders all changes of one key: the change's binlog position
  (``cdc.wire.position.EventPosition.sequence``; a snapshot row carries its window's HIGH
  watermark position; topics written by Debezium itself: the Kafka offset in the key's
  partition). See docs/architecture.md, "Sequences" and "Idempotence".

Column names starting with ``_cdc_`` are reserved for this metadata; other ``_cdc_*``
columns (e.g. ``_cdc_source`` for the changelog sink) are never stored as user columns.

Rules every sink follows
------------------------
* Within a batch, per key only the change with the highest sequence counts (ties: the
  later row of the batch).
* A change is applied only if its sequence is greater than the one the sink holds for
  the key, deleted keys included: a delete leaves a tombstone (key -> sequence) outside
  the user-visible table, so an older change can never resurrect the row.
* ``apply``/``truncate`` carry a per-table ``version`` (monotonic, from the Spark batch
  id). A version <= the last applied one is skipped entirely (returns False): replaying
  a batch after a crash changes nothing. The version is recorded atomically with the data.
* ``truncate`` empties the table and forgets its tombstones.
* ``ensure_table`` creates a table or follows compatible schema changes (added column,
  widened type); anything else raises :class:`IncompatibleSchemaChange` (the merger pauses
  that table). Columns that disappear from the source schema are kept in the sink (no
  longer written: null for new rows, unchanged on update).
* Transient failures raise :class:`SinkUnavailable`; retrying is the caller's job. A full
  disk raises :class:`SinkFull`, a sink whose tables a newer merger took over a
  ``SinkStop`` too (``claim_writer``; not retried: the merger stops).
* A value the sink cannot store by its rules raises :class:`UnstorableValue` (the merger
  pauses that table); nothing of the batch is written by that sink.
"""

from __future__ import annotations

import abc
from typing import Iterable, NamedTuple, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc

from merger.errors import MergerError
from merger.history.changelog import BEFORE_PREFIX
from merger.history.modes import BEFORE_IMAGE, TableModes

OP, SEQ = "_cdc_op", "_cdc_seq"
RESERVED_PREFIX = "_cdc_"
UPSERT_OPS = ("c", "u", "r")
DELETE_OP = "d"

Changes = Union[pa.Table, pa.RecordBatch, pa.RecordBatchReader, Iterable[pa.RecordBatch]]


class SinkError(MergerError):
    """A sink problem with a user-facing one-line message."""


class SinkUnavailable(SinkError):
    """The sink's server/storage is unreachable; retry later (the caller's job)."""


class SinkStop(SinkError):
    """The merger stops: waiting would not help (a full disk, a newer merger that took
    over the sink's tables). The batch is not committed, so nothing is lost."""


class SinkFull(SinkStop):
    """The sink's storage is full. Waiting does not free space, so the merger stops (its
    batch is not committed: after an operator frees space and restarts it, the batch is
    written again and nothing is lost)."""


class IncompatibleSchemaChange(SinkError):
    """A schema change the sink cannot follow; the merger pauses the table."""


class TableFault(SinkError):
    """A fault of one sink table that the merger cannot mend by itself and that must not
    stop the other tables: the merger pauses that table (its changes kept on disk) with
    the message, which says what the operator does (``cdc resume`` / ``cdc snapshot``)."""


class UnstorableValue(TableFault):
    """A value the sink cannot store under its configured rule (a NUL character in
    PostgreSQL text with ``nul_policy: pause``, see ``merger.sinks.nul``); the message
    names the table, key and column. The merger pauses that table."""


class TableCut(NamedTuple):
    """Where a truncate cuts a table's changes: its sequence and source commit time
    (microseconds; None: not known). History tables write it down; the others empty."""

    sequence: int
    time_us: int | None = None


class TableId(NamedTuple):
    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"


def as_table_id(table) -> TableId:
    if isinstance(table, TableId):
        return table
    db, name = table
    return TableId(str(db), str(name))


class KeepsRows:
    """A sink whose tables hold the rows, readable by key (``rows_with_keys``): PostgreSQL
    and Delta, not the Kafka changelog. Key mode ``unique`` checks each key's owner against
    the first such sink (``merger.batch.owner_check``)."""


class Sink(abc.ABC):
    """What the merger calls. All methods are safe to call from several threads for
    different tables; calls for one table must not overlap."""

    # what each table keeps (``merger.history.modes``); a sink with history modes sets its own
    modes: TableModes = TableModes()
    # the config section it was built from (``sinks.<section>``), set by ``merger.sinks.registry``
    section: str = ""

    @abc.abstractmethod
    def ensure_table(self, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        """Create the table or follow compatible changes. Returns what was done (e.g.
        ``["created"]``, ``["added column x", "widened y integer -> bigint"]``, ``[]``)."""

    def claim_writer(self, owner: str) -> None:
        """Called once at start, before any write: ``owner`` (an id kept in the merger's
        state directory) is about to write this sink's tables. A sink whose tables another
        merger (another state directory) may write too fences the older writer here
        (the Delta sink: merger/sinks/delta/writers.py); by default nothing."""

    @abc.abstractmethod
    def apply(self, table: TableId, version: int, changes: Changes) -> bool:
        """Apply a batch of changes; False if ``version`` was already applied."""

    @abc.abstractmethod
    def truncate(self, table: TableId, version: int) -> bool:
        """Empty the table and its tombstones; False if ``version`` was already applied."""

    # Reads for `cdc verify` (merger/verify/chunked.py). Keys and bounds are tuples of canonical
    # values (merger.schema.canonical) of ``key_columns``, in that order.

    def has_table(self, table: TableId) -> bool:
        """Whether the sink table exists."""
        raise NotImplementedError(f"{type(self).__name__} cannot be verified by key range")

    def rows_in_range(self, table: TableId, key_columns: Sequence[str], lo: tuple | None, hi: tuple | None) -> pa.Table:
        """The user-visible rows whose key k has ``lo <= k < hi`` (None: unbounded), keys
        compared as Python compares the values: code point order for strings, whatever
        the sink's collation. Ranges cut at the same bounds therefore never overlap."""
        raise NotImplementedError(f"{type(self).__name__} cannot be verified by key range")

    def rows_with_keys(self, table: TableId, key_columns: Sequence[str], keys: Sequence[tuple]) -> pa.Table:
        """The user-visible rows with exactly these keys (equal values, not collation-equal)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be verified by key range")

    @abc.abstractmethod
    def applied_version(self, table: TableId) -> int | None:
        """The last applied version for the table, None if none yet."""

    def drop_table(self, table: TableId) -> None:
        """Remove the table and everything the sink keeps about it (tombstones, versions),
        so that ``ensure_table`` creates it anew: ``cdc snapshot`` of a table paused by a
        schema change the sink cannot follow. No-op if the table does not exist."""
        raise SinkError(f"{type(self).__name__} cannot drop table {table}: drop it by hand, then `cdc resume`")

    # Rows of one origin (`cdc shard remove`): ``column`` holds each row's origin
    # (``__cdc_origin``, docs/sharding.md); the rows whose value starts with ``prefix``.
    # None: the sink has no such table or the table no such column (nothing to do).

    def count_origin(self, table: TableId, column: str, prefix: str) -> int | None:
        """How many rows of the table have a ``column`` value starting with ``prefix``."""
        raise SinkError(f"{type(self).__name__} cannot count rows by origin")

    def delete_origin(self, table: TableId, column: str, prefix: str) -> int | None:
        """Delete the rows whose ``column`` value starts with ``prefix``, and their
        tombstones if the tombstones are keyed by ``column``; the rows deleted. Running it
        again deletes nothing."""
        raise SinkError(f"{type(self).__name__} cannot delete rows by origin: delete them by hand")

    def truncate_origin(self, table: TableId, version: int, column: str, origin: str) -> bool:
        """Empty one origin of a logical table (a TRUNCATE of one of its physical tables,
        docs/sharding.md): delete the rows whose ``column`` equals ``origin``, and their
        tombstones if the tombstones are keyed by ``column``; False if ``version`` was
        already applied."""
        raise SinkError(
            f"{type(self).__name__} cannot empty one origin of table {table}: delete its rows by hand, "
            "then `cdc resume`"
        )

    def nul_values_changed(self) -> dict[str, int]:
        """Per table, the stored values whose NUL characters the sink's rule changed since
        the process started (only PostgreSQL has such a rule: docs/values.md)."""
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------- helpers


def user_fields(schema: pa.Schema) -> list[pa.Field]:
    """The schema's fields without the reserved ``_cdc_*`` columns."""
    return [f for f in schema if not f.name.startswith(RESERVED_PREFIX)]


def with_before_fields(table: TableId, arrow_schema: pa.Schema, prefix: str = BEFORE_PREFIX) -> pa.Schema:
    """The user fields, then a twin of each named ``prefix + name``; a source column whose
    name starts with ``prefix`` would collide with the twins: a ``TableFault``."""
    fields = user_fields(arrow_schema)
    clash = [f.name for f in fields if f.name.startswith(prefix)]
    if clash:
        raise TableFault(
            f"table {table}: column(s) {clash} start with {prefix!r}, which names a change log's before image "
            "(image: before_after): rename them at the source or log this table with image: after"
        )
    twins = [pa.field(prefix + f.name, f.type, metadata=f.metadata) for f in fields]
    return pa.schema([*fields, *twins])


def before_as_log_columns(table: TableId, src: pa.Table) -> pa.Table:
    """A change log batch's before image (``_cdc_before_<column>``, ``merger.batch.records``)
    renamed to the log's columns (``__before_<column>``); a batch without it is the
    caller's bug."""
    users = [c for c in src.column_names if not c.startswith(RESERVED_PREFIX)]
    missing = [c for c in users if BEFORE_IMAGE + c not in src.column_names]
    if missing:
        raise SinkError(f"table {table}: a change log batch (image before_after) without the before image of {missing}")
    names = [BEFORE_PREFIX + c[len(BEFORE_IMAGE) :] if c.startswith(BEFORE_IMAGE) else c for c in src.column_names]
    return src.rename_columns(names)


def like_prefix(prefix: str) -> str:
    """The SQL LIKE pattern (escape character backslash) that matches exactly the strings
    starting with ``prefix``: its ``%``, ``_`` and backslashes are escaped."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def check_keys(table: TableId, schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
    keys = list(key_columns)
    if not keys:
        raise SinkError(f"table {table}: no key columns given (a primary key or a configured chunk key is required)")
    if len(set(keys)) != len(keys):
        raise SinkError(f"table {table}: duplicate key columns {keys}")
    names = {f.name for f in user_fields(schema)}
    missing = [k for k in keys if k not in names]
    if missing:
        raise SinkError(f"table {table}: key column(s) {missing} not in the schema")
    dupes = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if dupes:
        raise SinkError(f"table {table}: duplicate column names {dupes}")
    return keys


def to_arrow_table(changes: Changes) -> pa.Table:
    if isinstance(changes, pa.Table):
        return changes
    if isinstance(changes, pa.RecordBatch):
        return pa.Table.from_batches([changes])
    if isinstance(changes, pa.RecordBatchReader):
        return changes.read_all()
    batches = list(changes)
    if not batches:
        raise SinkError("empty change iterator: pass an empty pyarrow.Table (with its schema) instead")
    return pa.Table.from_batches(batches)


def checked_changes(table: TableId, changes: Changes, keys: Sequence[str]) -> pa.Table:
    """A change batch as one Arrow table, validated: its op and sequence columns, known
    ops, no null sequence or key."""
    t = to_arrow_table(changes)
    for col in (OP, SEQ, *keys):
        if col not in t.column_names:
            raise SinkError(f"table {table}: change batch has no column {col!r}")
    if t.num_rows == 0:
        return t
    t = t.combine_chunks()
    if t.schema.field(SEQ).type != pa.int64():
        t = t.set_column(t.schema.get_field_index(SEQ), SEQ, pc.cast(t[SEQ], pa.int64()))
    op = t[OP]
    if not pa.types.is_string(op.type):
        op = pc.cast(op, pa.string())
        t = t.set_column(t.schema.get_field_index(OP), OP, op)
    bad = pc.invert(pc.is_in(op, value_set=pa.array([*UPSERT_OPS, DELETE_OP])))
    if pc.any(pc.fill_null(bad, True)).as_py():
        found = pc.unique(pc.filter(op, pc.fill_null(bad, True))).to_pylist()
        raise SinkError(f"table {table}: unknown _cdc_op value(s) {found[:5]}")
    for col in (SEQ, *keys):
        if t[col].null_count:
            raise SinkError(f"table {table}: null in {'sequence' if col == SEQ else 'key column ' + repr(col)}")
    return t


def latest_per_key(table: TableId, changes: Changes, keys: Sequence[str]) -> pa.Table:
    """Validate a change batch and keep, per key, the change with the highest sequence
    (ties: the later row). The result is sorted by key."""
    t = checked_changes(table, changes, keys)
    if t.num_rows == 0:
        return t
    n = t.num_rows
    row = "_cdc_row"
    work = t.append_column(row, pa.array(range(n), pa.int64()))
    order = pc.sort_indices(
        work, sort_keys=[(k, "ascending") for k in keys] + [(SEQ, "descending"), (row, "descending")]
    )
    s = t.take(order)
    if n == 1:
        return s
    first = None
    for k in keys:
        col = s[k].combine_chunks() if isinstance(s[k], pa.ChunkedArray) else s[k]
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        ne = pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True)
        first = ne if first is None else pc.or_(first, ne)
    mask = pa.concat_arrays([pa.array([True]), first])
    return s.filter(mask)


def cast_columns(t: pa.Table, types: dict[str, pa.DataType]) -> pa.Table:
    """Cast the named columns to the given types (safe casts: an out-of-range value is an
    error, never a silent truncation)."""
    for name, typ in types.items():
        i = t.schema.get_field_index(name)
        if i < 0 or t.schema.field(i).type == typ:
            continue
        try:
            col = t[name]
            if isinstance(col.type, pa.BaseExtensionType):
                col = pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
            if isinstance(typ, pa.BaseExtensionType):
                col = pc.cast(col, typ.storage_type)
                col = pa.chunked_array([pa.ExtensionArray.from_storage(typ, c) for c in col.chunks], type=typ)
            elif col.type != typ:
                col = pc.cast(col, typ)
            t = t.set_column(i, pa.field(name, typ), col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SinkError(f"column {name!r}: cannot store {t.schema.field(i).type} values as {typ}: {exc}") from None
    return t
