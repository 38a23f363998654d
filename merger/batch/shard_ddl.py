"""DDL that reaches one shard first (docs/sharding.md, section 5): a pure rule, no I/O.

A logical table of a sharded source has several origins (a physical table of one shard,
``<shard>/<db>.<table>``), each with its own definition, changed by its own DDL, at its
own place in its shard's binlog. The merger keeps each origin's last definition (in the
logical form its DDL markers carry: renamed, with the origin column) and each shard's
last DDL position (``ShardDdl``). The sink tables hold what every origin's rows need
together, optimistically (TiDB DM's optimistic mode):

* a column some origins have and others lack is in the logical table, nullable (the rows
  of origins without it carry NULL);
* a column whose types differ is in the logical table with a type that holds both
  (``join``: a wider integer, a longer string, a larger decimal, ...), so a type widened
  on one shard is widened at once;
* a marker that leaves the logical definition as it is changes nothing.

A change the origins disagree on is a **conflict**: a column gone from one origin
(dropped or renamed away) that another still has, a type that no type holds together
with another origin's (``INT`` here, ``VARCHAR`` there), another primary key. ``decide``
then names the table, the shards and the column; the merger pauses the table there.
With ``force`` (the operator's ``cdc resume`` after such a pause) the marker's origin
wins: a column it dropped stays for the origins that have it, its type replaces theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from cdc.routes import ORIGIN_COLUMN
from cdc.tablespec import ColumnSpec, TableSpec

APPLY, NOTHING, CONFLICT = "apply", "nothing", "conflict"

_INT_RANK = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "bigint": 5}
_TEXT_RANK = {"tinytext": 1, "text": 2, "mediumtext": 3, "longtext": 4}
_BLOB_RANK = {"tinyblob": 1, "blob": 2, "mediumblob": 3, "longblob": 4}
_FLOAT_RANK = {"float": 1, "double": 2}
# what else must be equal for two columns of one family to share a type
_SAME = ("unsigned", "charset", "enum_values", "generated", "fsp")


def origin_shard(origin: str) -> str:
    """The shard of an origin (``<shard>/<db>.<table>``)."""
    return origin.split("/", 1)[0]


def _families_join(a: ColumnSpec, b: ColumnSpec) -> ColumnSpec | None:
    ta, tb = a.type_name, b.type_name
    if ta == tb and a.length == b.length and a.scale == b.scale:
        return a
    for ranks in (_INT_RANK, _TEXT_RANK, _BLOB_RANK, _FLOAT_RANK):
        if ta in ranks and tb in ranks:
            wide = a if ranks[ta] >= ranks[tb] else b
            return dataclasses.replace(wide, length=None if ranks is _INT_RANK else wide.length)
    if ta in ("char", "varchar") and tb in ("char", "varchar"):
        if ta == tb or "varchar" in (ta, tb):
            return dataclasses.replace(
                a, type_name="varchar" if ta != tb else ta, length=max(a.length or 0, b.length or 0)
            )
        return None
    if (ta in ("char", "varchar") and tb in _TEXT_RANK) or (tb in ("char", "varchar") and ta in _TEXT_RANK):
        return b if tb in _TEXT_RANK else a
    if ta == tb == "decimal":
        digits = max((a.length or 10) - (a.scale or 0), (b.length or 10) - (b.scale or 0))
        scale = max(a.scale or 0, b.scale or 0)
        if digits + scale > 65:
            return None
        return dataclasses.replace(a, length=digits + scale, scale=scale)
    return None


def join(a: ColumnSpec, b: ColumnSpec) -> ColumnSpec | None:
    """The column whose type holds every value of both (None: no such type). Nullable if
    either is; the other attributes (position, default, comment, ...) are ``a``'s."""
    if any(getattr(a, k) != getattr(b, k) for k in _SAME):
        return None
    joined = _families_join(a, b)
    if joined is None:
        return None
    return dataclasses.replace(
        joined,
        name=a.name,
        position=a.position,
        nullable=a.nullable or b.nullable,
        default=a.default,
        comment=a.comment,
        collation=a.collation,
        zerofill=a.zerofill,
        auto_increment=a.auto_increment,
    )


def _describe(c: ColumnSpec) -> str:
    size = f"({c.length}{',' + str(c.scale) if c.scale is not None else ''})" if c.length else ""
    return f"{c.type_name.upper()}{size}{' UNSIGNED' if c.unsigned else ''}"


@dataclass(frozen=True)
class Verdict:
    action: str  # apply | nothing | conflict
    spec: TableSpec | None = None  # apply: the logical table's new definition
    reason: str = ""  # conflict: what the origins disagree on
    shards: tuple[str, ...] = ()  # conflict: the shards involved, the marker's first


def combine(logical: TableSpec, specs: Mapping[str, TableSpec], prefer: str | None = None) -> TableSpec | None:
    """The definition every origin's rows fit in (None: two origins' types of a column do
    not join, and ``prefer`` does not settle it). Columns keep the order of ``logical``;
    new ones follow in the order the origins list them (``prefer``'s first); the origin
    column stays last. ``prefer``: the origin whose column type wins where types do not join."""
    order = sorted(specs, key=lambda o: o != prefer)
    names = [c.name for c in logical.columns if any(c.name in s.column_names for s in specs.values())]
    for o in order:
        names += [n for n in specs[o].column_names if n not in names]
    if ORIGIN_COLUMN in names:
        names.remove(ORIGIN_COLUMN)
        names.append(ORIGIN_COLUMN)
    columns = []
    for position, name in enumerate(names, 1):
        holders = [specs[o].column(name) for o in order if name in specs[o].column_names]
        col = holders[0]
        for other in holders[1:]:
            joined = join(col, other)
            if joined is None:
                if prefer is None:
                    return None
                joined = col  # the preferred origin's (first) type wins
            col = joined
        if len(holders) < len(specs):
            col = dataclasses.replace(col, nullable=True)
        columns.append(dataclasses.replace(col, position=position))
    first = specs[order[0]]
    return dataclasses.replace(logical, columns=tuple(columns), primary_key=first.primary_key)


def decide(
    logical: TableSpec, specs: Mapping[str, TableSpec], origin: str, new: TableSpec, force: bool = False
) -> Verdict:
    """A DDL marker of ``origin`` (its definition now: ``new``) met while the logical table
    is ``logical`` and the origins' last definitions are ``specs`` (an origin not in it:
    one the merger knows nothing of yet, e.g. just created)."""
    old = specs.get(origin)
    others = {o: s for o, s in specs.items() if o != origin}
    table = f"{logical.db}.{logical.table}"
    if not force:
        for c in old.columns if old is not None else ():
            if c.name in new.column_names:
                continue
            holders = sorted(o for o, s in others.items() if c.name in s.column_names)
            if holders:
                return _conflict(
                    table,
                    origin,
                    holders,
                    f"column {c.name} is gone from {origin} (dropped or renamed), {', '.join(holders)} still "
                    f"{'has' if len(holders) == 1 else 'have'} it",
                )
        for c in new.columns:
            differ = sorted(
                o for o, s in others.items() if c.name in s.column_names and join(c, s.column(c.name)) is None
            )
            if differ:
                theirs = sorted({_describe(specs[o].column(c.name)) for o in differ})
                return _conflict(
                    table,
                    origin,
                    differ,
                    f"column {c.name} is {_describe(c)} on {origin} but {' or '.join(theirs)} on {', '.join(differ)}",
                )
        differ = sorted(o for o, s in others.items() if tuple(s.primary_key) != tuple(new.primary_key))
        if differ:
            return _conflict(
                table,
                origin,
                differ,
                f"primary key ({', '.join(new.primary_key)}) on {origin} differs on {', '.join(differ)}",
            )
    merged = combine(logical, {**others, origin: new}, prefer=origin)
    if merged == logical:
        return Verdict(NOTHING)
    return Verdict(APPLY, merged)


def _conflict(table: str, origin: str, others: list[str], what: str) -> Verdict:
    shards = tuple(dict.fromkeys([origin_shard(origin), *(origin_shard(o) for o in others)]))
    reason = (
        f"{table}: the shards disagree on a schema change ({what}; shards {', '.join(shards)}). The table is "
        f"paused, its changes kept: run the same DDL on every shard, then `cdc resume {table}` (the change of "
        f"{origin_shard(origin)} is then taken as it is), or `cdc snapshot {table}` to read the table again"
    )
    return Verdict(CONFLICT, None, reason, shards)


@dataclass
class ShardDdl:
    """What the merger keeps per logical table of a sharded source (saved with its
    runtime): each origin's last definition, each shard's last DDL position applied (a
    marker comes once per partition; positions compare only within a shard), and the
    marker a conflict paused the table at (``[shard, position]``)."""

    specs: dict[str, TableSpec] = field(default_factory=dict)
    through: dict[str, int] = field(default_factory=dict)
    conflict: list | None = None  # [shard, position] of the marker the table paused at
    accepted: list | None = None  # the same, once `cdc resume` accepted it

    def kept(self) -> bool:
        """Anything to save (a one-server table's is always empty)."""
        return bool(self.specs or self.through or self.conflict or self.accepted)

    def to_dict(self, spec_to_dict) -> dict:
        return {
            "specs": {o: spec_to_dict(s) for o, s in self.specs.items()},
            "through": dict(self.through),
            "conflict": self.conflict,
            "accepted": self.accepted,
        }

    @classmethod
    def from_dict(cls, d: dict | None, spec_from_dict) -> "ShardDdl":
        d = d or {}
        return cls(
            {o: spec_from_dict(s) for o, s in (d.get("specs") or {}).items()},
            {k: int(v) for k, v in (d.get("through") or {}).items()},
            d.get("conflict"),
            d.get("accepted"),
        )
