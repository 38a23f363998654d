"""The sink versions of one micro-batch's writes: ``base + batch_id * PER_BATCH + n``, where
``n`` counts the batch's writes in the order they are made. A re-run batch makes the same
writes in the same order, so it gets the same versions and every sink skips it (``base``:
``SinkWriter``'s version base of the table). The sink writer holds the batch's counter; the
processor starts a new one with each batch."""

from __future__ import annotations

PER_BATCH = 1_000_000  # sink versions per batch


class BatchVersions:
    def __init__(self, batch_id: int):
        self.batch_id = batch_id
        self.writes = 0  # the batch's writes so far

    def peek(self, base: int) -> int:
        """The version the batch's next write will get (a sink at or above it skips it)."""
        return base + self.batch_id * PER_BATCH + self.writes

    def take(self, base: int) -> int:
        """The version of the batch's next write, counted."""
        version = self.peek(base)
        self.writes += 1
        return version
