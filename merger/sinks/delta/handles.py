"""Where a Delta sink's tables are and how they are opened: the base path and its storage
options, the write settings every part shares, and delta-rs errors as sink errors."""

from __future__ import annotations

from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from cdc.object_store import one_line
from merger.sinks.base import SinkError, SinkUnavailable, TableFault
from merger.sinks.delta import paths


def missing_data_file(error_text: str) -> bool:
    """Whether a delta-rs error (lower case) says a data file of the table is not in storage."""
    return ".parquet" in error_text and any(w in error_text for w in ("not found", "no such file", "does not exist"))


def first_line(exc: BaseException) -> str:
    """A delta-rs error as one line (an object store's is a tree of causes over lines)."""
    text = one_line(str(exc))
    return text if text else type(exc).__name__


class DeltaHandles:
    """The tables of one base path: their paths, opened with the storage options; the
    writer properties, the target file size and the compaction cadence every writer uses."""

    def __init__(
        self,
        base: str,
        storage_options: dict[str, str] | None,
        writer_properties: Any,
        target_file_bytes: int,
        compact_every_commits: int,
    ):
        self.base = base
        self.storage_options = storage_options
        self.writer_properties = writer_properties
        self.target_file_bytes = target_file_bytes
        self.compact_every_commits = compact_every_commits

    @property
    def remote(self) -> bool:
        """The tables are in object storage (no directory renames or deletes)."""
        return "://" in self.base

    def table_path(self, table) -> str:
        return paths.table_path(self.base, table)

    def tombstone_path(self, table) -> str:
        return paths.tombstone_path(self.base, table)

    def open(self, path: str) -> DeltaTable | None:
        """The table at ``path``; None: there is none."""
        try:
            return DeltaTable(path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except (OSError, DeltaError) as exc:
            raise self.io_error(exc, path) from None

    def io_error(self, exc: BaseException, path: str) -> SinkError:
        """A delta-rs or storage error as a sink error: unreachable storage is retried
        (``SinkUnavailable``), a missing data file pauses the table (``TableFault``)."""
        # classified by the whole chain of causes: a MERGE's read of a data file puts the
        # store's "operation timed out" after 400 characters of Parquet and S3 context
        lowered = one_line(str(exc), limit=None).lower()
        text = first_line(exc)
        # "body error": the reply's body broke off mid-read (a store that hangs after its headers)
        unreachable = (
            "timed out",
            "timeout",
            "connection",
            "unreachable",
            "dns",
            "503",
            "network",
            "sending request",
            "body error",
        )
        if any(w in lowered for w in unreachable):
            return SinkUnavailable(f"Delta storage for {path} is unreachable: {text}")
        if missing_data_file(lowered):
            # deleted by hand or lost: this table cannot be written until its log stops naming it
            return TableFault(
                f"Delta table at {path}: a data file its log names is missing from storage ({text}); "
                "`cdc repair` removes such files from the table's log, re-reads their rows from the source and "
                "resumes the table"
            )
        return SinkError(f"Delta error at {path}: {text}")
