"""Order-independent digests of one chunk's rows, and the diff of two chunks.

Pure: no I/O. Rows are tuples of canonical values (``merger.verify.canonical``: strings,
None, or an "unexpected" tuple), in any order; other Python values are encoded too.

* ``row_hash``: 64 bits of BLAKE2b over a stable, type-tagged, length-prefixed encoding of
  the row's values, so the same values give the same hash in every process and version.
* ``digest``: (row count, sum of the row hashes mod 2**64). A sum, not a xor, so a row
  present twice does not cancel out. Equal multisets of rows give equal digests; different
  ones give different digests except with probability ~2**-64.
* ``diff``: for two chunks whose digests differ, the keys only the source has (missing in
  the sink), the keys only the sink has (extra), and the keys whose other columns differ
  (with those columns); a key held more often on one side (a chunk key that is not
  unique) counts as missing or extra. Values are compared by their encoding, the same
  equality the digest uses (so NaN equals NaN, and a digest mismatch always shows up in
  the diff).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import struct
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Sequence

import pyarrow as pa

MASK = (1 << 64) - 1


def encode_value(value: Any) -> bytes:
    """A stable byte encoding of one canonical value: a type tag, then the payload."""
    if value is None:
        return b"N"
    if isinstance(value, bool):  # before int: bool is an int
        return b"T" if value else b"F"
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, float):
        if math.isnan(value):
            return b"fnan"
        return b"f" + struct.pack(">d", value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            return b"d" + str(value).encode()
        # value semantics: 1.0 and 1.00 are the same number
        return b"d" + str(value.normalize() if value else Decimal(0)).encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"b" + bytes(value)
    if isinstance(value, _dt.datetime):  # before date: a datetime is a date
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc)
            return b"z" + value.replace(tzinfo=None).isoformat().encode()
        return b"t" + value.isoformat().encode()
    if isinstance(value, _dt.date):
        return b"D" + value.isoformat().encode()
    if isinstance(value, _dt.timedelta):
        micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
        return b"u" + str(micros).encode()
    if isinstance(value, _dt.time):
        return b"h" + value.isoformat().encode()
    # nested values (not produced by the canonical schema today): JSON with sorted keys
    return b"j" + json.dumps(value, sort_keys=True, default=str, separators=(",", ":")).encode()


def encode_row(values: Sequence[Any]) -> bytes:
    """The row's values, each length-prefixed, so no two rows share an encoding."""
    parts = []
    for v in values:
        e = encode_value(v)
        parts.append(len(e).to_bytes(4, "big"))
        parts.append(e)
    return b"".join(parts)


def row_hash(values: Sequence[Any]) -> int:
    return int.from_bytes(hashlib.blake2b(encode_row(values), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Digest:
    count: int = 0
    hash: int = 0

    def __add__(self, other: "Digest") -> "Digest":
        return Digest(self.count + other.count, (self.hash + other.hash) & MASK)

    def hex(self) -> str:
        return f"{self.count}:{self.hash:016x}"


def digest(rows: Iterable[Sequence[Any]]) -> Digest:
    count, total = 0, 0
    for r in rows:
        count += 1
        total += row_hash(r)
    return Digest(count, total & MASK)


def table_rows(table: pa.Table, columns: Sequence[str] | None = None) -> list[tuple]:
    """The rows of an Arrow table as tuples (in ``columns`` order, default: all)."""
    names = list(columns) if columns is not None else table.column_names
    if table.num_rows == 0:
        return []
    return list(zip(*(table.column(n).to_pylist() for n in names)))


@dataclass
class ChunkDiff:
    """What differs between a source chunk and its sink chunk (all keys, unbounded; the
    caller bounds what it reports)."""

    missing: list[tuple] = field(default_factory=list)  # in the source, not in the sink
    extra: list[tuple] = field(default_factory=list)  # in the sink, not in the source
    different: list[tuple[tuple, tuple[str, ...]]] = field(default_factory=list)  # (key, columns)

    @property
    def empty(self) -> bool:
        return not (self.missing or self.extra or self.different)

    def keys(self) -> set[tuple]:
        return {*self.missing, *self.extra, *(k for k, _ in self.different)}


def diff(
    columns: Sequence[str], keys: Sequence[str], source: Iterable[Sequence[Any]], sink: Iterable[Sequence[Any]]
) -> ChunkDiff:
    """Compare two chunks by key. ``columns`` names the row positions; ``keys`` are some of
    them. A key the sink holds more often than the source (a duplicate) counts as extra,
    one the source holds more often as missing.
    Results are sorted (by key encoding, so mixed types never fail to sort)."""
    columns = list(columns)
    missing_cols = [k for k in keys if k not in columns]
    if missing_cols:
        raise ValueError(f"key columns {missing_cols} are not among the columns {columns}")
    key_pos = [columns.index(k) for k in keys]

    def index(rows) -> dict[bytes, tuple[tuple, list[tuple]]]:
        """key encoding -> (key, the encoded rows with that key: one, unless the key repeats)"""
        by_key: dict[bytes, tuple[tuple, list[tuple]]] = {}
        for r in rows:
            k = tuple(r[i] for i in key_pos)
            by_key.setdefault(encode_row(k), (k, []))[1].append(tuple(encode_value(v) for v in r))
        return by_key

    src, dst = index(source), index(sink)
    out = ChunkDiff()
    for ek in sorted(src):
        key, mine = src[ek]
        theirs = dst.get(ek, (key, []))[1]
        if len(mine) > len(theirs):  # absent, or held fewer times (duplicate keys)
            out.missing.append(key)
        if not theirs:
            continue
        only_mine = Counter(mine) - Counter(theirs)
        only_theirs = Counter(theirs) - Counter(mine)
        if only_mine and only_theirs:  # same key, other values: name the columns that differ
            a, b = min(only_mine), min(only_theirs)
            out.different.append((key, tuple(c for c, x, y in zip(columns, a, b) if x != y)))
    for ek in sorted(dst):
        if len(dst[ek][1]) > len(src.get(ek, (None, []))[1]):
            out.extra.append(dst[ek][0])
    return out
