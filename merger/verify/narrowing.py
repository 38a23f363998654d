"""Narrowing a chunk whose SQL digests differ: which sub-ranges to digest again, which to
compare row by row. Pure: the queries are the caller's (``cut``).

A chunk whose digests differ used to be read whole, on both sides, and compared row by
row. Instead it is cut, by keys the source picks (every ``step``-th key of the range, so
the parts hold about equal numbers of source rows), into at most ``fanout`` sub-ranges
whose digests both sides compute again in SQL. A sub-range whose digests are equal is
settled; one whose digests differ is cut again, until it holds at most ``leaf_rows`` rows
on both sides (or cannot be cut: one source row, keys all alike, ``max_depth`` reached).
Those leaves are compared row by row, as whole chunks were, so every differing key is
still found and named: a sub-range is settled only by equal digests, which mean equal rows
(``merger.verify.sql_digest``), and the sub-ranges of a range partition it.

Ranges are ``(lo, hi)`` pairs of source key bounds, ``lo`` included, ``hi`` excluded,
``None`` for no bound, as the chunk plan's; digests are anything with ``rows`` and ``==``.
The caller cuts and digests (``cut``): with a unique key, one query per side and range
(the source numbers its rows and digests them in parts, the sink digests the same key
ranges); else the source's cut keys first, then each part's digests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

FANOUT = 16  # sub-ranges per cut
PARTS = 64  # parts a chunk's source digest is computed in, once chunks of the table differ
LEAF_ROWS = 256  # a differing sub-range of at most this many rows on each side: compared by rows
MAX_DEPTH = 6  # cuts of one chunk at most (16**6 sub-ranges: far beyond any chunk size)

Range = tuple  # (lo, hi)


@dataclass
class Narrowed:
    """``settled``: (range, source digest) of the sub-ranges whose digests are equal;
    ``leaves``: the sub-ranges to compare row by row; ``measured``: digest pairs computed."""

    settled: list[tuple[Range, Any]] = field(default_factory=list)
    leaves: list[Range] = field(default_factory=list)
    measured: int = 0


def step_for(rows: int, fanout: int) -> int:
    """The number of source rows between two cuts of a range of ``rows`` rows."""
    if fanout < 2:
        raise ValueError(f"fanout must be at least 2, not {fanout}")
    return max(1, -(-int(rows) // fanout))


def decide(source, sink, leaf_rows: int, depth: int, max_depth: int) -> str:
    """``equal``, ``rows`` (compare this range row by row) or ``split``."""
    if source == sink:
        return "equal"
    if depth >= max_depth or source.rows <= 1 or max(source.rows, sink.rows) <= leaf_rows:
        return "rows"
    return "split"


def parts(rng: Range, bounds: Sequence) -> list[Range]:
    """The sub-ranges of ``rng`` cut at ``bounds`` (source keys in the range, in order);
    a bound equal to the range's start or to the previous bound is dropped (keys that are
    not unique), so no sub-range is empty by construction. One part: ``rng`` itself."""
    lo, hi = rng
    edges = [lo]
    for b in bounds:
        if b is None or b == edges[-1] or b == hi:
            continue
        edges.append(b)
    edges.append(hi)
    return list(zip(edges, edges[1:]))


def narrow(
    roots: Sequence[tuple[Range, Any, Any]],
    cut: Callable[[list[tuple[Range, int]]], list[Sequence[tuple[Range, Any, Any]]]],
    leaf_rows: int = LEAF_ROWS,
    fanout: int = FANOUT,
    max_depth: int = MAX_DEPTH,
) -> Narrowed:
    """Narrow ``roots``: (range, source digest, sink digest) of differing chunks.

    ``cut([(range, step), ...])``: for each range, its parts of about ``step`` source rows
    (cut at source keys, in key order, as ``parts`` does) with their digests: a list of
    (part, source digest, sink digest) that partitions the range; one part (the range
    itself): nothing to cut at. It is called once per level, for every range of the level,
    so the caller can run their queries side by side."""
    if leaf_rows < 1:
        raise ValueError(f"leaf_rows must be at least 1, not {leaf_rows}")
    out = Narrowed()
    level = [(rng, src, dst) for rng, src, dst in roots]
    depth = 0
    while level:
        to_split: list[tuple[Range, int]] = []
        for rng, src, dst in level:
            verdict = decide(src, dst, leaf_rows, depth, max_depth)
            if verdict == "equal":
                out.settled.append((rng, src))
            elif verdict == "rows":
                out.leaves.append(rng)
            else:
                to_split.append((rng, step_for(src.rows, fanout)))
        if not to_split:
            break
        level = []
        for (rng, _), pieces in zip(to_split, cut(to_split)):
            if len(pieces) <= 1:
                out.leaves.append(rng)  # nothing to cut at: compare its rows
            else:
                level += pieces
                out.measured += len(pieces)
        depth += 1
    return out
