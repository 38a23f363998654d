"""Moving a key range between shards without loss or duplication, and the order of one
key's changes across shards (issue 24; docs/sharding.md, sections 3 and 4). Pure: no I/O.

A keyspace is several servers with the same schema and globally unique keys. An operator
moves a key range R from shard A to shard B the usual way, with two control rows that land
in the binlogs (Vitess's journal does the same at its switch):

1. a **begin** row on B (the move's number, R, A, B), then B gets a copy of R's rows and,
   until the switch, every change A makes to them;
2. at the switch, with the writes to R stopped, a **switch** row on A and on B; the writes
   go to B from then on; then A's rows of R are deleted.

What ingest emits (``CutoverFilter``), per shard S and key k, from the last control row
of a move holding k that S's reader has passed: none: S's own key, emitted in generation 0;
a begin (S is the target): not emitted, a copy; a switch where S is the target: emitted,
in the move's generation (its number; numbers are global and increase); a switch where S
is the source: not emitted, the cleanup.

How the merger orders one key's changes (``KeyOrder``): by ``(generation, position)``,
where the position (the binlog position) is compared only between changes of one shard;
one generation has one owner, so two shards in one generation of a key is a conflict the
merger must stop on (keys that are not unique across shards), never a silent overwrite.
No order is made up between different keys of different shards.

Ingest keeps the control rows each shard has passed in the same position record as the
shard's position, so a restart decides every replayed change as before."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal

BEGIN, SWITCH = "begin", "switch"


@dataclass(frozen=True)
class KeyRange:
    """The keys ``low <= key < high`` (None: unbounded on that side)."""

    low: Any = None
    high: Any = None

    def holds(self, key: Any) -> bool:
        return (self.low is None or self.low <= key) and (self.high is None or key < self.high)


@dataclass(frozen=True)
class Move:
    """One move of ``keys`` from shard ``source`` to ``target``; ``number``: its place among
    all moves (1, 2, ...), the generation it starts."""

    number: int
    keys: KeyRange
    source: str
    target: str


class CutoverFilter:
    """Which changes of which shard ingest emits, with their generation (module doc)."""

    def __init__(self, passed: dict[str, list[tuple[Move, str]]] | None = None) -> None:
        """``passed``: per shard, the control rows its reader has passed, in binlog order
        (``(move, BEGIN or SWITCH)``, from the position record)."""
        self.passed: dict[str, list[tuple[Move, str]]] = {s: list(rows) for s, rows in (passed or {}).items()}

    def meet(self, shard: str, move: Move, row: Literal["begin", "switch"]) -> None:
        """``shard``'s reader passed a control row of ``move``."""
        self.passed.setdefault(shard, []).append((move, row))

    def generation(self, shard: str, key: Any) -> int | None:
        """The generation of ``shard``'s change of ``key``; None: not emitted (a copy on
        the target before the switch, or the source's cleanup after it)."""
        for move, row in reversed(self.passed.get(shard, ())):
            if move.keys.holds(key):
                if row == BEGIN:
                    return None
                return move.number if move.target == shard else None
        return 0


class KeyConflict(ValueError):
    """Changes of one key from two shards in one generation: the key is not unique across
    shards (or a move was not declared)."""


class KeyOrder:
    """The last applied change of each key, and whether a new one comes after it."""

    def __init__(self) -> None:
        self.last: dict[Hashable, tuple[int, str, int]] = {}  # key -> (generation, shard, position)

    def newer(self, key: Hashable, generation: int, shard: str, position: int) -> bool:
        """Whether the change comes after the last one applied to ``key`` (and is now the
        last); False: an older or the same change (a replay, or a change of an earlier
        owner read late). Raises KeyConflict for two shards in one generation."""
        seen = self.last.get(key)
        if seen is not None:
            gen, owner, pos = seen
            if generation < gen:
                return False
            if generation == gen:
                if owner != shard:
                    raise KeyConflict(
                        f"key {key!r} changed on shard {owner!r} and on shard {shard!r} in one generation"
                    )
                if position <= pos:
                    return False
        self.last[key] = (generation, shard, position)
        return True
