"""Verify's fast path, run: the SQL digests of a window of chunks, on the source and on
each sink, at the same time (``merger.verify.sql_digest`` writes the SQL).

The source's per-row work (text, hash) costs the most, so the window's source digests
run on ``SOURCE_CONNECTIONS`` connections of their own, side by side; each sink computes
the window's digests one after the other on its reader, meanwhile. Each side's query is
one autocommit SELECT. The caller compares the chunks the digests leave unsettled row by
row, with its own connections, after the window's queries have ended.

Narrowing (``merger.verify.narrowing``) runs its cuts and sub-range digests here too. Once
``part_rows`` is set (chunks of the table differ, primary key), the source digests each
chunk in parts of ``part_rows`` rows (one query; the parts' first keys are the cuts) and
each sink, once the source has cut a chunk, digests the same key ranges in one query: the
parts' sums are the chunk digests compared, and a differing chunk is narrowed from them.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from merger.verify.narrowing import parts
from merger.verify.side import SinkSide
from merger.verify.sinks.base import SinkReadError, SinkUnreachable
from merger.verify.source import SourceReader, SourceReadError, SourceTable
from merger.verify.sql_digest import Digest

SOURCE_CONNECTIONS = 2  # concurrent digest queries on the source


class ChunkDigests:
    """Settles chunks by digest: ``settle(window)`` -> {chunk index: {sink: the source's Digest}}."""

    window = 2 * SOURCE_CONNECTIONS  # chunks per settle(): the sinks run ahead of the source

    def __init__(self, source: SourceReader, table: SourceTable, keys: Sequence[str], sides: dict[str, SinkSide]):
        self.table = table
        self.keys = list(keys)
        self.sides = sides
        self.failed: dict[str, str] = {}  # sink -> why its digests stopped (then: row path)
        # (chunk index, sink) -> (source Digest, sink Digest, the source's parts or None) of
        # the last window's differing chunks
        self.differing: dict[tuple[int, str], tuple[Digest, Digest, list | None]] = {}
        # rows per part when the source digests chunks in parts (``parts_of``); None: whole
        self.part_rows: int | None = None
        self._parts: dict[tuple, list[tuple[tuple, Digest]]] = {}
        self._sink_parts: dict[tuple[int, str], list[Digest]] = {}  # (chunk, sink) -> its parts' digests
        self._readers: queue.SimpleQueue[SourceReader] = queue.SimpleQueue()
        self._opened = [source.sibling() for _ in range(SOURCE_CONNECTIONS)]
        for r in self._opened:
            self._readers.put(r)
        self._pool = ThreadPoolExecutor(max_workers=SOURCE_CONNECTIONS + max(1, len(sides)))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for r in self._opened:
            r.close()

    def _source_digest(self, rng: tuple, query: str) -> Digest:
        reader = self._readers.get()
        try:
            step = self.part_rows
            if step is None:
                return reader.digest_in_range(self.table, self.keys, *rng, query)
            parts = reader.digest_parts_in_range(self.table, self.keys, *rng, query, step)
        finally:
            self._readers.put(reader)
        self._parts[(rng, query)] = parts
        return Digest.of(sum(d.rows for _, d in parts), sum(d.total for _, d in parts))

    @staticmethod
    def _sink_digests(side: SinkSide, sink_ranges: list[tuple]) -> list[Digest]:
        return [side.digest_in_range(*r) for r in sink_ranges]

    def settle(
        self, chunks: list[tuple[int, tuple]], sink_ranges: dict[str, list[tuple]]
    ) -> dict[int, dict[str, Digest]]:
        """``chunks``: (index, (lo, hi)) in source bounds; ``sink_ranges``: each sink's
        bounds by index. A failed digest query sends its sink to the row path for the rest
        of the table (``failed`` says why); an unreachable sink raises."""
        live = {n: s for n, s in self.sides.items() if n not in self.failed}
        out: dict[int, dict[str, Digest]] = {i: {} for i, _ in chunks}
        self.differing = {}
        self._parts = {}
        self._sink_parts = {}
        if not live:
            return out
        texts = {_source_query(s) for s in live.values()}  # sinks may share one
        source: dict[tuple[int, str], Future] = {}
        submitted = threading.Event()  # the source's queries are submitted (sinks first: they wait)
        if self.part_rows is None:
            sinks: dict[str, Future] = {
                n: self._pool.submit(self._sink_digests, s, [sink_ranges[n][i] for i, _ in chunks])
                for n, s in live.items()
            }
        else:  # each sink digests the source's parts of a chunk once the source has cut it
            sinks = {
                n: self._pool.submit(self._sink_digests_in_parts, n, s, chunks, sink_ranges[n], source, submitted)
                for n, s in live.items()
            }
        try:
            for i, rng in chunks:
                for t in texts:
                    source[(i, t)] = self._pool.submit(self._source_digest, rng, t)
        finally:
            submitted.set()
        errors: list[BaseException] = []
        for name, side in live.items():
            try:
                theirs = sinks[name].result()
                ours = [source[(i, _source_query(side))].result() for i, _ in chunks]
            except SinkUnreachable as exc:
                errors.append(exc)
                continue
            except (SinkReadError, SourceReadError) as exc:
                self.failed[name] = f"the digest query failed: {exc}"
                continue
            for (i, _), a, b in zip(chunks, ours, theirs):
                if a == b:
                    out[i][name] = a
                else:
                    rng = next(r for j, r in chunks if j == i)
                    pieces = self._parts.get((rng, _source_query(side)))
                    self.differing[(i, name)] = (a, b, pieces, self._sink_parts.get((i, name)))
        for f in [*sinks.values(), *source.values()]:
            f.exception()  # every query of the window has ended before the row path runs
        if errors:
            raise errors[0]
        return out

    def _sink_digests_in_parts(
        self,
        name: str,
        side: SinkSide,
        chunks: list[tuple[int, tuple]],
        ranges: list[tuple],
        source: dict,
        submitted: threading.Event,
    ) -> list[Digest]:
        """A window's sink digests as sums of the digests of the source's parts of each
        chunk (one query per chunk); a chunk the source did not cut, digested whole."""
        text = _source_query(side)
        submitted.wait()
        out = []
        for i, rng in chunks:
            try:
                source[(i, text)].result()
                pieces = self._parts.get((rng, text)) or []
            except (KeyError, SourceReadError, SinkReadError):
                pieces = []
            cuts = [k for k, _ in pieces[1:]]
            if len(pieces) < 2 or len(parts(rng, cuts)) != len(pieces):
                out.append(side.digest_in_range(*ranges[i]))
                continue
            found = self.sink_parts(name, rng, cuts)
            self._sink_parts[(i, name)] = found
            out.append(Digest.of(sum(d.rows for d in found), sum(d.total for d in found)))
        return out

    # ------------------------------------------------------------------ narrowing a chunk

    def measure(self, name: str, ranges: list[tuple]) -> list[tuple[Digest, Digest]]:
        """(source Digest, sink Digest) of each range (source key bounds) for one sink; the
        source's on its connections side by side, the sink's meanwhile. Raises the
        readers' errors once every query has ended."""
        side = self.sides[name]
        text = _source_query(side)
        sink = self._pool.submit(self._sink_digests, side, [sink_range(side, r) for r in ranges])
        source = [self._pool.submit(self._source_digest, r, text) for r in ranges]
        _wait([sink, *source])
        return list(zip([f.result() for f in source], sink.result()))

    def cut(self, name: str, items: list[tuple[tuple, int]], unique: bool) -> list[list[tuple]]:
        """``merger.verify.narrowing``'s ``cut`` for one sink: each (range, step) cut into
        parts of ``step`` source rows, as [(part, source Digest, sink Digest), ...]. With a
        unique key the source's parts and their digests come from one query per range (and
        the sink's from one more); else the cut keys first, then each part's digests."""
        if not unique:
            ranges = [parts(rng, cut) for (rng, _), cut in zip(items, self.cuts(items))]
            digests = iter(self.measure(name, [r for rs in ranges for r in rs]))
            return [[(r, *next(digests)) for r in rs] for rs in ranges]
        text = _source_query(self.sides[name])
        source = [self._pool.submit(self._source_parts, rng, text, step) for rng, step in items]
        out = []
        try:
            for (rng, _), f in zip(items, source):
                pieces = f.result()
                cuts = [k for k, _ in pieces[1:]]
                ranges = parts(rng, cuts)
                if len(pieces) <= 1 or len(ranges) != len(pieces):
                    out.append([(rng, None, None)])  # nothing to cut at
                    continue
                sink = self.sink_parts(name, rng, cuts)  # meanwhile the source's next queries run
                out.append([(r, d, s) for r, (_, d), s in zip(ranges, pieces, sink)])
        finally:
            _wait(source)
        return out

    def _source_parts(self, rng: tuple, text: str, step: int) -> list[tuple[tuple, Digest]]:
        reader = self._readers.get()
        try:
            return reader.digest_parts_in_range(self.table, self.keys, *rng, text, step)
        finally:
            self._readers.put(reader)

    def sink_parts(self, name: str, rng: tuple, cuts: list[tuple]) -> list[Digest]:
        """The sink's digests of the parts of ``rng`` (source bounds) cut at ``cuts``."""
        side = self.sides[name]
        return side.digests_in_parts(*sink_range(side, rng), [side.canon_key(c) for c in cuts])

    def cuts(self, items: list[tuple[tuple, int]]) -> list[list[tuple]]:
        """For each (range, step): the source keys cutting it every ``step`` rows."""
        futures = [self._pool.submit(self._source_cuts, rng, step) for rng, step in items]
        _wait(futures)
        return [f.result() for f in futures]

    def _source_cuts(self, rng: tuple, step: int) -> list[tuple]:
        reader = self._readers.get()
        try:
            return reader.cuts_in_range(self.table, self.keys, *rng, step)
        finally:
            self._readers.put(reader)


def sink_range(side: SinkSide, rng: tuple) -> tuple:
    """A range of source key bounds as the sink's (canonical) bounds; the fast path's sinks
    order keys as the source does (``SinkSide.aligned``), so the range holds the same keys."""
    return tuple(None if b is None else side.canon_key(b) for b in rng)


def _wait(futures: list[Future]) -> None:
    for f in futures:
        f.exception()  # every query has ended before a result (or an error) is used


def _source_query(side: SinkSide) -> str:
    return side.digest_plan.source_row
