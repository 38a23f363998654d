"""The PostgreSQL sink's tables in mode ``scd2`` (``merger.history.modes``): every version
of each row, by the rules of ``merger.history.scd2`` (the pure core, which this module
only feeds and writes).

Layout of ``"<schema>"."<table>"``: the user columns, then

* ``__start_at`` / ``__end_at`` (timestamptz): the source commit times the version starts
  and ends at (NULL end: the current version);
* ``__start_seq`` / ``__end_seq`` (bigint): the same as sequences, the order and
  tie-breaker of two changes in one second;
* ``__last_seq`` (bigint): the last change written into the version (a change of an
  untracked column updates the current version in place);
* ``__current`` (boolean, generated: ``__end_seq IS NULL``).

The primary key is ``(key columns, __start_seq)``; a partial unique index keeps one open
version per key (PostgreSQL checks it, not only this code).

A write is one transaction with the version claim of ``Control``:

1. the batch's distinct keys are staged and each key's latest version (open or closed)
   read, one index probe per key;
2. ``scd2.apply_changes`` gives the plan: versions to rewrite (closed, or changed in
   place) and versions to insert;
3. the rewrites, then the inserts, are upserted by ``(key, __start_seq)``.

After a crash either all of it committed (the replay is skipped by its version) or none
did; a change read again under a new version changes nothing (the core's replay rule,
against the versions read in step 1). A truncate closes every current version applied
before it, in one UPDATE. Values are compared as the sink stores them (the batch cast to
the column types; JSON parsed), so a value that only looks different opens nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

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
from merger.sinks import types as T
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
from merger.sinks.postgres.catalog import Catalog
from merger.sinks.postgres.copy import Copier, key_range, orders_keys_as_arrow
from merger.sinks.postgres.history_schema import HistoryLayout, HistorySchema, commit_time_sql, cut_sql
from merger.sinks.postgres.meta import TableMeta, fit_batch

log = logging.getLogger(__name__)

SCD2 = HistoryLayout(
    mode="scd2",
    what="an SCD type 2 history",
    columns=(
        (START_AT, "timestamptz NOT NULL"),
        (END_AT, "timestamptz"),
        (START_SEQ, "bigint NOT NULL"),
        (END_SEQ, "bigint"),
        (LAST_SEQ, "bigint NOT NULL"),
        (CURRENT, f'boolean GENERATED ALWAYS AS ("{END_SEQ}" IS NULL) STORED'),
    ),
    key_order=START_SEQ,
    keys_not_null=True,
    open_index=f'"{END_SEQ}" IS NULL',
)
_START_US, _END_US = "_cdc_start_us", "_cdc_end_us"  # staged times, microseconds
_SEQS = (START_SEQ, END_SEQ, LAST_SEQ)  # a version's sequences, as staged


class SCD2Tables:
    def __init__(self, catalog: Catalog, copier: Copier, nul_policy: str, json_as_jsonb: bool):
        self.schema = HistorySchema(catalog, json_as_jsonb, SCD2)
        self.copier = copier
        self.nul_policy = nul_policy

    def check(self, table: TableId, mode: SCD2Mode, keys, columns) -> None:
        """The mode's options against the table (a mistake pauses the table, saying which)."""
        try:
            mode.options(keys).validate(list(columns))
        except HistoryOptionsError as exc:
            raise TableFault(f"table {table}: sinks.postgres.tables.{table}: {exc}") from None

    # ------------------------------------------------------------------ writes

    def write(self, conn, table: TableId, m: TableMeta, version: int, changes: Changes, mode: SCD2Mode):
        """Apply the batch in the caller's transaction; the values the NUL rule changed."""
        src = checked_changes(table, changes, m.keys)
        if not src.num_rows:
            return {}
        if COMMIT_US not in src.column_names or src[COMMIT_US].null_count:
            raise SinkError(
                f"table {table}: an SCD type 2 batch needs {COMMIT_US} on every change (the merger adds it)"
            )
        src, cols, nul_changed = fit_batch(table, src, m, self.nul_policy)
        self.check(table, mode, m.keys, cols)
        options = mode.options(m.keys)
        stored = _stored_types(m, cols)
        typed = cast_columns(src.select(cols), stored)
        latest = self._latest(conn, m, cols, src.select(m.keys), stored)
        if not latest and only_opens(typed.select(m.keys), src[OP], src[SEQ]):
            # keys without a history, each changed once (a snapshot's rows, a backlog of
            # inserts): the versions they open, over columns (merger.history.scd2_opened)
            opened = opened_versions(typed, src[OP], src[SEQ], src[COMMIT_US], _START_US, _END_US, *_SEQS)
            if opened.num_rows:
                self._insert_opened(conn, m, cols, _json_as_text_again(opened, cols, m, stored))
            return nul_changed
        values = _python_rows(typed, cols, m)
        ops, seqs, times = src[OP].to_pylist(), src[SEQ].to_pylist(), src[COMMIT_US].to_pylist()
        batch = [
            Change(tuple(row[k] for k in m.keys), op, seq, at, None if op == DELETE_OP else row)
            for row, op, seq, at in zip(values, ops, seqs, times)
        ]
        plan = apply_changes(latest, batch, options)
        for note in plan.notes:
            log.warning("table %s: %s", table, note.text)
        self._upsert(conn, m, cols, stored, plan.updated)
        self._upsert(conn, m, cols, stored, plan.inserted)
        return nul_changed

    def _latest(self, conn, m: TableMeta, cols: list[str], keys: pa.Table, stored: dict) -> dict[tuple, Version]:
        """The latest version of each of the batch's keys that has a history."""
        if _none_in_range(conn, m, keys):
            return {}
        ident = {c: sql.Identifier(c) for c in [*cols, START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ]}
        key_types = {k: stored[k] for k in m.keys}
        conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp._cdc_scd2_keys"))
        conn.execute(
            sql.SQL("CREATE TEMP TABLE _cdc_scd2_keys ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
                sql.SQL(", ").join(ident[k] for k in m.keys), sql.Identifier(m.schema, m.name)
            )
        )
        # duplicates would only make the join longer (DISTINCT ON takes one row per key)
        distinct = keys.group_by(list(m.keys)).aggregate([]).select(list(m.keys))
        self.copier.copy_table(conn, sql.Identifier("_cdc_scd2_keys"), cast_columns(distinct, key_types), key_types)
        exprs = [
            sql.SQL("h.{}::text").format(ident[c])
            if T.is_json(m.columns[c]) or m.columns[c] is None
            else sql.SQL("h.{}").format(ident[c])
            for c in cols
        ]
        us = "(extract(epoch from h.{}) * 1000000)::bigint"
        rows = conn.execute(
            sql.SQL(
                "SELECT DISTINCT ON ({hkeys}) {exprs}, h.{ss}, {start}, h.{es}, {end}, h.{ls} "
                "FROM {target} h JOIN _cdc_scd2_keys k ON {on} ORDER BY {hkeys}, h.{ss} DESC"
            ).format(
                hkeys=sql.SQL(", ").join(sql.SQL("h.{}").format(ident[k]) for k in m.keys),
                exprs=sql.SQL(", ").join(exprs),
                ss=ident[START_SEQ],
                es=ident[END_SEQ],
                ls=ident[LAST_SEQ],
                start=sql.SQL(us).format(ident[START_AT]),
                end=sql.SQL(us).format(ident[END_AT]),
                target=sql.Identifier(m.schema, m.name),
                on=sql.SQL(" AND ").join(sql.SQL("h.{k} = k.{k}").format(k=ident[k]) for k in m.keys),
            )
        ).fetchall()
        if not rows:
            return {}
        n = len(cols)
        columns = list(zip(*rows))
        arrays = [pa.array(list(columns[i]), type=stored[c]) for i, c in enumerate(cols)]
        read = _python_rows(pa.table(arrays, names=cols), cols, m)
        latest = {}
        for row, (start_seq, start_us, end_seq, end_us, last_seq) in zip(read, (r[n:] for r in rows)):
            key = tuple(row[k] for k in m.keys)
            latest[key] = Version(key, row, start_seq, start_us, last_seq, end_seq, end_us)
        return latest

    def _upsert(self, conn, m: TableMeta, cols: list[str], stored: dict, versions: list[Version]) -> None:
        if not versions:
            return
        data = {c: [v.values.get(c) for v in versions] for c in cols}
        for c in cols:
            if m.columns[c] is not None and T.is_json(m.columns[c]):  # parsed to compare: text again
                data[c] = [None if x is None else json.dumps(x) for x in data[c]]
        arrays = {c: pa.array(data[c], type=stored[c]) for c in cols}
        arrays[START_SEQ] = pa.array([v.start_sequence for v in versions], pa.int64())
        arrays[END_SEQ] = pa.array([v.end_sequence for v in versions], pa.int64())
        arrays[LAST_SEQ] = pa.array([v.last_sequence for v in versions], pa.int64())
        arrays[_START_US] = pa.array([v.start_time for v in versions], pa.int64())
        arrays[_END_US] = pa.array([v.end_time for v in versions], pa.int64())
        self._upsert_staged(conn, m, cols, pa.table(arrays))

    def _insert_opened(self, conn, m: TableMeta, cols: list[str], opened: pa.Table) -> None:
        """Versions opened for keys that have no history (``opened_versions``): no row of
        the table has their keys, so none can conflict, and they are copied straight in
        (no stage, no ``ON CONFLICT``; a conflict all the same fails the batch)."""
        utc = pa.timestamp("us", tz="UTC")
        rows = opened.select([*cols, *_SEQS])
        rows = rows.append_column(START_AT, opened[_START_US].cast(utc))
        rows = rows.append_column(END_AT, opened[_END_US].cast(utc))
        types: dict = {c: m.columns[c] for c in cols}  # the COPY's: JSON as JSON
        types.update({START_AT: utc, END_AT: utc, START_SEQ: pa.int64(), END_SEQ: pa.int64(), LAST_SEQ: pa.int64()})
        self.copier.copy_table(conn, sql.Identifier(m.schema, m.name), rows, types)

    def _upsert_staged(self, conn, m: TableMeta, cols: list[str], staged: pa.Table) -> None:
        """Versions (``cols``, the sequences and the times in microseconds) written whole
        by their name, ``(keys, start sequence)``."""
        staged = staged.select([*cols, *_SEQS, _START_US, _END_US])
        types: dict = {c: m.columns[c] for c in cols}  # the COPY's: JSON as JSON
        types.update({n: pa.int64() for n in (START_SEQ, END_SEQ, LAST_SEQ, _START_US, _END_US)})
        ident = {c: sql.Identifier(c) for c in [*cols, START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ]}
        conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp._cdc_scd2_stage"))
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE _cdc_scd2_stage ON COMMIT DROP AS SELECT {}, {}, {}, {}, "
                "NULL::bigint AS {}, NULL::bigint AS {} FROM {} WITH NO DATA"
            ).format(
                sql.SQL(", ").join(ident[c] for c in cols),
                ident[START_SEQ],
                ident[END_SEQ],
                ident[LAST_SEQ],
                sql.Identifier(_START_US),
                sql.Identifier(_END_US),
                sql.Identifier(m.schema, m.name),
            )
        )
        self.copier.copy_table(conn, sql.Identifier("_cdc_scd2_stage"), staged, types)
        written = [*cols, START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ]
        conn.execute(
            sql.SQL(
                "INSERT INTO {target} ({cols}) SELECT {vals}, {start}, {end}, s.{ss}, s.{es}, s.{ls} "
                "FROM _cdc_scd2_stage s ORDER BY s.{ss} "
                "ON CONFLICT ({keys}, {ss}) DO UPDATE SET {sets}"
            ).format(
                target=sql.Identifier(m.schema, m.name),
                cols=sql.SQL(", ").join(ident[c] for c in written),
                vals=sql.SQL(", ").join(sql.SQL("s.{}").format(ident[c]) for c in cols),
                start=commit_time_sql(sql.SQL("s.{}").format(sql.Identifier(_START_US))),
                end=commit_time_sql(sql.SQL("s.{}").format(sql.Identifier(_END_US))),
                ss=ident[START_SEQ],
                es=ident[END_SEQ],
                ls=ident[LAST_SEQ],
                keys=sql.SQL(", ").join(ident[k] for k in m.keys),
                sets=sql.SQL(", ").join(
                    sql.SQL("{c} = EXCLUDED.{c}").format(c=ident[c]) for c in written if c not in (*m.keys, START_SEQ)
                ),
            )
        )
        conn.execute("DROP TABLE pg_temp._cdc_scd2_stage")

    def truncate(self, conn, m: TableMeta, version: int, cut: TableCut | None, origin: tuple[str, str] | None) -> None:
        """Every current version applied before the truncate closes at it (of one origin:
        its rows only). Without the truncate's own place (a DDL's reset), after every change."""
        target = sql.Identifier(m.schema, m.name)
        seq, at = cut_sql(cut, target, LAST_SEQ)
        where = sql.SQL("")
        if origin is not None:
            where = sql.SQL(" AND {} = {}").format(sql.Identifier(origin[0]), sql.Literal(origin[1]))
        conn.execute(
            sql.SQL(
                "UPDATE {t} SET {es} = {seq}, {ea} = GREATEST({at}, {sa}) WHERE {es} IS NULL AND {ls} < {seq}{where}"
            ).format(
                t=target,
                es=sql.Identifier(END_SEQ),
                ea=sql.Identifier(END_AT),
                sa=sql.Identifier(START_AT),
                ls=sql.Identifier(LAST_SEQ),
                seq=seq,
                at=at,
                where=where,
            )
        )


def _none_in_range(conn, m: TableMeta, keys: pa.Table) -> bool:
    """Whether the table holds no version of a key between the batch's least and greatest
    (integer keys without NULLs, where PostgreSQL orders as Arrow does): one probe of the
    key index, instead of copying the keys to join them. True for a snapshot's chunks of a
    new table, which come in key order."""
    if not orders_keys_as_arrow(keys.schema.types):
        return False
    if any(c.null_count for c in keys.columns):
        return False
    ordered = keys.take(pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in m.keys]))
    lo = [ordered[k][0].as_py() for k in m.keys]
    hi = [ordered[k][ordered.num_rows - 1].as_py() for k in m.keys]
    found = conn.execute(
        sql.SQL("SELECT 1 FROM {} WHERE {} LIMIT 1").format(sql.Identifier(m.schema, m.name), key_range(m.keys)),
        lo + hi,
    ).fetchone()
    return found is None


def _stored_types(m: TableMeta, cols: list[str]) -> dict[str, pa.DataType]:
    """The Arrow type each column's values are compared and staged in: the sink's storage
    type; text for JSON (parsed to compare) and for a type the sink did not create."""
    return {c: pa.string() if m.columns[c] is None or T.is_json(m.columns[c]) else m.columns[c] for c in cols}


def _json_as_text_again(t: pa.Table, cols: list[str], m: TableMeta, stored: dict) -> pa.Table:
    """JSON columns as ``_upsert`` writes them: parsed (as the history compares them), then
    text again."""
    for c in cols:
        if m.columns[c] is not None and T.is_json(m.columns[c]):
            text = [None if x is None else json.dumps(json.loads(x)) for x in t[c].to_pylist()]
            t = t.set_column(t.schema.get_field_index(c), c, pa.array(text, type=stored[c]))
    return t


def _python_rows(t: pa.Table, cols: list[str], m: TableMeta) -> list[dict[str, Any]]:
    """Rows as the history compares them: the sink's storage types, JSON parsed."""
    rows = t.to_pylist()
    json_cols = [c for c in cols if T.is_json(m.columns[c])]
    for row in rows:
        for c in json_cols:
            if row[c] is not None:
                row[c] = json.loads(row[c])
    return rows
