"""One change of one key as the history tables take it (pure, no I/O).

The merger's change events carry a ``sequence`` (the binlog position packed into a
positive int64, docs/architecture.md, "Sequences"; on topics Debezium wrote, the Kafka
offset, which starts at 0): it orders every change of a key, is the same in every
partition, and a reconciled snapshot row carries its window's HIGH watermark position.
``time`` is the source commit time the history shows (int microseconds or a datetime:
the history only compares and copies it); the sequence, not the time, is the order, so
two changes in one second keep theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

INSERT, UPDATE, DELETE, SNAPSHOT, TRUNCATE = "c", "u", "d", "r", "t"
UPSERTS = frozenset({INSERT, UPDATE, SNAPSHOT})  # the ops that carry the row after the change
OPS = UPSERTS | {DELETE, TRUNCATE}


@dataclass(frozen=True)
class Change:
    """``values``: the row after the change (every column, keys included), None for a
    delete or truncate. ``before``: the row before it where the event carries one (update,
    delete); only the change log uses it. A truncate has the empty key ``()``."""

    key: tuple
    op: str
    sequence: int
    time: Any
    values: Mapping[str, Any] | None = None
    before: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"change op must be one of {sorted(OPS)}, got {self.op!r}")
        # bool is an int: refuse it, a flag passed as a sequence is a caller's bug
        if not isinstance(self.sequence, int) or isinstance(self.sequence, bool) or self.sequence < 0:
            raise ValueError(f"change sequence must be an int >= 0, got {self.sequence!r}")
        if not isinstance(self.key, tuple):
            raise ValueError(f"change key must be a tuple, got {self.key!r}")
        if self.op == TRUNCATE and self.key != ():
            raise ValueError(f"a truncate has the empty key (), got {self.key!r}")
        if (self.values is None) != (self.op in (DELETE, TRUNCATE)):
            raise ValueError(f"a {self.op!r} change {'must not' if self.values is not None else 'must'} carry values")
