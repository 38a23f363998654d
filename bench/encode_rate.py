"""Envelope encoding micro-benchmark: how many rows/s ingest's ``TableEncoder`` turns into
key + value JSON text on one core (a 10-column row, a fresh source block per row).

    .venv/bin/python bench/encode_rate.py [--rows 20000]

It was a timed test once (tests/unit/test_types.py); rates belong here, where a figure is
printed next to the machine it was measured on, not asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from decimal import Decimal

from cdc.tablespec import ColumnSpec, TableSpec
from ingest.envelope import EnvelopeConfig, TableEncoder


def col(name: str, type_name: str, **kw) -> ColumnSpec:
    return ColumnSpec(name=name, type_name=type_name, position=kw.pop("position", 1), **kw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    cols = (
        col("id", "bigint", nullable=False),
        col("name", "varchar", position=2, length=100),
        col("qty", "int", position=3),
        col("price", "decimal", position=4, length=10, scale=2),
        col("created", "datetime", position=5),
        col("updated", "timestamp", position=6, fsp=6),
        col("status", "enum", position=7, enum_values=("new", "paid")),
        col("score", "double", position=8),
        col("note", "text", position=9),
        col("flag", "tinyint", position=10),
    )
    enc = TableEncoder(TableSpec("shop", "orders", cols, ("id",)), EnvelopeConfig("app"))
    row = dict(
        id=1,
        name="Widget deluxe",
        qty=3,
        price=Decimal("19.99"),
        created=dt.datetime(2024, 5, 6, 7, 8, 9),
        updated=dt.datetime(2024, 5, 6, 7, 8, 9, 123456),
        status="paid",
        score=4.25,
        note="fast delivery please",
        flag=1,
    )
    t0 = time.perf_counter()
    for i in range(args.rows):
        row["id"] = i
        src = enc.source_json(1714979289000, 1, "binlog.000001", 4000 + i, 0, "0-1-1")
        for r in enc.change("c", None, row, src):
            r.key.encode(), r.value.encode()
    rate = args.rows / (time.perf_counter() - t0)
    print(f"encode rate: {rate:,.0f} rows/s ({args.rows:,} rows, one core)")


if __name__ == "__main__":
    main()
