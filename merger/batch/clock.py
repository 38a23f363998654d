"""Where the micro-batches stand in time, as the batch records it and the snapshot runner
reads it: whether the first batch restored the saved state, whether a batch runs now, when
the last one finished, whether changes stream in, and which table's ready windows wait for
another batch."""

from __future__ import annotations

import time

# a source counts as busy for this long after a batch with a streamed change
STREAMING_RECENT_S = 5.0


class BatchClock:
    def __init__(self) -> None:
        self.restored = False  # the first batch restored the saved state (paused tables too)
        self.started: float | None = None  # monotonic start of the batch running now, None between batches
        self.finished_at = 0.0  # monotonic end of the last batch
        self.last_change_at = 0.0  # monotonic time of the last batch with a streamed change
        self.emission_pending: str | None = None  # a table with ready windows left after the last batch

    def changes_streaming(self) -> bool:
        """A batch with a streamed change came within the last STREAMING_RECENT_S."""
        return time.monotonic() - self.last_change_at < STREAMING_RECENT_S
