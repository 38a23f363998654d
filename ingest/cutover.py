"""Key mode ``unique`` of a sharded source: the emission counter and the cutover of key
ranges moved between shards, shared by the shard readers of one ingest process
(docs/sharding.md, section 4; the pure rules are ``cdc.shard_cutover``).

* **The emission counter** stamps every record (header ``cdc.emitted``); the merger takes
  it as the record's sequence. It rises with each write of the process and is committed
  with the position vector; a restart resumes above the committed value and above the
  clock's microseconds, so a value an aborted transaction used is not given again even
  where a broker shows aborted records.
* **The cutover**: each shard's reader meets the control rows of the moves in the
  ``cdc_cutover`` table (beside the watermark table) at their place in its binlog. The
  filter then says which changes are emitted: not the target's copy before the switch,
  not the source's cleanup after it.
* **The barrier**: the target's reader, at its switch row, waits until the source's
  reader has passed the source's switch row, so every change of a moved key the source
  made is sent (and stamped) before any the target makes after the switch.

What each shard passed goes into its entry of the position vector (``ResumePoint.cutover``),
so a restart decides every replayed change as before.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from cdc.shard_cutover import (
    BEGIN,
    CUTOVER_TABLE,
    SWITCH,
    CutoverFilter,
    KeyRange,
    Move,
    bound_of,
    moved_from,
    passed_from_json,
    passed_to_json,
)
from cdc.wire.headers import MOVED_FROM_HEADER, MOVED_TO_HEADER
from cdc.wire.resume_point import PositionVector
from ingest import metrics
from ingest.errors import IngestError

log = logging.getLogger(__name__)

WAIT_LOG_S = 30.0


class BarrierInterrupted(Exception):
    """A reader waiting at a switch was told to stop or to read again from its entry."""


def clock_us() -> int:
    return time.time_ns() // 1000


class EmissionCounter:
    """Rises with every call, across restarts (module docstring): above the committed value
    and above the clock's microseconds (a restart takes far longer than the counter can run
    ahead of the clock: that would take over a million records a second, sustained)."""

    def __init__(self, committed: int = 0, clock=clock_us) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self.last = max(committed, clock())

    def next(self) -> int:
        with self.lock:
            self.last = max(self.last + 1, self.clock())
            return self.last

    def stamp(self) -> bytes:
        return str(self.next()).encode()


def move_of(row: dict[str, Any], shard: str) -> tuple[Move, str] | None:
    """The move and control row (begin or switch) a ``cdc_cutover`` row holds; None if it
    is not one for ``shard``. IngestError for a row ingest cannot read."""
    kind = str(row.get("kind") or "")
    try:
        low, high = bound_of(row.get("low_key")), bound_of(row.get("high_key"))
        move = Move(int(row["move_id"]), KeyRange(low, high), str(row["source"]), str(row["target"]), row["table_name"])
    except (KeyError, TypeError, ValueError) as exc:
        raise IngestError(
            f"shard {shard}: a row of {CUTOVER_TABLE} that is not a move ({exc}): {row!r}. Write moves with "
            "`cdc shard move` (docs/operations/shards.md)"
        ) from None
    if kind not in (BEGIN, SWITCH):
        raise IngestError(
            f"shard {shard}: {CUTOVER_TABLE} row of move {move.number} has kind {kind!r}, not begin or switch"
        )
    if shard not in (move.source, move.target) or (kind == BEGIN and shard != move.target):
        log.warning(
            "shard %s: %s row of move %d (%s -> %s) ignored: not this shard's",
            shard,
            kind,
            move.number,
            move.source,
            move.target,
        )
        return None
    return move, kind


def describe_move(move: Move) -> str:
    return f"{move.table} keys [{move.keys.low!r}, {move.keys.high!r}) from {move.source} to {move.target}"


class ShardCutover:
    """The counter, the filter and the barrier of one ingest process (module docstring)."""

    def __init__(self, vector: PositionVector, interrupts: dict[str, threading.Event], clock=clock_us) -> None:
        self.counter = EmissionCounter(vector.emitted, clock)
        self.lock = threading.Condition()
        self.filter = CutoverFilter(
            {name: passed_from_json(point.cutover or []) for name, point in vector.shards.items()}
        )
        self.interrupts = interrupts

    def reset(self, shard: str, passed: list | None) -> None:
        """The shard reads again from an entry: what it had passed there."""
        with self.lock:
            self.filter.passed[shard] = passed_from_json(passed or [])
            self.lock.notify_all()

    def passed(self, shard: str) -> list:
        with self.lock:
            return passed_to_json(self.filter.passed.get(shard, []))

    def meet(self, shard: str, move: Move, row: str) -> None:
        """The shard's reader passed a control row (once: a replayed one is met already).
        At its switch of a move it is the target of, it waits for the source's switch."""
        with self.lock:
            self._check_number(shard, move)
            rows = self.filter.passed.get(shard, [])
            if any(m.number == move.number and r == row for m, r in rows):
                return
            if self.blocked(shard, move, row):
                self._wait_for_source(shard, move)
            self.filter.meet(shard, move, row)
            self.lock.notify_all()
        log.info(
            "shard %s passed the %s of move %d (%s of %s -> %s)",
            shard,
            row,
            move.number,
            move.table,
            move.source,
            move.target,
        )

    def _check_number(self, shard: str, move: Move) -> None:
        """A move's number names one move: met again with other content (a number reused
        after rows of ``cdc_cutover`` were deleted, a shard removed, or two begins at
        once), it would be ignored as a replay, or give two moves one generation."""
        for name, rows in self.filter.passed.items():
            for known, _ in rows:
                if known.number == move.number and known != move:
                    raise IngestError(
                        f"shard {shard}: move {move.number} ({describe_move(move)}) reused a number shard {name} "
                        f"passed for another move ({describe_move(known)}): ingest stops rather than ignore it. "
                        f"Delete move {move.number}'s new rows from {CUTOVER_TABLE} on {move.source} and "
                        f"{move.target}, undo its copy, and begin it again with `cdc shard move begin` (numbers go "
                        "above every move the shards hold: keep the rows of cdc_cutover, docs/operations/shards.md)"
                    )

    def blocked(self, shard: str, move: Move, row: str) -> bool:
        """Whether ``shard``'s reader must wait before passing the row: the target's switch
        until the source's reader has passed its own."""
        return row == SWITCH and shard == move.target and not self.filter.switched(move.source, move.number)

    def _wait_for_source(self, shard: str, move: Move) -> None:
        started = logged = time.monotonic()
        interrupt = self.interrupts.get(shard)
        metrics.SHARD_WAITING.labels(shard).set(move.number)
        try:
            while self.blocked(shard, move, SWITCH):
                if interrupt is not None and interrupt.is_set():
                    raise BarrierInterrupted()
                self.lock.wait(0.5)
                if time.monotonic() - logged >= WAIT_LOG_S:
                    logged = time.monotonic()
                    log.warning(
                        "shard %s waits at the switch of move %d for shard %s to reach its own (%.0fs): "
                        "the changes of %s after the switch are held until then",
                        shard,
                        move.number,
                        move.source,
                        logged - started,
                        move.table,
                    )
        finally:
            metrics.SHARD_WAITING.labels(shard).set(0)

    def decide(self, shard: str, table: str, key: Any) -> bytes | None:
        """For a change of ``key`` (its first key column's value) of logical ``table`` read
        on ``shard``: None if it is not emitted, else the ``cdc.moved_from`` header value
        (b"" for a key never moved)."""
        rows = self.filter.passed.get(shard)
        if not rows:
            return b""
        try:
            generation = self.filter.generation(shard, key, table)
        except TypeError:
            raise IngestError(
                f"shard {shard}: a key of {table} ({key!r}) does not compare with the bounds of a move of that "
                "table: a move's bounds are values of the table's first key column"
            ) from None
        if generation is None:
            return None
        if generation == 0:
            return b""
        with self.lock:
            switched = self.filter.moves_switched()
        return ",".join(moved_from(switched, table, key, generation)).encode()

    def headers(self, shard: str, table: str, key: Any, write: bool) -> list[tuple[str, bytes]] | None:
        """What a change of ``key`` read on ``shard`` carries (``decide``); None: not
        emitted. A write (not a delete) on a move's source after its switch is no cleanup
        but a write to the wrong shard: it is emitted with ``cdc.moved_to`` naming the
        move's target, and the merger pauses the table on it, never dropped unseen."""
        moved = self.decide(shard, table, key)
        if moved is None:
            last = self.filter.deciding(shard, key, table) if write else None
            if last is not None and last[1] == SWITCH and last[0].source == shard:
                return [(MOVED_TO_HEADER, last[0].target.encode())]
            return None
        return [(MOVED_FROM_HEADER, moved)] if moved else []

    def marker_cutover(self, shard: str, table: str) -> dict:
        """What a watermark marker of ``table`` read on ``shard`` carries."""
        with self.lock:
            return {
                "passed": passed_to_json(self.filter.table_rows(shard, table)),
                "switched": [m.to_json() for m in self.filter.moves_switched() if m.table in (None, table)],
            }
