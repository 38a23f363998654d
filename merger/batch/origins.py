"""The origins of a logical table in the batch: the physical tables its routes gather (on
one server, or one per shard of a sharded source), told apart by the origin column
(``cdc.routes.ORIGIN_COLUMN``). What one origin does alone: a DDL marker of one shard
(the sink tables follow what every origin's definition allows together,
``merger.batch.shard_ddl``), a DROP or RENAME of one physical table, a TRUNCATE that empties
that origin's rows only (``TableRuntime.origin_truncated``)."""

from __future__ import annotations

import logging
from pathlib import Path

from cdc.ddl import ALTERED, spec_from_marker
from cdc.routes import ORIGIN_COLUMN, origin_of
from merger.batch.records import ChangeEvent, payload_of
from merger.batch.shard_ddl import APPLY, CONFLICT
from merger.batch.shard_ddl import decide as decide_shard_ddl
from merger.batch.sink_writer import SinkWriter
from merger.batch.table_ddl import DdlFollower
from merger.batch.tables import TableRuntime
from merger.schema.catalog import SourceCatalog
from merger.sinks.base import TableCut
from merger.snapshot.chunking import window_origin
from merger.sources import SourceKind
from merger.state.store import StateStore

log = logging.getLogger(__name__)


class Origins:
    def __init__(
        self,
        source_kind: SourceKind,
        store: StateStore,
        writer: SinkWriter,
        ddl: DdlFollower,
        catalog: SourceCatalog | None,
        on_drop: str,
        staging_done: list[Path],
    ):
        self.source_kind = source_kind
        self.store = store
        self.writer = writer
        self.ddl = ddl
        self.catalog = catalog
        self.on_drop = on_drop  # truncate | keep: the rows of a dropped origin
        self.staging_done = staging_done  # the batch's: windows dropped, deleted once its state is saved

    def of_record(self, ev: ChangeEvent) -> str:
        """The origin whose physical table a record's ``source`` names."""
        source = (payload_of(ev.record["value"]) or {}).get("source") or {}
        return origin_of(source.get("shard") or None, str(source.get("db") or ""), str(source.get("table") or ""))

    def truncated_by(self, rt: TableRuntime, ev: ChangeEvent) -> str | None:
        """The origin a truncate record empties: its physical table's, when the logical
        table keeps rows of several origins (the origin column); None: the whole table."""
        return self.of_record(ev) if ORIGIN_COLUMN in rt.schema.names else None

    def shard_marker(self, rt: TableRuntime, ev: ChangeEvent) -> bool:
        """A DDL marker of one shard of a sharded source: applied once per shard position,
        the sink tables following what every origin's definition allows together
        (``merger.batch.shard_ddl.decide``). True: the shards disagree, the table is paused here."""
        state = rt.shard_ddl
        source = (payload_of(ev.record["value"]) or {}).get("source") or {}
        shard = str(source.get("shard") or "")
        if ev.order <= state.through.get(shard, 0):
            return False  # the same statement, read from another partition
        spec = spec_from_marker(ev.image)
        if spec is None:  # the table was gone when ingest read its definition: nothing to compare
            state.through[shard] = ev.order
            return False
        origin = origin_of(shard, str(source.get("db") or ""), str(source.get("table") or ""))
        if not state.specs:
            state.specs = dict.fromkeys(self._listed(rt.name), rt.spec)  # every origin as the table is now
        force = state.accepted == [shard, ev.order]  # `cdc resume` took this marker as it is
        verdict = decide_shard_ddl(rt.spec, state.specs, origin, spec, force)
        if verdict.action == CONFLICT:
            state.conflict = [shard, ev.order]
            rt.phase, rt.error = "paused", verdict.reason
            log.error("table %s paused: %s", rt.name, rt.error)
            return True
        state.through[shard] = ev.order
        state.specs[origin] = spec
        if force:
            state.conflict = state.accepted = None
        if verdict.action == APPLY:
            # no order: it is a position of one shard, and the table's cuts compare with every shard's
            self.ddl.apply(rt, ALTERED, verdict.spec, ev.image.get("ddl"), None, self.staging_done)
        return False

    def dropped(self, rt: TableRuntime, ev: ChangeEvent) -> None:
        """A DROP of one physical table of a logical table: that origin's rows are emptied
        (``on_drop: truncate``, older changes of it read late are void) or kept
        (``keep``), its definition is forgotten, and a snapshot of the table under way is
        planned again, from the origins the source has now. Once per statement: the
        marker is in every partition."""
        origin = self.of_record(ev)
        shard = origin.partition("/")[0] if self.source_kind.shards else ""
        if self.source_kind.shards:
            if ev.order <= rt.shard_ddl.through.get(shard, 0):
                return
            rt.shard_ddl.through[shard] = ev.order
            rt.shard_ddl.specs.pop(origin, None)
        else:
            if ev.order <= rt.ddl_through:
                return
            rt.ddl_through = ev.order
        log.info("%s: origin %s dropped (on_drop: %s)", rt.name, origin, self.on_drop)
        if self.on_drop == "truncate":
            self.cut(rt, origin, ev.order)
        plan = self.store.load_plan(rt.name)
        if plan is not None and not plan.get("finished_at") and not plan.get("cancelled"):
            # its chunks of the dropped table would never be read: the snapshot starts again
            self.ddl.drop_windows(rt, self.staging_done)
            self.store.request("snapshot", rt.name, where=None)

    def renamed_in(self, rt: TableRuntime, ev: ChangeEvent) -> bool:
        """A table renamed into the logical table (RENAME TABLE, ALTER ... RENAME TO): one
        more origin, whose rows came without row events. Its definition counts as an
        ALTER's would; then its server's tables are snapshotted again (a shard's; the
        whole logical table on one server). True: the shards disagree, paused here."""
        if self.source_kind.shards:
            shard = self.of_record(ev).partition("/")[0]
            if ev.order <= rt.shard_ddl.through.get(shard, 0):
                return False  # the same statement, read from another partition
            if self.shard_marker(rt, ev):
                return True
        else:
            if ev.order <= rt.ddl_through:
                return False
            rt.ddl_through = ev.order
            spec = spec_from_marker(ev.image)
            if spec is not None:
                self.ddl.apply(rt, ALTERED, spec, ev.image.get("ddl"), ev.order, self.staging_done)
        origin = self.of_record(ev)
        if self.on_drop == "truncate":  # what the name held before (a swap) is void, as at a DROP
            self.cut(rt, origin, ev.order)
        rt.reconciler.empty_windows(lambda w: window_origin(w, rt.name) == origin)
        of_shard = {"shard": origin.partition("/")[0]} if self.source_kind.shards else {}
        self.store.request("snapshot", rt.name, where=None, **of_shard)
        log.info("%s: %s renamed into it: its rows are snapshotted", rt.name, origin)
        return False

    def cut(self, rt: TableRuntime, origin: str, order: int, cut: TableCut | None = None) -> None:
        """Empty one origin's rows in every sink at ``order``: its changes older than that,
        read later from a lagging partition, are void (orders of one origin compare).
        ``cut``: the TRUNCATE's place, for history tables (None: a rename's)."""
        self.writer.truncate_origin(rt, origin, cut)
        rt.origin_truncated[origin] = max(rt.origin_truncated.get(origin, 0), order)

    def _listed(self, name: str) -> list[str]:
        """The origins of a logical table that the source has now (none if it cannot say)."""
        try:
            return [origin_of(o.shard, o.db, o.table) for o in self.catalog.origins(name)] if self.catalog else []
        except Exception as exc:  # noqa: BLE001 - the origins are then learnt from their markers
            log.warning("cannot list the origins of %s: %s", name, exc)
            return []
