"""Chunk planning for DBLog snapshots: primary-key ranges ``[lo, hi)`` and their SQL.

Pure functions, no I/O: where a plan needs the database (boundary keys, row counts) the
caller passes a callable that runs the query (``boundary_sql`` builds it).

Keys and bounds are tuples, one value per key column, compared lexicographically like
SQL row values. A bound may be a *prefix* of the key (fewer values than key columns):
``(5,)`` as ``lo`` of a key ``(a, b)`` means ``a >= 5``. Python's tuple order agrees
with that (``(5, 'x') >= (5,)`` and ``not (5, 'x') < (5,)``), so a plan can cut a
composite key on its leading column. ``lo``/``hi`` None means unbounded.
A plan is a list of ranges that is contiguous and covers every key: the first ``lo``
and the last ``hi`` are None, and each ``hi`` is the next ``lo``.

Python compares strings by code point; the database by the column's collation
(case-insensitive, PAD SPACE...). So nothing here relies on Python's order of database
keys: boundaries come from the database, ranges are only checked to be contiguous, and
membership is decided by the SQL predicates. ``KeyRange.contains`` (Python order) agrees
with the database for integers, binary strings and NO PAD binary collations only.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Iterable, Iterator, Sequence

from cdc.quoting import quote_ident, text_literal
from merger.dblog import encode_key


def as_key(value: Any) -> tuple:
    """A key or bound as a tuple: tuples as they are, lists as tuples, a scalar as 1-tuple."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    return (value,)


@dataclass(frozen=True)
class KeyRange:
    """Keys k with ``lo <= k < hi`` in the database's order; None = unbounded."""

    lo: tuple | None
    hi: tuple | None

    def __post_init__(self) -> None:
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if value is not None:
                value = as_key(value)
                if not value:
                    raise ValueError(f"range bound {name} must not be an empty tuple")
                object.__setattr__(self, name, value)
        if self.lo is not None and self.lo == self.hi:
            raise ValueError(f"empty range: lo and hi are both {self.lo!r}")

    def contains(self, key: Any) -> bool:
        """Membership in Python's tuple order (see the module note on collations)."""
        key = as_key(key)
        return (self.lo is None or key >= self.lo) and (self.hi is None or key < self.hi)


@dataclass(frozen=True)
class Chunk:
    """A planned chunk. ``id`` depends only on table and bounds (stable across restarts);
    ``index`` is its position in the plan, for display."""

    id: str
    table: str
    index: int
    range: KeyRange


def chunk_id(table: str, rng: KeyRange) -> str:
    """``<table>:<16 hex digits of SHA-256 of the exact bounds>``: the same plan always
    gets the same ids, whatever the process, so progress can be stored per chunk."""
    payload = json.dumps([encode_key(rng.lo), encode_key(rng.hi)], separators=(",", ":"))
    return f"{table}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def chunk_origin(chunk_id: str, table: str) -> str | None:
    """The origin a chunk of ``table`` reads (the planned table of an origin's chunks is
    ``<table>@<origin>``); None for a chunk of the table itself."""
    planned = chunk_id.rpartition(":")[0]
    prefix = f"{table}@"
    return planned[len(prefix) :] if planned.startswith(prefix) else None


def window_origin(window, table: str) -> str | None:
    """The origin a snapshot window of ``table`` reads (all its chunks are one origin's)."""
    return chunk_origin(window.chunk_ids[0], table)


def make_chunks(table: str, ranges: Iterable[KeyRange], start_index: int = 0) -> list[Chunk]:
    return [Chunk(chunk_id(table, r), table, i, r) for i, r in enumerate(ranges, start_index)]


def remaining(chunks: Iterable[Chunk], done_ids: Iterable[str]) -> list[Chunk]:
    """The chunks still to snapshot, in plan order (resume after a restart)."""
    done = set(done_ids)
    return [c for c in chunks if c.id not in done]


def ranges_from_boundaries(boundaries: Sequence[Any]) -> list[KeyRange]:
    """Strictly increasing boundary keys -> the covering ranges between them."""
    edges = [None, *(as_key(b) for b in boundaries), None]
    return [KeyRange(lo, hi) for lo, hi in zip(edges, edges[1:])]


# -- planners ----------------------------------------------------------------------------


MIN_CHUNK_ROWS = 10


def rows_per_chunk(chunk_size: int, chunk_mb: int, avg_row_length: int | None) -> int:
    """Rows per chunk: ``chunk_size``, fewer when rows of ``avg_row_length`` bytes (the
    source's estimate; None or 0 when it has none) would make a chunk of more than
    ``chunk_mb`` MB; never below MIN_CHUNK_ROWS (or chunk_size if that is lower)."""
    if not avg_row_length or avg_row_length <= 0:
        return chunk_size
    fit = (chunk_mb * 1024 * 1024) // int(avg_row_length)
    return max(min(chunk_size, MIN_CHUNK_ROWS), min(chunk_size, fit))


def plan_by_boundaries(
    next_boundary: Callable[[tuple | None, tuple | None], Any], start: Any = None
) -> Iterator[KeyRange]:
    """Ranges of at most N rows, for any key type, distribution and collation.

    ``next_boundary(lo, hi)`` returns the smallest key with exactly N keys in
    ``[lo, key)``, searching below ``hi`` only, or None when no such key is below ``hi``
    (fewer than N+1 keys left); None bounds are open. That is one indexed query,
    ``boundary_sql(..., chunk_size=N)``. Yields ``[start, b1), [b1, b2), ..., [bk, None)``,
    asking for one boundary per range, lazily; start None covers everything, or pass the
    ``hi`` of the last finished range to resume there.
    """
    return _cut(None if start is None else as_key(start), None, next_boundary)


def _cut(lo: tuple | None, hi: tuple | None, next_boundary) -> Iterator[KeyRange]:
    """Cut [lo, hi) at the boundaries the database returns."""
    while True:
        boundary = next_boundary(lo, hi)
        if boundary is None:
            yield KeyRange(lo, hi)
            return
        boundary = as_key(boundary)
        if boundary == lo or boundary == hi:
            raise ValueError(
                f"next_boundary({lo!r}, {hi!r}) returned {boundary!r}, which is not strictly inside the range"
            )
        yield KeyRange(lo, boundary)
        lo = boundary


# -- SQL -------------------------------------------------------------------------------
# Composite bounds are expanded into nested OR/AND terms:
#     (a, b) >= (x, y)   ->   (a >= x AND (a > x OR (a = x AND b >= y)))
# and not written as row constructors, because MariaDB's optimizer uses an index only for
# row-constructor = and IN, not for < <= > >= (MariaDB docs, "Row Constructor
# Optimization"; MySQL's manual recommends the same rewrite). Checked on MariaDB 10.11
# with a 4-column primary key: EXPLAIN shows a range scan on PRIMARY for this form and a
# full table scan for ``(a, b) >= (x, y) AND (a, b) < (...)``. The redundant leading
# ``a >= x`` / ``a <= x`` term is a plain range on the first index column.


def quote_table(table: str | Sequence[str], quote: Callable[[str], str] = quote_ident) -> str:
    """``name`` or ``(database, name)`` quoted; a str is one identifier (dots kept)."""
    if isinstance(table, str):
        return quote(table)
    parts = list(table)
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"a table is a name or (database, name), got {table!r}")
    return ".".join(quote(p) for p in parts)


def sql_predicate(
    key_columns: Sequence[str], lo: Any, hi: Any, quote: Callable[[str], str] = quote_ident
) -> tuple[str, list]:
    """WHERE-clause text for ``lo <= key < hi`` with pymysql ``%s`` placeholders.

    A ``%`` in an identifier is doubled for pymysql's %-formatting: always pass the
    params (even an empty list) to ``cursor.execute``. Unbounded both ways gives ``1=1``.
    """
    params: list = []

    def placeholder(value: Any) -> str:
        params.append(_check_value(value))
        return "%s"

    text = _predicate(key_columns, lo, hi, lambda c: quote(c).replace("%", "%%"), placeholder)
    return text, params


def sql_predicate_literal(
    key_columns: Sequence[str], lo: Any, hi: Any, quote: Callable[[str], str] = quote_ident
) -> str:
    """Like ``sql_predicate`` with the values inlined as ``sql_literal``s: for SQL that must
    stay text (Spark JDBC ``predicates=``, ConnectorX). A connection that takes parameters
    takes ``sql_predicate``'s instead."""
    return _predicate(key_columns, lo, hi, quote, sql_literal)


def sql_literal(value: Any) -> str:
    r"""A key value as a MariaDB literal whose meaning no sql_mode changes: numbers bare,
    strings as ``_utf8mb4 X'..'`` (their UTF-8 bytes in hex with a character set
    introducer), bytes as ``X'..'``, dates/times quoted (digits, '-', ':', '.', ' ' only).
    NULL is rejected (key columns are NOT NULL).

    A quoted string's meaning depends on the session: ``'a\\b'`` is ``a\b`` in the default
    sql_mode and ``a\\b`` under NO_BACKSLASH_ESCAPES, where ``'O\'Brien'`` is a syntax
    error. A hex literal has no escapes, so no value can end it early either. With the
    introducer it is a character string, not a binary one, of derivation COERCIBLE like a
    quoted literal: compared with a column (IMPLICIT) it takes the column's collation, so
    ``k = _utf8mb4 X'41'`` finds 'a' in a case-insensitive column as ``k = 'A'`` does
    (proved against the server in tests/integration/test_no_backslash_escapes.py)."""
    value = _check_value(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")  # plain notation: 1E+3 would be read as a DOUBLE
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "X'" + bytes(value).hex().upper() + "'"
    if isinstance(value, str):
        return text_literal(value)
    if isinstance(value, _dt.datetime):
        return "'" + value.isoformat(sep=" ") + "'"
    if isinstance(value, (_dt.date, _dt.time)):
        return "'" + value.isoformat() + "'"
    raise AssertionError("unreachable")


def _check_value(value: Any) -> Any:
    if value is None:
        raise ValueError("NULL can't be a chunk bound: key columns must be NOT NULL")
    if (isinstance(value, Decimal) and not value.is_finite()) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise ValueError(f"a chunk bound must be finite, got {value!r}")
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        raise ValueError(f"a chunk bound datetime must be naive (as stored), got {value!r}")
    if not isinstance(value, (int, float, Decimal, str, bytes, bytearray, memoryview, _dt.date, _dt.time)):
        raise ValueError(f"unsupported chunk bound type {type(value).__name__}: {value!r}")
    return value


def _predicate(key_columns, lo, hi, quote, render) -> str:
    columns = _columns(key_columns, quote)
    parts = []
    if lo is not None:
        parts.append(_compare(columns, as_key(lo), lower=True, render=render))
    if hi is not None:
        parts.append(_compare(columns, as_key(hi), lower=False, render=render))
    return " AND ".join(parts) if parts else "1=1"


def _columns(key_columns, quote) -> list[str]:
    if isinstance(key_columns, str):
        key_columns = [key_columns]
    columns = list(key_columns)
    if not columns:
        raise ValueError("key_columns must name at least one column")
    if len(set(columns)) != len(columns):
        raise ValueError(f"key_columns has duplicates: {columns!r}")
    return [quote(c) for c in columns]


def _compare(columns: list[str], bound: tuple, lower: bool, render) -> str:
    """``key >= bound`` (lower) or ``key < bound``, on the first len(bound) columns."""
    if not bound:
        raise ValueError("a range bound must have at least one value")
    if len(bound) > len(columns):
        raise ValueError(f"bound {bound!r} has more values than key columns {columns!r}")
    last = len(bound) - 1
    strict, final = (">", ">=") if lower else ("<", "<")

    def level(i: int) -> str:  # text is built left to right, so params stay in order
        col = columns[i]
        if i == last:
            return f"{col} {final} {render(bound[i])}"
        first = render(bound[i])
        second = render(bound[i])
        return f"({col} {strict} {first} OR ({col} = {second} AND {level(i + 1)}))"

    if last == 0:
        return level(0)
    hint = f"{columns[0]} {'>=' if lower else '<='} {render(bound[0])}"
    return f"({hint} AND {level(0)})"


def boundary_sql(
    table: str | Sequence[str],
    key_columns: Sequence[str],
    lo: Any,
    chunk_size: int,
    hi: Any = None,
    quote: Callable[[str], str] = quote_ident,
) -> tuple[str, list]:
    """The query behind ``next_boundary(lo, hi)``: the key with exactly ``chunk_size``
    keys in ``[lo, key)``, below ``hi``; no row means the rest fits in one range."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    cols = ", ".join(quote(c).replace("%", "%%") for c in _columns_list(key_columns))
    where, params = sql_predicate(key_columns, lo, hi, quote=quote)
    table_sql = quote_table(table, quote).replace("%", "%%")
    return (f"SELECT {cols} FROM {table_sql} WHERE {where} ORDER BY {cols} LIMIT 1 OFFSET {chunk_size}", params)


def _columns_list(key_columns) -> list[str]:
    return [key_columns] if isinstance(key_columns, str) else list(key_columns)


# -- chunk keys ------------------------------------------------------------------------


def no_chunk_key_error(table: str) -> str:
    """The message for a table that has neither a primary key nor a configured chunk key."""
    return (
        f"{table} has no primary key, so it can't be snapshotted in key-range chunks nor "
        f"merged by key: set snapshot.chunk_keys['{table}'] to one or more NOT NULL columns "
        "that are unique together, ideally the leading columns of an index"
    )


def resolve_chunk_key(
    table: str, primary_key: Sequence[str] | None, configured: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The chunk key columns: the primary key, else the configured ones (``snapshot.chunk_keys``
    is for tables without one: the key is also the sink's row identity), else ValueError."""
    for columns in (primary_key, configured):
        if columns:
            columns = _columns_list(columns)
            if not all(isinstance(c, str) and c for c in columns):
                raise ValueError(f"chunk key columns of {table} must be non-empty names: {columns!r}")
            if len(set(columns)) != len(columns):
                raise ValueError(f"chunk key of {table} names a column twice: {columns!r}")
            return tuple(columns)
    raise ValueError(no_chunk_key_error(table))
