"""An SCD type 2 history in a sink read as the latest table it stands for: its current
versions (``__end_seq`` NULL) are the source's rows, its bookkeeping columns are not the
source's. Verify compares them with the source exactly as a latest table (digests, rows,
narrowing, verify windows) through ``CurrentVersions``, a reader with the interface of the
sink's own reader (``merger.verify.sinks``, over the same connection) that adds the sink's
filter of the current versions (the reader's ``current_filter``: PostgreSQL's ``only``,
Delta's ``only_null``) to every read; and checks the history's shape
(``merger.verify.history_shape``, run by the sink's reader in its own dialect), which a
latest table does not have.

The position of a key's last change (a verify window's test) is the greatest end or last
change of its versions: a delete closes the current version at the delete's sequence, any
other change that alters the history opens a version or updates the current one there
(the reader's ``history_positions``).
"""

from __future__ import annotations

from merger.verify.history_shape import HISTORY_COLUMNS, ShapeFault
from merger.verify.sinks.base import SinkReader


class CurrentVersions:
    """The current versions of SCD type 2 tables, read with ``reader`` (the caller closes it)."""

    def __init__(self, reader: SinkReader):
        self.reader = reader
        self.rules = reader.rules
        self.name = reader.name

    @property
    def only(self) -> dict:
        """The sink's row filter of the current versions, as keyword arguments of its reads."""
        return self.reader.current_filter

    @property
    def digest_key_kinds(self) -> tuple[str, ...]:
        return self.reader.digest_key_kinds

    def digest_refusal(self, keys, sink_cols) -> str | None:
        return self.reader.digest_refusal(keys, sink_cols)

    def where(self) -> str:
        return self.reader.where()

    def close(self) -> None:
        pass  # the reader is shared with the sink's other tables

    def columns(self, db: str, table: str) -> dict[str, str] | None:
        cols = self.reader.columns(db, table)
        return None if cols is None else {n: t for n, t in cols.items() if n not in HISTORY_COLUMNS}

    def rows_in_range(self, *args, **kwargs) -> list[tuple]:
        return self.reader.rows_in_range(*args, **kwargs, **self.only)

    def digest_in_range(self, *args, **kwargs):
        return self.reader.digest_in_range(*args, **kwargs, **self.only)

    def rows_with_keys(self, *args, **kwargs) -> list[tuple]:
        return self.reader.rows_with_keys(*args, **kwargs, **self.only)

    def digests_in_parts(self, db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql: str, **kwargs) -> list:
        """The digests of [lo, hi) cut at ``cuts``, as the sink's reader computes them."""
        return self.reader.digests_in_parts(
            db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql, **kwargs, **self.only
        )

    def positions_with_keys(self, db, table, sink_cols, keys, kinds, canon_keys, key_canons=()) -> list[tuple]:
        """``(key values..., sequence)`` per key with versions: the last change the history
        applied of it (read at one state of the table)."""
        return self.reader.history_positions(db, table, sink_cols, keys, kinds, canon_keys, key_canons=key_canons)

    def value_counts(self, db: str, table: str, column: str) -> dict:
        """How many current versions hold each value of ``column`` (a sharded source's origins)."""
        return self.reader.value_counts(db, table, column, **self.only)

    def shape_faults(self, db: str, table: str, keys, fixed: tuple[str, str] | None = None) -> list[ShapeFault]:
        """What is wrong with the history's shape (``fixed``: of one origin's rows)."""
        return self.reader.shape_faults(db, table, keys, fixed)


def reader_for_mode(reader, mode: str):
    """What verify compares a sink table in ``mode`` (``sinks.<sink>.tables``) through: the
    sink's reader for a latest table, its current versions for an SCD type 2 table (where
    the sink's reader can read them: its ``current_filter``); None for a table with no latest
    state to compare (a change log)."""
    if mode == "latest":
        return reader
    if mode == "scd2" and getattr(reader, "current_filter", None) is not None:
        return CurrentVersions(reader)
    return None
