"""The PostgreSQL sink's tables in mode ``changelog`` (``merger.history.modes``): one row
appended per change, never updated.

Layout of ``"<schema>"."<table>"``: the user columns (all nullable: a delete keeps only
its key, a truncate none), then

* ``__op`` (text): ``c`` insert, ``u`` update, ``d`` delete, ``r`` a row read by a
  snapshot, ``t`` truncate (every key column NULL; of one origin: its origin column set);
* ``__seq`` (bigint): the change's sequence, the order of a key's changes (the binlog
  position; a snapshot row's is its window's HIGH watermark);
* ``__at`` (timestamptz): the source commit time (whole seconds in MariaDB's binlog; a
  snapshot row's is its HIGH watermark's);
* ``__version`` (bigint): the merger's write that appended it (batches in order).

A unique index on ``(key columns, __seq) NULLS NOT DISTINCT`` (PostgreSQL 15 or later)
names each change. The table's comment marks its mode, so a table configured in another
mode is refused, never silently rewritten.

Exactly once: a write is one transaction with the version claim of ``Control`` (a batch
replayed after a crash is skipped whole). The rule of ``merger.history.changelog``, in
SQL over the staged batch: a change at or below the last sequence the log holds for its
key is a replay and is not appended; a change whose (key, sequence) is there already is
skipped by the unique index (``ON CONFLICT DO NOTHING``), also within a batch.

A table dropped at the source, or rebuilt by the merger (an incompatible schema change,
``cdc snapshot`` of a paused table), keeps its history: the log is renamed aside
(``<table>__until_<UTC time>``) and a new one starts.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

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
    check_keys,
    checked_changes,
    user_fields,
)
from merger.sinks.nul import apply_nul_policy
from merger.sinks.postgres.catalog import Catalog, check_ident
from merger.sinks.postgres.copy import Copier
from merger.sinks.postgres.meta import TableMeta

log = logging.getLogger(__name__)

LOG_OP, LOG_SEQ, LOG_AT, LOG_VERSION = "__op", "__seq", "__at", "__version"
LOG_COLUMNS = (LOG_OP, LOG_SEQ, LOG_AT, LOG_VERSION)
MARK = "cdc sink change log of "  # the table comment's start: the mode, then the source table
MIN_SERVER = 150000  # NULLS NOT DISTINCT


class ChangelogTables:
    def __init__(self, catalog: Catalog, copier: Copier, nul_policy: str, json_as_jsonb: bool):
        self.catalog = catalog
        self.copier = copier
        self.nul_policy = nul_policy
        self.json_as_jsonb = json_as_jsonb
        self._meta: dict[TableId, TableMeta] = {}

    # ------------------------------------------------------------------ the table

    def load(self, conn, table: TableId) -> TableMeta | None:
        """The log's definition; None: no table. A table of another mode is refused."""
        schema, name = self.catalog.target_name(table)
        qualified = sql.Identifier(schema, name).as_string(conn)
        row = conn.execute(
            "SELECT to_regclass(%s)::oid, obj_description(to_regclass(%s), 'pg_class')", (qualified, qualified)
        ).fetchone()
        if row[0] is None:
            return None
        if not (row[1] or "").startswith(MARK):
            raise TableFault(
                f"table {qualified} exists and is not a change log (its mode in sinks.postgres.tables is "
                f"changelog now): rename or drop it, then `cdc snapshot {table}`; a mode never changes silently"
            )
        cols = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (row[0],),
        ).fetchall()
        keys = [
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
                " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
                " WHERE i.indrelid = %s AND i.indisunique ORDER BY k.n",
                (row[0],),
            ).fetchall()
            if r[0] != LOG_SEQ
        ]
        columns = {n: T.pg_type_to_storage(t) for n, t in cols if n not in LOG_COLUMNS}
        return TableMeta(schema, name, keys, columns, "")

    def meta_for(self, conn, table: TableId) -> TableMeta:
        m = self._meta.get(table)
        if m is None:
            m = self.load(conn, table)
            if m is None:
                raise SinkError(f"table {table}: no sink table yet; call ensure_table first")
            self._meta[table] = m
        return m

    def forget(self, table: TableId) -> None:
        self._meta.pop(table, None)

    def ensure(self, conn, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        keys = check_keys(table, arrow_schema, key_columns)
        schema, name = self.catalog.target_name(table)
        check_ident(schema, "schema")
        check_ident(name, "table")
        wanted: dict[str, pa.DataType] = {}
        for f in user_fields(arrow_schema):
            check_ident(f.name, "column")
            if f.name in LOG_COLUMNS:
                raise SinkError(f"table {table}: column {f.name!r} is a change log column; it cannot be kept")
            try:
                wanted[f.name] = T.pg_storage_type(f.type, self.json_as_jsonb)
            except T.UnsupportedType as exc:
                raise SinkError(f"table {table}, column {f.name!r}: {exc}") from None
        self.forget(table)
        qualified = sql.Identifier(schema, name)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (qualified.as_string(conn),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        m = self.load(conn, table)
        if m is None:
            if conn.info.server_version < MIN_SERVER:
                raise SinkError(
                    f"table {table}: a change log needs PostgreSQL 15 or later (UNIQUE NULLS NOT DISTINCT); "
                    f"the server is {conn.info.server_version // 10000}"
                )
            cols = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(T.pg_type_name(t))) for c, t in wanted.items()]
            cols += [
                sql.SQL("{} text NOT NULL").format(sql.Identifier(LOG_OP)),
                sql.SQL("{} bigint NOT NULL").format(sql.Identifier(LOG_SEQ)),
                sql.SQL("{} timestamptz").format(sql.Identifier(LOG_AT)),
                sql.SQL("{} bigint NOT NULL").format(sql.Identifier(LOG_VERSION)),
            ]
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(qualified, sql.SQL(", ").join(cols)))
            conn.execute(
                sql.SQL("CREATE UNIQUE INDEX {} ON {} ({}) NULLS NOT DISTINCT").format(
                    sql.Identifier(_index_name(name)),
                    qualified,
                    sql.SQL(", ").join(sql.Identifier(c) for c in [*keys, LOG_SEQ]),
                )
            )
            conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(qualified, sql.Literal(MARK + str(table))))
            return ["created"]
        if list(m.keys) != list(keys):
            raise IncompatibleSchemaChange(
                f"incompatible schema change for {table}: key columns change from {m.keys} to {keys}"
            )
        done: list[str] = []
        for c, new in wanted.items():
            if c not in m.columns:
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                        qualified, sql.Identifier(c), sql.SQL(T.pg_type_name(new))
                    )
                )
                done.append(f"added column {c} {T.pg_type_name(new)}")
                continue
            old = m.columns[c]
            verdict = T.compare(old, new) if old is not None else None
            if verdict == T.SAME:
                continue
            old_name = T.pg_type_name(old) if old is not None else "an unknown type"
            if verdict is None:
                raise IncompatibleSchemaChange(
                    f"incompatible schema change for {table}: column {c!r} cannot change from "
                    f"{old_name} to {T.pg_type_name(new)}"
                )
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}").format(
                    qualified, sql.Identifier(c), sql.SQL(T.pg_type_name(new))
                )
            )
            done.append(f"widened {c} {old_name} -> {T.pg_type_name(new)}")
        return done

    def set_aside(self, conn, table: TableId) -> str | None:
        """The log renamed aside (its history kept); the new name, None if there was none."""
        schema, name = self.catalog.target_name(table)
        qualified = sql.Identifier(schema, name)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (qualified.as_string(conn),))
        if self.load(conn, table) is None:
            return None
        aside = _aside_name(name)
        conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(qualified, sql.Identifier(aside)))
        conn.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(schema, _index_name(name)), sql.Identifier(_index_name(aside))
            )
        )
        self.forget(table)
        return f"{schema}.{aside}"

    # ------------------------------------------------------------------ writes

    def write(self, conn, table: TableId, m: TableMeta, version: int, changes: Changes) -> dict[str, int]:
        """Append the batch's changes in the caller's transaction; the values the NUL rule changed."""
        src = checked_changes(table, changes, m.keys)
        if not src.num_rows:
            return {}
        if COMMIT_US not in src.column_names:
            raise SinkError(f"table {table}: a change log batch without {COMMIT_US} (the merger adds it)")
        unknown = [c for c in src.column_names if not c.startswith("_cdc_") and c not in m.columns]
        if unknown:
            raise SinkError(
                f"table {table}: column(s) {unknown} not in the sink table; call ensure_table with the new schema first"
            )
        cols = [c for c in src.column_names if c in m.columns]
        src, nul_changed = apply_nul_policy(
            table,
            src,
            m.keys,
            [c for c in cols if m.columns[c] == pa.string()],
            [c for c in cols if T.is_json(m.columns[c])],
            self.nul_policy,
        )
        target = sql.Identifier(m.schema, m.name)
        ident = {c: sql.Identifier(c) for c in [*cols, COMMIT_US, SEQ, OP, *LOG_COLUMNS]}
        conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp._cdc_log_stage"))
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE _cdc_log_stage ON COMMIT DROP AS SELECT {}, NULL::bigint AS {}, "
                "NULL::bigint AS {}, NULL::text AS {} FROM {} WITH NO DATA"
            ).format(sql.SQL(", ").join(ident[c] for c in cols), ident[COMMIT_US], ident[SEQ], ident[OP], target)
        )
        self.copier.copy_table(
            conn,
            sql.Identifier("_cdc_log_stage"),
            src,
            {**{c: m.columns[c] for c in cols}, COMMIT_US: pa.int64(), SEQ: pa.int64(), OP: pa.string()},
        )
        key_match = sql.SQL(" AND ").join(sql.SQL("l.{k} = s.{k}").format(k=ident[k]) for k in m.keys)
        values = [
            ident[c]
            if c in m.keys
            else sql.SQL("CASE WHEN s.{} = {} THEN NULL ELSE s.{} END").format(
                ident[OP], sql.Literal(DELETE_OP), ident[c]
            )
            for c in cols
        ]
        conn.execute(
            sql.SQL(
                "INSERT INTO {target} ({cols}, {op}, {seq}, {at}, {version}) "
                "SELECT {values}, s.{sop}, s.{sseq}, {time}, %s FROM _cdc_log_stage s "
                "WHERE s.{sseq} > COALESCE((SELECT max(l.{seq}) FROM {target} l WHERE {key_match}), 0) "
                "ORDER BY s.{sseq} ON CONFLICT DO NOTHING"
            ).format(
                target=target,
                cols=sql.SQL(", ").join(ident[c] for c in cols),
                op=ident[LOG_OP],
                seq=ident[LOG_SEQ],
                at=ident[LOG_AT],
                version=ident[LOG_VERSION],
                values=sql.SQL(", ").join(
                    sql.SQL("s.{}").format(v) if isinstance(v, sql.Identifier) else v for v in values
                ),
                sop=ident[OP],
                sseq=ident[SEQ],
                time=_time(sql.SQL("s.{}").format(ident[COMMIT_US])),
                key_match=key_match,
            ),
            (version,),
        )
        conn.execute("DROP TABLE pg_temp._cdc_log_stage")
        if pc.any(pc.is_null(src[COMMIT_US])).as_py():
            log.warning("table %s: changes without a commit time appended with __at NULL", table)
        return nul_changed

    def truncate(self, conn, m: TableMeta, version: int, cut: TableCut | None, origin: tuple[str, str] | None) -> None:
        """A ``t`` row: every key column NULL (of one origin: its origin column set). Without
        the truncate's own sequence (a DDL's reset), it follows every change of the log."""
        target = sql.Identifier(m.schema, m.name)
        cols, vals = [], []
        if origin is not None:
            cols, vals = [sql.Identifier(origin[0])], [sql.Literal(origin[1])]
        seq = (
            sql.Literal(int(cut.sequence))
            if cut is not None
            else sql.SQL("(SELECT COALESCE(max({}), 0) + 1 FROM {})").format(sql.Identifier(LOG_SEQ), target)
        )
        at = _time(sql.Literal(int(cut.time_us))) if cut is not None and cut.time_us is not None else sql.SQL("now()")
        conn.execute(
            sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
                target,
                sql.SQL(", ").join([*cols, *(sql.Identifier(c) for c in LOG_COLUMNS)]),
                sql.SQL(", ").join([*vals, sql.Literal("t"), seq, at, sql.Literal(int(version))]),
            )
        )


def _time(us: sql.Composable) -> sql.Composable:
    """Microseconds since the epoch as timestamptz, exactly (no float on the way)."""
    return sql.SQL("(timestamptz 'epoch' + {} * interval '1 microsecond')").format(us)


def _index_name(table: str) -> str:
    return "cdc_log_" + hashlib.sha1(table.encode()).hexdigest()[:20]


def _aside_name(table: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    name = f"{table}__until_{stamp}"
    if len(name.encode()) > 63:
        short = table.encode()[:20].decode(errors="ignore")  # a name of at most 63 bytes
        name = f"{short}_{hashlib.sha1(table.encode()).hexdigest()[:8]}__until_{stamp}"
    return name
