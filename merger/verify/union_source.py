"""`cdc verify` of a logical table in key mode ``unique`` (docs/sharding.md, section 4): the
union of its origins' rows, each origin's rows of key ranges its shard does not own left
out, read as one source.

The sink rows cannot be split by origin: ``__cdc_origin`` names a row's last writer, and a
row moved to another shard and not changed since still names its old one. So the logical
sink table is compared by the source key, without the origin column, with this union. A
shard's ownership comes from its own control rows of moves (``<watermark db>.cdc_cutover``,
in move order, a begin before its switch; ``cdc.shard_cutover.owned_ranges``), as a SQL
condition on the table's first key column that every read of that origin carries
(``SourceReader.only``): a copy before its switch and leftovers after it are not the
shard's rows.
"""

from __future__ import annotations

from typing import Sequence

from cdc.quoting import quote_ident
from cdc.shard_cutover import BEGIN, SWITCH, KeyRange, Move, bound_of, owned_ranges
from merger.snapshot.chunking import quote_table
from merger.verify.source import SourceReader, SourceReadError, SourceTable
from merger.verify.sql_digest import Digest

CUTOVER_TABLE = "cdc_cutover"  # beside the watermark table, on every shard


def cutover_rows(reader: SourceReader, cutover_table: str, table: str) -> list[tuple[Move, str]]:
    """A shard's control rows of moves of logical table ``table``, in the order its binlog
    holds them (none when the shard has no cutover table)."""
    db, name = cutover_table.split(".", 1)
    found = reader.query(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, name)
    )
    if not found or not found[0][0]:
        return []
    out = []
    for move_id, kind, table_name, low, high, source, target in reader.query(
        "SELECT move_id, kind, table_name, low_key, high_key, source, target FROM "
        f"{quote_table((db, name))} WHERE table_name = %s ORDER BY move_id, kind = 'switch'",
        (table,),
    ):
        if kind not in (BEGIN, SWITCH):
            raise SourceReadError(f"{cutover_table} on {reader.where}: move {move_id} has a row of kind {kind!r}")
        bounds = KeyRange(bound_of(low), bound_of(high))
        out.append((Move(int(move_id), bounds, str(source), str(target), str(table_name)), kind))
    return out


def owned_sql(reader: SourceReader, column: str, ranges: list[tuple[KeyRange, bool]]) -> str | None:
    """The condition a row of the shard meets when its shard owns its key (``column``, the
    table's first key column); None: it owns every key."""
    if not ranges:
        return None
    col = quote_ident(column)
    whens = []
    for r, owned in ranges:
        conds = [f"{col} >= {reader.literal(r.low)}"] if r.low is not None else []
        conds += [f"{col} < {reader.literal(r.high)}"] if r.high is not None else []
        whens.append(f"WHEN {' AND '.join(conds) or 'TRUE'} THEN {int(owned)}")
    return f"CASE {' '.join(whens)} ELSE 1 END = 1"


class UnionSource:
    """The reads ``merger.verify.chunked.TableVerifier`` makes of a source, over several
    origins: ``parts``, each a reader (restricted to its shard's keys) and the physical table
    it reads. The verifier's table argument is ignored: each part reads its own."""

    def __init__(self, parts: list[tuple[SourceReader, SourceTable]]):
        self.parts = parts

    def sibling(self) -> "UnionSource":
        return UnionSource([(r.sibling(), t) for r, t in self.parts])

    def close(self) -> None:
        for r, _ in self.parts:
            r.close()

    def plan(self, t: SourceTable, keys: Sequence[str], chunk_size: int) -> list[tuple]:
        """The chunks of the origin of the most chunks: bounds in the servers' own order (any
        bounds cover every key; the other origins' chunks may hold more rows)."""
        plans = [r.plan(table, keys, chunk_size) for r, table in self.parts]
        return max(plans, key=len)

    def rows_in_range(self, t: SourceTable, keys: Sequence[str], lo, hi) -> list[tuple]:
        return [row for r, table in self.parts for row in r.rows_in_range(table, keys, lo, hi)]

    def digest_in_range(self, t: SourceTable, keys: Sequence[str], lo, hi, row_sql: str) -> Digest:
        found = [r.digest_in_range(table, keys, lo, hi, row_sql) for r, table in self.parts]
        return Digest.of(sum(d.rows for d in found), sum(d.total for d in found))

    def digest_parts_in_range(
        self, t: SourceTable, keys: Sequence[str], lo, hi, row_sql: str, step: int
    ) -> list[tuple[tuple, Digest]]:
        """One part: the origins' rows are not numbered in one key order (a differing chunk is
        then compared row by row)."""
        return [(lo or (), self.digest_in_range(t, keys, lo, hi, row_sql))]

    def cuts_in_range(self, t: SourceTable, keys: Sequence[str], lo, hi, step: int) -> list[tuple]:
        return []  # as digest_parts_in_range: no cut across origins

    def rows_with_keys(
        self, t: SourceTable, keys: Sequence[str], kinds: Sequence[str], canon_keys: Sequence[tuple]
    ) -> list[tuple]:
        return [row for r, table in self.parts for row in r.rows_with_keys(table, keys, kinds, canon_keys)]


def union_of(
    table: str, origins: list[tuple[str, str, str, SourceReader]], cutover_table: str
) -> tuple[UnionSource, SourceTable]:
    """The union source of logical table ``table`` from its origins ``(shard, db, table,
    reader of the shard)``, and the table it is verified as (the first origin's definition).
    Raises SourceReadError when the origins differ in columns or a table with moves has no key."""
    parts: list[tuple[SourceReader, SourceTable]] = []
    try:
        for shard, db, name, reader in origins:
            described = reader.describe(db, name)
            if described is None:
                continue  # gone since the catalog listed it
            if parts and described.column_names != parts[0][1].column_names:
                raise SourceReadError(
                    f"the origins of {table} differ in columns ({parts[0][1].name}: {parts[0][1].column_names}; "
                    f"{described.name}: {described.column_names}): run the same DDL on every shard"
                )
            own = reader.sibling()
            parts.append((own, described))
            ranges = owned_ranges(cutover_rows(own, cutover_table, table), shard, table)
            if ranges and not described.primary_key:
                raise SourceReadError(f"{described.name} on shard {shard}: moves of {table} need a primary key")
            own.only = owned_sql(own, described.primary_key[0], ranges) if ranges else None
    except Exception:
        for r, _ in parts:
            r.close()
        raise
    if not parts:
        raise SourceReadError(f"no origin of {table} is in the source")
    return UnionSource(parts), parts[0][1]
