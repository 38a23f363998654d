"""The key ranges of a batch, for a MERGE's filter on the target table. Pure.

delta-rs prunes the files a MERGE reads by the batch's lowest and highest key only. A batch
that updates old rows and inserts new ones spans the whole table, so every file is read and
joined, and the MERGE costs in proportion to the table (measured: 250 updates of old rows
and 250 inserts into a 1M-row table, 230 ms of CPU a batch with 4 MB files). A filter on the
target naming the few ranges the batch's keys fall in, split at the largest gaps between
them, lets delta-rs skip the files in between (106 ms; 39 ms with 1 MB files).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

MAX_RANGES = 16


def key_ranges(values: pa.Array | pa.ChunkedArray, max_ranges: int = MAX_RANGES) -> list[tuple[int, int]]:
    """At most ``max_ranges`` ``(low, high)`` ranges, ascending and disjoint, that hold
    every (integer, non-null) value; split at the largest gaps, never between consecutive
    integers."""
    v = pc.unique(values)
    v = v.take(pc.sort_indices(v))
    n = len(v)
    if n == 0:
        return []
    if n == 1 or max_ranges <= 1:
        return [(v[0].as_py(), v[n - 1].as_py())]
    # float gaps for ranking only (no overflow); the ranges are made of the values themselves
    gaps = pc.subtract(v.slice(1).cast(pa.float64(), safe=False), v.slice(0, n - 1).cast(pa.float64(), safe=False))
    widest = pc.sort_indices(gaps, sort_keys=[("", "descending")])[: max_ranges - 1].to_pylist()
    cuts = sorted(i for i in widest if gaps[i].as_py() > 1)
    starts = [0, *(c + 1 for c in cuts)]
    ends = [*cuts, n - 1]
    return [(v[s].as_py(), v[e].as_py()) for s, e in zip(starts, ends)]


def range_filter(column: pa.Array | pa.ChunkedArray, target_column: str, max_ranges: int = MAX_RANGES) -> str | None:
    """SQL on ``target_column`` (quoted, with its alias) true for every key of ``column``;
    None for keys other than integers (delta-rs's own min/max pruning then)."""
    if not pa.types.is_integer(column.type) or len(column) == 0 or column.null_count:
        return None
    ranges = key_ranges(column, max_ranges)
    return "(" + " OR ".join(f"({target_column} >= {lo} AND {target_column} <= {hi})" for lo, hi in ranges) + ")"
