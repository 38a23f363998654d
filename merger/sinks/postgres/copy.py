"""Bulk loading into PostgreSQL: COPY in binary where every column type allows, else CSV text, in pieces."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from pgpq import ArrowToPostgresBinaryEncoder
from psycopg import sql

from merger.sinks import types as T
from merger.sinks.base import OP, SEQ, cast_columns
from merger.sinks.postgres.meta import TableMeta


def orders_keys_as_arrow(types) -> bool:
    """Whether PostgreSQL orders keys of these Arrow types as Arrow does: integers that fit
    a bigint (a key range read by one query then holds the batch's keys, and no other)."""
    return all(pa.types.is_integer(t) and t != pa.uint64() for t in types)


def key_range(keys: list[str]) -> sql.Composed:
    """``(k1, ...) >= (%s, ...) AND (k1, ...) <= (%s, ...)``: the rows between two key
    tuples, given as parameters (least, then greatest)."""
    row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in keys))
    bound = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(keys)))
    return sql.SQL("{} >= {} AND {} <= {}").format(row, bound, row, bound)


class Copier:
    def __init__(self, fast_snapshot: bool = True):
        """``fast_snapshot``: snapshot rows may skip the staging (``insert_snapshot_rows``)."""
        self.fast_snapshot = fast_snapshot

    def copy(self, conn, m: TableMeta, rel, src: pa.Table, cols: list[str], with_op: bool) -> None:
        """COPY the batch's columns (plus the sequence, and the op for the staging table)."""
        storage = {**{c: m.columns[c] for c in cols}, SEQ: pa.int64(), **({OP: pa.string()} if with_op else {})}
        self.copy_table(conn, rel, src, storage)

    def copy_table(self, conn, rel, src: pa.Table, storage: dict[str, pa.DataType | None]) -> None:
        """COPY ``src``'s columns named in ``storage`` (name -> the sink's storage type,
        None: a type this sink did not create, handed over as text) into ``rel``."""
        names = list(storage)
        binary = self.binary(src, storage)
        fmt = sql.SQL("binary" if binary is not None else "csv")
        with conn.cursor() as cur:
            with cur.copy(
                sql.SQL("COPY {} ({}) FROM STDIN (FORMAT {})").format(
                    rel, sql.SQL(", ").join(sql.Identifier(c) for c in names), fmt
                )
            ) as cp:
                if binary is None:
                    for piece in _pieces(src):
                        cp.write(_csv(piece, storage))
                    return
                encoder = ArrowToPostgresBinaryEncoder(binary.schema)
                cp.write(encoder.write_header())
                for piece in _pieces(binary):
                    for batch in piece.to_batches():
                        cp.write(encoder.write_batch(batch))
                cp.write(encoder.finish())

    def binary(self, src: pa.Table, storage: dict[str, pa.DataType | None]) -> pa.Table | None:
        """The columns cast to the sink's storage types, for a binary COPY; None when a
        column's type has no fixed binary form here (then CSV)."""
        for t in storage.values():
            if not (t in _BINARY_COPY_TYPES or (t is not None and pa.types.is_decimal128(t))):
                return None
        # NUL characters are gone already (``nul_policy``, in the writers)
        return cast_columns(src.select(list(storage)), storage)

    def insert_snapshot_rows(self, conn, m: TableMeta, src: pa.Table, cols: list[str], target, tomb) -> bool:
        """Snapshot rows (op ``r`` only) over a key range the target barely holds yet: COPY
        them straight into the target instead of staging + MERGE (measured ~2x faster for
        an initial load). The few rows and tombstones already in the range are read first
        and the sequence rule is applied to them here; more than a few: False (MERGE).
        Integer keys only (at most bigint), where PostgreSQL's order is the batch's order."""
        if not self.fast_snapshot or src.num_rows < FAST_MIN_ROWS:
            return False
        if not orders_keys_as_arrow(src.schema.field(k).type for k in m.keys):
            return False
        if not pc.all(pc.equal(src[OP], "r")).as_py():
            return False
        limit = max(FAST_MIN_ROWS, src.num_rows // 20)
        key = sql.SQL(", ").join(sql.Identifier(k) for k in m.keys)
        lo = [src[k][0].as_py() for k in m.keys]  # src is sorted by key (latest_per_key)
        hi = [src[k][src.num_rows - 1].as_py() for k in m.keys]
        existing = {}
        for rel in (target, tomb):
            found = conn.execute(
                sql.SQL("SELECT {}, {} FROM {} WHERE {} LIMIT {}").format(
                    key, sql.Identifier(SEQ), rel, key_range(m.keys), sql.Literal(limit + 1)
                ),
                lo + hi,
            ).fetchall()
            if len(found) > limit:
                return False
            for r in found:  # target rows and tombstones: the highest sequence per key
                k = tuple(r[:-1])
                existing[k] = max(existing.get(k, r[-1]), r[-1])
        if existing:
            # the sequence rule for the keys the sink holds: newer staged rows replace them
            seqs = src[SEQ].to_pylist()
            keys = list(zip(*[src[k].to_pylist() for k in m.keys]))
            keep = [existing.get(k, -1) < q for k, q in zip(keys, seqs)]
            stale = [k for k, ok in zip(keys, keep) if ok and k in existing]
            src = src.filter(pa.array(keep))
            if stale:
                arrays = sql.SQL(", ").join(sql.SQL("%s::bigint[]") for _ in m.keys)
                for rel in (target, tomb):
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE ({}) IN (SELECT * FROM unnest({}))").format(rel, key, arrays),
                        [list(col) for col in zip(*stale)],
                    )
        if src.num_rows:
            self.copy(conn, m, target, src, cols, with_op=False)
        return True


# storage types whose Arrow form pgpq writes as exactly the column's binary COPY form (jsonb,
# interval, bytea and numerics beyond 38 digits go as CSV)
_BINARY_COPY_TYPES = {
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.bool_(),
    pa.date32(),
    pa.timestamp("us"),
    pa.timestamp("us", tz="UTC"),
}


def _csv(src: pa.Table, storage: dict[str, pa.DataType | None]) -> memoryview:
    arrays = [_pg_text(src[c], t, c) for c, t in storage.items()]
    out = pa.table(arrays, names=[f"c{i}" for i in range(len(arrays))])
    sink = pa.BufferOutputStream()
    pacsv.write_csv(out, sink, pacsv.WriteOptions(include_header=False, batch_size=65536))
    return memoryview(sink.getvalue())


def _pieces(table: pa.Table, rows: int = 32768):
    """The rows in pieces: PostgreSQL parses one piece of the COPY while the next is encoded."""
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


def _pg_text(col: pa.ChunkedArray, storage: pa.DataType | None, name: str) -> pa.ChunkedArray | pa.Array:
    """One column as values PostgreSQL's CSV COPY reads into the column's type."""
    typ = col.type
    if storage is None:  # a column of a type we did not create: hand over text
        return pc.cast(col, pa.string())
    if pa.types.is_duration(storage):
        if pa.types.is_time(typ):
            col = pc.cast(pc.cast(col, pa.time64("us")), pa.int64())
        elif pa.types.is_duration(typ):
            col = pc.cast(pc.cast(col, pa.duration("us")), pa.int64())
        else:
            col = pc.cast(col, pa.int64())
        return pc.binary_join_element_wise(pc.cast(col, pa.string()), "", " microseconds")
    if pa.types.is_binary(storage):
        col = pc.cast(col, pa.binary()) if not pa.types.is_binary(typ) else col
        return pa.array([None if v is None else "\\x" + v.hex() for v in col.to_pylist()], pa.string())
    if T.is_json(storage) or pa.types.is_string(storage):
        if isinstance(typ, pa.BaseExtensionType):
            col = pa.chunked_array([c.storage for c in col.chunks], type=typ.storage_type)
        return pc.cast(col, pa.string())  # without NUL characters (``nul_policy``, in ``LatestWriter.write``)
    return cast_columns(pa.table({name: col}), {name: storage})[name]


# snapshot batches from this size on try the direct COPY (``insert_snapshot_rows``)
FAST_MIN_ROWS = 1000
