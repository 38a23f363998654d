"""Compare a whole sink table with its source, row by row, in canonical form (tests and
the demo; ``cdc verify`` compares in chunks, see ``merger.verify.chunked``).

The source is read with one plain ``SELECT `col`, ... FROM db.t`` (no lock); the sink with
its own client. Both sides are canonicalised (``merger.verify.canonical``) and compared by
key: missing keys, extra keys and keys whose values differ are reported (at most
``limit`` of each), with the canonical values of both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from merger.verify.side import SinkSide
from merger.verify.sinks.base import SinkReadError
from merger.verify.source import SourceReader


@dataclass
class Comparison:
    table: str
    sink: str
    source_rows: int
    sink_rows: int
    missing: list = field(default_factory=list)  # keys in the source, not in the sink
    extra: list = field(default_factory=list)  # keys in the sink, not in the source
    different: list = field(default_factory=list)  # (key, column, source value, sink value), canonical

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.different) and self.source_rows == self.sink_rows

    def summary(self) -> str:
        if self.ok:
            return f"{self.table} ({self.sink}): {self.source_rows} rows, equal"
        return (
            f"{self.table} ({self.sink}): source {self.source_rows} rows, sink {self.sink_rows}; "
            f"missing {self.missing[:3]}, extra {self.extra[:3]}, different {self.different[:5]}"
        )


def compare_table(
    source: SourceReader, reader, db: str, table: str, keys: Sequence[str] | None = None, limit: int = 20
) -> Comparison:
    """One sink table (``reader``: a ``merger.verify.sinks`` reader) against its source.
    Raises ``SinkReadError`` when the sink has no such table."""
    out = compare_tables(source, {reader.name: reader}, db, table, keys, limit)[reader.name]
    if isinstance(out, str):
        raise SinkReadError(out)
    return out


def compare_tables(
    source: SourceReader, readers: dict, db: str, table: str, keys: Sequence[str] | None = None, limit: int = 20
) -> dict:
    """Several sinks against one read of the source: {sink name: Comparison, or the error
    text when that sink's table cannot be read}."""
    t = source.describe(db, table)
    if t is None:
        raise SinkReadError(f"the source has no table {db}.{table}")
    keys = list(keys or t.primary_key)
    if not keys:
        raise SinkReadError(f"{db}.{table} has no primary key: name its key columns")
    raw_src = None
    out: dict = {}
    for name, reader in readers.items():
        try:
            cols = reader.columns(db, table)
            if cols is None:
                raise SinkReadError(f"the {reader.name} sink has no table {db}.{table}")
            side = SinkSide(reader, t, keys, cols)
            raw_dst = reader.rows(db, table, t.column_names, cols)
        except SinkReadError as exc:
            out[name] = str(exc)
            continue
        if raw_src is None:
            raw_src = source.rows(t)
        out[name] = compare_rows(
            t.name,
            reader.name,
            t.column_names,
            side.key_pos,
            side.source_rows(raw_src),
            side.sink_rows(raw_dst),
            limit,
            shown=_shown(side.key_pos, raw_src, raw_dst),
        )
    return out


def _shown(key_pos: Sequence[int], *raw_sides: list[tuple]) -> list[list[tuple]]:
    return [[tuple(r[i] for i in key_pos) for r in rows] for rows in raw_sides]


def compare_rows(
    name: str,
    sink: str,
    columns: Sequence[str],
    key_pos: Sequence[int],
    src: list[tuple],
    dst: list[tuple],
    limit: int = 20,
    shown: list[list[tuple]] | None = None,
) -> Comparison:
    """Canonical rows of both sides, compared by key. ``shown``: the keys as each side
    returned them (source, sink), to report keys in their own values."""

    def index(rows, raw_keys):
        out: dict[bytes, tuple] = {}
        display: dict[bytes, tuple] = {}
        dup = 0
        for n, r in enumerate(rows):
            key = tuple(r[i] for i in key_pos)
            k = key  # canonical values (str, None, tuples) are hashable and exact
            dup += k in out
            out[k] = r
            display[k] = raw_keys[n] if raw_keys is not None else key
        return out, display, dup

    src_rows, src_keys, _ = index(src, shown[0] if shown else None)
    dst_rows, dst_keys, dst_dup = index(dst, shown[1] if shown else None)
    result = Comparison(name, sink, len(src), len(dst))
    for ek, row in src_rows.items():
        other = dst_rows.get(ek)
        if other is None:
            if len(result.missing) < limit:
                result.missing.append(src_keys[ek])
            continue
        for col, a, b in zip(columns, row, other):
            if a != b and len(result.different) < limit:
                result.different.append((src_keys[ek], col, a, b))
    result.extra = [dst_keys[ek] for ek in dst_rows if ek not in src_rows][:limit]
    if dst_dup and not result.extra:
        result.extra.append(("<duplicate keys in sink>",))
    return result
