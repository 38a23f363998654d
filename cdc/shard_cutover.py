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

How the merger must order one key's changes (the tests' model of it, ``KeyOrder`` in
tests/unit/test_shard_cutover.py): by ``(generation, position)``,
where the position (the binlog position) is compared only between changes of one shard;
one generation has one owner, so two shards in one generation of a key is a conflict the
merger must stop on (keys that are not unique across shards), never a silent overwrite.
No order is made up between different keys of different shards.

Ingest keeps the control rows each shard has passed in the same position record as the
shard's position, so a restart decides every replayed change as before."""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

BEGIN, SWITCH = "begin", "switch"
CUTOVER_TABLE = "cdc_cutover"  # the control rows' table, in the watermark table's database on every shard


# The collations whose order ``compare_keys`` reproduces exactly: code points, PAD SPACE.
# Text bounds of a move are refused on any other (``bounds_refusal``): a case- or
# accent-insensitive collation puts 'B' and 'é' inside ['a', 'm'), Python's order does not.
BINARY_COLLATIONS = frozenset({"utf8mb4_bin", "utf8mb3_bin", "utf8_bin", "ascii_bin"})
INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
TEXT_TYPES = frozenset({"char", "varchar"})


def compare_keys(a: Any, b: Any) -> int:
    """-1, 0 or 1: how the server orders a key column's value against a bound (or two
    bounds). Numbers exactly (int and Decimal, never through a float; a float, the value
    of a FLOAT or DOUBLE column, against the bound as a DOUBLE, as SQL compares them);
    texts as a binary collation (``BINARY_COLLATIONS``) does: by code point, the shorter
    one padded with spaces (PAD SPACE: 'a ' equals 'a', 'a\t' is below it). TypeError for
    a text against a number (the server would compare them as DOUBLEs: refused)."""
    if isinstance(a, str) and isinstance(b, str):
        width = max(len(a), len(b))
        a, b = a.ljust(width), b.ljust(width)
    elif isinstance(a, str) or isinstance(b, str):
        raise TypeError(f"{a!r} and {b!r} do not compare")
    elif isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
    return (a > b) - (a < b)


def exact_bound(value: Any) -> Any:
    """A bound as the ranges hold it: a float (a number of an older JSON reading) becomes
    the Decimal of its shortest text, which is what was written."""
    if isinstance(value, float):
        return Decimal(repr(value))
    return value


def bound_text(value: Any) -> str | None:
    """A bound as the JSON text of ``cdc_cutover.low_key``/``high_key``; a Decimal as the
    JSON number of its exact digits."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    return json.dumps(value)


def bound_of(text: str | None) -> Any:
    """``bound_text``'s inverse: a JSON number with a fraction or exponent is a Decimal,
    exactly as written (never a float)."""
    if text is None:
        return None
    return exact_bound(json.loads(text, parse_float=Decimal))


def bound_to_json(value: Any) -> Any:
    """A bound inside JSON records (the position record, the markers): a Decimal as
    ``{"decimal": text}``; ints and texts as they are."""
    return {"decimal": format(value, "f")} if isinstance(value, Decimal) else value


def bound_from_json(raw: Any) -> Any:
    if isinstance(raw, dict):
        return Decimal(raw["decimal"])
    return exact_bound(raw)


def bounds_refusal(where: str, column: str, data_type: str, collation: str | None, low: Any, high: Any) -> str | None:
    """Why a move's bounds on a key column cannot be ordered alike by ingest and the
    merger (Python) and by the copy, the switch's check and verify (SQL), in one line;
    None: they can. Accepted: integer and DECIMAL keys with numeric bounds (exact), CHAR
    and VARCHAR keys of a binary collation (``BINARY_COLLATIONS``) with text bounds."""
    data_type = data_type.lower()
    given = [b for b in (low, high) if b is not None]
    if data_type in INTEGER_TYPES or data_type == "decimal":
        if any(isinstance(b, bool) or not isinstance(b, (int, Decimal)) for b in given):
            return (
                f"{where}: key column {column} is {data_type.upper()}: give its bounds as numbers "
                f"(--low 1000), not {', '.join(repr(b) for b in given)}"
            )
    elif data_type in TEXT_TYPES:
        if any(not isinstance(b, str) for b in given):
            return (
                f"{where}: key column {column} is {data_type.upper()}: give its bounds as texts (--low eu-7, or "
                f"--low '\"1000\"' for digits), not {', '.join(repr(b) for b in given)}"
            )
        if (collation or "").lower() not in BINARY_COLLATIONS:
            return (
                f"{where}: key column {column} has collation {collation}, whose order ingest and the merger cannot "
                "reproduce (case and accents: 'B' and 'é' are inside ['a', 'm') there): text bounds need a key of "
                f"collation {', '.join(sorted(BINARY_COLLATIONS))} (ALTER TABLE ... MODIFY {column} ... COLLATE "
                "utf8mb4_bin on every shard), or move by an integer or DECIMAL key (docs/sharding.md)"
            )
    else:
        return (
            f"{where}: key column {column} is {data_type.upper()}: a move's range is on an integer, DECIMAL or "
            "binary-collated CHAR/VARCHAR key (docs/sharding.md)"
        )
    if low is not None and high is not None and compare_keys(low, high) >= 0:
        return f"the range is empty: --low {low!r} is not below --high {high!r} on {where} ({collation or data_type})"
    return None


@dataclass(frozen=True)
class KeyRange:
    """The keys ``low <= key < high`` (None: unbounded on that side), in the server's order
    (``compare_keys``)."""

    low: Any = None
    high: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "low", exact_bound(self.low))
        object.__setattr__(self, "high", exact_bound(self.high))

    def holds(self, key: Any) -> bool:
        return (self.low is None or compare_keys(self.low, key) <= 0) and (
            self.high is None or compare_keys(key, self.high) < 0
        )


@dataclass(frozen=True)
class Move:
    """One move of ``keys`` of logical table ``table`` (``db.table``; None: of any table)
    from shard ``source`` to ``target``; ``number``: its place among all moves (1, 2, ...),
    the generation it starts. A key is the value of the table's first key column."""

    number: int
    keys: KeyRange
    source: str
    target: str
    table: str | None = None

    def holds(self, table: str | None, key: Any) -> bool:
        return (self.table is None or table is None or self.table == table) and self.keys.holds(key)

    def to_json(self) -> list:
        low, high = bound_to_json(self.keys.low), bound_to_json(self.keys.high)
        return [self.number, self.table, low, high, self.source, self.target]

    @classmethod
    def from_json(cls, raw: list) -> "Move":
        number, table, low, high, source, target = raw
        return cls(int(number), KeyRange(bound_from_json(low), bound_from_json(high)), str(source), str(target), table)


def passed_to_json(rows: list[tuple[Move, str]]) -> list:
    """A shard's passed control rows as JSON (the position record, the watermark markers)."""
    return [[move.to_json(), row] for move, row in rows]


def passed_from_json(raw: list) -> list[tuple[Move, str]]:
    rows = []
    for move, row in raw:
        if row not in (BEGIN, SWITCH):
            raise ValueError(f"not a control row of a move: {row!r}")
        rows.append((Move.from_json(move), row))
    return rows


class CutoverFilter:
    """Which changes of which shard ingest emits, with their generation (module doc)."""

    def __init__(self, passed: dict[str, list[tuple[Move, str]]] | None = None) -> None:
        """``passed``: per shard, the control rows its reader has passed, in binlog order
        (``(move, BEGIN or SWITCH)``, from the position record)."""
        self.passed: dict[str, list[tuple[Move, str]]] = {s: list(rows) for s, rows in (passed or {}).items()}

    def meet(self, shard: str, move: Move, row: Literal["begin", "switch"]) -> None:
        """``shard``'s reader passed a control row of ``move``."""
        self.passed.setdefault(shard, []).append((move, row))

    def deciding(self, shard: str, key: Any, table: str | None = None) -> tuple[Move, str] | None:
        """The last control row ``shard`` passed of a move holding ``key`` (None: none)."""
        for move, row in reversed(self.passed.get(shard, ())):
            if move.holds(table, key):
                return move, row
        return None

    def generation(self, shard: str, key: Any, table: str | None = None) -> int | None:
        """The generation of ``shard``'s change of ``key`` (of ``table``); None: not emitted
        (a copy on the target before the switch, or the source's cleanup after it)."""
        last = self.deciding(shard, key, table)
        if last is None:
            return 0
        move, row = last
        if row == BEGIN:
            return None
        return move.number if move.target == shard else None

    def switched(self, shard: str, number: int) -> bool:
        """Whether ``shard``'s reader has passed its switch row of move ``number``."""
        return any(m.number == number and r == SWITCH for m, r in self.passed.get(shard, ()))

    def moves_switched(self) -> list[Move]:
        """Every move whose target's reader has passed its switch row."""
        return [m for shard, rows in self.passed.items() for m, r in rows if r == SWITCH and m.target == shard]

    def table_rows(self, shard: str, table: str) -> list[tuple[Move, str]]:
        """``shard``'s passed control rows of moves of ``table``."""
        return [(m, r) for m, r in self.passed.get(shard, ()) if m.table in (None, table)]


def owned_ranges(rows: list[tuple[Move, str]], shard: str, table: str) -> list[tuple[KeyRange, bool]]:
    """``CutoverFilter.generation``'s rule for ``shard`` as key ranges (``cdc verify`` turns
    them into SQL): its control rows of moves of ``table`` (in the order it passed them),
    latest first, each with whether the shard owns its keys there. The first range holding a
    key decides; none: the shard's own key."""
    return [(m.keys, row == SWITCH and m.target == shard) for m, row in reversed(rows) if m.table in (None, table)]


class WindowOwnership:
    """Which rows of a snapshot window on ``shard`` are emitted (key mode ``unique``,
    docs/sharding.md section 4, point 4): those whose key the shard owned both at LOW and
    at HIGH, in one generation (``low``/``high``: the control rows of moves of ``table``
    the shard's reader had passed at each marker). A row read from a copy before its
    switch or from leftovers after it may lag the owner's changes."""

    def __init__(self, shard: str, table: str, low: list[tuple[Move, str]], high: list[tuple[Move, str]]) -> None:
        self.shard, self.table = shard, table
        self.low = CutoverFilter({shard: low})
        self.high = CutoverFilter({shard: high})

    @property
    def moves(self) -> bool:
        """Whether HIGH passed a control row of a move of the table (else every row is kept)."""
        return bool(self.high.table_rows(self.shard, self.table))

    def decide(self, key: Any) -> tuple[bool, str | None]:
        """``(kept, snapshot_on)``: whether the window's row of ``key`` is emitted, and if
        not, the shard whose snapshot must bring the key (None: a copy before its switch,
        whose source's row is read there). The move's target is asked when the shard is
        its source past the switch (the target's windows may have run before it) or when
        the key's generation changed inside the window."""
        at_low = self.low.generation(self.shard, key, self.table)
        at_high = self.high.generation(self.shard, key, self.table)
        if at_high is not None and at_high == at_low:
            return True, None
        last = self.high.deciding(self.shard, key, self.table)
        if last is None or last[1] == BEGIN:
            return False, None  # a copy on the target before its switch: its source's row is read
        return False, last[0].target


def moved_from(switched: list[Move], table: str | None, key: Any, generation: int) -> tuple[str, ...]:
    """The shards ``key`` was moved away from, up to ``generation`` (the sources of the
    switched moves holding it): a live row of the key last written on one of them is not a
    conflict for a change of the key's current owner."""
    return tuple(sorted({m.source for m in switched if m.number <= generation and m.holds(table, key)}))


def shard_of(origin: str) -> str:
    """The shard an origin (``<shard>/<db>.<table>``) names."""
    return origin.partition("/")[0]


def owner_conflicts(
    held: dict[Hashable, str], changes: list[tuple[Hashable, str, tuple[str, ...], bool]]
) -> list[tuple[Hashable, str, str]]:
    """Keys declared unique that arrive from two origins (key mode ``unique``).

    ``held``: per key, the origin of its live row in the sink (absent: no live row);
    ``changes``: a batch's changes in the order they apply, each ``(key, origin,
    moved_from, deleted)``. A change of a key whose live row was last written by another
    origin, on a shard the key was not moved away from, is a conflict: ``(key, that
    origin, this one)``. A key deleted on one shard and written on another without a move
    is not seen (it has no live row left to compare with)."""
    live = dict(held)
    found = []
    for key, origin, moved, deleted in changes:
        prev = live.get(key)
        if prev is not None and prev != origin and shard_of(prev) not in moved:
            found.append((key, prev, origin))
            continue
        if deleted:
            live.pop(key, None)
        else:
            live[key] = origin
    return found
