"""Differences confirmed at a known position: `cdc verify` while writes flow.

A chunk compared at one instant on the source and a moment later on a sink can differ only
because a change was on its way. So verify treats what its first comparison finds as
candidates, and confirms each candidate key in a *verify window*, the DBLog way:

1. write a LOW watermark row (window id ``verify-<id>``, ``merger.verify.windows``);
2. read the candidate keys' rows from the source (plain SELECT, a fresh autocommit read
   that starts after LOW committed);
3. write a HIGH watermark row;
4. wait until the merger reports that it has read HIGH in every partition of the table's
   topic in a batch whose changes are in the sinks (its status, ``verify_windows``), with
   the position (sequence) L of the LOW marker;
5. read the keys' rows from each sink, with the position of the sink's last change of
   each key (``_cdc_seq`` of its row, or of its tombstone).

Why a key k left after this is a real difference at a known position: if the sink's last
change of k is after L, k changed inside the window and the stream decides its value (k
is checked again in a new window, or counted as changing). Otherwise no change of k lies
between L and HIGH: every change before HIGH is applied (step 4), and applying one would
have set k's position above L (a sink never lowers it). So k's source row did not change
between LOW and the read in step 2, and the sink has applied every change of k before
LOW: it must hold exactly what step 2 read. A truncate after LOW voids the window (the
sink may hold nothing where the source read rows): its keys are checked again.

A difference the first comparison did not see is not found here: the first comparison
is the net. It can only miss a key whose damage a change on its way happened to mask
at that instant; the next run sees it.

``settle`` is the rule, pure; ``Confirmer`` runs the windows through callbacks (the
watermark write and the merger's status), so this module does no I/O of its own.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

from merger.verify.digest import ChunkDiff, encode_row, encode_value
from merger.verify.windows import PREFIX


class NotConfirmed(Exception):
    """The merger did not report the verify window in time (not running, or far behind)."""


@dataclass
class Settled:
    diff: ChunkDiff = field(default_factory=ChunkDiff)  # confirmed differences
    changing: list = field(default_factory=list)  # keys changed inside the window: check again


def settle(
    keys: Sequence[tuple],
    columns: Sequence[str],
    key_pos: Sequence[int],
    source_rows: Sequence[tuple],
    sink_rows: Sequence[tuple],
    sink_positions: dict[bytes, int],
    low: int,
) -> Settled:
    """The candidate ``keys`` (canonical) of one window: those whose sink position is
    above ``low`` are changing; the others compare the source's canonical row (read inside
    the window) with the sink's (read after the merger applied the window)."""
    src = {encode_row(tuple(r[i] for i in key_pos)): r for r in source_rows}
    dst = {encode_row(tuple(r[i] for i in key_pos)): r for r in sink_rows}
    out = Settled()
    for key in dict.fromkeys(map(tuple, keys)):
        ek = encode_row(key)
        if sink_positions.get(ek, -1) > low:
            out.changing.append(key)
            continue
        mine, theirs = src.get(ek), dst.get(ek)
        if mine is None and theirs is None:
            continue
        if theirs is None:
            out.diff.missing.append(key)
        elif mine is None:
            out.diff.extra.append(key)
        else:
            cols = tuple(c for c, a, b in zip(columns, mine, theirs) if encode_value(a) != encode_value(b))
            if cols:
                out.diff.different.append((key, cols))
    return out


@dataclass
class WindowReport:
    low: int
    truncated: bool


class Confirmer:
    """Runs verify windows for one table. ``write_watermark(table, window id, kind)``
    writes a LOW or HIGH row; ``window_status(table, window id)`` returns the merger's
    report of that window (``merger.verify.windows``: ``low``, ``high_partitions``,
    ``truncated``, and the table's ``partitions``) or None."""

    def __init__(
        self,
        write_watermark: Callable[[str, str, str], None],
        window_status: Callable[[str, str], dict | None],
        timeout: float = 60.0,
        poll: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.write_watermark = write_watermark
        self.window_status = window_status
        self.timeout = timeout
        self.poll = poll
        self.sleep = sleep
        self.clock = clock
        self.windows = 0

    def window(self, table: str, read_source: Callable[[], list]) -> tuple[list, WindowReport]:
        """LOW, ``read_source()``, HIGH, then the merger's report once it applied HIGH."""
        wid = PREFIX + uuid.uuid4().hex[:16]
        self.write_watermark(table, wid, "LOW")
        rows = read_source()
        self.write_watermark(table, wid, "HIGH")
        self.windows += 1
        deadline = self.clock() + self.timeout
        while True:
            st = self.window_status(table, wid)
            if st is not None and st.get("partitions") and st.get("high_partitions", 0) >= st["partitions"]:
                return rows, WindowReport(int(st["low"]), bool(st.get("truncated")))
            if self.clock() >= deadline:
                raise NotConfirmed(
                    f"the merger did not apply verify window {wid} of {table} within {self.timeout:.0f}s: is it "
                    "running and caught up (`cdc status`)? differences cannot be confirmed without it"
                )
            self.sleep(self.poll)
