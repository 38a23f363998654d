"""The source side of verify: the table's columns from ``information_schema`` and its rows
from plain ``SELECT `a`, `b`, ... FROM db.t [WHERE key range] [ORDER BY key]`` queries,
values as pymysql returns them. No expression, no projection, no conversion: what a user
gets from the server is what is compared (through ``canonical``).

Every query is its own autocommit statement (a consistent read: no lock, no long
transaction). The session runs with ``time_zone = '+00:00'`` so TIMESTAMP values come back
in UTC, and ``NAMES utf8mb4`` so every character arrives.

The one exception is ``digest_in_range``, verify's fast path: the server hashes each row's
text (``merger.verify.sql_digest``) and returns a chunk digest; a chunk whose digest
differs from the sink's is read again here with the plain SELECT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pymysql

from cdc.quoting import quote_ident
from merger.errors import MergerError
from merger.snapshot.chunking import quote_table, sql_literal, sql_predicate_literal
from merger.verify.canonical import Column
from merger.verify.keys import source_value
from merger.verify.sql_digest import Digest, mariadb_parts_query, mariadb_query

LOOKUP_BATCH = 1000


class SourceReadError(MergerError):
    """A source query failed (one line, no credentials)."""


@dataclass(frozen=True)
class SourceTable:
    db: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


_JSON_CHECK = re.compile(r"^\s*json_valid\(\s*`((?:[^`]|``)+)`\s*\)\s*$", re.I)


class SourceReader:
    """Plain SELECTs on the source. ``connect``: a function returning a new pymysql
    connection (autocommit), or a ``cdc.config.MySQLConfig``."""

    def __init__(self, connect: Callable[[], pymysql.Connection] | Any):
        if not callable(connect):
            mysql = connect

            def connect():
                from merger.mysql.source import connect as source_connect

                return source_connect(mysql)

            self.where = f"{mysql.host}:{mysql.port}"
        else:
            self.where = "source"
        self._connect_fn = connect
        self._conn: pymysql.Connection | None = None
        # a condition every row read must meet (SQL): a shard's owned key ranges in key mode
        # unique (merger.verify.union_source); None: every row
        self.only: str | None = None

    def sibling(self) -> "SourceReader":
        """Another reader of the same server, with a connection of its own."""
        other = SourceReader(self._connect_fn)
        other.where = self.where
        other.only = self.only
        return other

    def _connection(self) -> pymysql.Connection:
        if self._conn is None:
            conn = self._connect_fn()
            try:
                conn.autocommit(True)
                with conn.cursor() as cur:
                    cur.execute("SET NAMES utf8mb4")
                    cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP values in UTC
            except Exception:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def query(self, sql: str, args=None) -> list[tuple]:
        try:
            with self._connection().cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            self.close()
            text = exc.args[-1] if exc.args else type(exc).__name__
            raise SourceReadError(f"source MySQL at {self.where}: {text}") from None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def literal(self, v: Any) -> str:
        """A value as SQL text that means the same under every sql_mode (``sql_literal``)."""
        return sql_literal(v)

    # ------------------------------------------------------------------ the table

    def describe(self, db: str, table: str) -> SourceTable | None:
        """The table's columns and primary key; None if there is no such table."""
        cols = self.query(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        if not cols:
            return None
        names = (
            "COLUMN_NAME",
            "DATA_TYPE",
            "COLUMN_TYPE",
            "IS_NULLABLE",
            "COLUMN_DEFAULT",
            "NUMERIC_SCALE",
            "DATETIME_PRECISION",
            "CHARACTER_SET_NAME",
        )
        json_cols = self._json_columns(db, table)
        columns = tuple(Column.from_information_schema(dict(zip(names, r)), is_json=r[0] in json_cols) for r in cols)
        pk = self.query(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (db, table),
        )
        return SourceTable(db, table, columns, tuple(r[0] for r in pk))

    def _json_columns(self, db: str, table: str) -> set[str]:
        """MariaDB's JSON is LONGTEXT with CHECK (json_valid(`col`))."""
        try:
            rows = self.query(
                "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
                (db, table),
            )
        except SourceReadError:
            return set()  # a server without CHECK_CONSTRAINTS (MySQL < 8.0.16): DATA_TYPE says json
        out = set()
        for (clause,) in rows:
            m = _JSON_CHECK.match(clause or "")
            if m:
                out.add(m.group(1).replace("``", "`"))
        return out

    # ------------------------------------------------------------------ rows

    def _select(self, t: SourceTable, where: str | None = None, order: Sequence[str] | None = None) -> str:
        cols = ", ".join(quote_ident(c.name) for c in t.columns)
        sql = f"SELECT {cols} FROM {quote_table((t.db, t.table))}"
        if where:
            sql += f" WHERE {where}"
        if order:
            sql += " ORDER BY " + ", ".join(quote_ident(k) for k in order)
        return sql

    def _range(self, keys: Sequence[str], lo, hi) -> str:
        """The WHERE of the rows of keys in [lo, hi) that the reader reads (``only``)."""
        where = sql_predicate_literal(keys, _raw_bound(lo), _raw_bound(hi))
        return where if self.only is None else f"({where}) AND ({self.only})"

    def rows(self, t: SourceTable, order: Sequence[str] | None = None) -> list[tuple]:
        return self.query(self._select(t, order=order))

    def plan(self, t: SourceTable, keys: Sequence[str], chunk_size: int) -> list[tuple]:
        """Chunk boundaries, as raw key tuples: (lo, hi) pairs covering every key, each of
        at most ``chunk_size`` rows (one indexed boundary query per chunk)."""
        table = quote_table((t.db, t.table))
        cols = ", ".join(quote_ident(k) for k in keys)
        self._connection()
        ranges: list[tuple] = []
        lo = None
        while True:
            where = sql_predicate_literal(keys, _raw_bound(lo), None)
            rows = self.query(
                f"SELECT {cols} FROM {table} WHERE {where} ORDER BY {cols} LIMIT 1 OFFSET {int(chunk_size)}"
            )
            if not rows:
                ranges.append((lo, None))
                return ranges
            hi = tuple(rows[0])
            ranges.append((lo, hi))
            lo = hi

    def rows_in_range(self, t: SourceTable, keys: Sequence[str], lo: tuple | None, hi: tuple | None) -> list[tuple]:
        self._connection()
        where = self._range(keys, lo, hi)
        return self.query(self._select(t, where))

    def digest_in_range(self, t: SourceTable, keys: Sequence[str], lo, hi, row_sql: str) -> Digest:
        """The chunk's digest, computed by the server (``merger.verify.sql_digest``)."""
        self._connection()
        where = self._range(keys, lo, hi)
        row, *_ = self.query(mariadb_query(row_sql, quote_table((t.db, t.table)), where))
        return Digest.of(*row)

    def digest_parts_in_range(
        self, t: SourceTable, keys: Sequence[str], lo, hi, row_sql: str, step: int
    ) -> list[tuple[tuple, Digest]]:
        """The range's digest in parts of ``step`` rows, in key order: (the part's first
        key, its Digest) each. One query; the sum of the parts is the range's digest."""
        self._connection()
        where = self._range(keys, lo, hi)
        q = mariadb_parts_query(row_sql, quote_table((t.db, t.table)), where, [quote_ident(k) for k in keys], step)
        n = len(keys)
        return [(tuple(r[:n]), Digest.of(*r[n:])) for r in self.query(q)]

    def cuts_in_range(self, t: SourceTable, keys: Sequence[str], lo, hi, step: int) -> list[tuple]:
        """The keys of the range's rows number ``step + 1``, ``2 * step + 1``, ... in key
        order: where ``merger.verify.narrowing`` cuts a range into parts of ``step`` rows.
        Keys only (a boundary query like ``plan``'s); the row number is the server's."""
        self._connection()
        where = self._range(keys, lo, hi)
        order = ", ".join(quote_ident(k) for k in keys)
        inner = ", ".join(f"{quote_ident(k)} AS k{i}" for i, k in enumerate(keys))
        outer = ", ".join(f"k{i}" for i in range(len(keys)))
        step = max(1, int(step))
        return [
            tuple(r)
            for r in self.query(
                f"SELECT {outer} FROM (SELECT {inner}, ROW_NUMBER() OVER (ORDER BY {order}) AS rn "
                f"FROM {quote_table((t.db, t.table))} WHERE {where}) AS cuts "
                f"WHERE rn > 1 AND MOD(rn - 1, {step}) = 0 ORDER BY rn"
            )
        ]

    def rows_with_keys(
        self, t: SourceTable, keys: Sequence[str], kinds: Sequence[str], canon_keys: Sequence[tuple]
    ) -> list[tuple]:
        """Rows whose key may equal one of ``canon_keys`` (canonical values). The caller
        keeps only exact matches: a case-insensitive collation returns 'A' for 'a'."""
        cols = "(" + ", ".join(quote_ident(k) for k in keys) + ")"
        out: list[tuple] = []
        for i in range(0, len(canon_keys), LOOKUP_BATCH):
            batch = canon_keys[i : i + LOOKUP_BATCH]
            tuples = ", ".join(
                "(" + ", ".join(self.literal(source_value(k, v)) for k, v in zip(kinds, key)) + ")" for key in batch
            )
            where = f"{cols} IN ({tuples})"
            out += self.query(self._select(t, where if self.only is None else f"{where} AND ({self.only})"))
        return out


def _raw_bound(bound: tuple | None) -> tuple | None:
    """A raw key tuple as ``sql_literal`` writes it (TIME as text: timedelta has no literal)."""
    if bound is None:
        return None
    import datetime as dt

    out = []
    for v in bound:
        if isinstance(v, dt.timedelta):
            micros = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
            sign, micros = ("-" if micros < 0 else ""), abs(micros)
            secs, us = divmod(micros, 1_000_000)
            v = f"{sign}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}.{us:06d}"
        out.append(v)
    return tuple(out)
