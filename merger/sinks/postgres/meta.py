"""What the PostgreSQL sink knows of one of its tables (read from PostgreSQL's catalog by
``catalog.Catalog``)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from cdc.quoting import pg_ident


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
