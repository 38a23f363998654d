"""Reading the staged rows of a snapshot window (Parquet files the snapshot runner wrote)
in pieces, for the emission: few, large sink writes, and never more than one piece in
the driver's memory."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cdc.tablespec import TableSpec

EMIT_BATCH_ROWS = 200_000


def staged_files(path: Path) -> list[Path]:
    """The window's Parquet files, in the order their rows are emitted."""
    return sorted(path.glob("*.parquet")) if path.exists() else []


def staged_rows(path: Path) -> int:
    """How many rows a window staged (from the files' metadata)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in path.glob("*.parquet")) if path.exists() else 0


def count_rows(files: list[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def staged_slice(files: list[Path], start: int, count: int):
    """Staged rows [start, start + count), in the files' order, in pieces (see
    ``staged_batches``)."""
    if count <= 0:
        return
    pos = 0
    for batch in staged_batches(files):
        lo, hi = max(start - pos, 0), min(start + count - pos, batch.num_rows)
        pos += batch.num_rows
        if hi > lo:
            yield batch.slice(lo, hi - lo)
        if pos >= start + count:
            return


def staged_batches(files: list[Path]):
    """The staged rows in pieces of about EMIT_BATCH_ROWS (few, large sink writes; the
    driver never holds more than one piece)."""
    pending, count = [], 0
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=EMIT_BATCH_ROWS):
            pending.append(batch)
            count += batch.num_rows
            if count >= EMIT_BATCH_ROWS:
                yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
                pending, count = [], 0
    if count:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def fill_missing(batch: pa.RecordBatch, spec: TableSpec) -> pa.Table:
    """The piece as a table with every column of ``spec`` (a column the read did not
    return is NULL)."""
    t = pa.Table.from_batches([batch])
    for c in spec.columns:
        if c.name not in t.column_names:
            t = t.append_column(c.name, pa.nulls(t.num_rows))
    return t
