"""Key mode ``unique``: a key met from two origins pauses its logical table, never a silent
overwrite (docs/sharding.md, section 4, point 5).

Before a slice of a table's changes is applied, the sink rows of its keys are read from
the first sink that keeps rows (``merger.sinks.base.KeepsRows``: the key columns and
``__cdc_origin``, the origin of each row's last change), and the changes are walked in
apply order against them (``cdc.shard_cutover.owner_conflicts``): a change of a key whose
live row another origin wrote, on a shard the key was not moved away from (the change's
``cdc.moved_from`` header), is a conflict. Snapshot rows are not checked: a window's rows
of keys its shard did not own are dropped before (``cdc.shard_cutover.WindowOwnership``).
"""

from __future__ import annotations

from collections.abc import Sequence

from cdc.config import UNIQUE_NEEDS_ROWS
from cdc.routes import ORIGIN_COLUMN
from cdc.shard_cutover import owner_conflicts, shard_of
from cdc.wire.headers import MOVED_FROM_HEADER, MOVED_TO_HEADER
from merger.batch.records import ChangeEvent, headers_of
from merger.batch.tables import TableRuntime
from merger.errors import BadChange, MergerError
from merger.sinks.base import KeepsRows


class OwnerConflict(BadChange):
    """A key declared unique arrived from two origins: its table pauses here."""


def moved_from(ev: ChangeEvent) -> tuple[str, ...]:
    """The shards a change's key was moved away from (its ``cdc.moved_from`` header)."""
    raw = headers_of(ev.record.get("headers")).get(MOVED_FROM_HEADER)
    if not raw:
        return ()
    text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8")
    return tuple(s for s in text.split(",") if s)


class OwnerCheck:
    """Checks a table's changes against the origins of the sink's rows (module doc)."""

    def __init__(self, sinks: Sequence, read=None):
        """``read(rt, sink, call)``: runs ``call()`` against ``sink`` (the writer's retry
        while the sink is unavailable); None: at once."""
        self.sink = next((s for s in sinks if isinstance(s, KeepsRows)), None)
        if self.sink is None:
            raise MergerError(UNIQUE_NEEDS_ROWS)  # the config refuses it first
        self.read = read or (lambda rt, sink, call: call())

    def _ask(self, rt: TableRuntime, call):
        """``call(sink, table)``'s result, through ``read``."""
        got: list = []
        db, table = rt.name.split(".", 1)
        self.read(rt, self.sink, lambda: got.append(call(self.sink, (db, table))))
        return got[0]

    def held(self, rt: TableRuntime, keys: list[tuple]) -> dict[tuple, str]:
        """Per key, the origin of its live row in the sink (absent: none)."""
        unique = list(dict.fromkeys(keys))
        found = self._ask(rt, lambda sink, table: sink.rows_with_keys(table, rt.keys, unique))
        rows = found.select([*rt.keys, ORIGIN_COLUMN]).to_pylist() if found.num_rows else []
        return {tuple(r[k] for k in rt.keys): r[ORIGIN_COLUMN] for r in rows if r[ORIGIN_COLUMN] is not None}

    def check(self, rt: TableRuntime, version: int, events: list[ChangeEvent], keys: list[tuple], origin_of) -> None:
        """Raises OwnerConflict for the first change of a key from a second origin.
        ``version``: the one the changes will be written with; ``events``/``keys``: the
        data changes in apply order and their keys; ``origin_of(ev)``: a change's origin
        when its row image lacks the column."""
        if not events:
            return
        applied = self._ask(rt, lambda sink, table: sink.applied_version(table))
        if applied is not None and applied >= version:
            return  # a batch run again after a crash: the sink holds these changes, and skips them
        changes = [
            ((ev.image or {}).get(ORIGIN_COLUMN) or origin_of(ev), moved_from(ev), ev.op == "d") for ev in events
        ]
        for ev, key, (origin, _, _) in zip(events, keys, changes):
            target = headers_of(ev.record.get("headers")).get(MOVED_TO_HEADER)
            if target is not None:  # a write on a move's source after its switch (ingest.cutover)
                shown = key[0] if len(key) == 1 else key
                target = target if isinstance(target, str) else bytes(target).decode("utf-8")
                raise OwnerConflict(
                    f"{rt.name}: key {shown!r} was written on {origin} after its move to shard {target} "
                    f"switched: writes to a moved range go to its new shard. Write the key's latest value on "
                    f"{target}, then `cdc snapshot {rt.name}` (the table's later changes are kept until then)"
                )
        found = owner_conflicts(
            self.held(rt, keys), [(key, o, moved, deleted) for key, (o, moved, deleted) in zip(keys, changes)]
        )
        if not found:
            return
        key, held, origin = found[0]
        shown = key[0] if len(key) == 1 else key
        raise OwnerConflict(
            f"{rt.name}: key {shown!r} has a row from {held} and a change from {origin}, and no move of it from "
            f"shard {shard_of(held)} was declared: the keys are not unique across shards (key_mode: unique). Use "
            f"key_mode: origin (the origin joins the key), or declare the move with `cdc shard move`; then `cdc "
            f"snapshot {rt.name}` (the table's later changes are kept until then)"
        )
