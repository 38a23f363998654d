"""The position every record carries (epoch, binlog file, event start, row, part) and the
replay rule consumers apply with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache, total_ordering

FILE_SEQ = re.compile(r"\.(\d+)$")
# ``sequence()``'s layout, low bits first: part | pos + row | file number | epoch, in a
# positive int64 (63 bits). Event header positions are 32 bits; binlog file numbers go to
# 999999 (< 2**20); the epoch takes the rest.
PART_BITS = 1
POS_BITS = 32
FILE_BITS = 20
EPOCH_BITS = 63 - FILE_BITS - POS_BITS - PART_BITS  # 10
FILE_SHIFT = PART_BITS + POS_BITS
EPOCH_SHIFT = FILE_SHIFT + FILE_BITS
MAX_EPOCH = (1 << EPOCH_BITS) - 1
MAX_FILE_NUMBER = 999_999  # MariaDB's binlog files are numbered .000001 to .999999 (< 2**FILE_BITS)
POSITION_LIMIT = 1 << POS_BITS  # an event header's position field has 4 bytes (ingest stops at a wrap)


@lru_cache(maxsize=4096)
def file_number(file: str) -> int | None:
    """The binlog file's number (``mariadb-bin.000123``: 123), None without one. Cached:
    every record's position asks, and a batch holds a few files' names."""
    m = FILE_SEQ.search(file)
    return int(m.group(1)) if m else None


@total_ordering
@dataclass(frozen=True)
class EventPosition:
    """binlog file, start of the binlog event, row inside the event, ``part``: 1 for the
    create half of a primary-key change (its delete half is part 0), and ``epoch``: the
    number of changes of source server ingest continued across (a failover), which sorts
    above the binlog coordinates because the new server's are not comparable with the old
    one's. Positions of different shards do not compare (``shard`` sorts first only to
    make sorting total); the sequence leaves the shard out."""

    file: str
    pos: int
    row: int = 0
    part: int = 0
    epoch: int = 0
    shard: str = ""  # the shard whose binlog it is in ("" for a one-server source)

    def key(self) -> tuple[str, int, int, str, int, int, int]:
        number = file_number(self.file)
        return (self.shard, self.epoch, -1 if number is None else number, self.file, self.pos, self.row, self.part)

    def __lt__(self, other: "EventPosition") -> bool:
        return self.key() < other.key()

    def sequence(self) -> int:
        """A positive int64 that orders positions: epoch, then file number, then ``pos +
        row`` (a row index is always smaller than its event's size, so this never reaches
        the next event), then ``part`` (the bit widths above). The merger orders the
        changes of a key by it, across partitions and for snapshot rows (the HIGH
        watermark's sequence). ValueError for a position outside that range (``checked``):
        it never overflows."""
        file_seq = file_number(self.file) or 0
        self._check(file_seq)
        return (self.epoch << EPOCH_SHIFT) | (file_seq << FILE_SHIFT) | ((self.pos + self.row) << PART_BITS) | self.part

    def checked(self) -> "EventPosition":
        """Itself, if it is a position the sequence can order; else ValueError (a garbled
        header, or a binlog file past 4 GiB, whose header positions wrap)."""
        self._check(file_number(self.file) or 0)
        return self

    def _check(self, file_seq: int) -> None:
        if file_seq > MAX_FILE_NUMBER:
            raise ValueError(f"binlog position {self.file}: file number beyond {MAX_FILE_NUMBER}")
        if not 0 <= self.epoch <= MAX_EPOCH:
            raise ValueError(f"position epoch {self.epoch} outside 0..{MAX_EPOCH}")
        if not (self.pos >= 0 and self.row >= 0 and self.pos + self.row < POSITION_LIMIT and self.part in (0, 1)):
            raise ValueError(
                f"binlog position {self.file}:{self.pos}:{self.row}:{self.part} out of range "
                f"(0 <= pos + row < 2^32, part 0 or 1)"
            )

    def encode(self) -> bytes:
        return position_bytes(self.file, self.pos, self.row, self.part, self.epoch, self.shard)

    @classmethod
    def decode(cls, raw: bytes | str) -> "EventPosition":
        """The position a ``cdc.position`` header carries; ValueError if it is not one."""
        text = raw.decode() if isinstance(raw, bytes) else raw
        text, at, shard = text.rpartition("@") if "@" in text else (text, "", "")
        file, sep, rest = text.partition(":")
        try:
            parts = [int(x) for x in rest.split(":")] if sep else []
        except ValueError:
            parts = []
        if not file or not 1 <= len(parts) <= 4 or (at and not shard):
            raise ValueError(f"not a binlog position (file:pos[:row[:part[:epoch]]][@shard]): {text[:100]!r}")
        return cls(file, *parts, shard=shard).checked()


def position_bytes(file: str, pos: int, row: int = 0, part: int = 0, epoch: int = 0, shard: str = "") -> bytes:
    """``EventPosition(file, pos, row, part, epoch, shard).encode()`` without building the
    object (once per record on ingest's hot path): ``file:pos:row``, then ``:part`` when part
    is not 0, then ``:epoch`` when the epoch is not 0 (a header without it is epoch 0), then
    ``@shard`` for a shard's."""
    if epoch:
        text = f"{file}:{pos}:{row}:{part}:{epoch}"
    elif part:
        text = f"{file}:{pos}:{row}:{part}"
    else:
        text = f"{file}:{pos}:{row}"
    return f"{text}@{shard}".encode() if shard else text.encode()


class ReplayFilter:
    """Drops records at or below the highest position already taken from a partition (of
    one shard: the shards of a sharded source write one partition in any interleaving, each
    in its own binlog's order).

    A tombstone carries its delete's position and follows it directly, so an equal
    position is accepted once for a null value after a non-null one."""

    def __init__(self) -> None:
        self.highest: dict[tuple[str, int, str], tuple[EventPosition, bool]] = {}

    def accept(self, topic: str, partition: int, position: EventPosition | None, is_tombstone: bool) -> bool:
        if position is None:
            return True
        tp = (topic, partition, position.shard)
        prev = self.highest.get(tp)
        if prev is not None:
            prev_pos, prev_tomb = prev
            if position < prev_pos:
                return False
            if position == prev_pos and (not is_tombstone or prev_tomb):
                return False
        self.highest[tp] = (position, is_tombstone)
        return True

    def accept_record(self, topic: str, partition: int, position: EventPosition | None, payload: dict | None) -> bool:
        """``accept`` for a parsed record: a tombstone is the record without a payload.
        A rule for another writer's positions overrides it (Debezium's, in the merger)."""
        return self.accept(topic, partition, position, payload is None)
