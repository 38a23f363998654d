"""Emission of the ready snapshot windows, in one batch: which windows (and which slice of
a large one) the batch emits, decided once and written down first so a re-run of the
batch emits exactly the same; then each window's staged rows through the DBLog rule
(``merger.dblog.emitted_rows``) to the sinks, and the snapshot plan's progress."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa

from cdc.shard_cutover import WindowOwnership, passed_from_json, shard_of
from merger import crashpoints
from merger.batch.sink_writer import SinkWriter
from merger.batch.staging import count_rows, fill_missing, staged_files, staged_rows, staged_slice
from merger.batch.tables import TableRegistry, TableRuntime
from merger.dblog import Window, emitted_rows, swept_keys, window_survives
from merger.history.modes import BEFORE_IMAGE, COMMIT_US, before_column
from merger.schema.canonical import from_snapshot
from merger.sinks.base import TableFault
from merger.snapshot.chunking import window_origin
from merger.snapshot.repair import asked_table, chunk_keys, deletes_table, is_key_list
from merger.state.store import StateStore

log = logging.getLogger(__name__)


def window_ownership(window: Window, table: str) -> WindowOwnership | None:
    """Which rows of a window its shard owned (key mode unique: both its markers carry the
    moves passed there); None: every row is the shard's (markers without ``cutover``)."""
    low, high = window.cutover.get("LOW"), window.cutover.get("HIGH")
    origin = window_origin(window, table)
    if low is None or high is None or origin is None:
        return None
    return WindowOwnership(
        shard_of(origin), table, passed_from_json(low.get("passed", [])), passed_from_json(high.get("passed", []))
    )


class WindowEmitter:
    def __init__(self, store: StateStore, tables: TableRegistry, writer: SinkWriter, rows_per_batch: int):
        self.store = store
        self.tables = tables
        self.writer = writer
        self.rows_per_batch = rows_per_batch

    def emit_ready(
        self,
        batch_id: int,
        budget_factor: int,
        done: list[Path],
        pause: Callable[[TableRuntime, TableFault], None],
    ) -> None:
        """Emit the batch's share of the ready windows. ``done`` collects the staging
        directories consumed (deleted once the batch is saved); ``pause(rt, exc)`` is called
        for a table whose rows a sink cannot store (its window stays)."""
        intent = self.store.intent(batch_id)
        if intent is None:
            intent = self._intent(batch_id, budget_factor)
        for name, wid, *part in intent["emit"]:
            rt = self.tables.get(name)
            if rt is None or wid not in rt.reconciler.windows or rt.phase == "paused":
                continue
            start, count = part if part else (0, None)  # an intent of an older version: all of it
            try:
                self.emit_window(rt, wid, start, count, done)
            except TableFault as exc:  # the window stays, to be emitted after `cdc resume`
                pause(rt, exc)

    def _intent(self, batch_id: int, budget_factor: int) -> dict:
        ready = [
            [name, wid]
            for name, rt in sorted(self.tables.items())
            if rt.phase != "paused"
            for wid in rt.reconciler.emittable_windows()
        ]
        ready.sort(key=lambda nw: self.tables[nw[0]].reconciler.windows[nw[1]].opened_at)
        # a batch that writes a lot of snapshot rows holds back the streamed changes
        # behind it: emit about rows_per_batch rows (whole windows or slices of
        # one), the rest in the next batches. Written down first: a re-run does the same.
        budget, emit = self.rows_per_batch * budget_factor, []
        for name, wid in ready:
            if budget <= 0:
                break
            start = self.tables[name].emitted.get(wid, 0)
            count = min(staged_rows(self.store.staging_dir(name, wid)) - start, budget)
            emit.append([name, wid, start, max(count, 0)])
            budget -= max(count, 1)
        intent = {"emit": emit}
        if emit:
            self.store.save_intent(batch_id, intent)
        return intent

    def emit_window(self, rt: TableRuntime, wid: str, start: int, count: int | None, done: list[Path]) -> None:
        """Emit staged rows [start, start + count) of a ready window; finish the window
        when that reaches its end."""
        window = rt.reconciler.window(wid)
        if not rt.reconciler.is_ready(wid):
            # never the case when the intent was made; stay open (emitted later, or read again)
            log.warning("snapshot window %s of %s is not ready after a restart; not emitted now", wid, rt.name)
            return
        path = self.store.staging_dir(rt.name, wid)
        read_with = self.store.staged_columns(rt.name, wid)
        if read_with is not None and read_with != rt.columns():
            # read with another definition than the one in force here (an ALTER the reader
            # had not seen yet, or one since): a column added before the read would be
            # written as NULL over its values. Read again, in a new window.
            log.info(
                "snapshot window %s of %s was read with another definition of the table; its chunks are read again",
                wid,
                rt.name,
            )
            rt.reconciler.finish(wid)
            rt.emitted.pop(wid, None)
            done.append(path)
            return
        files = staged_files(path)
        total = count_rows(files)
        end = total if count is None else min(total, start + count)
        emitted = 0
        cut = rt.truncated_through
        if rt.origin_truncated:  # a TRUNCATE of the window's origin (its server's order) counts too
            cut = max(cut, rt.origin_truncated.get(window_origin(window, rt.name), 0))
        owner = window_ownership(window, rt.name)
        asks: set[str] = set()  # shards whose snapshot brings keys this window left out
        for batch in staged_slice(files, start, end - start):
            if not window_survives(window, cut):
                break  # a truncate came after LOW: nothing of the window survives
            table = emitted_rows(window, from_snapshot(rt.spec, rt.schema, fill_missing(batch, rt.spec)), rt.keys, cut)
            if owner is not None and table.num_rows:
                table = self._owned(rt, wid, owner, table, asks)
            if table.num_rows == 0:
                continue
            self.writer.apply(rt, self._timed(rt, window, table))
            emitted += table.num_rows
            crashpoints.reached("mid_emission")
        rt.snapshot_rows += emitted
        finished = end >= total
        plan = self.store.load_plan(rt.name)  # read once for the sweep and the progress
        deleted = self._sweep(rt, window, files, cut, plan) if finished and plan else 0
        self._record_progress(rt, window, emitted, finished, asks, deleted, plan)
        if not finished:
            rt.emitted[wid] = end
            log.info(
                "snapshot window %s of %s: rows %d..%d of %d emitted (%d after reconciliation)",
                wid,
                rt.name,
                start,
                end,
                total,
                emitted,
            )
            return
        rt.emitted.pop(wid, None)
        rt.windows_expired = 0
        rt.reconciler.finish(wid)  # after the plan says done: the runner must not read it again
        done.append(path)
        log.info("snapshot window %s of %s emitted: %d rows", wid, rt.name, emitted)

    def _sweep(self, rt: TableRuntime, window: Window, files: list[Path], cut: int, plan: dict) -> int:
        """A repair's key-list window: the asked keys the SELECT did not return and the
        stream did not change are deleted (``merger.dblog.swept_keys``); the deletes."""
        asked = [
            k for c in plan.get("chunks", []) if c["id"] in window.chunk_ids and is_key_list(c) for k in chunk_keys(c)
        ]
        if not asked:
            return 0
        try:
            asked_keys = asked_table(rt.schema, rt.keys, asked)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise TableFault(
                f"repair of {rt.name}: its keys do not fit the table's key columns {rt.keys} ({exc}); "
                "`cdc resume` the table, then `cdc snapshot` it"
            ) from None
        read = [
            from_snapshot(rt.spec, rt.schema, fill_missing(b, rt.spec)).select(rt.keys)
            for b in staged_slice(files, 0, count_rows(files))
        ]
        read_keys = pa.concat_tables(read) if read else asked_keys.slice(0, 0)
        gone = swept_keys(window, asked_keys, read_keys, rt.keys, cut)
        if gone.num_rows:
            self.writer.apply(rt, self._timed(rt, window, deletes_table(rt.schema, gone)))
            log.info("repair of %s: %d rows the source does not hold deleted from the sinks", rt.name, gone.num_rows)
        return gone.num_rows

    def _timed(self, rt: TableRuntime, window: Window, table: pa.Table) -> pa.Table:
        """The window's changes with their commit time, where a sink's mode keeps it: the
        HIGH marker's (the rows are the source's as of HIGH); a window saved before markers
        carried it takes the time it opened. A change log of image before_after: a NULL
        before image."""
        extra = self.writer.extra_columns(rt)
        if COMMIT_US not in extra:
            return table
        us = window.high_time_us if window.high_time_us is not None else int(window.opened_at * 1_000_000)
        table = table.append_column(COMMIT_US, pa.repeat(pa.scalar(us, pa.int64()), table.num_rows))
        if BEFORE_IMAGE in extra:  # a change log's before image: none for a snapshot row (nor a repair's delete)
            for f in rt.schema:
                table = table.append_column(pa.field(before_column(f.name), f.type), pa.nulls(table.num_rows, f.type))
        return table

    @staticmethod
    def _owned(rt: TableRuntime, wid: str, owner: WindowOwnership, table: pa.Table, asks: set[str]) -> pa.Table:
        """A window's rows of the keys its shard owned at LOW and at HIGH (key mode unique,
        ``cdc.shard_cutover.WindowOwnership``); adds to ``asks`` the shards whose snapshot
        must bring the keys left out."""
        if not owner.moves:
            return table
        decisions = [owner.decide(key) for key in table.column(rt.keys[0]).to_pylist()]
        kept = pa.array([keep for keep, _ in decisions], pa.bool_())
        left = [ask for keep, ask in decisions if not keep]
        if left:
            asks.update(ask for ask in left if ask)
            log.info(
                "snapshot window %s of %s: %d rows of keys shard %s did not own all through the window left out",
                wid,
                rt.name,
                len(left),
                owner.shard,
            )
        return table.filter(kept)

    def _record_progress(
        self,
        rt: TableRuntime,
        window: Window,
        emitted: int,
        finished: bool,
        asks: set[str],
        deleted: int,
        plan: dict | None,
    ) -> None:
        """The snapshot plan counts the rows; a finished window's chunks are done, and the
        last one finishes the snapshot. ``asks``: shards to snapshot once it is finished (a
        new plan replaces a running one); ``plan``: the table's, as loaded (None: none)."""
        if plan is None:
            self._snapshot_shards(rt, asks)
            return
        plan["rows"] = plan.get("rows", 0) + emitted
        if deleted:
            plan["deleted"] = plan.get("deleted", 0) + deleted
        if asks:
            plan["then_snapshot"] = sorted(set(plan.get("then_snapshot", [])) | asks)
        if finished:
            done = set(plan.get("done", []))
            done.update(window.chunk_ids)
            plan["done"] = sorted(done)
            if len(done) >= len(plan.get("chunks", [])):
                plan["finished_at"] = time.time()
                if rt.phase == "snapshotting":
                    rt.phase = "streaming"
        self.store.save_plan(rt.name, plan)
        if plan.get("finished_at"):
            self._snapshot_shards(rt, set(plan.get("then_snapshot", [])))

    def _snapshot_shards(self, rt: TableRuntime, shards: set[str]) -> None:
        for shard in sorted(shards):
            log.info("snapshot of %s on shard %s asked for: a moved key range's rows are read there", rt.name, shard)
            self.store.request("snapshot", rt.name, where=None, shard=shard)
