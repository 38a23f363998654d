"""Verify's reader of the PostgreSQL sink: psycopg, values in its native Python types.

Key ranges are applied in code point order (``COLLATE "C"`` where a text key's collation
is another one); the digests are computed by PostgreSQL (``merger.verify.sql_digest``, in
its dialect); NUL characters follow the sink's ``nul_policy`` (PostgreSQL text cannot hold
them). ``only``: a condition, in SQL, that every row read must also meet (the current
versions of an SCD type 2 history, ``merger.verify.current_versions``).
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import partial
from typing import Any, Sequence

from merger.verify.canonical import POSTGRESQL, SinkRules
from merger.verify.history_shape import CURRENT_ROWS, END_SEQ, LAST_SEQ, ShapeFault, faults_of, shape_query
from merger.verify.keys import ALIGNED_KINDS, python_value
from merger.verify.sinks.base import (
    LOOKUP_BATCH,
    SEQ,
    SEQ_COLUMN,
    SinkReader,
    SinkReadError,
    SinkUnreachable,
    first_line,
)
from merger.verify.sql_digest import Digest, fixed_predicate, postgres_parts_query, postgres_query


def postgres_rules(nul_policy: str = "strip") -> SinkRules:
    """The PostgreSQL sink's rules: its dialect, and its NUL rule (``sinks.postgres.nul_policy``)."""
    return SinkRules(POSTGRESQL, nul_policy)


def postgres_param(kind: str, canon: str, sink_type: str | None) -> Any:
    """A canonical key value as a query parameter for the sink column's type."""
    v = python_value(kind, canon)
    if kind == "bit" and (sink_type or "").lower() == "boolean":
        return int.from_bytes(v, "big") != 0
    return v


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


class PostgresReader(SinkReader):
    name = "postgres"
    # every key kind that orders alike in MariaDB and the sinks has a PostgreSQL literal
    digest_key_kinds = ALIGNED_KINDS
    current_filter = {"only": CURRENT_ROWS}

    def __init__(self, settings: dict, schema: str | None = None, nul_policy: str = "strip"):
        self.settings = dict(settings)
        self.fixed_schema = schema
        self.rules = postgres_rules(nul_policy)
        self._conn = None
        self._key_exprs: dict = {}

    @classmethod
    def from_config(cls, section: Any) -> "PostgresReader":
        """``section``: ``sinks.postgres`` (``cdc.config``); the sink's rule for NUL characters
        decides what the source's strings become."""
        return cls(
            section.settings(), schema=section.schema_, nul_policy=getattr(section, "nul_policy", None) or "strip"
        )

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
            raise SinkUnreachable(f"{self.where()} is unreachable: {first_line(exc)}") from None
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
                raise SinkUnreachable(f"{self.where()}: connection lost: {first_line(exc)}") from None
            raise SinkReadError(f"PostgreSQL error: {first_line(exc)}") from None
        except psycopg.Error as exc:
            raise SinkReadError(f"PostgreSQL error: {first_line(exc)}") from None

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

    def rows_in_range(
        self, db, table, names, sink_cols, keys, kinds, lo, hi, fixed=None, only=None, key_canons=()
    ) -> list[tuple]:
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
        self, db, table, names, sink_cols, keys, kinds, canon_keys, fixed=None, only=None, key_canons=()
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

    def positions_with_keys(self, db, table, sink_cols, keys, kinds, canon_keys, key_canons=()) -> list[tuple]:
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

    def value_counts(self, db, table, column, only=None) -> dict:
        """How many rows hold each value of ``column`` (that meet ``only``)."""
        from psycopg import sql

        if only is None:
            q = sql.SQL("SELECT {0}, count(*) FROM {1} GROUP BY {0}").format(
                sql.Identifier(column), sql.Identifier(*self.target(db, table))
            )
        else:
            q = sql.SQL("SELECT {0}, count(*) FROM {1} WHERE {2} GROUP BY {0}").format(
                sql.Identifier(column), sql.Identifier(*self.target(db, table)), sql.SQL(only)
            )
        return dict(self._run(q))

    # ------------------------------------------------ an SCD type 2 history (current_versions)

    def history_positions(self, db, table, sink_cols, keys, kinds, canon_keys, key_canons=()) -> list[tuple]:
        """``(key values..., sequence)`` per key with versions in an SCD type 2 history: the
        last change the history applied of it, read in one statement (one snapshot)."""
        from psycopg import sql

        key = sql.SQL(", ").join(map(sql.Identifier, keys))
        one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(keys)))
        out: list[tuple] = []
        for i in range(0, len(canon_keys), LOOKUP_BATCH):
            batch = canon_keys[i : i + LOOKUP_BATCH]
            q = sql.SQL("SELECT {k}, max(coalesce({es}, {ls})) FROM {t} WHERE ({k}) IN ({listed}) GROUP BY {k}").format(
                k=key,
                es=sql.Identifier(END_SEQ),
                ls=sql.Identifier(LAST_SEQ),
                t=sql.Identifier(*self.target(db, table)),
                listed=sql.SQL(", ").join([one] * len(batch)),
            )
            params = [postgres_param(k, v, sink_cols.get(c)) for kv in batch for c, k, v in zip(keys, kinds, kv)]
            out += self.query(q, params)
        return out

    def shape_faults(self, db: str, table: str, keys, fixed: tuple[str, str] | None = None) -> list[ShapeFault]:
        """What is wrong with an SCD type 2 history's shape (``fixed``: of one origin's rows),
        found by PostgreSQL."""
        from psycopg import sql

        target = ".".join('"' + n.replace('"', '""') + '"' for n in self.target(db, table))
        where = None if fixed is None else fixed_predicate(self.rules.dialect, *fixed)
        return faults_of(self.query(sql.SQL(shape_query(target, list(keys), where, dialect=self.rules.dialect))))
