"""How far each partition of a table's topic has been read, in sequences (positional windows).

A positional window (``merger.dblog``, "Watermarks without writes") is ready once every
partition is read through ``HIGH - 1``. The snapshot runner learns where that is in Kafka
offsets (``merger.snapshot.positional``): once ingest has committed through HIGH, each
partition's end then (every record below HIGH lies below it) is a *target*: the partition
is read through ``HIGH - 1`` when the stream's reader has passed that offset. The
processor checks its targets against the offsets the reader has consumed before each
emission. Targets are not saved: after a restart the runner sets them again for the
windows it restored. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReadThroughTarget:
    """``sequence`` is read through in a partition once the reader passed ``ends[p]``."""

    sequence: int
    ends: dict[int, int]
    reached: set[int] = field(default_factory=set)


class ReadThroughTargets:
    """The targets of one table, in the order the runner set them."""

    def __init__(self) -> None:
        self.targets: list[ReadThroughTarget] = []

    def add(self, sequence: int, ends: dict[int, int]) -> None:
        if not isinstance(sequence, int) or not all(isinstance(o, int) and o >= 0 for o in ends.values()):
            raise ValueError(f"a read-through target needs an int sequence and offsets, got {sequence!r}, {ends!r}")
        self.targets.append(ReadThroughTarget(sequence, dict(ends)))

    def passed(self, consumed: dict[int, int]) -> list[tuple[int, int]]:
        """``(partition, sequence)`` newly read through, given the next offset the reader
        will read in each partition (``consumed``; a partition it has not met: nothing of
        it read, unless the target's end is 0). Targets reached in every partition go."""
        out = []
        for target in self.targets:
            for partition, end in target.ends.items():
                if partition not in target.reached and consumed.get(partition, 0) >= end:
                    target.reached.add(partition)
                    out.append((partition, target.sequence))
        self.targets = [t for t in self.targets if len(t.reached) < len(t.ends)]
        return out

    def __len__(self) -> int:
        return len(self.targets)
