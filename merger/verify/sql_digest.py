"""Chunk digests computed inside each database: `cdc verify`'s fast path. Pure: this
module only writes SQL text; the readers run it.

Each side turns every row of a key range into one text, in its own SQL (MariaDB for the
source, PostgreSQL, or DataFusion over the Delta table), hashes it with SHA-256 and
returns ``(rows, sum of the hashes' first 64 bits mod 2**64)``. SHA-256, not MD5: the three
dialects all have it, and MariaDB's costs a third of its MD5 (measured: 0.3 against 1.1 s per
million rows; PostgreSQL's about as much as its MD5). Equal digests mean the
chunk is equal: the texts are written so that two rows give the same text only when the
row path (``merger.verify.canonical``) would call them equal too, never more leniently. A
digest that differs proves nothing by itself (a decimal written ``1.50`` on one side and
``1.5`` on the other would differ): the chunk then goes through the row path, which reads
the rows and names the keys. So the fast path can only cost time, never hide a change.

The row text: the columns' texts joined by ``,``; NULL is ``N``; a text or binary value is
length-prefixed (``5:hello``) or hex, so no value can run into the next one. Columns whose
types have no text here that all three dialects write alike (FLOAT, DOUBLE, JSON, BIT,
GEOMETRY, a column the sink lacks, a sink type other than the documented one) make the
table use the row path for that sink (``DigestPlan.reason`` says why).

The source's text of a string holds its NUL characters as they are. A PostgreSQL sink
cannot hold NUL (its ``nul_policy`` stripped or replaced them), so a chunk with such a value
never settles by digest there: the row path compares it under the sink's NUL rule and counts
the values that rule changed. Applying the rule in the digest (a REPLACE per string column)
would cost every row of every table for the few that hold NUL.

The texts per column type (source -> PostgreSQL / Delta type):

===========  =========================================  ===================================
type         text                                       sink types
===========  =========================================  ===================================
integers     decimal digits                             smallint, integer, bigint,
                                                        numeric(p,0) / intN, decimal(p, 0)
BOOLEAN      ``true`` / ``false``                       boolean / bool
DECIMAL      digits with exactly the column's scale     numeric(p,s) / decimal128(p, s)
strings      byte length ``:`` the UTF-8 text (CHAR     text, character varying / string
             without trailing spaces; PostgreSQL's
             NUL rule applied to the source)
binary       upper-case hex                             bytea / binary
DATE         ``YYYY-MM-DD``                             date / date32
DATETIME     ``YYYY-MM-DD HH:MM:SS.ffffff``             timestamp / timestamp[us]
TIMESTAMP    the same, in UTC                           timestamptz / timestamp[us, UTC]
TIME         signed microseconds                        interval / int64
===========  =========================================  ===================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from cdc.quoting import pg_ident, quote_ident
from merger.verify.canonical import DATAFUSION, POSTGRESQL, Column, SinkRules, UnsupportedColumn

DIALECTS = ("mariadb", POSTGRESQL, DATAFUSION)
# MariaDB character sets whose every value converts to utf8mb4 unchanged
_CHARSETS = ("utf8mb4", "utf8mb3", "utf8", "latin1", "ascii")
_PG_INTS = ("smallint", "integer", "bigint")
_DF_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_DF_STRINGS = ("string", "large_string", "string_view", "utf8", "large_utf8", "utf8_view")
_DF_BINARY = ("binary", "large_binary", "binary_view")


MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Digest:
    """One chunk's digest: rows, and the sum mod 2**64 of the first 64 bits of each row's
    SHA-256 (read big-endian; a sum, not a xor, so a row held twice does not cancel out)."""

    rows: int
    total: int

    @classmethod
    def of(cls, rows, total) -> "Digest":
        """From a side's (possibly signed or unbounded) sum."""
        return cls(int(rows), int(total) & MASK)


@dataclass(frozen=True)
class DigestPlan:
    """The row text of one table on the source side and on one sink; ``reason`` (and no
    SQL) when the table takes the row path for that sink."""

    source_row: str | None = None
    sink_row: str | None = None
    reason: str | None = None

    @property
    def usable(self) -> bool:
        return self.reason is None


def quote(dialect: str, name: str) -> str:
    """An identifier in a dialect: backticks in MariaDB, double quotes in PostgreSQL and DataFusion."""
    return quote_ident(name) if dialect == "mariadb" else pg_ident(name)


def _decimal_type(text: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(?:numeric|decimal128|decimal256)\((\d+),\s*(\d+)\)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


class NoSqlText(Exception):
    """A column or key this module writes no SQL text for (the row path takes it)."""


def _string_texts(col: Column, rules: SinkRules, sink_type: str, c: str, s: str) -> tuple[str, str]:
    if (col.character_set or "utf8mb4").lower() not in _CHARSETS:
        raise NoSqlText(f"column {col.name!r} has character set {col.character_set}")
    src = c if (col.character_set or "utf8mb4").lower() == "utf8mb4" else f"CONVERT({c} USING utf8mb4)"
    if col.data_type == "char":
        src = f"TRIM(TRAILING ' ' FROM {src})"
    if rules.dialect == POSTGRESQL:
        if sink_type not in ("text",) and not sink_type.startswith("character varying"):
            raise NoSqlText(f"column {col.name!r} is {sink_type} in the sink")
        return (f"CONCAT(LENGTH({src}), ':', {src})", f"octet_length({s})::text || ':' || {s}")
    if sink_type not in _DF_STRINGS:
        raise NoSqlText(f"column {col.name!r} is {sink_type} in the sink")
    return (f"CONCAT(LENGTH({src}), ':', {src})", f"CAST(octet_length({s}) AS VARCHAR) || ':' || {s}")


def column_texts(col: Column, rules: SinkRules, sink_type: str | None) -> tuple[str, str]:
    """(source SQL, sink SQL) of one column's text, NULL for NULL; raises NoSqlText."""
    if sink_type is None:
        raise NoSqlText(f"the sink has no column {col.name!r}")
    st = sink_type.lower()
    pg = rules.dialect == POSTGRESQL
    c = quote("mariadb", col.name)
    s = quote(rules.dialect, col.name)
    sink_text = f"{s}::text" if pg else f"CAST({s} AS VARCHAR)"
    try:
        kind = col.kind
    except UnsupportedColumn as exc:
        raise NoSqlText(str(exc)) from None
    if kind == "int":
        if st in ("boolean", "bool"):
            if col.data_type != "tinyint":
                raise NoSqlText(f"column {col.name!r} is {st} in the sink")
            return (f"CASE WHEN {c} <> 0 THEN 'true' WHEN {c} = 0 THEN 'false' END", sink_text)
        dec = _decimal_type(st)
        if st in (_PG_INTS if pg else _DF_INTS) or (dec is not None and dec[1] == 0):
            return (c, sink_text)  # CONCAT_WS writes a number's digits as CAST would, for less
    elif kind == "decimal":
        dec = _decimal_type(st)
        if dec is not None and dec[1] == (col.numeric_scale or 0):
            return (c, sink_text)
    elif kind == "string":
        if st in ("jsonb", "json"):
            raise NoSqlText(f"column {col.name!r} is {st} in the sink")
        return _string_texts(col, rules, st, c, s)
    elif kind == "binary":
        if st == "bytea" or st in _DF_BINARY:
            return (f"HEX({c})", f"upper(encode({s}, 'hex'))")
    elif kind == "date":
        if st in ("date", "date32[day]", "date32"):
            # PostgreSQL's text of a date is YYYY-MM-DD under DateStyle ISO (its readers set it)
            return (f"CAST({c} AS CHAR)", f"{s}::text" if pg else f"to_char({s}, '%Y-%m-%d')")
    elif kind in ("datetime", "timestamp"):
        want = (
            ("timestamp without time zone", "timestamp[us]")
            if kind == "datetime"
            else ("timestamp with time zone", "timestamp[us, tz=utc]")
        )
        if st in want:
            fmt = "'YYYY-MM-DD HH24:MI:SS.US'" if pg else "'%Y-%m-%d %H:%M:%S%.6f'"
            # CAST writes the column's own number of fraction digits: six, alike, only for (6)
            src = f"CAST({c} AS CHAR)" if col.datetime_precision == 6 else f"DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')"
            return (src, f"to_char({s}, {fmt})")
    elif kind == "time":
        src = f"CAST(TIME_TO_SEC({c}) * 1000000 AS SIGNED)"
        if pg and st == "interval":
            return (src, f"(extract(epoch from {s}) * 1000000)::bigint::text")
        if not pg and st == "int64":
            return (src, sink_text)
    raise NoSqlText(f"column {col.name!r} ({col.column_type} as {st}) has no SQL text")


def _row(dialect: str, texts: Sequence[str]) -> str:
    null = "IFNULL" if dialect == "mariadb" else "coalesce"
    parts = ", ".join(f"{null}({t}, 'N')" for t in texts)
    return f"CONCAT_WS(',', {parts})" if dialect == "mariadb" else f"concat_ws(',', {parts})"


def plan(columns: Sequence[Column], rules: SinkRules, sink_types: Mapping[str, str]) -> DigestPlan:
    """The row texts of a table for one sink, or the reason there are none."""
    dialect = rules.dialect
    pairs = []
    try:
        for col in columns:
            pairs.append(column_texts(col, rules, sink_types.get(col.name)))
    except NoSqlText as exc:
        return DigestPlan(reason=str(exc))
    return DigestPlan(_row("mariadb", [p[0] for p in pairs]), _row(dialect, [p[1] for p in pairs]))


# ------------------------------------------------------------------ the digest queries


HASH_BYTES = 32  # SHA-256
_MARIADB_HASH = "CAST(CONV(LEFT(SHA2({row}, 256), 16), 16, 10) AS UNSIGNED)"  # one CONV of 16 hex digits
_POSTGRES_HASH = "('x' || encode(substring(sha256(convert_to({row}, 'UTF8')) from 1 for 8), 'hex'))::bit(64)::bigint"


def mariadb_query(row_sql: str, table: str, where: str | None) -> str:
    w = f" WHERE {where}" if where else ""
    return f"SELECT COUNT(*), IFNULL(SUM({_MARIADB_HASH.format(row=row_sql)}), 0) FROM {table}{w}"


def mariadb_parts_query(row_sql: str, table: str, where: str | None, keys: Sequence[str], step: int) -> str:
    """The range's rows in parts of ``step`` rows in key order (the server numbers them):
    per part, in order, its first key (one column per key column), then ``COUNT(*)`` and
    the digest's sum as ``mariadb_query``. ``keys``: quoted key columns."""
    w = f" WHERE {where}" if where else ""
    order = ", ".join(keys)
    firsts = ", ".join(f"MIN(CASE WHEN pos = 0 THEN k{i} END)" for i in range(len(keys)))
    inner = ", ".join(f"{k} AS k{i}" for i, k in enumerate(keys))
    step = max(1, int(step))
    return (
        f"SELECT {firsts}, COUNT(*), IFNULL(SUM(h), 0) FROM ("
        f"SELECT (ROW_NUMBER() OVER (ORDER BY {order}) - 1) DIV {step} AS part, "
        f"(ROW_NUMBER() OVER (ORDER BY {order}) - 1) MOD {step} AS pos, {inner}, "
        f"{_MARIADB_HASH.format(row=row_sql)} AS h "
        f"FROM {table}{w}) AS parts GROUP BY part ORDER BY part"
    )


def postgres_parts_query(row_sql: str, table: str, where: str | None, part_sql: str) -> str:
    """Per part (``part_sql``: a CASE giving each row its part's number), the count and the
    digest's sum as ``postgres_query``."""
    w = f" WHERE {where}" if where else ""
    return (
        f"SELECT {part_sql} AS part, count(*), coalesce(sum({_POSTGRES_HASH.format(row=row_sql)}), 0) "
        f"FROM {table}{w} GROUP BY 1"
    )


def postgres_query(row_sql: str, table: str, where: str | None) -> str:
    """The sum is of signed 64-bit values (bit(64)::bigint); ``Digest.of`` takes it mod 2**64.
    The text's UTF-8 bytes are hashed, whatever the database's encoding."""
    w = f" WHERE {where}" if where else ""
    return f"SELECT count(*), coalesce(sum({_POSTGRES_HASH.format(row=row_sql)}), 0) FROM {table}{w}"


def datafusion_query(row_sql: str, table: str, where: str | None) -> str:
    """One binary SHA-256 per row; ``words_digest`` sums them (DataFusion cannot parse hex)."""
    w = f" WHERE {where}" if where else ""
    return f"SELECT digest({row_sql}, 'sha256') AS h FROM {table}{w}"


def words_digest(rows: int, packed: bytes) -> Digest:
    """The digest of ``rows`` SHA-256 values packed back to back (HASH_BYTES each)."""
    import array
    import sys

    if len(packed) != HASH_BYTES * rows:
        raise ValueError(f"{len(packed)} bytes are not {rows} SHA-256 values")
    words = array.array("Q")  # 8 bytes on every platform CPython supports
    words.frombytes(packed)
    if sys.byteorder == "little":
        words.byteswap()
    return Digest.of(rows, sum(words[0 :: HASH_BYTES // 8]))


# ------------------------------------------------------------------ range predicates


def datafusion_literal(kind: str, canon: str) -> str:
    """A canonical key value as a DataFusion literal, for the key kinds the Delta digest
    supports (integers and dates); raises NoSqlText otherwise."""
    if kind == "int" and re.fullmatch(r"-?\d+", canon or ""):
        return canon
    if kind == "date" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", canon or ""):
        return f"DATE '{canon}'"
    raise NoSqlText(f"a {kind} key has no DataFusion literal here")


def range_predicate(
    dialect: str, keys: Sequence[str], lo: Sequence[str] | None, hi: Sequence[str] | None
) -> str | None:
    """``keys >= lo AND keys < hi`` as row comparisons spelled out (DataFusion has no row
    values); ``lo``/``hi`` are literals already."""
    conds = []
    for bound, strict_last in ((lo, False), (hi, True)):
        if bound is None:
            continue
        op_last = "<" if strict_last else ">="
        op_mid = "<" if strict_last else ">"
        ors = []
        for i in range(len(keys)):
            eqs = [f"{quote(dialect, keys[j])} = {bound[j]}" for j in range(i)]
            last = f"{quote(dialect, keys[i])} {op_last if i == len(keys) - 1 else op_mid} {bound[i]}"
            ors.append("(" + " AND ".join([*eqs, last]) + ")")
        conds.append("(" + " OR ".join(ors) + ")")
    return " AND ".join(conds) if conds else None


def fixed_predicate(dialect: str, column: str, value: str) -> str:
    """``column = 'value'`` (a text value: the origin column), for a digest query's WHERE."""
    if dialect == "mariadb":
        raise ValueError("the source side reads physical tables: no fixed column there")
    return f"{quote(dialect, column)} = '" + str(value).replace("'", "''") + "'"
