"""The append-only change log of a table, as plain Python (no I/O): one row per change,
with its op, the row after it (and before it, in mode ``before_after``), its sequence
and commit time.

Replays: a change at or below the last sequence appended for its key was appended
already (the merger delivers a key's changes in sequence order, and anything else it
delivers is a replay: see ``merger.history.scd2``), so it is dropped. A truncate is one
row of the empty key ``()``, so a replayed truncate is dropped the same way. The sink
keeps the last appended sequence per key (or reads ``max(sequence)`` per key back from
the log); ``appended_rows`` returns it moved forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from merger.history.change import Change

# the columns a change log adds after the user columns, in every sink (docs/history.md)
LOG_OP, LOG_SEQ, LOG_AT, LOG_VERSION = "__op", "__seq", "__at", "__version"
LOG_COLUMNS = (LOG_OP, LOG_SEQ, LOG_AT, LOG_VERSION)

# mode BEFORE_AFTER: the row before the change, one column per user column, named so
BEFORE_PREFIX = "__before_"

BEFORE_AFTER = "before_after"
AFTER = "after"
MODES = (BEFORE_AFTER, AFTER)


@dataclass(frozen=True)
class LogRow:
    key: tuple
    op: str
    sequence: int
    time: Any
    after: Mapping[str, Any] | None
    before: Mapping[str, Any] | None = None  # always None in mode AFTER


@dataclass
class Appended:
    rows: list[LogRow]  # in sequence order
    last: dict[tuple, int]  # the last appended sequence per key, with this batch's


def appended_rows(last: Mapping[tuple, int], changes: Iterable[Change], mode: str = BEFORE_AFTER) -> Appended:
    """The rows a batch of changes appends; ``last``: the last appended sequence of each
    key the batch touches (a key missing has none)."""
    if mode not in MODES:
        raise ValueError(f"change log mode must be one of {', '.join(MODES)}, got {mode!r}")
    moved = dict(last)
    rows = []
    for change in sorted(changes, key=lambda c: c.sequence):  # stable: a repeat in one batch is a replay
        if change.sequence <= moved.get(change.key, -1):  # -1: none yet (a Kafka offset may be 0)
            continue
        moved[change.key] = change.sequence
        before = change.before if mode == BEFORE_AFTER else None
        rows.append(LogRow(change.key, change.op, change.sequence, change.time, change.values, before))
    return Appended(rows, moved)
