"""SCD type 2 history of a table's changes, as plain Python (no Spark, no sink, no I/O).

The semantics are those of Spark's AUTO CDC flow stored as SCD type 2
(``pyspark.pipelines.create_auto_cdc_flow``: keys, sequence_by, track_history_column_list
or track_history_except_column_list) with the merger's sequence as ``sequence_by``.

Versions
--------
A key's history is a list of ``Version``s: the row's values from ``start_sequence`` /
``start_time`` up to ``end_sequence`` / ``end_time`` (None: open, the current version).
``last_sequence`` is the last change written into the version (its start, or a later
in-place update); a sink keeps it like the latest-state sinks keep ``_cdc_seq``. A
version is named by ``(key, start_sequence)``; ``Plan.upserts`` are whole versions to
write by that name (one MERGE / ``INSERT ... ON CONFLICT DO UPDATE``), so writing a plan
twice leaves what writing it once does.

The rules, per change (``apply_change``), against the key's *latest* version (the one
with the greatest start, open or closed; None for a key with no history):

* replay: a change whose sequence is at or below the key's applied sequence
  (``Version.applied_through``: ``last_sequence`` of an open version, ``end_sequence`` of a
  closed one) changes nothing;
* insert, update or snapshot row (``c``, ``u``, ``r``) of a key with a current version:
  a tracked column differs -> the current version closes at the change's sequence and time
  and a new one opens there; only untracked columns differ -> the current version is
  updated in place; nothing differs -> nothing happens (a snapshot row of an unchanged key
  opens nothing). Columns are compared by name, a missing one counting as None, so after
  a DDL adds a column later versions carry it and earlier ones do not;
* the same without a current version: a version opens;
* delete: the current version closes; without one, nothing happens;
* a snapshot row that opens a version, or changes one in place, for a key that has a
  history (a re-snapshot that found a value the history lacked) adds a ``Note`` saying so;
* a key change arrives as a delete of the old key and an insert of the new one (Debezium):
  the old key's version closes, the new key's opens, nothing special;
* times never go back along a key's versions: a change whose time is earlier than the
  key's last boundary (binlog timestamps are statement start times, so a transaction
  that commits later may carry an earlier one) takes that boundary's time; the sequence
  stays the order, so a version's ``start_time <= end_time`` and a query at time t finds
  at most one version of a key.

``apply_changes`` folds a batch: each key's changes in sequence order, each on the
latest version the previous one left, one ``Plan`` for all. ``truncate`` closes every
current version at the truncate (a function of its own: one set-based UPDATE, see there).

Why it is exact
---------------
The model is the naive one: every distinct change of the table applied once, in
sequence order, by the rules above. The core meets what the merger delivers:

(A) a change delivered for the first time is newer than every change of its key
    delivered before. A key's changes travel in one partition in binlog order; the
    processor voids changes older than a truncate it applied (``truncated_through``);
    DBLog never emits a snapshot row once a newer change of its key was read.
(B) anything else delivered is a replay of a change already delivered (a batch re-run
    after a crash, a suffix re-read).

Invariant: after the first deliveries s1 < ... < sn of a key, its versions are the
model's after s1..sn, and ``applied_through`` of its latest version is the sequence of
the last change that altered them (a change that alters nothing records nothing).
A first delivery s(n+1) is above sn >= applied_through, so it is applied to the model's
latest version, and every rule reads nothing else: same result. A replay of si: if a
later change altered the versions, applied_through > si and si is dropped; if si
altered them itself, applied_through >= si, dropped; otherwise the versions are the ones
si saw and it left unchanged, so applying it again alters nothing. A truncate closes only
versions whose ``last_sequence`` is below it: on a replay, every version it closed is
closed and every version opened after it starts after it.

Tiling: a version opens at a change's sequence s above the key's applied sequence (so
above the latest version's start) and the change that closes a current version at s
opens the next one at s with the same time; replays open and close nothing. So for every
key the versions, by start, never overlap, each one that a change of values closed ends
where the next starts, and only the last can be open; a delete or truncate leaves a gap
until the key is inserted again.

Batches: ``apply_changes`` carries each step's latest version to the next, and keeps
each version's last state under its name, which is what writing each step in turn leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Collection, Iterable, Mapping

from cdc.errors import UserError
from merger.history.change import DELETE, SNAPSHOT, TRUNCATE, UPSERTS, Change

# a version's own columns in every sink's SCD type 2 table (docs/history.md)
START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ, CURRENT = (
    "__start_at",
    "__end_at",
    "__start_seq",
    "__end_seq",
    "__last_seq",
    "__current",
)
SNAPSHOT_OPENED = "snapshot_opened"  # a re-snapshot found a tracked difference (or a row the history deleted)
SNAPSHOT_UPDATED = "snapshot_updated"  # a re-snapshot found a difference in untracked columns only


class HistoryOptionsError(UserError, ValueError):
    """History options that do not fit the table (one line for the user)."""


@dataclass(frozen=True)
class SCD2Options:
    """Which columns open a new version when they change: ``track_history`` (the tracked
    columns), or ``track_history_except`` (every non-key column but these); neither: all
    non-key columns. Changes of the other columns update the current version in place."""

    keys: tuple[str, ...]
    track_history: tuple[str, ...] | None = None
    track_history_except: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("keys", "track_history", "track_history_except"):
            listed = getattr(self, name)
            if isinstance(listed, str):
                raise HistoryOptionsError(f"history options: {name} must be a list of column names, got {listed!r}")
            if listed is not None:  # a configuration's lists, kept as tuples: options stay hashable
                object.__setattr__(self, name, tuple(listed))
        if not self.keys:
            raise HistoryOptionsError("history options: keys lists no column")
        if self.track_history is not None and self.track_history_except is not None:
            raise HistoryOptionsError("history options: give track_history or track_history_except, not both")
        for name in ("track_history", "track_history_except"):
            listed = getattr(self, name)
            if listed is None:
                continue
            if not listed:  # AUTO CDC reads an empty list as none given: say it instead of guessing
                raise HistoryOptionsError(
                    f"history options: {name} lists no column (leave it out to track every column)"
                )
            keyed = [c for c in listed if c in self.keys]
            if keyed:
                raise HistoryOptionsError(f"history options: {name} lists key column(s) {', '.join(keyed)}")

    def validate(self, columns: Collection[str]) -> None:
        """Refuse columns the table does not have (``columns``: its column names)."""
        for name in ("keys", "track_history", "track_history_except"):
            unknown = [c for c in getattr(self, name) or () if c not in columns]
            if unknown:
                raise HistoryOptionsError(
                    f"history options: {name} names unknown column(s) {', '.join(unknown)} "
                    f"(the table has {', '.join(columns)})"
                )

    def tracks(self, column: str) -> bool:
        if column in self.keys:
            return False
        if self.track_history is not None:
            return column in self.track_history
        return self.track_history_except is None or column not in self.track_history_except


@dataclass(frozen=True)
class Version:
    """One version of a key's row; ``end_sequence`` None: the current version."""

    key: tuple
    values: Mapping[str, Any]
    start_sequence: int
    start_time: Any
    last_sequence: int
    end_sequence: int | None = None
    end_time: Any = None

    @property
    def is_current(self) -> bool:
        return self.end_sequence is None

    @property
    def applied_through(self) -> int:
        """The key's applied sequence when this is its latest version."""
        return self.last_sequence if self.end_sequence is None else self.end_sequence

    @property
    def boundary_time(self) -> Any:
        """The latest time on the key's history when this is its latest version."""
        return self.start_time if self.end_sequence is None else self.end_time


@dataclass(frozen=True)
class Note:
    """Something a sink should tell the user (``kind``: SNAPSHOT_OPENED, SNAPSHOT_UPDATED)."""

    key: tuple
    sequence: int
    kind: str
    text: str


@dataclass(frozen=True)
class Step:
    """What one change does: the key's latest version rewritten (closed and/or updated in
    place), a version opened, a note. All None: nothing."""

    rewritten: Version | None = None
    opened: Version | None = None
    note: Note | None = None


@dataclass
class Plan:
    """What to write. ``inserted``: versions new to the sink (some already closed, when a
    batch opened and closed them); ``updated``: versions the sink holds, rewritten whole
    (closed, or values changed in place), named by ``(key, start_sequence)``."""

    inserted: list[Version] = field(default_factory=list)
    updated: list[Version] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    @property
    def upserts(self) -> list[Version]:
        return self.inserted + self.updated

    def __bool__(self) -> bool:
        return bool(self.inserted or self.updated)


def is_replay(latest: Version | None, change: Change) -> bool:
    return latest is not None and change.sequence <= latest.applied_through


def differing_columns(old: Mapping[str, Any], new: Mapping[str, Any], options: SCD2Options) -> list[str]:
    """The non-key columns whose values differ (a column missing on one side is None there)."""
    names = [c for c in old if c not in options.keys] + [c for c in new if c not in old and c not in options.keys]
    return [c for c in names if old.get(c) != new.get(c)]


def closed(version: Version, sequence: int, time: Any) -> Version:
    return replace(version, end_sequence=sequence, end_time=time)


def opened(change: Change, time: Any) -> Version:
    return Version(change.key, dict(change.values), change.sequence, time, change.sequence)


def apply_change(latest: Version | None, change: Change, options: SCD2Options) -> Step:
    """One change on its key's latest version (None: the key has no history)."""
    if change.op == TRUNCATE:
        raise ValueError("a truncate is applied with scd2.truncate, not as a change of one key")
    if latest is not None and latest.key != change.key:
        raise ValueError(f"latest version of key {latest.key!r} given for a change of key {change.key!r}")
    if is_replay(latest, change):
        return Step()
    time = change.time if latest is None else max(change.time, latest.boundary_time)
    current = latest if latest is not None and latest.is_current else None
    if change.op == DELETE:
        return Step(rewritten=closed(current, change.sequence, time)) if current else Step()
    if change.op not in UPSERTS:
        raise ValueError(f"unknown op {change.op!r} of a change of key {change.key!r}")
    if current is None:
        note = None
        if change.op == SNAPSHOT and latest is not None:
            note = Note(
                change.key,
                change.sequence,
                SNAPSHOT_OPENED,
                f"re-snapshot found a row for key {change.key!r} that the history holds as deleted "
                f"(at sequence {latest.end_sequence}): new version opened at sequence {change.sequence}",
            )
        return Step(opened=opened(change, time), note=note)
    differing = differing_columns(current.values, change.values, options)
    if not differing:
        return Step()
    snapshot = change.op == SNAPSHOT
    if any(options.tracks(c) for c in differing):
        note = None
        if snapshot:
            note = Note(
                change.key,
                change.sequence,
                SNAPSHOT_OPENED,
                f"re-snapshot found a different value for key {change.key!r} "
                f"(column(s) {', '.join(differing)}): new version opened at sequence {change.sequence}",
            )
        return Step(rewritten=closed(current, change.sequence, time), opened=opened(change, time), note=note)
    note = None
    if snapshot:
        note = Note(
            change.key,
            change.sequence,
            SNAPSHOT_UPDATED,
            f"re-snapshot found a different value for key {change.key!r} in untracked column(s) "
            f"{', '.join(differing)}: current version updated in place at sequence {change.sequence}",
        )
    return Step(rewritten=replace(current, values=dict(change.values), last_sequence=change.sequence), note=note)


def apply_changes(latest: Mapping[tuple, Version], changes: Iterable[Change], options: SCD2Options) -> Plan:
    """A batch of changes of one table. ``latest``: the latest version (open or closed) of
    each key the batch changes that has a history; a key missing has none."""
    by_key: dict[tuple, list[Change]] = {}
    for change in changes:
        by_key.setdefault(change.key, []).append(change)
    inserted: dict[tuple, Version] = {}
    updated: dict[tuple, Version] = {}
    notes: list[Note] = []
    for key, key_changes in by_key.items():
        version = latest.get(key)
        for change in sorted(key_changes, key=lambda c: c.sequence):  # stable: a repeat stays a replay
            step = apply_change(version, change, options)
            for written in (step.rewritten, step.opened):
                if written is None:
                    continue
                name = (key, written.start_sequence)
                # a version this batch opened stays an insert, whatever happens to it after
                if written is step.opened or name in inserted:
                    inserted[name] = written
                else:
                    updated[name] = written
                version = written
            if step.note is not None:
                notes.append(step.note)
    return Plan(inserted=list(inserted.values()), updated=list(updated.values()), notes=notes)


def truncate(current: Iterable[Version], sequence: int, time: Any) -> Plan:
    """A TRUNCATE at ``sequence``: every current version applied below it closes there.
    ``current``: the table's current versions. As one statement:
    ``UPDATE h SET end_sequence = :sequence, end_time = GREATEST(:time, start_time)
    WHERE end_sequence IS NULL AND last_sequence < :sequence``."""
    updated = [
        closed(v, sequence, max(time, v.start_time))
        for v in current
        if v.end_sequence is None and v.last_sequence < sequence
    ]
    return Plan(updated=updated)
