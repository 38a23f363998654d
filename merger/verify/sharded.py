"""`cdc verify` of a sharded source's logical tables (``docs/sharding.md``), pure parts.

A logical table is the union of its origins (``merger.schema.catalog.Origin``: one physical
table of one shard). In key mode ``origin`` each sink row names its origin in the column
``__cdc_origin``, so verify compares one origin at a time: the physical table on its
shard, through the plain source reader, against the sink rows whose origin column holds
that origin (``TableVerifier(..., target=<logical table>, fixed=(column, origin))``), the
chunks cut on the physical key. The origin column itself is the filter, so it is not
compared as a value. Sink rows whose origin is none of the source's are reported too.

The results of the origins are merged into one per logical table and sink; a key is
reported as the logical key: the physical key with the origin appended.

In key mode ``unique`` the origin column names a row's last writer, not where the row is
now: the logical table is compared with the union of the rows each shard owns
(``merger.verify.union_source``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from merger.verify.chunked import TableResult


def logical_key(key: Sequence, origin: str | None) -> tuple:
    """An origin's key as the logical table's key (with the origin column last)."""
    return tuple(key) if origin is None else (*key, origin)


def merge_results(table: str, sink: str, parts: Sequence[tuple[str | None, TableResult]], limit: int) -> TableResult:
    """One logical table's result for one sink from its origins' results: counts summed,
    keys with their origin, at most ``limit`` keys listed (the rest counted as unlisted),
    errors and notes prefixed by the origin they concern."""
    out = TableResult(table, sink)
    listed = 0
    notes, errors = [], []
    for origin, r in parts:
        for attr in (
            "chunks",
            "source_rows",
            "sink_rows",
            "mismatched_chunks",
            "unlisted",
            "in_flight_chunks",
            "digest_chunks",
            "narrowed_chunks",
            "nul_values_changed",
        ):
            setattr(out, attr, getattr(out, attr) + getattr(r, attr))
        for kind in ("missing", "extra", "different"):
            for item in getattr(r, kind):
                if listed >= limit:
                    out.unlisted += 1
                    continue
                listed += 1
                if kind == "different":
                    getattr(out, kind).append((logical_key(item[0], origin), item[1]))
                else:
                    getattr(out, kind).append(logical_key(item, origin))
        where = f"{origin}: " if origin else ""
        if r.error:
            errors.append(where + r.error)
        if r.note:
            notes.append(where + r.note)
        out.row_path = out.row_path or (r.row_path and where + r.row_path)
        out.history_faults += [
            replace(f, examples=tuple(logical_key(k, origin) for k in f.examples)) for f in r.history_faults
        ]
        out.nul_policy = out.nul_policy or r.nul_policy
    out.skipped = bool(parts) and all(r.skipped for _, r in parts)
    out.error = "; ".join(errors) or None
    out.note = "; ".join(notes) or None
    return out


def stray_origins(counts: Mapping[str | None, int], known: Sequence[str]) -> dict[str | None, int]:
    """The sink's rows per origin value that is none of the source's origins."""
    wanted = set(known)
    return {value: n for value, n in counts.items() if value not in wanted and n}


def stray_note(column: str, strays: Mapping[str | None, int]) -> str | None:
    """One line on the sink rows of no origin of the source (then the table differs)."""
    if not strays:
        return None
    parts = ", ".join(f"{value!r} ({n:,} rows)" for value, n in sorted(strays.items(), key=lambda kv: str(kv[0])))
    return f"extra in the sink: rows whose {column} is no origin of the source: {parts}"


def add_strays(result: TableResult, column: str, strays: Mapping[str | None, int]) -> TableResult:
    note = stray_note(column, strays)
    if note:
        result.sink_rows += sum(strays.values())
        result.note = f"{result.note}; {note}" if result.note else note
    return result
