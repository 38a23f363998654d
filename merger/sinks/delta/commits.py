"""The Delta sink's commits: the app transactions each carries (a table's version, and
the writer epoch), the writer fence (merger/sinks/delta/writers.py), and a version
recorded by an empty commit when a step wrote nothing."""

from __future__ import annotations

import logging
from typing import Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from merger.sinks.base import SinkError
from merger.sinks.delta.handles import DeltaHandles, first_line
from merger.sinks.delta.meta import held_version
from merger.sinks.delta.writers import WRITER_APP, SinkFenced, WriterClaims, verdict

log = logging.getLogger(__name__)


class Commits:
    """The commits of one base path's tables, with the writer epoch ``claim`` took (None:
    commits carry no epoch)."""

    def __init__(self, handles: DeltaHandles):
        self.handles = handles
        self.writer_epoch: int | None = None

    def claim(self, owner: str) -> None:
        """Take (or keep) the writer epoch of these tables (merger/sinks/delta/writers.py).
        The first access to the storage: a store that is unreachable, a bucket that does not
        exist or credentials it refuses are reported here, in one line."""
        base = self.handles.base
        try:
            self.writer_epoch = WriterClaims(base, self.handles.storage_options).claim(owner)
        except CommitFailedError as exc:
            raise SinkError(f"Delta tables at {base}: cannot claim them ({first_line(exc)})") from None
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, base) from None
        log.info("Delta tables at %s: written with writer epoch %d", base, self.writer_epoch)

    def properties(self, version: int, *app_ids: str) -> CommitProperties:
        """A commit's app transactions: ``(app_id, version)`` each, and the writer epoch."""
        txns = [Transaction(app_id, version) for app_id in app_ids]
        if self.writer_epoch is not None:
            txns.append(Transaction(WRITER_APP, self.writer_epoch))
        return CommitProperties(app_transactions=txns)

    def fence(self, tables: Sequence[DeltaTable], version: int = -1, held: int = -1) -> None:
        """Stop if a newer merger took these tables over, or an older one wrote past ``version``."""
        if self.writer_epoch is None:
            return
        epochs = [e for e in (dt.transaction_version(WRITER_APP) for dt in tables) if e is not None]
        reason = verdict(self.writer_epoch, max(epochs) if epochs else None, version, held)
        if reason:
            # the merger names the table and the sink (merger/sinks/fanout.py)
            raise SinkFenced(f"Delta tables at {self.handles.base}: {reason}; this merger stops")

    def record(self, dt: DeltaTable, version: int, schema: pa.Schema, *app_ids: str) -> None:
        """Make sure ``version`` is recorded in ``dt`` (an empty commit if the write
        before did not commit anything)."""
        dt.update_incremental()
        if held_version(dt, app_ids[0]) >= version:
            return
        write_deltalake(dt, schema.empty_table(), mode="append", commit_properties=self.properties(version, *app_ids))
        dt.update_incremental()
