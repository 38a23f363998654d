"""The position every record carries (binlog file, event start, row, part) and the replay
rule consumers apply with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

FILE_SEQ = re.compile(r"\.(\d+)$")


@total_ordering
@dataclass(frozen=True)
class EventPosition:
    """binlog file, start of the binlog event, row inside the event, and ``part``: 1 for
    the create half of a primary-key change (its delete half is part 0)."""

    file: str
    pos: int
    row: int = 0
    part: int = 0

    def key(self) -> tuple[int, str, int, int, int]:
        m = FILE_SEQ.search(self.file)
        return (int(m.group(1)) if m else -1, self.file, self.pos, self.row, self.part)

    def __lt__(self, other: "EventPosition") -> bool:
        return self.key() < other.key()

    def sequence(self) -> int:
        """A positive int64 that orders positions along the binlog: file number, then
        ``pos + row`` (a row index is always smaller than its event's size, so this never
        reaches the next event), then ``part``. The merger orders the changes of a key by
        it, across partitions and for snapshot rows (the HIGH watermark's sequence)."""
        m = FILE_SEQ.search(self.file)
        file_seq = int(m.group(1)) if m else 0
        return (file_seq << 33) | ((self.pos + self.row) << 1) | (self.part & 1)

    def encode(self) -> bytes:
        return position_bytes(self.file, self.pos, self.row, self.part)

    @classmethod
    def decode(cls, raw: bytes | str) -> "EventPosition":
        text = raw.decode() if isinstance(raw, bytes) else raw
        file, rest = text.split(":", 1)
        parts = [int(x) for x in rest.split(":")]
        return cls(file, *parts)


def position_bytes(file: str, pos: int, row: int = 0, part: int = 0) -> bytes:
    """``EventPosition(file, pos, row, part).encode()`` without building the object (once per
    record on ingest's hot path): ``file:pos:row``, then ``:part`` when part is not 0."""
    if part:
        return f"{file}:{pos}:{row}:{part}".encode()
    return f"{file}:{pos}:{row}".encode()


class ReplayFilter:
    """Drops records at or below the highest position already taken from a partition.

    A tombstone carries its delete's position and follows it directly, so an equal
    position is accepted once for a null value after a non-null one."""

    def __init__(self) -> None:
        self.highest: dict[tuple[str, int], tuple[EventPosition, bool]] = {}

    def accept(self, topic: str, partition: int, position: EventPosition | None, is_tombstone: bool) -> bool:
        if position is None:
            return True
        tp = (topic, partition)
        prev = self.highest.get(tp)
        if prev is not None:
            prev_pos, prev_tomb = prev
            if position < prev_pos:
                return False
            if position == prev_pos and (not is_tombstone or prev_tomb):
                return False
        self.highest[tp] = (position, is_tombstone)
        return True
