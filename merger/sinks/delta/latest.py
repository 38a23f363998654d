"""The Delta sink's tables in mode ``latest`` (the default): the latest row of each key,
and the keys deleted (``LatestTables``, composed into merger/sinks/delta/sink.py).

Layout (``paths``)::

    <base>/<db>/<table>                      the user-visible table
    <base>/_cdc/tombstones/<db>/<table>      deleted keys (key columns + _cdc_seq)

The user-visible table holds the source columns plus ``_cdc_seq`` (int64: the sequence
of the change that wrote the row; readers may ignore or drop it).

apply(table, version, changes)
  1. dedupe the batch (max sequence per key), cast to the Delta storage types;
  2. drop changes not newer than the key's tombstone (tombstones read for the batch's keys);
  3. MERGE into the table: ``ON keys``; matched and ``s._cdc_seq > t._cdc_seq``: delete
     (op d) or update; not matched and not a delete: insert. Committed with the Delta
     app-transaction (``txn``) action ``(app_id=cdc-sink:<table id>, version)``;
  4. MERGE the tombstones (deletes raise/insert them, newer upserts remove them),
     committed with ``txn(cdc-sink-tombstones:<table id>, version)``. When the batch has
     no tombstone to write (no delete, no write of a tombstoned key: most batches), that
     same txn goes into step 3's commit instead, and the tombstones are not written: the
     tombstone step's version is the higher of the two records.
  When the table step changes nothing, an empty commit still records its version.

Why two separately idempotent commits are safe: each commit records its own version
atomically with its data, and the table is always written before its tombstones. A crash
between the two leaves the table at ``version`` and the tombstones at ``version - 1``; the
merger then replays ``version`` (Spark re-runs the batch with the same id): step 3 is
skipped, and step 2 reads the very tombstones it read the first time (nothing else wrote
them), so step 4 computes and commits exactly what the lost attempt would have. While the
tombstones lag, readers are not affected (they only read the table), and no newer batch
is applied before the replay completes it: a newer version (a merger that did not re-run
the batch, a new ``state_dir``) is refused with ``TableFault``, which pauses the table
until ``cdc snapshot`` rebuilds it, since the deletes of the unfinished step are not
remembered. A tombstone may be older than the row of its
key (a delete that lost to a newer row); such a tombstone can never hide or resurrect
anything, because a key's row always carries a higher sequence than its tombstone.

Writers: every commit also carries ``txn(cdc-writer, epoch)``, the epoch the merger claimed at
start (``claim_writer``, merger/sinks/delta/writers.py); a table written by a newer epoch
stops an older merger (``SinkFenced``), so two mergers with two state directories on one
set of tables (one bucket) never interleave their writes. On S3, commits are conditional
puts (cdc/object_store.py): a lost race is a ``CommitFailedError`` like any conflict.

The ``<table id>`` is the Delta metadata id of the user table (fixed at creation, kept by
schema changes), so a table that is dropped and re-created starts with fresh versions.

Schema changes: an added column is added (``ALTER``, metadata only); a widened type is
followed by rewriting the table with the wider type (streamed, one overwrite commit;
Delta type widening is not available in delta-rs). Costs: MERGE rewrites every data file
holding a matched key (copy-on-write); files accumulate with small batches, so every
``compact_every_commits`` batches that wrote rows the small files are compacted
(``_compact_when_due``); ``VACUUM`` is left to the user. Measured here (2 cores, shared):
1M new rows of a 6-column table in batches of 100k: 420-570k rows/s (delta-rs prunes
files by the batch's key range); 100k random updates into that 1M-row table: ~0.55 s per
batch (~150-185k rows/s), because every file is rewritten: the cost of an update batch
grows with the table when its keys are spread over all files (bench/sink_throughput.py).
Every apply adds a commit to the table (an empty one included) and one to the tombstones
when it has tombstones to write (delta-rs checkpoints every 100 commits). MERGEs of tables with integer keys
run with ``streamed_exec=False``: the batch is in memory anyway, and only then does delta-rs
prune the table's files by the batch's key range (not for other key types: their file
statistics are inexact, see ``TableMeta.prunable``) (measured: 1M snapshot rows in batches of 100k,
0.08 s of CPU per batch instead of 0.20-0.24 s growing with the table).
Tombstones stay until the key is written again or the table is truncated.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError

from cdc.quoting import quote_ident
from merger.sinks import types as T
from merger.sinks.base import (
    DELETE_OP,
    OP,
    SEQ,
    Changes,
    IncompatibleSchemaChange,
    SinkError,
    TableFault,
    TableId,
    as_table_id,
    cast_columns,
    check_keys,
    latest_per_key,
    user_fields,
)
from merger.sinks.delta.arrow import delta_arrow_schema, without_log_statistics
from merger.sinks.delta.commits import Commits
from merger.sinks.delta.handles import DeltaHandles, first_line
from merger.sinks.delta.meta import TableMeta, properties_to_set, steps_done, table_mode, table_properties
from merger.sinks.delta.origins import in_predicate
from merger.sinks.key_ranges import range_filter

log = logging.getLogger(__name__)

COMMIT_CONFLICT_RETRIES = 5  # Delta commits of one step that may conflict with another writer in a row
TSEQ = "_cdc_tseq"

# the MERGE conditions on a change (alias s) and the row or tombstone it meets (alias t)
_NEWER = f"s.{quote_ident(SEQ)} > t.{quote_ident(SEQ)}"
_IS_DELETE = f"s.{quote_ident(OP)} = '{DELETE_OP}'"
_NOT_DELETE = f"s.{quote_ident(OP)} <> '{DELETE_OP}'"


class LatestTables:
    """The tables that keep the latest state of each key and their tombstones (the module
    notes), composed into ``DeltaSink`` as its ``latest``."""

    def __init__(self, handles: DeltaHandles, commits: Commits):
        self.handles = handles
        self.commits = commits
        self._meta: dict[TableId, TableMeta] = {}
        self._writes_since_compaction: dict[TableId, int] = {}

    def forget(self, table: TableId) -> None:
        """Drop what is known of the table (loaded again at its next use)."""
        self._meta.pop(table, None)

    def _load(self, table: TableId) -> TableMeta | None:
        main = self.handles.open(self.handles.table_path(table))
        if main is None:
            return None
        self._refuse_another_mode(table, main)
        tomb = self.handles.open(self.handles.tombstone_path(table))
        if tomb is None:
            raise SinkError(
                f"table {table}: tombstone table missing at {self.handles.tombstone_path(table)}; "
                "call ensure_table to repair"
            )
        keys = [n for n in delta_arrow_schema(tomb).names if n != SEQ]
        schema = delta_arrow_schema(main)
        columns = {f.name: f.type for f in schema if f.name != SEQ}
        return TableMeta(main, tomb, keys, columns, main.metadata().id)

    def _refuse_another_mode(self, table: TableId, main: DeltaTable) -> None:
        """A latest-state table is never made of a table marked another mode (a change log)."""
        mode = table_mode(main)
        if mode != "latest":
            raise TableFault(
                f"Delta table {self.handles.table_path(table)} is a {mode} table (its mode in sinks.delta.tables is "
                f"latest now): move it away, then `cdc snapshot {table}`; a mode never changes silently"
            )

    def meta_for(self, table: TableId) -> TableMeta:
        m = self._meta.get(table)
        if m is None:
            m = self._load(table)
            if m is None:
                raise SinkError(f"table {table}: no sink table yet; call ensure_table first")
            self._meta[table] = m
        else:
            try:
                m.main.update_incremental()
                m.tomb.update_incremental()
            except (OSError, DeltaError) as exc:
                raise self.handles.io_error(exc, self.handles.table_path(table)) from None
        return m

    # ------------------------------------------------------------------ tables

    def ensure(self, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        keys = check_keys(table, arrow_schema, key_columns)
        wanted: dict[str, pa.DataType] = {}
        for f in user_fields(arrow_schema):
            try:
                wanted[f.name] = T.delta_storage_type(f.type)
            except T.UnsupportedType as exc:
                raise SinkError(f"table {table}, column {f.name!r}: {exc}") from None
        self._meta.pop(table, None)
        try:
            return self._ensure(table, keys, wanted)
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, self.handles.table_path(table)) from None

    def _schemas(self, keys, columns: dict[str, pa.DataType]) -> tuple[pa.Schema, pa.Schema]:
        main = pa.schema(
            [pa.field(c, t, nullable=c not in keys) for c, t in columns.items()]
            + [pa.field(SEQ, pa.int64(), nullable=False)]
        )
        tomb = pa.schema(
            [pa.field(k, columns[k], nullable=False) for k in keys] + [pa.field(SEQ, pa.int64(), nullable=False)]
        )
        return main, tomb

    def _ensure(self, table: TableId, keys, wanted) -> list[str]:
        main_path, tomb_path = self.handles.table_path(table), self.handles.tombstone_path(table)
        current = self._load_lenient(table)
        if current is None:
            main_schema, tomb_schema = self._schemas(keys, wanted)
            # tombstones first (emptied: a re-created table forgets the old deletes), then the
            # table; the table's existence marks a completed creation.
            self._empty_tombstones(tomb_path, tomb_schema)
            DeltaTable.create(
                main_path,
                main_schema,
                mode="error",
                name=table.table,
                description=f"CDC copy of {table.database}.{table.table}; key {keys}; "
                f"{SEQ} = sequence of the last applied change",
                configuration=table_properties(self.handles.target_file_bytes),
                storage_options=self.handles.storage_options,
            )
            return ["created"]
        main, tomb, old_keys, columns = current
        self.commits.fence([t for t in (main, tomb) if t is not None])
        for dt in (main, tomb):
            # a table of an older release, or compact_target_mb changed (a metadata commit)
            missing = properties_to_set(dt, table_properties(self.handles.target_file_bytes)) if dt else None
            if missing:
                dt.alter.set_table_properties(missing)
        if old_keys is not None and set(old_keys) != set(keys):
            raise IncompatibleSchemaChange(
                f"incompatible schema change for {table}: key columns change from {old_keys} to {keys}"
            )
        added, widened, done = [], {}, []
        for c, new in wanted.items():
            if c not in columns:
                added.append(pa.field(c, new, nullable=True))
                continue
            old = columns[c]
            verdict = T.compare(old, new)
            if verdict is None:
                raise IncompatibleSchemaChange(
                    f"incompatible schema change for {table}: column {c!r} cannot change from {old} to {new}"
                )
            if verdict == T.WIDEN:
                widened[c] = new
        if added:
            main.alter.add_columns(DeltaSchema.from_arrow(pa.schema(added)).fields)
            done += [f"added column {f.name} {f.type}" for f in added]
        if widened:
            self._rewrite(main_path, main, widened)
            done += [f"widened {c} {columns[c]} -> {t}" for c, t in widened.items()]
        if tomb is None or any(k in widened for k in keys):
            cols = {**columns, **widened}
            _, tomb_schema = self._schemas(keys, cols)
            if tomb is None:
                # lost tombstones: only possible if someone deleted them
                log.warning("table %s: tombstone table missing, recreating it empty", table)
                self._empty_tombstones(tomb_path, tomb_schema)
            else:
                self._rewrite(tomb_path, tomb, {k: widened[k] for k in keys if k in widened})
        return done

    def _load_lenient(self, table: TableId):
        main = self.handles.open(self.handles.table_path(table))
        if main is None:
            return None
        self._refuse_another_mode(table, main)
        tomb = self.handles.open(self.handles.tombstone_path(table))
        keys = [n for n in delta_arrow_schema(tomb).names if n != SEQ] if tomb is not None else None
        columns = {f.name: f.type for f in delta_arrow_schema(main) if f.name != SEQ}
        return main, tomb, keys, columns

    def _empty_tombstones(self, tomb_path: str, tomb_schema) -> None:
        """(Re)write the tombstone table empty, in the given schema."""
        write_deltalake(
            tomb_path,
            tomb_schema.empty_table(),
            mode="overwrite",
            schema_mode="overwrite",
            configuration=table_properties(self.handles.target_file_bytes),
            storage_options=self.handles.storage_options,
        )

    def _rewrite(self, path: str, dt: DeltaTable, new_types: dict[str, pa.DataType]) -> None:
        """Rewrite a table with wider column types: one overwrite commit (app-transaction
        versions live in the log, so they survive)."""
        old = delta_arrow_schema(dt)
        schema = pa.schema([pa.field(f.name, new_types.get(f.name, f.type), f.nullable) for f in old])
        dataset = dt.to_pyarrow_dataset()

        def batches():
            for b in dataset.to_batches(columns=schema.names):
                if b.num_rows:
                    yield b.cast(schema)

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        write_deltalake(
            path,
            reader,
            mode="overwrite",
            schema_mode="overwrite",
            storage_options=self.handles.storage_options,
            writer_properties=self.handles.writer_properties,
        )

    # ------------------------------------------------------------------ versions

    def applied_version(self, table: TableId) -> int | None:
        m = self.meta_for(table)
        return m.main.transaction_version(m.app_main)

    def _versions(self, m: TableMeta) -> tuple[int, int]:
        return steps_done(m.main, m.tomb)

    # ------------------------------------------------------------------ apply

    def write(self, table: TableId, version: int, changes: Changes) -> bool:
        """Apply a batch (the module notes); False: a replayed version."""
        m = self.meta_for(table)
        src = None  # the batch, deduplicated once: a retry after a conflict applies it again
        for attempt in range(1, COMMIT_CONFLICT_RETRIES + 1):
            try:
                if src is None:
                    src = latest_per_key(table, changes, m.keys)
                return self._apply(table, m, version, src)
            except CommitFailedError as exc:
                # another writer committed between our read and our commit (a user's OPTIMIZE,
                # VACUUM, DELETE): read the table again and redo the step; the versions make a
                # step that did commit a no-op
                if attempt == COMMIT_CONFLICT_RETRIES:
                    raise TableFault(
                        f"table {table}: {COMMIT_CONFLICT_RETRIES} Delta commits in a row conflicted with another "
                        f"writer of {self.handles.table_path(table)} ({first_line(exc)}): stop the other writer "
                        f"(a second merger on these tables?), then `cdc resume {table.database}.{table.table}`"
                    ) from None
                log.warning("table %s: Delta commit conflict (%s); retrying", table, first_line(exc))
                time.sleep(0.1 * attempt)
                self._meta.pop(table, None)
                m = self.meta_for(table)
            except (OSError, DeltaError) as exc:
                raise self.handles.io_error(exc, self.handles.table_path(table)) from None
        raise AssertionError("unreachable")

    def _apply(self, table: TableId, m: TableMeta, version: int, src: pa.Table) -> bool:
        main_v, tomb_v = self._versions(m)
        self.commits.fence((m.main, m.tomb), version, main_v)
        if version <= main_v and version <= tomb_v:
            return False
        if main_v > tomb_v and version != main_v:
            # the tombstones of the table's last write were never completed, and this is not
            # the replay that completes them (Spark re-runs a batch with the same versions):
            # the deletes of that write are not remembered, and an older change of such a key
            # would bring its row back. Never go on as if nothing happened.
            raise TableFault(
                f"table {table}: the Delta tombstones of version {main_v} were never written (the batch that "
                f"wrote the table was not run again; now version {version}), so a deleted row could come back: "
                f"`cdc snapshot {table.database}.{table.table}` rebuilds the table"
            )
        unknown = [c for c in src.column_names if not c.startswith("_cdc_") and c not in m.columns]
        if unknown:
            raise SinkError(
                f"table {table}: column(s) {unknown} not in the sink table; call ensure_table with the new schema first"
            )
        src = cast_columns(src, {c: m.columns[c] for c in src.column_names if c in m.columns})
        src = self._drop_tombstoned(m, src)
        tomb_changes = self._tombstone_changes(m, src)
        replay = version <= main_v
        tombs_unchanged = tomb_changes.num_rows == 0
        if not replay:
            self._merge_main(m, src, version, tombs_unchanged)
        # without tombstones to write, the table's own commit recorded the tombstone step
        # (each look at a version replays the log: three fewer a batch)
        if (replay or not tombs_unchanged) and self._versions(m)[1] < version:
            self._merge_tombs(m, tomb_changes, version)
        if src.num_rows:
            self._compact_when_due(table, m)
        return not replay

    def _compact_when_due(self, table: TableId, m: TableMeta) -> None:
        """Every ``compact_every_commits`` writes of rows to a table, its small files are
        compacted (delta-rs OPTIMIZE: files under the target size binned into files of about
        it; one commit with dataChange=false, so readers see the same rows). Each micro-batch
        adds a file, and a MERGE opens every file whose key range it may touch: measured, a
        3-row MERGE into a 2,122-row table of 423 files took 110 ms of CPU, 20 ms after
        compaction; the merger's CPU at 10 changes/s grew from 0.14 to 0.51 of a core in 3
        minutes without it. Files at the target size are left alone."""
        if self.handles.compact_every_commits <= 0:
            return
        n = self._writes_since_compaction.get(table, 0) + 1
        self._writes_since_compaction[table] = n
        if n < self.handles.compact_every_commits:
            return
        self._writes_since_compaction[table] = 0
        started = time.monotonic()
        done = []
        for dt in (m.main, m.tomb):
            metrics = dt.optimize.compact(
                target_size=self.handles.target_file_bytes,
                writer_properties=self.handles.writer_properties,
                commit_properties=self.commits.properties(0),
            )
            dt.update_incremental()
            done.append(f"{metrics.get('numFilesRemoved', 0)} -> {metrics.get('numFilesAdded', 0)}")
        log.info(
            "table %s: compacted its small Delta files (table %s, tombstones %s files) in %.2fs",
            table,
            done[0],
            done[1],
            time.monotonic() - started,
        )

    def _drop_tombstoned(self, m: TableMeta, src: pa.Table) -> pa.Table:
        """Drop changes not newer than their key's tombstone; adds column TSEQ (the
        tombstone's sequence, null if none) to the rest."""
        if src.num_rows == 0 or not m.tomb.file_uris():
            return src.append_column(TSEQ, pa.nulls(src.num_rows, pa.int64()))
        dataset = m.tomb.to_pyarrow_dataset()
        if not m.prunable:
            dataset = without_log_statistics(dataset)
        first = m.keys[0]
        values = pc.unique(src[first])
        field, ftype = ds.field(first), dataset.schema.field(first).type
        if (
            pa.types.is_string(ftype)
            or pa.types.is_binary(ftype)
            or pa.types.is_large_string(ftype)
            or pa.types.is_large_binary(ftype)
        ):
            # files written by deltalake's MERGE hold string_view/binary_view columns, whose
            # statistics pyarrow cannot compare with a plain value set ("no kernel matching
            # (string, string_view)"); a cast expression skips that pruning
            field = field.cast(ftype)
        tombs = dataset.to_table(filter=field.isin(values))
        tombs = tombs.rename_columns([TSEQ if n == SEQ else n for n in tombs.column_names])
        if tombs.num_rows == 0:
            return src.append_column(TSEQ, pa.nulls(src.num_rows, pa.int64()))
        joined = _left_join(src, tombs, m.keys)
        keep = pc.or_kleene(pc.is_null(joined[TSEQ]), pc.greater(joined[SEQ], joined[TSEQ]))
        return joined.filter(keep)

    def _merge_main(self, m: TableMeta, src: pa.Table, version: int, tombs_unchanged: bool) -> None:
        # a tombstone step with nothing to write is done with the table's own commit: no
        # empty commit in the tombstones (~10 ms of a ~50 ms batch)
        apps = (m.app_main, m.app_tomb) if tombs_unchanged else (m.app_main,)
        main_schema = delta_arrow_schema(m.main)
        if src.num_rows and self._empty(m):
            self._append_first(m, src, main_schema, self.commits.properties(version, *apps))
        elif src.num_rows:
            cols = [c for c in src.column_names if c in m.columns]
            nonkey = [c for c in cols if c not in m.keys] + [SEQ]
            source = src.select(cols + [SEQ, OP])
            (
                self._merge_into(
                    m, m.main, source, self.commits.properties(version, *apps), self.handles.writer_properties
                )
                .when_matched_delete(predicate=f"{_NEWER} AND {_IS_DELETE}")
                .when_matched_update(
                    {quote_ident(c): f"s.{quote_ident(c)}" for c in nonkey},
                    predicate=f"{_NEWER} AND {_NOT_DELETE}",
                )
                .when_not_matched_insert(
                    {quote_ident(c): f"s.{quote_ident(c)}" for c in cols + [SEQ]},
                    predicate=_NOT_DELETE,
                )
                .execute()
            )
        self.commits.record(m.main, version, main_schema, *apps)
        if src.num_rows:
            m.maybe_empty = False

    @staticmethod
    def _empty(m: TableMeta) -> bool:
        """The table holds no row (no data file in the version the step reads). Another
        merger's write since then makes the append's commit fail (the same Delta app
        transaction id), and the retry reads the table again and MERGEs."""
        if not m.maybe_empty:
            return False
        m.maybe_empty = not m.main.file_uris()
        return m.maybe_empty

    def _append_first(self, m: TableMeta, src: pa.Table, schema: pa.Schema, commit: CommitProperties) -> None:
        """The MERGE's result on a table without rows: its inserts (every change but a
        delete; ``src`` holds one change per key), appended. A MERGE costs a query plan and a
        join even then: with 500 small tables snapshotted, it was a quarter of the merger's
        time (issue 23)."""
        rows = src.filter(pc.not_equal(src[OP], DELETE_OP))
        if rows.num_rows == 0:
            return
        columns = [
            rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
            for f in schema
        ]
        write_deltalake(
            m.main,
            pa.Table.from_arrays(columns, schema=schema),
            mode="append",
            commit_properties=commit,
            writer_properties=self.handles.writer_properties,
        )

    @staticmethod
    def _merge_into(m: TableMeta, dt: DeltaTable, source: pa.Table, commit: CommitProperties, writer_properties=None):
        """A MERGE of ``source`` (alias s) into ``dt`` (alias t, the table or its
        tombstones) on the table's keys; files are skipped by key only where the log's
        statistics are exact (``TableMeta.prunable``)."""
        on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in m.keys)
        # every key of the batch is in these ranges, so no match is lost; the files
        # between them are not read (merger/sinks/key_ranges.py)
        ranges = range_filter(source[m.keys[0]], f"t.{quote_ident(m.keys[0])}") if m.prunable else None
        if ranges is not None:
            on = f"{on} AND {ranges}"
        return dt.merge(
            source,
            predicate=on,
            source_alias="s",
            target_alias="t",
            streamed_exec=not m.prunable,
            writer_properties=writer_properties,
            commit_properties=commit,
        )

    @staticmethod
    def _tombstone_changes(m: TableMeta, src: pa.Table) -> pa.Table:
        """The rows the tombstone MERGE needs: deletes, and writes of tombstoned keys."""
        relevant = pc.or_(pc.equal(src[OP], DELETE_OP), pc.is_valid(src[TSEQ]))
        return src.filter(relevant).select(m.keys + [SEQ, OP])

    def _merge_tombs(self, m: TableMeta, source: pa.Table, version: int) -> None:
        tomb_schema = delta_arrow_schema(m.tomb)
        if source.num_rows:
            (
                self._merge_into(m, m.tomb, source, self.commits.properties(version, m.app_tomb))
                .when_matched_update(
                    {quote_ident(SEQ): f"s.{quote_ident(SEQ)}"}, predicate=f"{_NEWER} AND {_IS_DELETE}"
                )
                .when_matched_delete(predicate=f"{_NEWER} AND {_NOT_DELETE}")
                .when_not_matched_insert(
                    {quote_ident(c): f"s.{quote_ident(c)}" for c in m.keys + [SEQ]},
                    predicate=_IS_DELETE,
                )
                .execute()
            )
        self.commits.record(m.tomb, version, tomb_schema, m.app_tomb)

    # ------------------------------------------------------------------ truncate

    def truncate(self, table: TableId, version: int) -> bool:
        """The table and its tombstones emptied, each step's commit recording ``version``."""

        def overwrite_empty(dt: DeltaTable, app_id: str, version: int) -> None:
            empty = delta_arrow_schema(dt).empty_table()
            write_deltalake(dt, empty, mode="overwrite", commit_properties=self.commits.properties(version, app_id))
            dt.update_incremental()

        def empty_main(m: TableMeta, version: int) -> None:
            overwrite_empty(m.main, m.app_main, version)
            m.maybe_empty = True

        return self._emptying(table, version, empty_main, lambda m, v: overwrite_empty(m.tomb, m.app_tomb, v))

    def truncate_origin(self, table: TableId, version: int, column: str, origin: str) -> bool:
        """The rows (and tombstones) whose ``column`` is ``origin`` deleted, versioned."""
        predicate = in_predicate(column, [origin])

        # a delete that matches nothing commits nothing: _record then commits the version
        def delete_main(m: TableMeta, version: int) -> None:
            m.main.delete(predicate, commit_properties=self.commits.properties(version, m.app_main))
            self.commits.record(m.main, version, delta_arrow_schema(m.main), m.app_main)

        def delete_tombs(m: TableMeta, version: int) -> None:
            if column in delta_arrow_schema(m.tomb).names:
                m.tomb.delete(predicate, commit_properties=self.commits.properties(version, m.app_tomb))
            self.commits.record(m.tomb, version, delta_arrow_schema(m.tomb), m.app_tomb)

        return self._emptying(table, version, delete_main, delete_tombs)

    def _emptying(
        self, table, version: int, main: Callable[[TableMeta, int], None], tombs: Callable[[TableMeta, int], None]
    ) -> bool:
        """A versioned write that takes rows out of the table (``main``) and of its
        tombstones (``tombs``), each step's commit recording ``version``: a replay skips a
        step already done; False if both were."""
        table = as_table_id(table)
        version = int(version)
        m = self.meta_for(table)
        try:
            main_v, tomb_v = self._versions(m)
            self.commits.fence((m.main, m.tomb), version, main_v)
            if version <= main_v and version <= tomb_v:
                return False
            replay = version <= main_v
            if not replay:
                main(m, version)
            if tomb_v < version:
                tombs(m, version)
            return not replay
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, self.handles.table_path(table)) from None

    # ------------------------------------------------------------------ drop

    def drop(self, table: TableId) -> None:
        """The table and its tombstones deleted (on a local disk only)."""
        paths = (self.handles.table_path(table), self.handles.tombstone_path(table))
        found = self.handles.open(paths[0])
        if found is not None:
            self._refuse_another_mode(table, found)  # a change log configured latest now: never deleted
        if self.handles.remote:
            raise SinkError(
                f"table {table}: dropping tables in object storage is not supported; delete "
                f"{paths[0]} and {paths[1]} by hand, then `cdc resume {table}`"
            )
        for path in paths:  # the table first: it marks a complete creation
            shutil.rmtree(path, ignore_errors=True)
        self._meta.pop(table, None)


def _left_join(src: pa.Table, tombs: pa.Table, keys: list[str]) -> pa.Table:
    """src LEFT JOIN tombs USING (keys); Arrow's hash join, or a dict for key types it lacks."""
    tombs = tombs.select(keys + [TSEQ])
    try:
        return src.join(tombs, keys=keys, join_type="left outer", use_threads=True)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        held = {tuple(r[k] for k in keys): r[TSEQ] for r in tombs.to_pylist()}
        cols = [src[k].to_pylist() for k in keys]
        tseq = [held.get(key) for key in zip(*cols)]
        return src.append_column(TSEQ, pa.array(tseq, pa.int64()))
