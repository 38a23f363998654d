"""Diagnostics: the time of each phase of the source's end check, one JSON line per
trigger, to the file named by ``CDC_SOURCE_TIMING_LOG`` (none: nothing is measured)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

TIMING_ENV = "CDC_SOURCE_TIMING_LOG"


class PhaseTimes:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.line: dict = {}
        self.pending: dict = {}

    def note(self, **figures: object) -> None:
        """Figures for the next line (written with its first phase)."""
        if self.path:
            self.pending.update(figures)

    def start(self) -> Callable[..., None]:
        """A function that records the time since the previous call under a phase name."""
        if not self.path:
            return lambda *_a, **_k: None
        self.line = {"at": time.time(), **self.pending}
        self.pending = {}
        last = [time.monotonic()]

        def lap(phase: str, **figures: int) -> None:
            now = time.monotonic()
            self.line[phase] = round(1000 * (now - last[0]), 1)
            self.line.update(figures)
            last[0] = now

        return lap

    def write(self) -> None:
        if not self.path or not self.line:
            return
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(self.line) + "\n")
        except OSError:
            pass
        self.line = {}
