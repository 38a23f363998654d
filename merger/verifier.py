"""`cdc verify`: compare sink tables with their source in key-range chunks.

Per table: plan key ranges on the source (``boundary_sql`` queries, as the snapshots do);
per chunk read the source rows of the range and each sink's rows of the same range,
compare their digests (``merger.chunk_digest``) and, when they differ, their keys. Every
source query is one autocommit SELECT (no lock, no long transaction); at most one chunk
per side is in memory.

The source is live: a chunk that differs is read again, both sides, after
``retry_wait`` seconds, up to ``retries`` times. Only keys that differ in every attempt
are reported; a chunk whose difference goes away is equal (its rows were in flight).

Key order. The source cuts ranges in its collation order (the primary key index); the
sinks read ranges in code point order (``Sink.rows_in_range``). For integer, decimal and
temporal keys both orders agree. For string keys they may not (``utf8mb4_general_ci``
sorts 'a' before 'B'): then the sink ranges use the same boundaries sorted in code point
order, so they still partition the sink, and a key that lands in different chunks on the
two sides (a "stray") is looked up by exact key on the other side before it counts as a
difference.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import pyarrow as pa
import pymysql

from cdc.config import MySQLConfig
from ingest.types import TableSpec
from merger.chunk_digest import ChunkDiff, Digest, diff, digest, encode_row, encode_value, table_rows
from merger.chunking import quote_ident, quote_table, sql_literal, sql_predicate_literal
from merger.errors import MergerError
from merger.schema import arrow_schema, from_snapshot, snapshot_expression, snapshot_select
from merger.sinks.base import Sink, SinkError, SinkUnavailable
from merger.source import connect
from merger.verify import canonical_sink_rows, canonical_source_rows

LOOKUP_BATCH = 1000
# key types whose order is the same in MariaDB and in Python (no strays possible)
_ORDERED_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint", "year", "decimal", "numeric",
                  "float", "double", "date", "datetime", "timestamp", "time", "binary", "varbinary", "boolean")


@dataclass(frozen=True)
class Range:
    """One chunk: raw bounds for the source's SQL, canonical bounds for the sinks."""

    raw_lo: tuple | None
    raw_hi: tuple | None
    lo: tuple | None
    hi: tuple | None


@dataclass
class TableResult:
    table: str
    sink: str
    chunks: int = 0
    source_rows: int = 0
    sink_rows: int = 0
    mismatched_chunks: int = 0
    missing: list = field(default_factory=list)     # keys (bounded by the limit)
    extra: list = field(default_factory=list)
    different: list = field(default_factory=list)   # (key, columns)
    unlisted: int = 0                               # differing keys beyond the limit
    in_flight_chunks: int = 0                       # differed at first, settled on re-check
    error: str | None = None
    note: str | None = None
    skipped: bool = False

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.error:
            return "error"
        if self.mismatched_chunks or self.note:
            return "different"
        return "equal"

    def to_json(self) -> dict:
        return {"table": self.table, "sink": self.sink, "verdict": self.verdict, "chunks": self.chunks,
                "source_rows": self.source_rows, "sink_rows": self.sink_rows,
                "mismatched_chunks": self.mismatched_chunks, "in_flight_chunks": self.in_flight_chunks,
                "missing": [list(k) for k in self.missing], "extra": [list(k) for k in self.extra],
                "different": [{"key": list(k), "columns": list(c)} for k, c in self.different],
                "unlisted": self.unlisted, "error": self.error, "note": self.note}


# ------------------------------------------------------------------ the source side


class SourceReader:
    """Plain autocommit SELECTs on the source: each is its own consistent read."""

    def __init__(self, mysql: MySQLConfig):
        self.mysql = mysql
        self._conn: pymysql.Connection | None = None
        self.no_backslash_escapes = False

    def _connect(self) -> pymysql.Connection:
        if self._conn is None:
            self._conn = connect(self.mysql)  # one-line MergerError when it fails
            with self._conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")  # from_snapshot expects UTC
                cur.execute("SELECT @@SESSION.sql_mode")
                self.no_backslash_escapes = "NO_BACKSLASH_ESCAPES" in (cur.fetchone()[0] or "")
        return self._conn

    def query(self, sql: str) -> tuple[list[str], list[tuple]]:
        try:
            with self._connect().cursor() as cur:
                cur.execute(sql)  # no args: values are inlined literals, so '%' needs no escaping
                names = [d[0] for d in cur.description]
                return names, list(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            self.close()
            text = exc.args[-1] if exc.args else type(exc).__name__
            raise MergerError(f"source MySQL at {self.mysql.host}:{self.mysql.port}: {text}") from None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def _literal(self, v: Any) -> str:
        return sql_literal(v, no_backslash_escapes=self.no_backslash_escapes)

    def plan(self, spec: TableSpec, keys: Sequence[str], chunk_size: int) -> list[Range]:
        """Ranges of at most ``chunk_size`` rows (one indexed boundary query per range)."""
        table = quote_table((spec.db, spec.table))
        cols = ", ".join(quote_ident(k) for k in keys)
        by_name = {c.name: c for c in spec.columns}
        exprs = ", ".join(snapshot_expression(by_name[k]) for k in keys)
        key_spec = _key_spec(spec, keys)
        n = len(keys)
        ranges: list[Range] = []
        raw_lo, lo = None, None
        self._connect()  # the sql_mode decides how literals are written
        while True:
            where = sql_predicate_literal(keys, raw_lo, None, no_backslash_escapes=self.no_backslash_escapes)
            names, rows = self.query(f"SELECT {cols}, {exprs} FROM {table} WHERE {where} ORDER BY {cols} "
                                     f"LIMIT 1 OFFSET {int(chunk_size)}")
            if not rows:
                ranges.append(Range(raw_lo, None, lo, None))
                return ranges
            raw = tuple(_raw_value(v) for v in rows[0][:n])
            canon = table_rows(from_snapshot(key_spec, arrow_schema(key_spec),
                                             pa.table({k: pa.array([v]) for k, v in zip(keys, rows[0][n:])})))[0]
            ranges.append(Range(raw_lo, raw, lo, canon))
            raw_lo, lo = raw, canon

    def rows_in_range(self, spec: TableSpec, keys: Sequence[str], rng: Range) -> pa.Table:
        self._connect()
        where = sql_predicate_literal(keys, rng.raw_lo, rng.raw_hi, no_backslash_escapes=self.no_backslash_escapes)
        names, rows = self.query(f"SELECT {snapshot_select(spec)} FROM {quote_table((spec.db, spec.table))} "
                                 f"WHERE {where}")
        return canonical_source_rows(spec, names, rows)

    def rows_with_keys(self, spec: TableSpec, keys: Sequence[str], values: Sequence[tuple]) -> pa.Table:
        """Rows whose key equals one of ``values`` (canonical keys), exactly: a
        case-insensitive collation may return 'A' for 'a', which is filtered out here."""
        self._connect()
        cols = "(" + ", ".join(quote_ident(k) for k in keys) + ")"
        parts = []
        for i in range(0, len(values), LOOKUP_BATCH):
            batch = values[i:i + LOOKUP_BATCH]
            tuples = ", ".join("(" + ", ".join(self._literal(_raw_value(v)) for k, v in zip(keys, key))
                               + ")" for key in batch)
            names, rows = self.query(f"SELECT {snapshot_select(spec)} FROM {quote_table((spec.db, spec.table))} "
                                     f"WHERE {cols} IN ({tuples})")
            parts.append(canonical_source_rows(spec, names, rows))
        if not parts:
            return arrow_schema(spec).empty_table()
        t = pa.concat_tables(parts)
        wanted = {encode_row(k) for k in values}
        keep = [encode_row(k) in wanted for k in table_rows(t, keys)]
        return t.filter(pa.array(keep, pa.bool_())) if keep else t


def _key_spec(spec: TableSpec, keys: Sequence[str]) -> TableSpec:
    by_name = {c.name: c for c in spec.columns}
    return replace(spec, columns=tuple(by_name[k] for k in keys))


def _raw_value(v: Any) -> Any:
    """A key value as ``sql_literal`` can write it for MariaDB (session in UTC): aware
    datetimes as naive UTC, TIME (timedelta) as '[-]H:MM:SS.ffffff'."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(v, dt.timedelta):
        micros = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        secs, us = divmod(micros, 1_000_000)
        return f"{sign}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}.{us:06d}"
    return v


def keys_in_code_point_order(spec: TableSpec, keys: Sequence[str]) -> bool:
    """True if MariaDB orders these key columns as Python orders their canonical values
    (then no key can land in different chunks on the two sides)."""
    by_name = {c.name: c for c in spec.columns}
    return all(by_name[k].type_name in _ORDERED_TYPES for k in keys)


# ------------------------------------------------------------------ comparing


class TableVerifier:
    """Verify one source table against some sinks."""

    def __init__(self, source: SourceReader, spec: TableSpec, keys: Sequence[str], sinks: dict[str, Sink],
                 chunk_size: int, retries: int = 3, retry_wait: float = 2.0, limit: int = 20,
                 sleep: Callable[[float], None] = time.sleep,
                 on_progress: Callable[[str, int, int, int], None] | None = None):
        self.source = source
        self.spec = spec
        self.name = f"{spec.db}.{spec.table}"
        self.table_id = (spec.db, spec.table)
        self.keys = list(keys)
        self.sinks = sinks
        self.chunk_size = chunk_size
        self.retries = retries
        self.retry_wait = retry_wait
        self.limit = limit
        self.sleep = sleep
        self.on_progress = on_progress  # (table, chunks done, chunks total, source rows so far)
        self.schema = arrow_schema(spec)
        self.columns = list(self.schema.names)
        self.aligned = keys_in_code_point_order(spec, keys)

    def run(self) -> list[TableResult]:
        results = {name: TableResult(self.name, name) for name in self.sinks}
        live: dict[str, Sink] = {}
        for name, sink in self.sinks.items():
            try:
                if sink.has_table(self.table_id):
                    live[name] = sink
                else:
                    results[name].note = f"the sink has no table {self.name}"
            except SinkUnavailable:
                raise
            except SinkError as exc:
                results[name].error = str(exc)
        ranges = self.source.plan(self.spec, self.keys, self.chunk_size)
        sink_ranges = self._sink_ranges(ranges)
        source_rows = 0
        for i, (rng, srng) in enumerate(zip(ranges, sink_ranges)):
            src = table_rows(self.source.rows_in_range(self.spec, self.keys, rng), self.columns)
            source_rows += len(src)
            src_digest = digest(src)  # once per chunk, whatever the number of sinks
            for name, res in results.items():
                res.chunks += 1
                if res.error:
                    continue
                if name not in live:
                    res.source_rows += len(src)
                    res.mismatched_chunks += 1 if src else 0
                    continue
                try:
                    self._chunk(live[name], res, rng, srng, src, src_digest)
                except SinkUnavailable:
                    raise
                except SinkError as exc:
                    res.error = str(exc)
            if self.on_progress:
                self.on_progress(self.name, i + 1, len(ranges), source_rows)
        return list(results.values())

    def _sink_ranges(self, ranges: list[Range]) -> list[tuple]:
        """(lo, hi) for the sinks: the same boundaries in code point order."""
        bounds = [r.hi for r in ranges[:-1]]
        if not self.aligned:
            bounds.sort()
        edges = [None, *bounds, None]
        return list(zip(edges, edges[1:]))

    def _chunk(self, sink: Sink, res: TableResult, rng: Range, srng: tuple, src: list[tuple],
               src_digest: Digest) -> None:
        persistent: set | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(self.retry_wait)
                src = table_rows(self.source.rows_in_range(self.spec, self.keys, rng), self.columns)
                src_digest = digest(src)
            dst = self._sink_rows(sink, *srng)
            found = self._compare(sink, src, src_digest, dst)
            if found.empty:
                if attempt:
                    res.in_flight_chunks += 1
                break
            keys = {encode_row(k) for k in found.keys()}
            persistent = keys if persistent is None else persistent & keys
            if not persistent:
                res.in_flight_chunks += 1  # every difference so far went away: rows in flight
                found = ChunkDiff()
                break
        res.source_rows += len(src)
        res.sink_rows += len(dst)
        if found.empty:
            return
        res.mismatched_chunks += 1
        listed = len(res.missing) + len(res.extra) + len(res.different)
        for kind, items in (("missing", found.missing), ("extra", found.extra), ("different", found.different)):
            for item in items:
                key = item[0] if kind == "different" else item
                if encode_row(key) not in persistent:
                    continue
                if listed < self.limit:
                    getattr(res, kind).append(item)
                    listed += 1
                else:
                    res.unlisted += 1

    def _sink_rows(self, sink: Sink, lo, hi) -> list[tuple]:
        t = sink.rows_in_range(self.table_id, self.keys, lo, hi)
        return table_rows(canonical_sink_rows(t, self.schema), self.columns)

    def _compare(self, sink: Sink, src: list[tuple], src_digest: Digest, dst: list[tuple]) -> ChunkDiff:
        if src_digest == digest(dst):
            return ChunkDiff()
        found = diff(self.columns, self.keys, src, dst)
        if self.aligned:
            return found
        return self._resolve_strays(sink, found, src)

    def _resolve_strays(self, sink: Sink, found: ChunkDiff, src: list[tuple]) -> ChunkDiff:
        """Keys on one side only may sit in another chunk on the other side (see the
        module note): look them up by exact key there."""
        out = ChunkDiff(different=list(found.different))
        key_pos = [self.columns.index(k) for k in self.keys]
        if found.missing:
            src_by_key = {encode_row(tuple(r[i] for i in key_pos)): r for r in src}
            t = sink.rows_with_keys(self.table_id, self.keys, found.missing)
            held = {encode_row(tuple(r[i] for i in key_pos)): r
                    for r in table_rows(canonical_sink_rows(t, self.schema), self.columns)}
            for key in found.missing:
                ek = encode_row(key)
                other = held.get(ek)
                if other is None:
                    out.missing.append(key)
                    continue
                cols = tuple(c for c, a, b in zip(self.columns, src_by_key[ek], other)
                             if encode_value(a) != encode_value(b))
                if cols:
                    out.different.append((key, cols))
        if found.extra:
            # a key the source holds in another chunk is compared by that chunk
            t = self.source.rows_with_keys(self.spec, self.keys, found.extra)
            held = {encode_row(k) for k in table_rows(t, self.keys)}
            out.extra = [k for k in found.extra if encode_row(k) not in held]
        return out


# ------------------------------------------------------------------ tables of a config


def merger_tables(all_tables: Sequence[str], include: Sequence[str], exclude: Sequence[str],
                  watermark_table: str) -> list[str]:
    """The tables the merger handles: as ``merger.app`` decides (full-match regexes)."""
    import re

    inc = [re.compile(p) for p in include]
    exc = [re.compile(p) for p in exclude]
    out = []
    for name in all_tables:
        if name == watermark_table:
            continue
        if inc and not any(p.fullmatch(name) for p in inc):
            continue
        if any(p.fullmatch(name) for p in exc):
            continue
        out.append(name)
    return sorted(out)
