"""The sink side of verify: each sink table read with the sink's own client, values in
that client's native Python types (psycopg for PostgreSQL; deltalake -> pyarrow ->
``to_pylist`` for Delta). Nothing of the merger's conversion code is used; only where the
sinks keep a table (schema = database, ``<base>/<db>/<table>``) is shared knowledge.

A reader returns rows as tuples in the order of the column names asked for; a column the
sink table lacks reads as NULL. Key ranges and key lookups take canonical key values
(``keys``) and are applied in each sink's order: numbers by value, text by code point
(PostgreSQL ``COLLATE "C"`` where the column's collation is another one).

``fixed``: an optional ``(column, value)`` that every row read must also hold (the origin
column of a sharded source's logical table: verify compares one origin at a time).
``only`` (PostgreSQL): a condition, in SQL, that every row read must also meet (the
current versions of an SCD type 2 history, ``merger.verify.current_versions``);
``only_null`` (Delta): the same for a column that every row read must hold NULL in (the
current versions: ``__end_seq``), applied in Arrow for reads and in DataFusion for digests.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from functools import partial
from typing import Any, Sequence

from cdc.object_store import one_line
from merger.errors import MergerError
from merger.verify.canonical import SinkRules
from merger.verify.column_canon import ColumnCanon
from merger.verify.keys import delta_value, order_key, postgres_param
from merger.verify.sql_digest import (
    Digest,
    datafusion_literal,
    datafusion_query,
    fixed_predicate,
    postgres_parts_query,
    postgres_query,
    range_predicate,
    words_digest,
)

LOOKUP_BATCH = 500
SEQ = "_cdc_seq"  # the sinks' own bookkeeping column: not a source column


def _lenient_temporals(conn) -> None:
    """Dates, timestamps and intervals Python cannot hold ('infinity', year 10000, a user's
    write into the sink) are read as their text: verify then reports them as differing
    values instead of failing on the table."""
    import psycopg
    from psycopg.types import datetime as pgdt

    def lenient(base):
        class Lenient(base):
            def load(self, data):
                try:
                    return super().load(data)
                except (psycopg.DataError, ValueError, OverflowError):
                    return bytes(data).decode("utf-8", "replace")

        return Lenient

    for name, base in (
        ("date", pgdt.DateLoader),
        ("timestamp", pgdt.TimestampLoader),
        ("timestamptz", pgdt.TimestamptzLoader),
        ("interval", pgdt.IntervalLoader),
    ):
        conn.adapters.register_loader(name, lenient(base))


TOMBSTONE_WAIT_S = 30.0  # how long a confirmation read waits for the Delta tombstones to catch up
SEQ_COLUMN = "_cdc_seq"  # each sink row's and tombstone's position (docs/architecture.md)


class SinkReadError(MergerError):
    """A sink table could not be read (reported for that table)."""


class SinkUnreachable(SinkReadError):
    """The sink's server or storage does not answer (verify stops with one line)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


# ------------------------------------------------------------------ PostgreSQL


class PostgresReader:
    name = "postgres"

    def __init__(self, settings: dict, schema: str | None = None, nul_policy: str = "strip"):
        self.settings = dict(settings)
        self.fixed_schema = schema
        self.rules = SinkRules("postgres", nul_policy)
        self._conn = None
        self._key_exprs: dict = {}

    def where(self) -> str:
        s = self.settings
        return f"PostgreSQL at {s.get('host')}:{s.get('port')} (database {s.get('dbname')!r})"

    def _connection(self):
        import psycopg
        from psycopg.types.json import set_json_loads

        if self._conn is not None and not self._conn.closed:
            return self._conn
        s = self.settings
        try:
            conn = psycopg.connect(
                host=s.get("host"),
                port=s.get("port"),
                user=s.get("user"),
                password=s.get("password") or "",
                dbname=s.get("dbname"),
                connect_timeout=int(s.get("connect_timeout", 10)),
                application_name="cdc-verify",
                autocommit=True,
            )
        except psycopg.OperationalError as exc:
            raise SinkUnreachable(f"{self.where()} is unreachable: {_first_line(exc)}") from None
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET DateStyle = 'ISO, YMD'")  # a date's text in the digest (merger.verify.sql_digest)
        # jsonb values parsed exactly: numbers as Decimal, never rounded through a float
        set_json_loads(partial(json.loads, parse_float=Decimal), conn)
        _lenient_temporals(conn)
        self._conn = conn
        return conn

    def _run(self, sql, params=None) -> list[tuple]:
        import psycopg

        conn = self._connection()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall() if cur.description else []
        except psycopg.OperationalError as exc:
            if conn.closed or conn.broken:
                self._conn = None
                raise SinkUnreachable(f"{self.where()}: connection lost: {_first_line(exc)}") from None
            raise SinkReadError(f"PostgreSQL error: {_first_line(exc)}") from None
        except psycopg.Error as exc:
            raise SinkReadError(f"PostgreSQL error: {_first_line(exc)}") from None

    def query(self, q, params=None) -> list[tuple]:
        """The rows of one statement (a read of the verifier's own)."""
        return self._run(q, params)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def target(self, db: str, table: str) -> tuple[str, str]:
        return (self.fixed_schema or db, table)

    def _qualified(self, db: str, table: str) -> str:
        return ".".join('"' + n.replace('"', '""') + '"' for n in self.target(db, table))

    def columns(self, db: str, table: str) -> dict[str, str] | None:
        """The sink table's columns and their types (``format_type``); None: no table."""
        rows = self._run(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
            " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (self._qualified(db, table),),
        )
        if not rows:
            return None
        return {n: t for n, t in rows if n != SEQ}

    def _key_expr(self, db: str, table: str, keys: Sequence[str]):
        """The key as a row value in code point order: text keys whose collation is not byte
        order get COLLATE "C" (then the primary key index is not used for the range)."""
        from psycopg import sql

        cached = self._key_exprs.get((db, table, tuple(keys)))
        if cached is not None:
            return cached
        rows = self._run(
            "SELECT a.attname, c.collname, c.collprovider, d.datcollate, d.datlocprovider"
            " FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation"
            " JOIN pg_database d ON d.datname = current_database()"
            " WHERE a.attrelid = to_regclass(%s) AND a.attname = ANY(%s)",
            (self._qualified(db, table), list(keys)),
        )
        byte_order = {"C", "POSIX", "C.UTF-8", "C.utf8"}
        needs = set()
        for name, coll, provider, datcollate, datprovider in rows:
            if coll is None or coll in ("C", "POSIX"):
                continue
            if coll == "default" and datprovider == "c" and datcollate in byte_order:
                continue
            if coll != "default" and provider == "c" and coll in byte_order:
                continue
            needs.add(name)
        parts = [
            sql.SQL('({} COLLATE "C")').format(sql.Identifier(k)) if k in needs else sql.Identifier(k) for k in keys
        ]
        expr = self._key_exprs[(db, table, tuple(keys))] = sql.SQL("({})").format(sql.SQL(", ").join(parts))
        return expr

    def _select(self, db, table, names, sink_cols, where=None, params=()) -> list[tuple]:
        from psycopg import sql

        present = [n for n in names if n in sink_cols]
        if not present:
            raise SinkReadError(f"the sink table {self._qualified(db, table)} has none of the source's columns")
        q = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, present)), sql.Identifier(*self.target(db, table))
        )
        if where is not None:
            q = q + sql.SQL(" WHERE ") + where
        rows = self._run(q, list(params) or None)
        if len(present) == len(names):
            return rows
        pos = {n: i for i, n in enumerate(present)}
        return [tuple(r[pos[n]] if n in pos else None for n in names) for r in rows]

    def rows(self, db, table, names, sink_cols) -> list[tuple]:
        return self._select(db, table, names, sink_cols)

    def _range_where(self, db, table, sink_cols, keys, kinds, lo, hi, literal: bool = False, fixed=None, only=None):
        """``key >= lo AND key < hi`` with placeholders and their params, or (``literal``)
        with the values written in; and ``fixed``'s ``column = value``, and ``only``."""
        from psycopg import sql

        key = self._key_expr(db, table, keys)
        conds, params = [], []
        if only is not None:
            conds.append(sql.SQL("({})").format(sql.SQL(only)))
        if fixed is not None:
            conds.append(sql.SQL("{} = {}").format(sql.Identifier(fixed[0]), sql.Literal(fixed[1])))
        for bound, op in ((lo, ">="), (hi, "<")):
            if bound is not None:
                values = [postgres_param(k, v, sink_cols.get(c)) for c, k, v in zip(keys, kinds, bound)]
                slots = [sql.Literal(v) for v in values] if literal else sql.Placeholder() * len(keys)
                conds.append(sql.SQL("{} {} ({})").format(key, sql.SQL(op), sql.SQL(", ").join(slots)))
                params += [] if literal else values
        return (sql.SQL(" AND ").join(conds) if conds else None), params

    def rows_in_range(self, db, table, names, sink_cols, keys, kinds, lo, hi, fixed=None, only=None) -> list[tuple]:
        where, params = self._range_where(db, table, sink_cols, keys, kinds, lo, hi, fixed=fixed, only=only)
        return self._select(db, table, names, sink_cols, where, params)

    def digest_in_range(self, db, table, sink_cols, keys, kinds, lo, hi, row_sql: str, fixed=None, only=None) -> Digest:
        """The chunk's digest, computed by PostgreSQL (``merger.verify.sql_digest``)."""
        from psycopg import sql

        where, _ = self._range_where(db, table, sink_cols, keys, kinds, lo, hi, literal=True, fixed=fixed, only=only)
        conn = self._connection()
        q = postgres_query(
            row_sql,
            sql.Identifier(*self.target(db, table)).as_string(conn),
            None if where is None else where.as_string(conn),
        )
        (rows, total), *_ = self._run(q)  # no params: a '%' in the text is plain text
        return Digest.of(rows, total)

    def digests_in_parts(
        self, db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql: str, fixed=None, only=None
    ) -> list[Digest]:
        """The digests of the parts of [lo, hi) cut at ``cuts`` (canonical keys, in order):
        one query, each row given its part by a CASE over the cuts."""
        from psycopg import sql

        where, _ = self._range_where(db, table, sink_cols, keys, kinds, lo, hi, literal=True, fixed=fixed, only=only)
        conn = self._connection()
        if len(keys) == 1 and sink_cols.get(keys[0]):  # a binary search per row
            values = [postgres_param(kinds[0], c[0], sink_cols.get(keys[0])) for c in cuts]
            part = sql.SQL("width_bucket({}, CAST({} AS {}[]))").format(
                sql.Identifier(keys[0]), sql.Literal(values), sql.SQL(sink_cols[keys[0]])
            )
        else:
            part = self._case_part(db, table, sink_cols, keys, kinds, cuts)
        q = postgres_parts_query(
            row_sql,
            sql.Identifier(*self.target(db, table)).as_string(conn),
            None if where is None else where.as_string(conn),
            part.as_string(conn),
        )
        out = [Digest(0, 0)] * (len(cuts) + 1)
        for i, rows, total in self._run(q):
            out[i] = Digest.of(rows, total)
        return out

    def _case_part(self, db, table, sink_cols, keys, kinds, cuts):
        """A CASE giving a row the number of ``cuts`` its key is at or above."""
        from psycopg import sql

        key = self._key_expr(db, table, keys)
        whens = [
            sql.SQL("WHEN {} < ({}) THEN {}").format(
                key,
                sql.SQL(", ").join(
                    sql.Literal(postgres_param(k, v, sink_cols.get(c))) for c, k, v in zip(keys, kinds, cut)
                ),
                sql.Literal(i),
            )
            for i, cut in enumerate(cuts)
        ]
        return sql.SQL("CASE {} ELSE {} END").format(sql.SQL(" ").join(whens), sql.Literal(len(cuts)))

    def rows_with_keys(
        self, db, table, names, sink_cols, keys, kinds, canon_keys, fixed=None, only=None
    ) -> list[tuple]:
        from psycopg import sql

        key = sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Identifier, keys)))
        one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(keys)))
        out: list[tuple] = []
        for i in range(0, len(canon_keys), LOOKUP_BATCH):
            batch = canon_keys[i : i + LOOKUP_BATCH]
            where = sql.SQL("{} IN ({})").format(key, sql.SQL(", ").join([one] * len(batch)))
            if fixed is not None:
                where = where + sql.SQL(" AND {} = {}").format(sql.Identifier(fixed[0]), sql.Literal(fixed[1]))
            if only is not None:
                where = where + sql.SQL(" AND ({})").format(sql.SQL(only))
            params = [postgres_param(k, v, sink_cols.get(c)) for kv in batch for c, k, v in zip(keys, kinds, kv)]
            out += self._select(db, table, names, sink_cols, where, params)
        return out

    def positions_with_keys(self, db, table, sink_cols, keys, kinds, canon_keys) -> list[tuple]:
        """``(key values..., sequence)`` of the sink's rows and tombstones of these keys: the
        position of its last change of each (a deleted key's tombstone is in the table whose
        comment names the sink table, docs/architecture.md). Rows and tombstones are read in
        one statement, one snapshot: read apart, a key deleted and written again in between
        would show neither (its tombstone goes when it is written again)."""
        from psycopg import sql

        if not canon_keys:
            return []
        found = self._run(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND obj_description(c.oid, 'pg_class') = %s",
            (f"cdc sink tombstones (deleted key -> sequence) of {self._qualified(db, table)}",),
        )
        tables = [sql.Identifier(*self.target(db, table))] + ([sql.Identifier(*found[0])] if found else [])
        columns = sql.SQL(", ").join(map(sql.Identifier, [*keys, SEQ_COLUMN]))
        key = sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Identifier, keys)))
        one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(keys)))
        out: list[tuple] = []
        for i in range(0, len(canon_keys), LOOKUP_BATCH):
            batch = canon_keys[i : i + LOOKUP_BATCH]
            listed = sql.SQL(", ").join([one] * len(batch))
            q = sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT {} FROM {} WHERE {} IN ({})").format(columns, t, key, listed) for t in tables
            )
            params = [postgres_param(k, v, sink_cols.get(c)) for kv in batch for c, k, v in zip(keys, kinds, kv)]
            out += self._run(q, params * len(tables))
        return out

    def keys_where(self, db, table, keys, condition: str) -> list[tuple]:
        """The keys of the sink rows that meet ``condition`` (SQL in PostgreSQL's dialect, as
        the operator wrote it for `cdc repair --where`)."""
        from psycopg import sql

        q = sql.SQL("SELECT {} FROM {} WHERE ").format(
            sql.SQL(", ").join(map(sql.Identifier, keys)), sql.Identifier(*self.target(db, table))
        ) + sql.SQL(condition)  # noqa: S608 - the operator's own condition
        return self._run(q)

    def value_counts(self, db, table, column) -> dict:
        """How many rows hold each value of ``column``."""
        from psycopg import sql

        q = sql.SQL("SELECT {0}, count(*) FROM {1} GROUP BY {0}").format(
            sql.Identifier(column), sql.Identifier(*self.target(db, table))
        )
        return dict(self._run(q))


# ------------------------------------------------------------------ Delta Lake


class DeltaReader:
    name = "delta"

    def __init__(self, base: str, storage_options: dict | None = None):
        self.base = str(base).rstrip("/")
        self.storage_options = storage_options
        self.rules = SinkRules("delta")

    def where(self) -> str:
        return f"Delta Lake at {self.base}"

    def close(self) -> None:
        pass

    def path(self, db: str, table: str) -> str:
        # where the sink keeps a table (its path rule only needs ``base``; no values)
        from merger.sinks.delta.paths import table_path

        return table_path(self.base, (db, table))

    def _open(self, db: str, table: str):
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        path = self.path(db, table)
        try:
            return DeltaTable(path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except (OSError, DeltaError) as exc:
            # an object store's error is a tree of causes over several lines
            raise SinkReadError(f"Delta table {path}: {one_line(str(exc))}") from None

    def columns(self, db: str, table: str) -> dict[str, str] | None:
        import pyarrow as pa

        dt = self._open(db, table)
        if dt is None:
            return None
        return {f.name: str(_plain_type(f.type)) for f in pa.schema(dt.schema().to_arrow()) if f.name != SEQ}

    def _scan(self, db, table, names, sink_cols, keep, prune=None, fixed=None, dt=None, only_null=None) -> list[tuple]:
        """Rows of the table's files (``dt``: as loaded; else its latest version; pruned by
        ``prune`` where delta-rs can), filtered per batch by ``fixed`` (column, value),
        ``only_null`` (a column that must be NULL) and ``keep(arrow table) -> arrow table``."""
        import pyarrow as pa
        import pyarrow.dataset as ds
        from deltalake.exceptions import DeltaError

        dt = dt or self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        present = [n for n in names if n in sink_cols]
        read = present if fixed is None or fixed[0] in present else [*present, fixed[0]]
        if only_null is not None and only_null not in read:
            read = [*read, only_null]
        try:
            try:
                dataset = dt.to_pyarrow_dataset(file_pruning_predicate=prune or None)
            except (DeltaError, ValueError, TypeError):
                dataset = dt.to_pyarrow_dataset()
            rows: list[tuple] = []
            for batch in dataset.to_batches(columns=read):
                t = _plain(pa.Table.from_batches([batch]))
                if fixed is not None:
                    t = t.filter(ds.field(fixed[0]) == fixed[1])
                if only_null is not None:
                    t = t.filter(ds.field(only_null).is_null())
                t = keep(t)
                if t.num_rows:
                    rows += zip(*(t.column(n).to_pylist() for n in present))
        except (OSError, DeltaError) as exc:
            raise SinkReadError(f"Delta table {self.path(db, table)}: {_first_line(exc)}") from None
        if len(present) == len(names):
            return rows
        pos = {n: i for i, n in enumerate(present)}
        return [tuple(r[pos[n]] if n in pos else None for n in names) for r in rows]

    def rows(self, db, table, names, sink_cols) -> list[tuple]:
        return self._scan(db, table, names, sink_cols, lambda t: t)

    def rows_in_range(
        self,
        db,
        table,
        names,
        sink_cols,
        keys,
        kinds,
        lo,
        hi,
        key_canons: Sequence[ColumnCanon] = (),
        fixed=None,
        only_null=None,
    ) -> list[tuple]:
        import pyarrow as pa

        types = {k: _arrow_type(sink_cols[k]) for k in keys if k in sink_cols}
        if len(types) < len(keys):
            raise SinkReadError(f"the Delta table has no key column(s) {[k for k in keys if k not in types]}")
        bounds = [(b, lower) for b, lower in ((lo, True), (hi, False)) if b is not None]
        stored = [[delta_value(kind, v, types[k]) for k, kind, v in zip(keys, kinds, b)] for b, _ in bounds]
        exact = all(v is not None for s in stored for v in s)
        prune = []
        for (b, lower), s in zip(bounds, stored):
            if exact and delta_statistics_exact(sink_cols[keys[0]]) and _prunable(s[0]):
                prune.append((keys[0], ">=" if lower else "<=", s[0]))
        if exact:
            expr = None
            for (b, lower), s in zip(bounds, stored):
                scalars = [_scalar(v).cast(types[k]) for k, v in zip(keys, s)]
                e = _bound_filter(keys, scalars, lower)
                expr = e if expr is None else expr & e

            def keep(t):
                return t if expr is None else t.filter(expr)
        else:  # compare canonical keys in Python
            lo_k = order_key(kinds, lo) if lo is not None else None
            hi_k = order_key(kinds, hi) if hi is not None else None

            def keep(t):
                cols = [c.sinks(t.column(k).to_pylist()) for c, k in zip(key_canons, keys)]
                mask = []
                for key in zip(*cols):
                    try:
                        o = order_key(kinds, key)
                    except (ValueError, TypeError):
                        mask.append(lo is None)  # a key with no canonical form: the first chunk
                        continue
                    mask.append((lo_k is None or o >= lo_k) and (hi_k is None or o < hi_k))
                return t.filter(pa.array(mask, pa.bool_())) if mask else t

        return self._scan(db, table, names, sink_cols, keep, prune, fixed, only_null=only_null)

    def digest_in_range(
        self, db, table, sink_cols, keys, kinds, lo, hi, row_sql: str, fixed=None, only_null=None, dt=None
    ) -> Digest:
        """The chunk's digest: DataFusion (delta-rs's ``QueryBuilder``) hashes each row's
        text; the hashes are summed here. Integer and date keys only (raises NoSqlText).
        ``dt``: the table as loaded; else its latest version."""
        import pyarrow as pa
        from deltalake import QueryBuilder
        from deltalake.exceptions import DeltaError

        if dt is None:
            dt = self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        bounds = [None if b is None else [datafusion_literal(k, v) for k, v in zip(kinds, b)] for b in (lo, hi)]
        where = range_predicate("datafusion", keys, *bounds)
        if fixed is not None:
            equal = fixed_predicate("datafusion", *fixed)
            where = equal if where is None else f"{equal} AND {where}"
        if only_null is not None:
            null = '"' + only_null.replace('"', '""') + '" IS NULL'
            where = null if where is None else f"{null} AND {where}"
        try:
            result = QueryBuilder().register("chunk_table", dt).execute(datafusion_query(row_sql, "chunk_table", where))
            hashes = pa.table(result.read_all()).column(0)
        except (OSError, DeltaError) as exc:
            raise SinkReadError(f"Delta table {self.path(db, table)}: {_first_line(exc)}") from None
        except Exception as exc:  # DataFusion's own errors have no Python class of their own
            where_ = self.path(db, table)
            raise SinkReadError(f"Delta table {where_}: digest query failed: {_first_line(exc)}") from None
        packed = b"".join(_binary_values(c) for c in hashes.chunks)
        return words_digest(len(hashes), packed)

    def digests_in_parts(
        self, db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql: str, fixed=None, only_null=None
    ) -> list[Digest]:
        """The digests of the parts of [lo, hi) cut at ``cuts`` (canonical keys, in order):
        one query per part, all over one load of the table's latest version (the parts of
        one version, and the log read once, not once per part)."""
        dt = self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        edges = [lo, *cuts, hi]
        return [
            self.digest_in_range(db, table, sink_cols, keys, kinds, a, b, row_sql, fixed, only_null, dt=dt)
            for a, b in zip(edges, edges[1:])
        ]

    def rows_with_keys(
        self,
        db,
        table,
        names,
        sink_cols,
        keys,
        kinds,
        canon_keys,
        key_canons: Sequence[ColumnCanon] = (),
        fixed=None,
        only_null=None,
    ) -> list[tuple]:
        """Rows whose canonical key is one of ``canon_keys`` (compared in Python)."""

        wanted = set(map(tuple, canon_keys))
        if not wanted:
            return []
        keep = _with_keys(wanted, keys, key_canons)
        return self._scan(db, table, names, sink_cols, keep, fixed=fixed, only_null=only_null)

    def query(self, db, table, sql_text: str) -> list[tuple]:
        """The rows of one DataFusion statement over the table, registered as ``t`` (a read
        of the verifier's own)."""
        import pyarrow as pa
        from deltalake import QueryBuilder
        from deltalake.exceptions import DeltaError

        dt = self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        try:
            t = _plain(pa.table(QueryBuilder().register("t", dt).execute(sql_text).read_all()))
        except (OSError, DeltaError) as exc:
            raise SinkReadError(f"Delta table {self.path(db, table)}: {_first_line(exc)}") from None
        except Exception as exc:  # DataFusion's own errors have no Python class of their own
            raise SinkReadError(f"Delta table {self.path(db, table)}: query failed: {_first_line(exc)}") from None
        return list(zip(*(c.to_pylist() for c in t.columns)))

    def positions_with_keys(
        self, db, table, sink_cols, keys, kinds, canon_keys, key_canons: Sequence[ColumnCanon] = ()
    ) -> list[tuple]:
        """``(key values..., sequence)`` of the sink's rows and tombstones of these keys: the
        position of its last change of each (deleted keys are in the table the Delta sink
        keeps its tombstones in, docs/architecture.md). Both are read at one batch of the
        merger (``_one_batch``): read apart, a key deleted and written again in between
        would show neither."""
        from deltalake.exceptions import DeltaError

        wanted = set(map(tuple, canon_keys))
        if not wanted:
            return []
        main, tomb = self._one_batch(db, table)
        keep = _with_keys(wanted, keys, key_canons)
        out = self._scan(db, table, [*keys, SEQ_COLUMN], {**sink_cols, SEQ_COLUMN: "bigint"}, keep, dt=main)
        if tomb is not None:
            try:
                t = _plain(tomb.to_pyarrow_table(columns=[*keys, SEQ_COLUMN]))
            except (OSError, DeltaError) as exc:
                raise SinkReadError(f"Delta tombstones of {self.path(db, table)}: {_first_line(exc)}") from None
            t = keep(t)
            out += zip(*(t.column(n).to_pylist() for n in [*keys, SEQ_COLUMN]))
        return out

    def _one_batch(self, db, table):
        """The sink table and its tombstone table (None: none) as one batch of the merger
        left them. The sink commits a batch's rows, then its tombstones; so the two are
        loaded again until the tombstones' step is the table's (``steps_done``), waiting
        while a batch is between its two commits."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        from merger.sinks.delta.meta import steps_done
        from merger.sinks.delta.paths import tombstone_path

        path = tombstone_path(self.base, (db, table))
        deadline = time.monotonic() + TOMBSTONE_WAIT_S
        while True:
            main = self._open(db, table)
            if main is None:
                raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
            try:
                tomb = DeltaTable(path, storage_options=self.storage_options)
            except TableNotFoundError:
                return main, None
            except (OSError, DeltaError) as exc:
                raise SinkReadError(f"Delta tombstones {path}: {_first_line(exc)}") from None
            table_done, tombs_done = steps_done(main, tomb)
            if tombs_done == table_done:
                return main, tomb
            if time.monotonic() > deadline:
                raise SinkReadError(
                    f"Delta tombstones {path}: at version {tombs_done} while the table is at {table_done} after "
                    f"{TOMBSTONE_WAIT_S:.0f}s (a merger stopped between a batch's two commits finishes it when it "
                    "starts again): start the merger, then verify again"
                )
            time.sleep(0.02)  # a batch between its two commits, or one committed between the two loads

    def keys_where(self, db, table, keys, condition: str) -> list[tuple]:
        """The keys of the sink rows that meet ``condition`` (SQL in DataFusion's dialect,
        as the operator wrote it for `cdc repair --where`)."""
        import pyarrow as pa
        from deltalake import QueryBuilder
        from deltalake.exceptions import DeltaError

        dt = self._open(db, table)
        if dt is None:
            return []
        cols = ", ".join('"' + k.replace('"', '""') + '"' for k in keys)
        try:
            t = pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {cols} FROM t WHERE {condition}").read_all())
        except (OSError, DeltaError, Exception) as exc:  # noqa: BLE001 - DataFusion's parse errors too
            raise SinkReadError(
                f"Delta table {self.path(db, table)}: --where {condition!r}: {_first_line(exc)}"
            ) from None
        t = _plain(t)
        return list(zip(*(t.column(k).to_pylist() for k in keys)))

    def value_counts(self, db, table, column, only_null=None) -> dict:
        """How many rows hold each value of ``column``."""
        from collections import Counter

        rows = self._scan(db, table, [column], {column: ""}, lambda t: t, only_null=only_null)
        return dict(Counter(r[0] for r in rows))


def _binary_values(chunk) -> bytes:
    """The values of a binary array without nulls, back to back."""
    import array

    import pyarrow as pa

    if chunk.null_count:
        raise SinkReadError("the Delta digest query returned NULL hashes")
    chunk = chunk.cast(pa.binary())
    offsets = array.array("i")
    offsets.frombytes(chunk.buffers()[1])
    start, end = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
    return chunk.buffers()[2].to_pybytes()[start:end] if len(chunk) else b""


def _plain_type(typ):
    import pyarrow as pa

    if pa.types.is_string_view(typ) or pa.types.is_large_string(typ):
        return pa.string()
    if pa.types.is_binary_view(typ) or pa.types.is_large_binary(typ):
        return pa.binary()
    return typ


def _with_keys(wanted: set, keys: Sequence[str], key_canons: Sequence[ColumnCanon]):
    """A filter of Arrow tables: the rows whose canonical key is in ``wanted``."""
    import pyarrow as pa

    def keep(t):
        cols = [c.sinks(t.column(k).to_pylist()) for c, k in zip(key_canons, keys)]
        mask = [key in wanted for key in zip(*cols)]
        return t.filter(pa.array(mask, pa.bool_())) if mask else t

    return keep


def _plain(t):
    """View/large types as their plain equivalents (what delta-rs returns varies);
    the values are the same."""
    import pyarrow as pa

    schema = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t.schema])
    return t if schema == t.schema else t.cast(schema)


_ARROW_NAMES = {}


def _arrow_type(name: str):
    """An Arrow type from its ``str()`` (the types Delta tables hold)."""
    import re

    import pyarrow as pa

    if not _ARROW_NAMES:
        for t in (
            pa.bool_(),
            pa.int8(),
            pa.int16(),
            pa.int32(),
            pa.int64(),
            pa.float32(),
            pa.float64(),
            pa.string(),
            pa.binary(),
            pa.date32(),
            pa.timestamp("us"),
            pa.timestamp("us", tz="UTC"),
        ):
            _ARROW_NAMES[str(t)] = t
    if name in _ARROW_NAMES:
        return _ARROW_NAMES[name]
    m = re.fullmatch(r"decimal(128|256)\((\d+), (\d+)\)", name)
    if m:
        ctor = pa.decimal128 if m.group(1) == "128" else pa.decimal256
        return ctor(int(m.group(2)), int(m.group(3)))
    raise SinkReadError(f"Delta column type {name} cannot be a verify key")


def _prunable(v: Any) -> bool:
    """Values delta-rs file pruning parses reliably."""
    return isinstance(v, (int, str)) and not isinstance(v, bool)


def delta_statistics_exact(type_name: str | None) -> bool:
    """Whether the Delta log's min/max of a column of this type (its Arrow name) are exact,
    so that a read or a digest query may skip files by them. delta-rs writes integers and
    dates exactly, but a decimal(20, 0) max of 18446744073709551614 (a BIGINT UNSIGNED key)
    as 9223372036854775807 and timestamps cut to milliseconds: a query pruned by them
    misses rows, and then misses an extra row in the sink too."""
    import re

    return bool(type_name) and (re.fullmatch(r"u?int(8|16|32|64)", type_name) or type_name.startswith("date32"))


def _scalar(v: Any):
    """An Arrow scalar of ``v``; an integer beyond int64 (BIGINT UNSIGNED) as a decimal."""
    import pyarrow as pa

    if isinstance(v, pa.Scalar):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
        return pa.scalar(Decimal(v))
    return pa.scalar(v)


def _bound_filter(cols: list[str], values: list, lower: bool):
    """``key >= bound`` (lower) or ``key < bound``, lexicographic over the columns."""
    import pyarrow.dataset as ds

    last = len(values) - 1

    def level(i: int):
        f, v = ds.field(cols[i]), values[i]
        if i == last:
            return f >= v if lower else f < v
        return (f > v if lower else f < v) | ((f == v) & level(i + 1))

    return level(0)


def sink_reader(name: str, sinks_config) -> Any:
    """Verify's reader of one configured sink (``cdc.config.SinksConfig``): its own client."""
    if name == "delta":
        return DeltaReader(sinks_config.delta.path, storage_options=sinks_config.delta.storage_options())
    if name == "postgres":
        pg = sinks_config.postgres
        # the sink's rule for NUL characters decides what the source's strings become
        return PostgresReader(pg.settings(), schema=pg.schema_, nul_policy=getattr(pg, "nul_policy", None) or "strip")
    raise ValueError(f"sink {name!r} cannot be read by key range")
