"""What the PostgreSQL sink knows of one of its tables (read from PostgreSQL's catalog by
``catalog.Catalog``)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from cdc.quoting import pg_ident
from merger.sinks import types as T
from merger.sinks.base import SinkError, TableId
from merger.sinks.nul import apply_nul_policy


@dataclass
class TableMeta:
    schema: str
    name: str
    keys: list[str]
    columns: dict[str, pa.DataType | None]  # user column -> storage type (None: unknown type)
    tomb: str

    @property
    def qualified(self) -> str:
        return pg_ident(self.schema) + "." + pg_ident(self.name)


def fit_batch(table: TableId, src: pa.Table, m: TableMeta, nul_policy: str) -> tuple[pa.Table, list[str], dict]:
    """A batch for the table: its user columns (each one the table has: an unknown one is
    an error, ``ensure_table`` comes first) and the NUL rule applied to its text. Returns
    the batch, its user columns and the values the NUL rule changed per column."""
    unknown = [c for c in src.column_names if not c.startswith("_cdc_") and c not in m.columns]
    if unknown:
        raise SinkError(
            f"table {table}: column(s) {unknown} not in the sink table; call ensure_table with the new schema first"
        )
    cols = [c for c in src.column_names if c in m.columns]
    src, nul_changed = apply_nul_policy(
        table,
        src,
        m.keys,
        [c for c in cols if m.columns[c] == pa.string()],
        [c for c in cols if T.is_json(m.columns[c])],
        nul_policy,
    )
    return src, cols, nul_changed
