"""What a sink table keeps, per table (pure): the latest state of each row (``LatestMode``,
the default), an SCD type 2 history (``SCD2Mode``) or an append-only change log
(``ChangelogMode``). A mode is a type; a sink picks its writer by it.

Each mode names the columns it needs in a batch besides the row and ``_cdc_op`` /
``_cdc_seq`` (``extra_columns``): the history modes need each change's commit time,
``COMMIT_US`` (microseconds since the epoch, UTC: the binlog event's time for a streamed
change, the HIGH watermark's for a snapshot row); a change log of image ``before_after``
also the row before each change, ``BEFORE_IMAGE`` (one column per user column).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from merger.history.changelog import AFTER, BEFORE_AFTER
from merger.history.changelog import MODES as IMAGES
from merger.history.scd2 import HistoryOptionsError, SCD2Options

COMMIT_US = "_cdc_commit_us"  # int64: the change's source commit time, microseconds since the epoch
# the row before the change (update, delete), one column per user column: ``_cdc_before_<column>``
# (``before_column``), of the column's type; NULL for an insert, a snapshot row, a truncate
BEFORE_IMAGE = "_cdc_before_"


def before_column(column: str) -> str:
    """The batch column holding ``column``'s value before the change (``BEFORE_IMAGE``)."""
    return BEFORE_IMAGE + column


@dataclass(frozen=True)
class LatestMode:
    """The latest state of each row (with tombstones for deleted keys)."""

    name = "latest"

    @property
    def extra_columns(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True)
class SCD2Mode:
    """Versions of each row over time (``merger.history.scd2``): a change of a tracked
    column opens a version, of another column updates the current one in place."""

    track_history: tuple[str, ...] | None = None
    track_history_except: tuple[str, ...] | None = None
    name = "scd2"

    @property
    def extra_columns(self) -> frozenset[str]:
        return frozenset({COMMIT_US})

    def options(self, keys: Sequence[str]) -> SCD2Options:
        return SCD2Options(tuple(keys), self.track_history, self.track_history_except)


@dataclass(frozen=True)
class ChangelogMode:
    """One row per change, appended (``merger.history.changelog``); ``image``: ``after``
    (the row after the change; a delete keeps its key) or ``before_after``."""

    image: str = AFTER
    name = "changelog"

    def __post_init__(self) -> None:
        if self.image not in IMAGES:
            raise HistoryOptionsError(f"change log image must be one of {', '.join(IMAGES)}, got {self.image!r}")

    @property
    def extra_columns(self) -> frozenset[str]:
        return frozenset({COMMIT_US, BEFORE_IMAGE} if self.image == BEFORE_AFTER else {COMMIT_US})


Mode = Union[LatestMode, SCD2Mode, ChangelogMode]
LATEST = LatestMode()


@dataclass(frozen=True)
class TableModes:
    """The modes of one sink's tables, by ``<database>.<table>``; a table not named is latest."""

    by_table: Mapping[str, Mode] = field(default_factory=dict)

    def of(self, table) -> Mode:
        """``table``: a ``TableId``, a (database, table) pair or ``db.table``."""
        name = table if isinstance(table, str) else f"{table[0]}.{table[1]}"
        return self.by_table.get(name, LATEST)

    def extra_columns(self, table) -> frozenset[str]:
        return self.of(table).extra_columns


def mode_of(entry: Mapping) -> Mode:
    """A mode from a configuration entry (``{"mode": "scd2", "track_history": [...]}``);
    the configuration has validated it."""
    kind = entry.get("mode", "latest")
    if kind == "latest":
        return LATEST
    if kind == "scd2":
        th, te = entry.get("track_history"), entry.get("track_history_except")
        return SCD2Mode(tuple(th) if th is not None else None, tuple(te) if te is not None else None)
    if kind == "changelog":
        return ChangelogMode(entry.get("image") or AFTER)
    raise HistoryOptionsError(f"table mode must be one of latest, scd2, changelog, got {kind!r}")


def table_modes(entries: Mapping[str, Mapping] | None) -> TableModes:
    return TableModes({name: mode_of(e) for name, e in (entries or {}).items()})
