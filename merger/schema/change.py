"""What a schema change does to the sink tables of a table: a pure decision.

A DDL reaches the merger as a marker in every partition of the table's topic (ingest
writes one per table the statement touched, at the statement's binlog position: see
docs/architecture.md), with what the statement did to the table (DROP, CREATE, RENAME,
ALTER), the statement's text and the table's definition after it. ``decide`` turns that
into one of:

* ``none``: nothing for the sinks (indexes, table options, a new column DEFAULT: MariaDB
  changes no existing row for those);
* ``follow``: the sinks add the new columns; existing rows read NULL in them, as in the
  source (a nullable column added without a default);
* ``resnapshot``: existing rows may hold other values now, without any row event (a
  column added with a value, MODIFY/CHANGE with a conversion, CONVERT TO CHARACTER SET,
  a generated column, ...): the sink tables follow the new definition and the table is
  snapshotted again; its rows are overwritten where they stand, nothing is emptied;
* ``reset``: the rows under this name were replaced or deleted without row events (a
  table CREATEd or RENAMEd to the name, DROP/TRUNCATE/EXCHANGE PARTITION): the sink tables
  are emptied at the statement's place in the stream and the table is snapshotted again;
* ``drop``: the table is gone: its sink tables are emptied there (``on_drop: truncate``)
  or kept as they are (``on_drop: keep``).

``rebuild`` is set when a sink table cannot hold the new definition in place: a column the
source no longer has (dropped, or renamed away) or another key. The sink tables are then
dropped and created again with the new definition (so no column the source lacks stays
behind with stale values) and the table is snapshotted again, like a reset. A type change
a sink cannot follow (``IncompatibleSchemaChange``) is a rebuild too; that one the sink
decides, not this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc.ddl import (
    ADD_COLUMN,
    ADD_PLAIN_COLUMN,
    COLUMN,
    CREATED,
    DROPPED,
    RENAMED,
    ROWS,
    UNKNOWN,
    alter_clause_kinds,
)
from cdc.tablespec import ColumnSpec, TableSpec

NONE, FOLLOW, RESNAPSHOT, RESET, DROP = "none", "follow", "resnapshot", "reset", "drop"
_RANK = {NONE: 0, FOLLOW: 1, RESNAPSHOT: 2, RESET: 3}

# what decides a column's stored values; not: position, comment, default (a DEFAULT
# applies to rows written later, which come as row events), collation, zerofill and an
# integer's display width (display only)
_VALUE_ATTRIBUTES = (
    "type_name",
    "unsigned",
    "length",
    "scale",
    "fsp",
    "charset",
    "nullable",
    "enum_values",
    "generated",
)
_INTEGERS = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")


def _value_form(c: ColumnSpec) -> tuple:
    return tuple(None if a == "length" and c.type_name in _INTEGERS else getattr(c, a) for a in _VALUE_ATTRIBUTES)


@dataclass(frozen=True)
class Decision:
    action: str  # none | follow | resnapshot | reset | drop
    rebuild: bool = False  # drop the sink tables and create them again with the new definition
    reasons: tuple[str, ...] = ()

    @property
    def snapshots(self) -> bool:
        return self.action in (RESNAPSHOT, RESET) or self.rebuild

    def __str__(self) -> str:
        what = self.action + (" (rebuild the sink tables)" if self.rebuild else "")
        return what + (": " + "; ".join(self.reasons) if self.reasons else "")


@dataclass(frozen=True)
class SpecDiff:
    removed: tuple[str, ...] = ()  # columns the new definition no longer has
    added_plain: tuple[str, ...] = ()  # new columns that read NULL in existing rows
    added_valued: tuple[str, ...] = ()  # new columns that existing rows hold a value in
    changed: tuple[str, ...] = ()  # columns whose stored values may differ now
    key_changed: bool = False


def _valued(c: ColumnSpec) -> bool:
    """Existing rows hold a value (not NULL) in this column when it is added."""
    return not c.nullable or c.default is not None or c.generated or c.auto_increment


def diff_specs(old: TableSpec, new: TableSpec) -> SpecDiff:
    before = {c.name: c for c in old.columns}
    after = {c.name: c for c in new.columns}
    added = [c for n, c in after.items() if n not in before]
    changed = tuple(n for n, c in after.items() if n in before and _value_form(c) != _value_form(before[n]))
    return SpecDiff(
        removed=tuple(n for n in before if n not in after),
        added_plain=tuple(c.name for c in added if not _valued(c)),
        added_valued=tuple(c.name for c in added if _valued(c)),
        changed=changed,
        key_changed=tuple(old.primary_key) != tuple(new.primary_key),
    )


def decide(kind: str, old: TableSpec | None, new: TableSpec | None, sql: str | None = None) -> Decision:
    """What to do with the sink tables of a table at a DDL: ``kind`` is what the statement
    did to the table (``cdc.ddl.table_effects``: DROP, CREATE, RENAME, ALTER), ``old``
    the definition the merger had, ``new`` the one after the statement (None: the table
    is gone), ``sql`` the statement (None: judge by the definitions alone).

    The definitions are read from information_schema when ingest reads the statement, so
    they may already show a later DDL; the statement's clauses therefore count too: a
    MODIFY that the definitions do not show (changed and changed back) still re-snapshots."""
    if kind == DROPPED or new is None:
        return Decision(DROP, reasons=("the table was dropped" if kind == DROPPED else "the table is gone",))
    if old is None:
        return Decision(RESET, reasons=("a table new to the merger",))
    d = diff_specs(old, new)
    rebuild_reasons = []
    if d.removed:
        rebuild_reasons.append(f"column(s) {list(d.removed)} no longer in the source")
    if d.key_changed:
        rebuild_reasons.append(f"key {list(old.primary_key)} -> {list(new.primary_key)}")
    if kind in (CREATED, RENAMED):
        what = "created" if kind == CREATED else "renamed to this name"
        return Decision(RESET, bool(rebuild_reasons), (f"a table {what}", *rebuild_reasons))
    # ALTER
    kinds = alter_clause_kinds(sql) if sql else []
    action, reasons = NONE, []

    def at_least(a: str, why: str) -> None:
        nonlocal action
        if _RANK[a] > _RANK[action]:
            action = a
        reasons.append(why)

    if ROWS in kinds:
        at_least(RESET, "rows deleted or replaced without row events (partition or ALTER IGNORE)")
    if d.changed:
        at_least(RESNAPSHOT, f"column(s) {list(d.changed)} changed")
    if d.added_valued or ADD_COLUMN in kinds:
        at_least(
            RESNAPSHOT,
            "column(s) added with a value in existing rows" + (f": {list(d.added_valued)}" if d.added_valued else ""),
        )
    if COLUMN in kinds:
        at_least(RESNAPSHOT, "a column modified, converted, renamed or dropped")
    if UNKNOWN in kinds:
        at_least(RESNAPSHOT, "a clause whose effect on existing rows is not known")
    if d.added_plain:
        at_least(FOLLOW, f"nullable column(s) {list(d.added_plain)} added")
    if rebuild_reasons and _RANK[action] < _RANK[RESNAPSHOT]:
        action = RESNAPSHOT
    reasons.extend(rebuild_reasons)
    if ADD_PLAIN_COLUMN in kinds and not (d.added_plain or d.added_valued) and action == NONE:
        reasons.append("the added column is gone again")
    return Decision(action, bool(rebuild_reasons), tuple(reasons))


def rows_to_arrow_lenient(schema, converters: dict, rows: list[dict | None], keys: list[str]):
    """Like ``merger.schema.canonical.rows_to_arrow`` for changes older than the table's last
    re-snapshotting schema change, decoded with the definition after it: a value that no
    longer fits its column (the column's type changed) becomes NULL, since the snapshot
    that follows the change overwrites it anyway; what counts in such a change is its key,
    its operation and its order. Returns (the table, indexes of the rows kept): a row whose
    key does not fit is left out (its table was rebuilt, so no such key is held)."""
    import pyarrow as pa

    columns = []
    for f in schema:
        conv = converters[f.name]
        values = []
        for r in rows:
            v = None if r is None else r.get(f.name)
            if v is not None:
                try:
                    v = conv(v)
                except (ValueError, TypeError, ArithmeticError, AttributeError):
                    v = None
            values.append(v)
        try:
            arr = pa.array(values, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            out = []
            for v in values:
                try:
                    pa.array([v], type=f.type)
                    out.append(v)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                    out.append(None)
            arr = pa.array(out, type=f.type)
        columns.append(arr)
    table = pa.Table.from_arrays(columns, names=schema.names)
    kept = [i for i in range(table.num_rows) if all(table.column(k)[i].is_valid for k in keys)]
    if len(kept) != table.num_rows:
        table = table.take(pa.array(kept, pa.int64()))
    return table, kept
