"""How far apart the ``cdc_kafka`` source lets micro-batches start (pure: a clock's
readings in, a decision out).

Every micro-batch costs about the same fixed CPU whatever it carries (Spark's planning and
task launch, the Arrow hand-over, a write per sink; measured ~0.25 s of the merger's cores
at 400 changes a batch): under a steady load, batches back to back at the trigger interval
make that cost most of the CPU per change. A batch therefore starts at least ``gap_s`` after
the one before, and the changes that arrive meanwhile go in the next one. A change on a
quiet source is not held: when the last batch started longer than ``gap_s`` ago, the next
trigger starts one at once. A batch the merger asks for (the tick: snapshot rows to emit)
and ``Trigger.AvailableNow`` are never held, nor any batch for ``PROMPT_S`` after the
merger (or `cdc verify`) wrote a watermark: its record is read at once, so a window closes
as fast as without the gap."""

from __future__ import annotations

PROMPT_S = 10.0  # after a watermark write: batches not held for this long


class BatchPacing:
    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s
        self.last_start: float | None = None  # when the source last let a batch start

    def hold(self, now: float, asked: bool = False) -> bool:
        """Whether a batch with new records waits for a later trigger. ``asked``: the
        merger asked for this one (never held)."""
        if asked or self.gap_s <= 0 or self.last_start is None:
            return False
        return now - self.last_start < self.gap_s

    def started(self, now: float) -> None:
        self.last_start = now
