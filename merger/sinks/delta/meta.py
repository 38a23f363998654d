"""What the Delta sink knows of one latest-state table (``TableMeta``), the app
transactions that record its versions, and the mark of a table's mode in its
configuration (``cdc.mode``)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable

MODE_PROPERTY = "cdc.mode"  # the table configuration entry that marks a sink table's mode
TARGET_FILE_SIZE = "delta.targetFileSize"  # delta-rs writes (MERGE included) split files at it
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
# Each micro-batch commits to a table, and every look at its versions (an app transaction's
# version, a refresh) replays the log from the last checkpoint: delta-rs checkpoints every
# 100 commits unless told, Delta Lake (Spark) every 10. At 10 a batch's version checks took
# ~40 % less time (bench/HISTORY.md, 2026-12-07)
COMMITS_PER_CHECKPOINT = 10


def table_properties(target_file_bytes: int) -> dict[str, str]:
    """The configuration entries every sink table (and tombstone table) is created with
    and kept at."""
    return {TARGET_FILE_SIZE: str(target_file_bytes), CHECKPOINT_INTERVAL: str(COMMITS_PER_CHECKPOINT)}


def properties_to_set(dt: DeltaTable, wanted: dict[str, str]) -> dict[str, str]:
    """Those of ``wanted`` the table does not hold (a table of an older release, or a
    setting changed since): one metadata commit sets them."""
    held = dt.metadata().configuration
    return {k: v for k, v in wanted.items() if held.get(k) != v}


def table_mode(dt: DeltaTable) -> str:
    """The mode a sink table's configuration marks (``latest`` when unmarked: tables of the
    latest state were created without the mark)."""
    return dt.metadata().configuration.get(MODE_PROPERTY) or "latest"


def app_main(table_id: str) -> str:
    """The app transaction that records a sink table's applied versions (a history's too)."""
    return f"cdc-sink:{table_id}"


def app_tombstones(table_id: str) -> str:
    """The app transaction that records the versions whose tombstone step is done."""
    return f"cdc-sink-tombstones:{table_id}"


def held_version(dt: DeltaTable, app_id: str) -> int:
    """The version the app transaction ``app_id`` recorded in ``dt`` (-1: none)."""
    v = dt.transaction_version(app_id)
    return -1 if v is None else v


def steps_done(main: DeltaTable, tomb: DeltaTable) -> tuple[int, int]:
    """The versions whose table step and tombstone step are done, as the loaded snapshots
    of a sink table and its tombstone table record them. A tombstone step with nothing to
    write is recorded in the table's own commit (merger/sinks/delta/latest.py)."""
    table_id = main.metadata().id
    tombs = max(held_version(tomb, app_tombstones(table_id)), held_version(main, app_tombstones(table_id)))
    return held_version(main, app_main(table_id)), tombs


def prunable_keys(columns: dict[str, pa.DataType], keys: list[str]) -> bool:
    """Whether a MERGE or a read may skip files by their key statistics: only for integer
    keys. delta-rs writes other types' statistics inexactly (a decimal(20, 0) max of
    18446744073709551614 as 9223372036854775807, timestamps in milliseconds), and a file
    skipped by a wrong statistic loses its deletes and duplicates its updates."""
    return all(pa.types.is_integer(columns[k]) for k in keys)


@dataclass
class TableMeta:
    main: DeltaTable
    tomb: DeltaTable
    keys: list[str]
    columns: dict[str, pa.DataType]  # user column -> storage type
    table_id: str
    # the table may hold no row: its first write (a snapshot's rows, mostly) is then a plain
    # append, not a MERGE (checked against the log before; false once rows were written)
    maybe_empty: bool = True

    @property
    def prunable(self) -> bool:
        """Whether file statistics of the keys are exact (``prunable_keys``)."""
        return prunable_keys(self.columns, self.keys)

    @property
    def app_main(self) -> str:
        return app_main(self.table_id)

    @property
    def app_tomb(self) -> str:
        return app_tombstones(self.table_id)
