"""What the changelog sink holds of one table (``TableState``), and the table's record on
the control topic (``control_key``, ``TableState.control_value`` / ``from_control``)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import pyarrow as pa

from merger.sinks import types as T
from merger.sinks.base import TableId


@dataclass
class TableState:
    table: TableId
    topic: str
    keys: list[str]
    columns: dict[str, pa.DataType]  # user column -> storage type
    version: int = -1
    partitions: int = 0
    seqs: dict[bytes, int] | None = None  # key bytes -> sequence held (deleted keys included)
    live: set[bytes] = field(default_factory=set)
    bits: dict[str, int] = field(default_factory=dict)  # BIT(n>1) column -> n

    def control_value(self) -> bytes:
        schema = pa.schema(
            [
                pa.field(c, t, metadata={T.BIT_WIDTH: str(self.bits[c]).encode()} if c in self.bits else None)
                for c, t in self.columns.items()
            ]
        )
        return json.dumps(
            {
                "version": self.version,
                "keys": self.keys,
                "topic": self.topic,
                "schema": base64.b64encode(schema.serialize().to_pybytes()).decode(),
            }
        ).encode()

    @classmethod
    def from_control(cls, key: bytes, value: bytes) -> TableState:
        """The state a control record holds (its sequences are not loaded yet)."""
        db, name = json.loads(key)
        d = json.loads(value)
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
        tid = TableId(db, name)
        return cls(
            tid,
            d["topic"],
            d["keys"],
            {f.name: f.type for f in schema},
            version=d["version"],
            bits={f.name: T.bit_width(f) for f in schema if T.bit_width(f)},
        )


def control_key(table: TableId) -> bytes:
    """The key of the table's record on the control topic."""
    return json.dumps([table.database, table.table], ensure_ascii=False).encode()
