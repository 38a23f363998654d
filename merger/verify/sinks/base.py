"""What every verify reader of a sink is (``SinkReader``) and the errors of a sink read.

A reader reads one sink's tables with the sink's own client, values in that client's
native Python types; nothing of the merger's conversion code is used, only where the sink
keeps a table is shared knowledge. It returns rows as tuples in the order of the column
names asked for; a column the sink table lacks reads as NULL. Key ranges and key lookups
take canonical key values (``keys``) and are applied in the sink's order: numbers by
value, text by code point.

``fixed``: an optional ``(column, value)`` that every row read must also hold (the origin
column of a sharded source's logical table: verify compares one origin at a time).
``key_canons``: the key columns' ``ColumnCanon``s, for a reader that compares keys in their
canonical form itself (it may ignore them).

Besides reading, a reader carries the rules of its sink that the rest of verify asks for
instead of testing the sink's name: ``rules`` (``merger.verify.canonical.SinkRules``: the
SQL dialect of its digest queries, its NUL rule), the key kinds whose range its digest
query can bound (``digest_key_kinds``), why a table's keys cannot bound one
(``digest_refusal``), and how it reads an SCD type 2 history's current versions
(``current_filter``, ``history_positions``, ``shape_faults``; ``merger.verify.current_versions``).
"""

from __future__ import annotations

from typing import Any, Sequence

from merger.errors import MergerError
from merger.verify.canonical import SinkRules

LOOKUP_BATCH = 500
SEQ = "_cdc_seq"  # the sinks' own bookkeeping column: not a source column
SEQ_COLUMN = "_cdc_seq"  # each sink row's and tombstone's position (docs/architecture.md)


class SinkReadError(MergerError):
    """A sink table could not be read (reported for that table)."""


class SinkUnreachable(SinkReadError):
    """The sink's server or storage does not answer (verify stops with one line)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class SinkReader:
    """Verify's reader of one sink (one module per sink in this package, found through
    ``merger.verify.sinks.registry``). The reads (``columns``, ``rows``, ``rows_in_range``,
    ``rows_with_keys``, ``positions_with_keys``, ``digest_in_range``, ``value_counts``,
    ``keys_where``) are each sink's own; what is here is what every reader has."""

    #: the sink's section of ``sinks:`` (``merger.sinks.registry.KINDS``)
    name: str = ""
    #: the sink's rules for the canonical form and the digest texts
    rules: SinkRules
    #: the key kinds (``merger.verify.keys``) whose range the sink's digest query can bound
    digest_key_kinds: tuple[str, ...] = ()
    #: the row filter, as keyword arguments of the reads, that keeps an SCD type 2
    #: history's current versions; None: the reader cannot read a history as its latest table
    current_filter: dict[str, str] | None = None

    @classmethod
    def from_config(cls, section: Any) -> "SinkReader":
        """The reader of the sink a merger config's section (``sinks.<name>``) describes."""
        raise NotImplementedError

    def where(self) -> str:
        """Where the sink is, for messages."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def digest_refusal(self, keys: Sequence[str], sink_cols: dict[str, str]) -> str | None:
        """Why a digest query cannot be bounded by these key columns of the sink table
        (their kinds allowed), or None."""
        return None
