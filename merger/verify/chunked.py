"""`cdc verify`: compare sink tables with their source in key-range chunks.

Independent of the pipeline it checks: the source is read with plain
``SELECT `col`, ... FROM db.t WHERE <key range>`` queries (``merger.verify.source``), each
sink with its own client in its own types (``merger.verify.sinks``), and both sides pass
through the one canonical form of ``merger.verify.canonical``. Nothing of the snapshot's
SQL projection or of the stream's conversion is used, so a conversion bug they share
shows up as a difference.

Per table: plan key ranges on the source (boundary queries on the key columns); per
chunk read the source rows of the range and each sink's rows of the same range,
canonicalise both, compare their digests (``merger.verify.digest``) and, when they differ,
their keys. Every source query is one autocommit SELECT (no lock, no long transaction);
at most one chunk per side is in memory.

Fast path (``merger.verify.sql_digest``): where the table's column types allow it, each
side first computes the chunk's digest itself, in SQL (MariaDB, PostgreSQL, DataFusion over
Delta). Equal digests settle a chunk; a difference proves nothing until the rows are
compared. A chunk whose digests differ is narrowed (``merger.verify.narrowing``): cut at
keys the source picks into sub-ranges whose digests both sides compute again, the same way,
until the differing sub-ranges are small; only those are read row by row as above (if a
digest or cut query fails, the whole chunk is). The result says how many chunks the digests
settled and how many were narrowed, and why a sink was compared row by row.

The source is live: a chunk that differs is read again, both sides, after
``retry_wait`` seconds, up to ``retries`` times. Only keys that differ in every attempt
are reported; a chunk whose difference goes away is equal (its rows were in flight).

Key order. The source cuts ranges in its collation order (the primary key index); the
sinks read ranges in their order (numbers by value, text by code point). For integer,
decimal, binary and temporal keys both orders agree. For string keys they may not
(``utf8mb4_general_ci`` sorts 'a' before 'B'): then the sink ranges use the same
boundaries sorted in the sinks' order, so they still partition the sink, and a key that
lands in different chunks on the two sides (a "stray") is looked up by exact key on the
other side before it counts as a difference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from merger.verify.canonical import UnsupportedColumn, nul_rule_applies
from merger.verify.consistent import Confirmer, NotConfirmed, settle
from merger.verify.current_versions import CurrentVersions
from merger.verify.digest import ChunkDiff, diff, digest, encode_row, encode_value
from merger.verify.fast_path import ChunkDigests, sink_range
from merger.verify.keys import UnsupportedKey
from merger.verify.narrowing import FANOUT, LEAF_ROWS, PARTS, narrow, parts, step_for
from merger.verify.side import SinkSide
from merger.verify.sinks.base import SinkReadError, SinkUnreachable
from merger.verify.source import SourceReader, SourceReadError, SourceTable

CONFIRM_KEYS = 1000  # candidate keys per verify window


@dataclass
class TableResult:
    table: str
    sink: str
    chunks: int = 0
    source_rows: int = 0
    sink_rows: int = 0
    mismatched_chunks: int = 0
    missing: list = field(default_factory=list)  # keys (bounded by the limit)
    extra: list = field(default_factory=list)
    different: list = field(default_factory=list)  # (key, columns)
    unlisted: int = 0  # differing keys beyond the limit
    in_flight_chunks: int = 0  # differed at first, settled on re-check
    digest_chunks: int = 0  # settled by the SQL digests alone (no row read)
    narrowed_chunks: int = 0  # digests differed: narrowed by sub-range digests to the rows compared
    row_path: str | None = None  # why the chunks were compared row by row, if they were
    error: str | None = None
    note: str | None = None
    skipped: bool = False
    nul_policy: str | None = None  # the sink's NUL rule, where it changes values (PostgreSQL strip/replace)
    nul_values_changed: int = 0  # source values compared that hold a NUL the rule changed
    key_kinds: list = field(default_factory=list)  # the canonical kinds of the key columns (repair reads them)
    confirmed_at: int | None = None  # position-consistent: the LOW position of the last verify window
    changing: int = 0  # position-consistent: candidate keys that changed in every window (not checked)
    history_faults: list = field(default_factory=list)  # an SCD type 2 table's shape (history_shape.ShapeFault)

    @property
    def nul_note(self) -> str | None:
        """The values the sink holds changed by its documented NUL rule (equal by that rule)."""
        if not self.nul_values_changed:
            return None
        lead = "equal except" if self.verdict == "equal" else "besides the differences,"
        return (
            f"{lead} {self.nul_values_changed} values changed by the NUL policy (nul_policy: {self.nul_policy}; "
            "docs/values.md)"
        )

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.error:
            return "error"
        if self.mismatched_chunks or self.note or self.history_faults:
            return "different"
        return "equal"

    def to_json(self) -> dict:
        return {
            "table": self.table,
            "sink": self.sink,
            "verdict": self.verdict,
            "chunks": self.chunks,
            "source_rows": self.source_rows,
            "sink_rows": self.sink_rows,
            "mismatched_chunks": self.mismatched_chunks,
            "in_flight_chunks": self.in_flight_chunks,
            "digest_chunks": self.digest_chunks,
            "narrowed_chunks": self.narrowed_chunks,
            "row_path": self.row_path,
            "missing": [list(k) for k in self.missing],
            "extra": [list(k) for k in self.extra],
            "different": [{"key": list(k), "columns": list(c)} for k, c in self.different],
            "unlisted": self.unlisted,
            "error": self.error,
            "note": self.note,
            "nul_policy": self.nul_policy,
            "nul_values_changed": self.nul_values_changed,
            "nul_note": self.nul_note,
            "confirmed_at": self.confirmed_at,
            "changing": self.changing,
            "history_faults": [f.to_json() for f in self.history_faults],
        }


class TableVerifier:
    """Verify one source table against some sinks (readers of ``merger.verify.sinks``)."""

    def __init__(
        self,
        source: SourceReader,
        table: SourceTable,
        keys: Sequence[str],
        sinks: dict[str, Any],
        chunk_size: int,
        retries: int = 3,
        retry_wait: float = 2.0,
        limit: int = 20,
        sleep: Callable[[float], None] = time.sleep,
        on_progress: Callable[[str, int, int, int], None] | None = None,
        digests: bool = True,
        target: tuple[str, str] | None = None,
        fixed: tuple[str, str] | None = None,
        leaf_rows: int = LEAF_ROWS,
        fanout: int = FANOUT,
        confirm: Confirmer | None = None,
    ):
        self.source = source
        self.table = table
        self.name = table.name
        self.target = target or (table.db, table.table)  # the sink table (a sharded source's logical table)
        self.fixed = fixed  # (column, value) the sink rows compared hold: one origin's rows
        self.keys = list(keys)
        self.sinks = sinks
        self.chunk_size = chunk_size
        self.retries = retries
        self.retry_wait = retry_wait
        self.limit = limit
        self.sleep = sleep
        self.on_progress = on_progress  # (table, chunks done, chunks total, source rows so far)
        self.columns = table.column_names
        self.digests = digests  # False: every chunk row by row (--compare rows)
        self.leaf_rows = leaf_rows  # a differing chunk is narrowed to sub-ranges of about this many rows
        self.fanout = fanout  # sub-ranges per cut
        # a unique key: a part of the source's rows in key order is the range up to the next part's first key
        self.unique = tuple(self.keys) == tuple(table.primary_key)
        # position-consistent (merger.verify.consistent): differing keys are candidates, each
        # confirmed in a verify window instead of re-read after a wait
        self.confirm = confirm
        self._chunk_index = 0
        self._candidates: dict[str, list[tuple[int, ChunkDiff]]] = {}
        self._shown: dict[bytes, tuple] = {}  # a candidate key as a side returned it

    def run(self) -> list[TableResult]:
        results = {name: TableResult(self.name, name) for name in self.sinks}
        sides: dict[str, SinkSide] = {}
        for name, reader in self.sinks.items():
            try:
                cols = reader.columns(*self.target)
                if cols is None:
                    results[name].note = f"the sink has no table {'.'.join(self.target)}"
                elif self.fixed is not None and self.fixed[0] not in cols:
                    results[name].error = f"the sink table {'.'.join(self.target)} has no column {self.fixed[0]}"
                else:
                    sides[name] = SinkSide(reader, self.table, self.keys, cols, self.target, self.fixed)
                    results[name].key_kinds = list(sides[name].kinds)
                    if nul_rule_applies(reader.rules):
                        results[name].nul_policy = reader.rules.nul_policy
            except SinkUnreachable:
                raise
            except (SinkReadError, UnsupportedColumn, UnsupportedKey) as exc:
                results[name].error = str(exc)
        ranges = self.source.plan(self.table, self.keys, self.chunk_size)
        bounds = [hi for _, hi in ranges[:-1]]
        sink_ranges = {name: side.ranges(bounds) for name, side in sides.items()}
        fast = ChunkDigests(self.source, self.table, self.keys, self._fast_sides(sides, results))
        source_rows = 0
        try:
            chunks = list(enumerate(ranges))
            for w in range(0, len(chunks), fast.window):
                window = chunks[w : w + fast.window]
                settled = fast.settle(window, sink_ranges)
                if fast.differing and self.unique and fast.part_rows is None:
                    # chunks differ: the source digests the next chunks in parts, so that
                    # narrowing one need not digest its source rows again
                    fast.part_rows = step_for(self.chunk_size, PARTS)
                for name, why in fast.failed.items():
                    results[name].row_path = why
                for i, rng in window:
                    self._chunk_index = i
                    source_rows += self._settle(results, sides, i, rng, sink_ranges, settled[i], fast)
                    if self.on_progress:
                        self.on_progress(self.name, i + 1, len(ranges), source_rows)
        finally:
            fast.close()
        for name, found in self._candidates.items():
            try:
                self._confirm(sides[name], results[name], found)
            except SinkUnreachable:
                raise
            except (SinkReadError, UnsupportedKey, SourceReadError, NotConfirmed) as exc:
                results[name].error = str(exc)
        for name, side in sides.items():
            if isinstance(side.reader, CurrentVersions) and not results[name].error:
                try:
                    results[name].history_faults = side.reader.shape_faults(*self.target, self.keys, self.fixed)
                except SinkUnreachable:
                    raise
                except SinkReadError as exc:
                    results[name].error = f"checking the history's shape: {exc}"
        return list(results.values())

    def _confirm(self, side: SinkSide, res: TableResult, found: list[tuple[int, ChunkDiff]]) -> None:
        """The candidates of one sink, confirmed in verify windows (``merger.verify.consistent``):
        keys changed inside a window go to the next one, at most ``retries`` more; what is
        left then is counted as changing, not reported."""
        chunks_of: dict[bytes, set[int]] = {}
        for i, diff_ in found:
            for key in diff_.keys():
                chunks_of.setdefault(encode_row(key), set()).add(i)
        remaining = [k for i, d in found for k in d.keys()]
        remaining = list({encode_row(k): k for k in remaining}.values())
        confirmed = ChunkDiff()
        for _ in range(self.retries + 1):
            if not remaining:
                break
            changing = []
            for b in range(0, len(remaining), CONFIRM_KEYS):
                batch = remaining[b : b + CONFIRM_KEYS]
                raw, report = self.confirm.window(
                    self.name, lambda batch=batch: self.source.rows_with_keys(self.table, self.keys, side.kinds, batch)
                )
                res.confirmed_at = report.low
                if report.truncated:
                    changing += batch
                    continue
                held = side.sink_rows(side.rows_with_keys(batch))
                # the positions are read after the rows: any change the rows show, they show
                positions = side.sequences(batch)
                found_now = settle(
                    batch, self.columns, side.key_pos, side.source_rows(raw), held, positions, report.low
                )
                changing += found_now.changing
                confirmed.missing += found_now.diff.missing
                confirmed.extra += found_now.diff.extra
                confirmed.different += found_now.diff.different
            remaining = changing
        res.changing += len(remaining)
        bad = {encode_row(k) for k in confirmed.keys()}
        chunks = {i for i, _ in found}
        wrong = {i for ek in bad for i in chunks_of.get(ek, ())}
        res.mismatched_chunks += len(wrong)
        res.in_flight_chunks += len(chunks - wrong)
        listed = len(res.missing) + len(res.extra) + len(res.different)
        for kind, items in (
            ("missing", confirmed.missing),
            ("extra", confirmed.extra),
            ("different", confirmed.different),
        ):
            for item in items:
                if listed < self.limit:
                    key = item[0] if kind == "different" else item
                    shown = self._shown.get(encode_row(key), key)
                    getattr(res, kind).append((shown, item[1]) if kind == "different" else shown)
                    listed += 1
                else:
                    res.unlisted += 1

    def _settle(
        self, results, sides, i: int, rng: tuple, sink_ranges, settled: dict[str, int], fast: ChunkDigests
    ) -> int:
        """One chunk for every sink: counted when its digests settled it, narrowed when they
        differ (``merger.verify.narrowing``), else compared row by row. Returns the chunk's
        source rows."""
        raw = None  # the source rows, read when a sink needs them
        counted = 0  # the source rows, from the digests
        for name, res in results.items():
            res.chunks += 1
            if res.error:
                continue
            if name in settled:
                res.digest_chunks += 1
                res.source_rows += settled[name].rows
                res.sink_rows += settled[name].rows
                counted = settled[name].rows
                continue
            roots = fast.differing.get((i, name))
            if roots is not None and name not in fast.failed:
                try:
                    if self._narrow(fast, name, sides[name], res, rng, *roots):
                        counted = roots[0].rows
                        continue
                except SinkUnreachable:
                    raise
                except (SinkReadError, UnsupportedKey) as exc:
                    res.error = str(exc)
                    continue
            if raw is None:
                raw = self.source.rows_in_range(self.table, self.keys, *rng)
            if name not in sides:
                res.source_rows += len(raw)
                res.mismatched_chunks += 1 if raw else 0
                continue
            try:
                status = self._chunk(sides[name], res, rng, sink_ranges[name][i], raw)
            except SinkUnreachable:
                raise
            except (SinkReadError, UnsupportedKey) as exc:
                res.error = str(exc)
                continue
            res.mismatched_chunks += status == "different"
            res.in_flight_chunks += status == "in flight"
        return len(raw) if raw is not None else counted

    def _narrow(
        self, fast: ChunkDigests, name: str, side: SinkSide, res: TableResult, rng: tuple, src, dst, pieces, sink
    ) -> bool:
        """A chunk whose digests differ, narrowed by sub-range digests down to the sub-ranges
        compared row by row; ``pieces``: the source's (first key, digest) of its parts, and
        ``sink``: the sink's digests of them, if they were computed with the chunk's. False
        when a digest or cut query failed (the caller then compares the whole chunk row by
        row)."""
        try:
            roots = [(rng, src, dst)]
            if pieces and len(pieces) > 1 and self.unique:
                cuts = [k for k, _ in pieces[1:]]
                ranges = parts(rng, cuts)
                if len(ranges) == len(pieces):
                    sink = sink if sink is not None and len(sink) == len(pieces) else fast.sink_parts(name, rng, cuts)
                    roots = [(r, d, s) for r, (_, d), s in zip(ranges, pieces, sink)]
            found = narrow(
                roots,
                cut=lambda items: fast.cut(name, items, self.unique),
                leaf_rows=self.leaf_rows,
                fanout=self.fanout,
            )
        except SinkUnreachable:
            raise
        except (SinkReadError, SourceReadError):
            return False
        res.narrowed_chunks += 1 if found.measured or len(roots) > 1 else 0  # a small chunk: straight to rows
        for _, d in found.settled:
            res.source_rows += d.rows
            res.sink_rows += d.rows
        statuses = set()
        for sub in found.leaves:
            raw = self.source.rows_in_range(self.table, self.keys, *sub)
            statuses.add(self._chunk(side, res, sub, sink_range(side, sub), raw))
        if "different" in statuses:
            res.mismatched_chunks += 1
        elif "candidate" not in statuses:  # (candidates are counted once confirmed)
            res.in_flight_chunks += 1  # the chunk's digests differed; none of its parts does now
        return True

    def _fast_sides(self, sides: dict[str, SinkSide], results: dict[str, TableResult]) -> dict[str, SinkSide]:
        """The sinks whose chunks are compared by SQL digests first; the others say why not."""
        fast = {}
        for name, side in sides.items():
            if not self.digests:
                results[name].row_path = "row comparison asked for (--compare rows)"
            elif not side.aligned:
                results[name].row_path = "the key's order differs between the source and the sink"
            elif not side.digest_plan.usable:
                results[name].row_path = side.digest_plan.reason
            else:
                fast[name] = side
        return fast

    def _chunk(self, side: SinkSide, res: TableResult, rng: tuple, srng: tuple, raw: list[tuple]) -> str:
        """Compare one range row by row (again after ``retry_wait`` while it differs) and
        list its differing keys: ``equal``, ``in flight`` (differed, then settled) or
        ``different``."""
        if self.confirm is not None:
            src = side.source_rows(raw)
            dst_raw = side.rows_in_range(*srng)
            dst = side.sink_rows(dst_raw)
            found = self._compare(side, src, dst)
            res.source_rows += len(src)
            res.sink_rows += len(dst)
            res.nul_values_changed += side.nul_changes(raw)
            if found.empty:
                return "equal"
            for rows, canon in ((dst_raw, dst), (raw, src)):  # the source's spelling wins
                for r, c in zip(rows, canon):
                    self._shown[encode_row(tuple(c[i] for i in side.key_pos))] = tuple(r[i] for i in side.key_pos)
            self._candidates.setdefault(res.sink, []).append((self._chunk_index, found))
            return "candidate"
        persistent: set | None = None
        status = "equal"
        shown: dict[bytes, tuple] = {}  # key encoding -> the key as a side returned it
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(self.retry_wait)
                raw = self.source.rows_in_range(self.table, self.keys, *rng)
            src = side.source_rows(raw)
            dst_raw = side.rows_in_range(*srng)
            dst = side.sink_rows(dst_raw)
            found = self._compare(side, src, dst)
            if found.empty:
                if attempt:
                    status = "in flight"
                break
            for rows, canon in ((dst_raw, dst), (raw, src)):  # the source's spelling wins
                for r, c in zip(rows, canon):
                    shown[encode_row(tuple(c[i] for i in side.key_pos))] = tuple(r[i] for i in side.key_pos)
            keys = {encode_row(k) for k in found.keys()}
            persistent = keys if persistent is None else persistent & keys
            if not persistent:
                status = "in flight"  # every difference so far went away: rows in flight
                found = ChunkDiff()
                break
        res.source_rows += len(src)
        res.sink_rows += len(dst)
        res.nul_values_changed += side.nul_changes(raw)  # counted on the source rows compared last
        if found.empty:
            return status
        listed = len(res.missing) + len(res.extra) + len(res.different)
        for kind, items in (("missing", found.missing), ("extra", found.extra), ("different", found.different)):
            for item in items:
                key = item[0] if kind == "different" else item
                ek = encode_row(key)
                if ek not in persistent:
                    continue
                if listed < self.limit:
                    display = shown.get(ek, key)
                    getattr(res, kind).append((display, item[1]) if kind == "different" else display)
                    listed += 1
                else:
                    res.unlisted += 1
        return "different"

    def _compare(self, side: SinkSide, src: list[tuple], dst: list[tuple]) -> ChunkDiff:
        if digest(src) == digest(dst):
            return ChunkDiff()
        found = diff(self.columns, self.keys, src, dst)
        if side.aligned:
            return found
        return self._resolve_strays(side, found, src)

    def _resolve_strays(self, side: SinkSide, found: ChunkDiff, src: list[tuple]) -> ChunkDiff:
        """Keys on one side only may sit in another chunk on the other side (see the
        module note): look them up by exact key there."""
        out = ChunkDiff(different=list(found.different))
        pos = side.key_pos
        if found.missing:
            src_by_key = {encode_row(tuple(r[i] for i in pos)): r for r in src}
            held = {encode_row(tuple(r[i] for i in pos)): r for r in side.sink_rows(side.rows_with_keys(found.missing))}
            for key in found.missing:
                ek = encode_row(key)
                other = held.get(ek)
                if other is None:
                    out.missing.append(key)
                    continue
                cols = tuple(
                    c for c, a, b in zip(self.columns, src_by_key[ek], other) if encode_value(a) != encode_value(b)
                )
                if cols:
                    out.different.append((key, cols))
        if found.extra:
            # a key the source holds in another chunk is compared by that chunk
            try:
                raw = self.source.rows_with_keys(self.table, self.keys, side.kinds, found.extra)
            except UnsupportedKey:
                raw = []
            held_keys = {encode_row(tuple(r[i] for i in pos)) for r in side.source_rows(raw)}
            out.extra = [k for k in found.extra if encode_row(k) not in held_keys]
        return out


# ------------------------------------------------------------------ tables of a config


def merger_tables(
    all_tables: Sequence[str], include: Sequence[str], exclude: Sequence[str], watermark_table: str
) -> list[str]:
    """The tables the merger handles: as ``merger.app`` decides (full-match regexes)."""
    import re

    inc = [re.compile(p) for p in include]
    exc = [re.compile(p) for p in exclude]
    out = []
    for name in all_tables:
        if name == watermark_table:
            continue
        if inc and not any(p.fullmatch(name) for p in inc):
            continue
        if any(p.fullmatch(name) for p in exc):
            continue
        out.append(name)
    return sorted(out)
