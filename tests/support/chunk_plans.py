"""Test-only chunk plans: an even split of an integer key, the tests' quick way to a
contiguous, covering plan (production plans by boundaries the database gives:
``merger.snapshot.chunking.plan_by_boundaries``)."""

from __future__ import annotations

from typing import Any

from merger.snapshot.chunking import KeyRange, ranges_from_boundaries


def plan_numeric(min_key: Any, max_key: Any, row_estimate: int, chunk_size: int) -> list[KeyRange]:
    """Even split of an integer key (or the leading integer column of a composite key).

    ``min_key``/``max_key``: the smallest and largest value (None for an empty table);
    about ``row_estimate / chunk_size`` ranges of equal width, never more than there are
    values. Good for dense keys; correct (contiguous, covering) for any key.
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if not isinstance(row_estimate, int) or isinstance(row_estimate, bool) or row_estimate < 0:
        raise ValueError(f"row_estimate must be a non-negative int, got {row_estimate!r}")
    if min_key is None or max_key is None:
        return [KeyRange(None, None)]
    lo_v, hi_v = (_single_int(k, name) for k, name in ((min_key, "min_key"), (max_key, "max_key")))
    if lo_v > hi_v:
        raise ValueError(f"min_key {lo_v} is above max_key {hi_v}")
    span = hi_v - lo_v + 1
    count = min(max(1, -(-row_estimate // chunk_size)), span)
    step = -(-span // count)
    boundaries = [lo_v + i * step for i in range(1, count) if lo_v + i * step <= hi_v]
    return ranges_from_boundaries(boundaries)


def _single_int(value: Any, name: str) -> int:
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"{name} for numeric planning must have one column, got {value!r}")
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} for numeric planning must be an int, got {value!r}")
    return value
