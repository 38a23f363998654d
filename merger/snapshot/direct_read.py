"""Snapshot reads of small tables without Spark.

A table whose plan is one chunk covering every key had fewer rows than ``chunk_size``
when it was planned. Reading it through Spark JDBC costs a Spark job (~0.5 s here, most
of a small table's snapshot: a database of 1,000 small tables spent ten minutes in job
overhead). Such a window is read by one streamed SELECT in the driver instead, converted
to the canonical Arrow schema the way ``merger.verify`` reads the source, and staged as
Parquet in row groups of ``batch_rows``: memory stays bounded even if the table grew
since it was planned.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql

from cdc.quoting import quote_ident
from cdc.tablespec import TableSpec
from merger.dblog import decode_key
from merger.schema.canonical import arrow_schema, from_snapshot, snapshot_select


def is_whole_table(chunks: list[dict]) -> bool:
    """One chunk, open at both ends: the plan found fewer rows than one chunk."""
    return len(chunks) == 1 and decode_key(chunks[0]["lo"]) is None and decode_key(chunks[0]["hi"]) is None


def canonical_source_rows(spec: TableSpec, names: list[str], rows) -> pa.Table:
    """Rows of a ``snapshot_select`` query (session time zone UTC) in the canonical schema."""
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    raw = pa.table({n: pa.array(list(col)) if rows else pa.nulls(0) for n, col in zip(names, columns)})
    return from_snapshot(spec, arrow_schema(spec), raw)


def stage_table(
    conn: pymysql.Connection,
    spec: TableSpec,
    where: str | None,
    path: Path,
    batch_rows: int,
    constants: dict[str, str] | None = None,
    params: list | None = None,
) -> int:
    """Every row of the table (matching ``where``) as canonical Parquet under ``path``;
    returns the row count. ``conn`` must be in autocommit mode (the SELECT must start
    after the window's LOW watermark committed). With ``params``, ``where`` holds their
    ``%s`` placeholders (and any other ``%`` doubled): pymysql writes the values."""
    path.mkdir(parents=True, exist_ok=True)
    head = f"SELECT {snapshot_select(spec, constants)} FROM {quote_ident(spec.db)}.{quote_ident(spec.table)}"
    if params:
        head = head.replace("%", "%%")
    sql = f"{head}{' WHERE ' + where if where else ''}"
    rows = 0
    writer = None
    try:
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(sql, params or None)
            names = [d[0] for d in cur.description]
            while True:
                batch = cur.fetchmany(batch_rows)
                if not batch:
                    break
                table = canonical_source_rows(spec, names, batch)
                if writer is None:
                    writer = pq.ParquetWriter(str(path / "part-00000.parquet"), table.schema)
                writer.write_table(table)
                rows += len(batch)
    finally:
        if writer is not None:
            writer.close()
    return rows
