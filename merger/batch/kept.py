"""The changes of a paused table, kept on disk in their order until `cdc resume` (or a
new snapshot) instead of being lost: one Parquet file of Kafka records per batch, in
``<state_dir>/paused/<table>/``. The batch applies them again, oldest first, before
anything newer (``merger.batch.pausing.PausedTables.apply_kept_of``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from merger.batch.records import ParsedRecord, header_pairs, parse
from merger.state.store import StateStore, safe_name


def kept_dir(store: StateStore, table: str) -> Path:
    return store.root / "paused" / safe_name(table)


def tables_with_kept(store: StateStore, tables) -> list[str]:
    """Those of ``tables`` (names) that have a directory of kept changes: one listing of
    ``paused/`` per batch instead of a stat per table (500 stats a batch at 500 tables)."""
    try:
        present = {entry.name for entry in os.scandir(store.root / "paused") if entry.is_dir()}
    except FileNotFoundError:
        return []
    return [name for name in tables if safe_name(name) in present] if present else []


def keep(store: StateStore, batch_id: int, table: str, records: list[dict], suffix: str = "") -> None:
    """Keep a batch's records of the table (``suffix``: a file that sorts before the
    batch's own one; written only if there are records)."""
    path = kept_dir(store, table)
    path.mkdir(parents=True, exist_ok=True)
    # headers as the source gives them (a list of key, value), whatever form the batch held them in
    rows = [{**r, "headers": [{"key": k, "value": v} for k, v in header_pairs(r.get("headers"))]} for r in records]
    if rows or not suffix:
        pq.write_table(pa.Table.from_pylist(rows), path / f"batch-{batch_id:012d}{suffix}.parquet")


def kept_batches(path: Path) -> Iterator[tuple[str, list[ParsedRecord]]]:
    """(file name, its records parsed), oldest first."""
    for f in sorted(path.glob("batch-*.parquet")):
        # only accepted non-tombstone records were kept
        yield f.name, [parse(r) for r in pq.read_table(f).to_pylist()]
