"""A sink's table read back, for tests and benches: through the sink's reads part (the
Delta sink's ``reads``, the PostgreSQL and Kafka changelog sinks' ``readback``), which
the sink contract (merger/sinks/base.py) does not hold: the merger never reads a table
whole."""

from __future__ import annotations

import pyarrow as pa


def reads_of(sink):
    """The sink's reads part."""
    for name in ("reads", "readback"):
        part = getattr(sink, name, None)
        if part is not None:
            return part
    raise TypeError(f"{type(sink).__name__} has no reads part (reads or readback)")


def rows(sink, table) -> pa.Table:
    """The table's rows: a latest table's user columns; a history's every row, its own columns included."""
    return reads_of(sink).rows(table)


def count(sink, table) -> int:
    """How many rows ``rows`` would give."""
    return reads_of(sink).count(table)
