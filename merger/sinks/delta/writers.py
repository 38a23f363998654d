"""Which merger writes the Delta tables under one base path: writer epochs (fencing).

The merger's own lock (``state_dir/merger.lock``) keeps a second merger off one state
directory, on one machine. Two mergers with two state directories may still point at the
same Delta tables (the same bucket and prefix, from two machines): each would apply its own
batches with its own versions, and the sink would skip one merger's writes as replays of the
other's. So the Delta tables themselves say who writes them:

* ``<base>/_cdc/writers`` is a small Delta table of claims ``(owner, epoch, claimed_at)``.
  At start, a merger whose state directory (``owner``, a random id kept there) made the last
  claim keeps that epoch (a restart after a crash); any other merger appends a claim with
  the next epoch: it takes over. Two claims at once cannot both commit the same epoch
  (a Delta commit is created only if absent: conditional put on S3, an exclusive create
  on a local disk; the same app-transaction id in both is a conflict), the later one
  retries and takes the next.
* Every commit the merger makes to a table or its tombstones carries the Delta app
  transaction ``cdc-writer`` = its epoch. Before a write, the sink reads the table's: a
  higher one means a newer merger took over, and this one stops (:class:`SinkFenced`). A
  commit racing with the newer merger's carries the same app-transaction id and fails;
  the retry reads the newer epoch. So the older merger's last write is before the newer's
  first, per table: never interleaved.
* A newer merger that finds a table written by an older epoch at a version at or above
  its own is stopped too (the older one wrote after the newer read its start version):
  nothing is skipped as if it were a replay.

Pure decisions here (``verdict``); the reads and writes are in :class:`WriterClaims`.
"""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa

from merger.sinks.base import SinkStop

WRITER_APP = "cdc-writer"  # the app transaction of every commit: the writer's epoch
CLAIMS_APP = "cdc-writers"  # the app transaction of a claim: the claimed epoch
CLAIM_RETRIES = 5
CLAIMS_SCHEMA = pa.schema(
    [
        pa.field("owner", pa.string(), nullable=False),
        pa.field("epoch", pa.int64(), nullable=False),
        pa.field("claimed_at", pa.string(), nullable=False),
    ]
)


class SinkFenced(SinkStop):
    """A newer merger writes these Delta tables: this one stops (not retried)."""


def next_epoch(claims: list[dict], owner: str) -> tuple[int, bool]:
    """(the epoch ``owner`` writes with, whether it must append a claim for it)."""
    if not claims:
        return 1, True
    last = max(claims, key=lambda c: c["epoch"])
    if last["owner"] == owner:
        return last["epoch"], False
    return last["epoch"] + 1, True


def verdict(mine: int, table_epoch: int | None, version: int, table_version: int) -> str | None:
    """Why this writer (epoch ``mine``) must not write ``version`` to a table whose last
    commit carries ``table_epoch`` and version ``table_version`` (None: it may)."""
    if table_epoch is None:
        return None  # never written with an epoch (a release before epochs, or a test tool)
    if table_epoch > mine:
        return f"a newer merger (writer epoch {table_epoch}, this one {mine}) took over"
    if table_epoch < mine and 0 <= version <= table_version:
        return (
            f"an older merger (writer epoch {table_epoch}, this one {mine}) wrote version {table_version} "
            f"after this one started (its version {version}): stop the other merger, then restart this one"
        )
    return None


class WriterClaims:
    """The claims table of one Delta base path."""

    def __init__(self, base: str, storage_options: dict | None):
        self.path = f"{base}/_cdc/writers"
        self.storage_options = storage_options

    def claim(self, owner: str) -> int:
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError

        for attempt in range(1, CLAIM_RETRIES + 1):
            table = self._table()
            claims = table.to_pyarrow_table().to_pylist()
            epoch, append = next_epoch(claims, owner)
            if not append:
                return epoch
            row = pa.table(
                {"owner": [owner], "epoch": [epoch], "claimed_at": [dt.datetime.now(dt.timezone.utc).isoformat()]},
                schema=CLAIMS_SCHEMA,
            )
            try:
                # appended to the version read: a claim committed since (the same app
                # transaction id) makes this commit fail, and the claims are read again
                write_deltalake(
                    table,
                    row,
                    mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction(CLAIMS_APP, epoch)]),
                )
                return epoch
            except CommitFailedError:
                if attempt == CLAIM_RETRIES:
                    raise
                time.sleep(0.1 * attempt)
        raise AssertionError("unreachable")

    def _table(self):
        """The claims table, created empty if absent (two creating it at once: one wins,
        the other opens the winner's)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        for attempt in range(1, CLAIM_RETRIES + 1):
            try:
                return DeltaTable(self.path, storage_options=self.storage_options)
            except TableNotFoundError:
                pass
            try:
                return DeltaTable.create(self.path, CLAIMS_SCHEMA, mode="ignore", storage_options=self.storage_options)
            except DeltaError:
                if attempt == CLAIM_RETRIES:
                    raise
                time.sleep(0.1 * attempt)  # created by another merger meanwhile: open it
        raise AssertionError("unreachable")
