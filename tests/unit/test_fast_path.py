"""merger.verify.fast_path.ChunkDigests: which chunks the digests settle, per sink, and
what a failing digest query does (that sink goes to the row path, saying why; an
unreachable sink stops verify). The readers here are plain stand-ins holding digests;
the real queries are tested in tests/integration/test_verify_digest.py."""

from __future__ import annotations

import threading

import pytest

from merger.verify.fast_path import ChunkDigests
from merger.verify.sinks.base import SinkReadError, SinkUnreachable
from merger.verify.sql_digest import Digest, DigestPlan


class Source:
    def __init__(self, digests: dict):
        self.digests = digests  # (lo, row_sql) -> Digest
        self.threads: set = set()
        self.closed = 0

    def sibling(self):
        return self

    def digest_in_range(self, table, keys, lo, hi, row_sql):
        self.threads.add(threading.get_ident())
        return self.digests[(lo, row_sql)]

    def close(self):
        self.closed += 1


class Side:
    def __init__(self, row_sql: str, digests: dict, fail: Exception | None = None):
        self.digest_plan = DigestPlan(source_row=row_sql, sink_row="x")
        self.digests = digests  # lo -> Digest
        self.fail = fail

    def digest_in_range(self, lo, hi):
        if self.fail is not None and lo == 20:
            raise self.fail
        return self.digests[lo]


def _rows(settled: dict) -> dict:
    """The source rows of each settled chunk per sink (settle returns the source's Digest)."""
    return {i: {n: d.rows for n, d in by_sink.items()} for i, by_sink in settled.items()}


CHUNKS = [(0, (0, 10)), (1, (10, 20)), (2, (20, 30)), (3, (30, None))]
RANGES = [rng for _, rng in CHUNKS]


def test_equal_digests_settle_their_chunks_per_sink():
    src = {(lo, t): Digest(lo + 1, lo * 7) for lo in (0, 10, 20, 30) for t in ("a", "b")}
    same = {lo: Digest(lo + 1, lo * 7) for lo in (0, 10, 20, 30)}
    off = {**same, 10: Digest(11, 71), 30: Digest(30, 210)}  # a changed value, a missing row
    source = Source(src)
    fast = ChunkDigests(source, None, ["id"], {"p": Side("a", same), "d": Side("b", off)})
    try:
        settled = fast.settle(CHUNKS, {"p": RANGES, "d": RANGES})
    finally:
        fast.close()
    assert _rows(settled) == {0: {"p": 1, "d": 1}, 1: {"p": 11}, 2: {"p": 21, "d": 21}, 3: {"p": 31}}
    assert fast.failed == {}
    assert source.closed == 2  # both digest connections closed


def test_a_failing_digest_query_sends_its_sink_to_the_row_path():
    src = {(lo, "a"): Digest(1, lo) for lo in (0, 10, 20, 30)}
    good = {lo: Digest(1, lo) for lo in (0, 10, 20, 30)}
    fast = ChunkDigests(
        Source(src), None, ["id"], {"p": Side("a", good), "d": Side("a", good, SinkReadError("no such function"))}
    )
    try:
        first = fast.settle(CHUNKS[:2], {"p": RANGES, "d": RANGES})
        second = fast.settle(CHUNKS[2:], {"p": RANGES, "d": RANGES})
        third = fast.settle(CHUNKS[2:], {"p": RANGES, "d": RANGES})
    finally:
        fast.close()
    assert _rows(first) == {0: {"p": 1, "d": 1}, 1: {"p": 1, "d": 1}}
    assert _rows(second) == {2: {"p": 1}, 3: {"p": 1}}  # the whole window of "d" is unsettled
    assert "no such function" in fast.failed["d"]
    assert _rows(third) == {2: {"p": 1}, 3: {"p": 1}}  # and it is not asked again


def test_an_unreachable_sink_stops_verify():
    src = {(lo, "a"): Digest(1, lo) for lo in (0, 10, 20, 30)}
    good = {lo: Digest(1, lo) for lo in (0, 10, 20, 30)}
    fast = ChunkDigests(Source(src), None, ["id"], {"d": Side("a", good, SinkUnreachable("gone"))})
    try:
        with pytest.raises(SinkUnreachable):
            fast.settle(CHUNKS, {"d": RANGES})
    finally:
        fast.close()
