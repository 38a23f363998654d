"""Physical tables into logical ones: ``routes`` and the origin column (pure, no I/O).

A route maps a physical ``db.table`` (a regex, full match, first match wins) to a logical
``db.table``; ``\\1``-style back references take parts of the match. Tables no route
matches keep their names. Ingest writes a physical table's changes to its logical table's
topic; the merger keeps one sink table per logical table.

Two physical tables of one logical table (of several shards, or ``orders_00`` and
``orders_01`` of one server) may hold equal keys. In key mode ``origin`` (the default) the
logical table gets one more column, ``__cdc_origin`` (``<shard>/<db>.<table>``, or
``<db>.<table>`` without shards), which joins the primary key, so those rows never
overwrite each other (Debezium's ``key.enforce.uniqueness``, the ``migration_shard_id`` of
Spanner's migration tool). In key mode ``unique`` the user declares the keys unique across
origins (a Vitess keyspace's case): the column is a plain one, naming the origin of the
row's last change, and the key stays the source's (docs/sharding.md, section 4).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from cdc.tablespec import ColumnSpec, TableSpec

ORIGIN_COLUMN = "__cdc_origin"
ORIGIN_LENGTH = 255  # characters: a shard name (<= 64) and a db.table (<= 2 * 64 + 1)
KEY_MODES = ("origin", "unique")


@dataclass(frozen=True)
class Route:
    match: str  # regex on "db.table", full match
    to: str  # logical "db.table", may use \1 ... of the match

    def logical(self, qualified: str) -> str | None:
        m = re.fullmatch(self.match, qualified)
        return m.expand(self.to) if m else None


def origin_of(shard: str | None, db: str, table: str) -> str:
    """The origin column's value for a physical table of one shard (or of the one server)."""
    return f"{shard}/{db}.{table}" if shard else f"{db}.{table}"


class Routes:
    """Which logical table each physical table belongs to, and whether its rows carry the
    origin column. ``sharded``: the tables come from several servers (every table is then
    one of several origins, routed or not)."""

    def __init__(self, routes: list[Route] | tuple[Route, ...] = (), key_mode: str = "origin", sharded: bool = False):
        if key_mode not in KEY_MODES:
            raise ValueError(f"key_mode must be one of {KEY_MODES}, not {key_mode!r}")
        self.routes = tuple(routes)
        self.key_mode = key_mode
        self.sharded = sharded
        self._cache: dict[tuple[str, str], tuple[str, str] | None] = {}

    def _route(self, db: str, table: str) -> tuple[str, str] | None:
        key = (db, table)
        if key in self._cache:
            return self._cache[key]
        found = None
        qualified = f"{db}.{table}"
        for route in self.routes:
            name = route.logical(qualified)
            if name is not None:
                ldb, _, ltable = name.partition(".")
                if not ldb or not ltable or "." in ltable:
                    raise ValueError(
                        f"route {route.match!r} -> {route.to!r} made {name!r} of {qualified}: not db.table"
                    )
                found = (ldb, ltable)
                break
        self._cache[key] = found
        return found

    def logical(self, db: str, table: str) -> tuple[str, str]:
        """The logical (db, table) of a physical table."""
        return self._route(db, table) or (db, table)

    def routed(self, db: str, table: str) -> bool:
        """Whether the physical table is one of several origins of its logical table."""
        return self.sharded or self._route(db, table) is not None

    def adds_origin(self, db: str, table: str) -> bool:
        """Whether the physical table's rows carry the origin column (in either key mode)."""
        return self.routed(db, table)

    @property
    def origin_in_key(self) -> bool:
        """Key mode ``origin``: the origin column joins the key."""
        return self.key_mode == "origin"

    def logical_spec(self, spec: TableSpec) -> TableSpec:
        """The physical table's definition as its logical table's: renamed, with the origin
        column appended, and in key mode ``origin`` joined to the primary key. A table
        without a primary key keeps none (its chunk keys name the columns)."""
        ldb, ltable = self.logical(spec.db, spec.table)
        if not self.adds_origin(spec.db, spec.table):
            if (ldb, ltable) == (spec.db, spec.table):
                return spec
            return dataclasses.replace(spec, db=ldb, table=ltable)
        if any(c.name == ORIGIN_COLUMN for c in spec.columns):
            raise ValueError(
                f"{spec.db}.{spec.table} has a column named {ORIGIN_COLUMN}, the origin column of a "
                "logical table of several origins: rename it"
            )
        origin = ColumnSpec(
            ORIGIN_COLUMN,
            "varchar",
            position=len(spec.columns) + 1,
            length=ORIGIN_LENGTH,
            charset="utf8mb4",
            nullable=False,
        )
        key = spec.primary_key
        if self.origin_in_key:
            key = (*spec.primary_key, ORIGIN_COLUMN) if spec.primary_key else ()
        return dataclasses.replace(spec, db=ldb, table=ltable, columns=(*spec.columns, origin), primary_key=key)
