"""DBLog reconciliation of snapshot chunks against the change stream, as plain Python.

No I/O here: no Spark, no Kafka, no database. The caller feeds what it reads from one
table's topic and gets told which snapshot rows to emit, and with which sequence
(``emitted_rows``, over Arrow).

The protocol (see docs/architecture.md, "Snapshots")
----------------------------------------------------
A *window* (an id string) covers one or more key-range chunks of a table T. The merger:

1. calls ``Reconciler.open_window`` (and persists the state) *before* it writes LOW;
2. writes the LOW watermark row in the source database (its own committed transaction);
3. SELECTs the window's chunks (each in a fresh transaction that starts after LOW
   committed) and stages the rows elsewhere (disk, sink staging; never this module);
4. writes the HIGH watermark row, then calls ``mark_staged`` once the rows are staged.

Ingest turns each watermark write into a marker ``(window id, LOW|HIGH)`` written into
EVERY partition of T's topic, in binlog order with the data events. In partition p the
markers therefore cut p's stream where the watermark commits fell in the binlog.

Rules, per window:

* In partition p, every event read *after* the LOW marker of p marks its key as *seen*
  (the key's row is removed from the chunk). Events before LOW in p do not count: the
  SELECT started after LOW committed, so it already reflects them.
* Seen keys keep being recorded after HIGH, until the window is emitted. A row changed
  after HIGH is not emitted, so a late emission never overwrites a newer change.
* A truncate event (op ``t``) after LOW in any partition drops the whole window: the
  staged rows may predate the truncate, and everything written after the truncate
  arrives as stream events anyway.
* The window is *ready* once HIGH has been read in every partition and the rows are
  staged. ``emitted_rows`` then keeps the staged rows whose key was not seen.
* A window whose markers do not all arrive within a timeout (the caller passes its own
  clock values) is reported by ``expired``, unless the reader has not yet read all of a
  partition that lacks its HIGH marker (the caller says which are behind); the caller
  ``finish``-es it and retries its chunks in a new window with new watermarks. Markers
  of unknown or finished windows are ignored, so window ids must never be reused.
* A HIGH marker without a LOW marker before it in the same partition means the window
  can't be reconciled (LOW was lost, or the window was opened after LOW was written);
  such a window is reported by ``expired`` at once, with ``Window.problem`` saying why.

Watermarks without writes: the source's own positions
------------------------------------------------------
Where the merger may not write to the source, a window's watermarks are positions read
from the server instead (``open_positional_window``; ``Positions``): LOW, read after the
window opened and before the chunk SELECT, and HIGH, read after it, as sequences (the
sequence of the next binlog position at the time of the read). Nothing is written, so no
marker comes through the stream; instead:

* LOW: every event read after the window opened marks its key seen, in every partition
  (as if a LOW marker were at each partition's read point then). The events read before
  it must all lie below LOW, or the SELECT may not reflect them: a source behind what the
  merger had already read (a lagging replica) makes the window a ``problem`` at once
  (``position_low``), read again later with new positions.
* HIGH: the window's rows carry the sequence ``HIGH - 1``, below every change not
  reflected by the SELECT (those lie at or after HIGH, or were read after the window
  opened and are seen). The window is ready once every partition has been read through
  ``HIGH - 1`` (``on_read_through``: the caller knows it from the producer's committed
  position and the partitions' ends; a partition of a quiet table is read through
  whatever the producer committed). A HIGH already behind what was read (a lagging
  replica) is ready at once: the keys changed since LOW were read after the window opened.

Everything else (truncates, expiry, emission, saved state) is the marker rule's.

The sequence rule (see docs/architecture.md, "Sequences" and "Idempotence")
---------------------------------------------------------------------------
Every change the merger applies carries an integer *sequence* that orders all changes
of one key (all changes of a key live in that key's partition):

* a streamed event: its binlog position (``cdc.wire.position.EventPosition.sequence``,
  the ``_cdc_seq`` column), which orders changes along the binlog across partitions;
* an emitted chunk row: the binlog position of the window's HIGH watermark write. That
  one write becomes a marker in every partition, all carrying the same position, so a
  window has one HIGH sequence (``high_sequence``).

(Topics written by Debezium itself use the Kafka offset instead, see merger.sources.debezium_topics.)

A sink applies a change only if its sequence is greater than the one it holds for the
key; a delete is kept as a tombstone carrying its sequence, so an older change (a replay,
or a chunk row emitted late) can never resurrect the row. A truncate at sequence s in
partition p turns every key of p held with a smaller sequence into a tombstone at s
(ingest writes a truncate into every partition, like a marker). The tests' reference
sink (``tests/support/dict_sink.py``) is this rule on a dict.

``emitted_rows`` is the emission rule the merger runs (over Arrow): which staged rows of
a ready window survive, and with which sequence.

Why this converges: take a key k and an emitted row of k with sequence h = the HIGH
position. If k's last change lies after h in the binlog, that change wins in the sink.
If it lies between LOW and h, it was read before the window became ready, so k was seen
and its row not emitted. Otherwise k did not change after LOW, and any SELECT started
after LOW returns k's final row.

Duplicates and restarts
-----------------------
Records of one partition must be fed in order. A record at an "offset" (the sequence the
caller passes) not above the last one processed for its partition is a replay (after a
crash) and is ignored;
``on_event``/``on_marker`` return False for it. The caller still hands replayed events
to the sink, whose sequence check makes that harmless. ``to_dict``/``from_dict`` give an
exact JSON form of the state; save it after processing a batch and before committing
that batch's Kafka offsets, so a restart replays from at or before the saved state
(a replay from later would miss seen keys).

Memory: every key read after LOW is recorded, whatever chunk it belongs to (filtering
by range here would need the database's collation); seen sets live only while a window
is open, so keep windows short. Keys are hashable tuples and must compare equal between
``key_of(row)`` of a staged row and the key of an event (same Python types).
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, Callable, Collection, Hashable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

LOW = "LOW"
HIGH = "HIGH"
OPS = frozenset({"c", "u", "d", "r", "t"})
STATE_VERSION = 1

Key = Hashable
Row = Any


class _Deleted:
    """The tombstone value of the model sink (a singleton)."""

    _instance: "_Deleted | None" = None

    def __new__(cls) -> "_Deleted":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DELETED"

    def __reduce__(self):
        return (_Deleted, ())


DELETED = _Deleted()


@dataclass
class Positions:
    """A positional window's watermarks (sequences of positions read from the source)."""

    # the highest sequence read in any partition when the window opened (-1: none)
    read_at_open: int
    low: int | None = None  # LOW: the source's next position before the SELECT
    high: int | None = None  # HIGH: the source's next position after it; rows at high - 1


@dataclass
class Window:
    """State of one open snapshot window. Read it; change it only through Reconciler."""

    window_id: str
    chunk_ids: tuple[str, ...]
    opened_at: float
    low: dict[int, int] = field(default_factory=dict)  # partition -> LOW marker sequence
    high: dict[int, int] = field(default_factory=dict)  # partition -> HIGH marker sequence
    seen: set = field(default_factory=set)  # keys changed since LOW
    truncated: bool = False  # a truncate came after LOW
    staged: bool = False  # chunk rows are staged
    problem: str | None = None  # why it can't be reconciled
    # LOW/HIGH -> the marker's "cutover" (key mode unique: the moves its shard had passed there)
    cutover: dict = field(default_factory=dict)
    # the HIGH marker's source commit time (microseconds): the time of the window's rows in
    # a history table (merger.history.modes); None: not known (a marker without one)
    high_time_us: int | None = None
    # in a state the merger saved (``Reconciler.mark_saved``, or restored from one): a batch
    # re-run after a crash restores it. Not saved itself, nor compared.
    saved: bool = field(default=False, compare=False)
    # watermarks read from the source's positions instead of markers (None: marker window)
    positions: Positions | None = None


class Reconciler:
    """DBLog reconciliation state of one table whose topic has ``num_partitions``."""

    def __init__(self, num_partitions: int):
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise ValueError(f"num_partitions must be a positive int, got {num_partitions!r}")
        self.num_partitions = num_partitions
        self.last_offsets: dict[int, int] = {}  # partition -> last processed sequence ("offset")
        # partition -> a sequence through which it has been read (``on_read_through``); not
        # saved: the reader tells it again after a restart
        self.read_through: dict[int, int] = {}
        self.windows: dict[str, Window] = {}

    # -- windows ------------------------------------------------------------------

    def open_window(self, window_id: str, chunk_ids: Iterable[str], opened_at: float) -> Window:
        """Start tracking a window. Call (and persist) before writing its LOW watermark."""
        if not isinstance(window_id, str) or not window_id:
            raise ValueError(f"window id must be a non-empty string, got {window_id!r}")
        if window_id in self.windows:
            raise ValueError(f"window {window_id!r} is already open")
        window = Window(window_id, tuple(chunk_ids), opened_at)
        self.windows[window_id] = window
        return window

    def open_positional_window(self, window_id: str, chunk_ids: Iterable[str], opened_at: float) -> Window:
        """Start tracking a window whose watermarks are the source's positions (no marker
        comes): every event read from now on marks its key seen. Call (and persist) before
        reading LOW from the source."""
        window = self.open_window(window_id, chunk_ids, opened_at)
        window.low = {p: self.last_offsets.get(p, -1) for p in range(self.num_partitions)}
        window.positions = Positions(read_at_open=max(self.last_offsets.values(), default=-1))
        return window

    def position_low(self, window_id: str, low: int) -> None:
        """LOW of a positional window: the sequence of the source's next position, read
        before the SELECT. A LOW not above everything read before the window opened is a
        ``problem`` (the source is behind the stream: the SELECT may miss changes already
        read, whose keys were not seen)."""
        window, positions = self._positional(window_id)
        if not isinstance(low, int) or low < 0:
            raise ValueError(f"LOW must be a non-negative int, got {low!r}")
        if positions.low is not None:
            raise ValueError(f"window {window_id!r} already has its LOW position")
        positions.low = low
        if positions.read_at_open >= low and window.problem is None:
            window.problem = (
                f"the source's position (sequence {low}) is behind what the merger had read "
                f"(sequence {positions.read_at_open}): a lagging source; read again later"
            )
            window.seen.clear()

    def position_high(self, window_id: str, high: int, time_us: int | None = None) -> None:
        """HIGH of a positional window: the sequence of the source's next position, read
        after the SELECT (``time_us``: the source's time then, for history tables). Its rows
        are emitted at ``high - 1`` once every partition is read through that."""
        window, positions = self._positional(window_id)
        if positions.low is None:
            raise ValueError(f"window {window_id!r} has no LOW position")
        if not isinstance(high, int) or high < positions.low:
            raise ValueError(f"HIGH must be an int not below LOW ({positions.low}), got {high!r}")
        if positions.high is not None:
            raise ValueError(f"window {window_id!r} already has its HIGH position")
        positions.high = high
        window.high_time_us = time_us
        if window.problem is None:
            for partition, through in self.read_through.items():
                if through >= high - 1:
                    window.high[partition] = high - 1

    def on_read_through(self, partition: int, sequence: int) -> None:
        """``partition`` holds no unread record with a sequence at or below ``sequence``:
        positional windows whose HIGH it passes have their HIGH in it."""
        if not isinstance(partition, int) or not 0 <= partition < self.num_partitions:
            raise ValueError(f"partition {partition!r} is outside 0..{self.num_partitions - 1}")
        if not isinstance(sequence, int):
            raise ValueError(f"sequence must be an int, got {sequence!r}")
        if sequence <= self.read_through.get(partition, -1):
            return
        self.read_through[partition] = sequence
        for window in self.windows.values():
            positions = window.positions
            if positions is None or positions.high is None or window.problem is not None:
                continue
            if sequence >= positions.high - 1:
                window.high.setdefault(partition, positions.high - 1)

    def _positional(self, window_id: str) -> tuple[Window, Positions]:
        window = self.window(window_id)
        if window.positions is None:
            raise ValueError(f"window {window_id!r} has watermark markers, not positions")
        return window, window.positions

    def window(self, window_id: str) -> Window:
        try:
            return self.windows[window_id]
        except KeyError:
            raise KeyError(f"window {window_id!r} is not open") from None

    def mark_staged(self, window_id: str) -> None:
        """The window's chunk rows are staged (call after its SELECTs are stored)."""
        self.window(window_id).staged = True

    def is_ready(self, window_id: str) -> bool:
        w = self.windows.get(window_id)
        return w is not None and w.staged and w.problem is None and len(w.high) == self.num_partitions

    def ready_windows(self) -> list[str]:
        """Ids of the windows that can be emitted now, oldest first."""
        ready = [w for w in self.windows.values() if self.is_ready(w.window_id)]
        ready.sort(key=lambda w: (w.opened_at, w.window_id))
        return [w.window_id for w in ready]

    def emittable_windows(self) -> list[str]:
        """The ready windows a batch may emit: those in the state the last batch saved. A
        window opened since (between two batches; LOW is written after it opens) is not in
        the state a re-run of this batch restores after a crash, which would then read its
        chunks again in a new window while the sinks kept what this run emitted: a change
        log would hold those rows twice. It is emitted by the next batch."""
        return [wid for wid in self.ready_windows() if self.windows[wid].saved]

    def mark_saved(self) -> None:
        """The state with every open window is saved (``emittable_windows``)."""
        for window in self.windows.values():
            window.saved = True

    def finish(self, window_id: str) -> None:
        """Forget a window (emitted, or given up). Its late markers are then ignored."""
        self.windows.pop(window_id, None)

    def expired(self, now: float, timeout: float, behind: Collection[int] = ()) -> list[str]:
        """Ids of windows to give up and retry with new watermarks, oldest first.

        A window expires when its HIGH marker has not been read in every partition
        ``timeout`` after it was opened, or at once when it has a ``problem``. Not while a
        partition that lacks its HIGH marker is in ``behind`` (it holds records the reader
        has not read yet: the marker may be among them, and a window read again would only
        add markers behind the same backlog).
        """
        out = [
            w
            for w in self.windows.values()
            if w.problem is not None
            or (
                len(w.high) < self.num_partitions
                and now - w.opened_at > timeout
                and not any(p in behind and p not in w.high for p in range(self.num_partitions))
            )
        ]
        out.sort(key=lambda w: (w.opened_at, w.window_id))
        return [w.window_id for w in out]

    # -- the stream -------------------------------------------------------------------

    def _accept(self, partition: int, offset: int) -> bool:
        if not isinstance(partition, int) or not 0 <= partition < self.num_partitions:
            raise ValueError(f"partition {partition!r} is outside 0..{self.num_partitions - 1}")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        if offset <= self.last_offsets.get(partition, -1):
            return False  # a replay of something already processed
        self.last_offsets[partition] = offset
        return True

    def on_marker(
        self,
        partition: int,
        offset: int,
        window_id: str,
        kind: str,
        sequence: int | None = None,
        cutover: dict | None = None,
        time_us: int | None = None,
        counted: bool = False,
    ) -> bool:
        """A watermark marker read from ``partition``. False if it was a replay. ``offset``
        rises along the partition; ``sequence``: the marker's own, when it is not the offset
        (a sharded source's, whose shards' sequences do not rise along a partition);
        ``cutover``: the marker's (key mode unique; every copy carries the same);
        ``time_us``: its source commit time (every copy carries the same); ``counted``: the
        sequence is ingest's emission counter (key mode unique), one value in every copy
        unless ingest crashed part-way through them: HIGH copies that differ make the
        window a ``problem`` (read again with new watermarks)."""
        kind = str(kind).upper()
        if kind not in (LOW, HIGH):
            raise ValueError(f"marker kind must be LOW or HIGH, got {kind!r}")
        if not self._accept(partition, offset):
            return False
        window = self.windows.get(window_id)
        if window is None or window.problem is not None:
            return True  # unknown, finished or failed window
        if kind == LOW:
            window.low.setdefault(partition, offset)
        elif partition not in window.low:
            window.problem = f"HIGH marker at offset {offset} of partition {partition} without a LOW marker before it"
            window.seen.clear()
            return True
        else:
            value = window.high.setdefault(partition, offset if sequence is None else sequence)
            if counted and value != window.high[next(iter(window.high))]:
                # key mode unique, a broker that shows aborted records: ingest crashed part-way
                # through the copies, and the next run gave the marker another counter. Neither
                # value is the window's: a change made after HIGH may carry a counter between
                # them (an aborted record read late). The window is read again.
                window.problem = (
                    f"HIGH marker copies with different counters ({sorted(set(window.high.values()))}: an ingest "
                    "crash part-way through them)"
                )
                window.seen.clear()
                return True
            if window.high_time_us is None:
                window.high_time_us = time_us
        if cutover is not None:
            window.cutover.setdefault(kind, cutover)
        return True

    def on_event(
        self, partition: int, offset: int, key: Key, op: str, emptied: Callable[[Window], bool] | None = None
    ) -> bool:
        """A change event read from ``partition``. False if it was a replay.

        ``op`` is one of c/u/d/r/t; for ``t`` (truncate) the key is ignored, and
        ``emptied`` says which windows it empties (None: all; a TRUNCATE of one origin of
        a logical table empties that origin's). Kafka tombstones (null values after
        deletes) carry no change: don't pass them.
        """
        if op not in OPS:
            raise ValueError(f"op must be one of c/u/d/r/t, got {op!r}")
        if not self._accept(partition, offset):
            return False
        for window in self.windows.values():
            if partition not in window.low:
                if window.positions is None:
                    continue  # its LOW marker has not come in this partition
                # a partition met after a positional window opened (the topic grew, or its
                # partition count was not known yet) had no event before: all are after LOW
                window.low[partition] = -1
            if window.truncated or window.problem:
                continue
            if op == "t":
                if emptied is None or emptied(window):
                    self._empty(window)
            else:
                window.seen.add(key)
        return True

    def empty_windows(self, emptied: Callable[[Window], bool]) -> None:
        """The open windows ``emptied`` names emit nothing (a TRUNCATE, or a table renamed
        onto their origin, came after their LOW): their rows may be older than it."""
        for window in self.windows.values():
            if not window.truncated and not window.problem and emptied(window):
                self._empty(window)

    @staticmethod
    def _empty(window: Window) -> None:
        window.truncated = True
        window.seen.clear()  # nothing will be emitted

    # -- persistence --------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The whole state as JSON-compatible data (exact for all supported key types)."""
        return {
            "version": STATE_VERSION,
            "num_partitions": self.num_partitions,
            "last_offsets": sorted([p, o] for p, o in self.last_offsets.items()),
            "windows": [_window_to_dict(w) for w in self.windows.values()],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Reconciler":
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported reconciler state version {data.get('version')!r}")
        rec = cls(data["num_partitions"])
        rec.last_offsets = {int(p): int(o) for p, o in data["last_offsets"]}
        for wd in data["windows"]:
            w = Window(
                window_id=wd["id"],
                chunk_ids=tuple(wd["chunk_ids"]),
                opened_at=wd["opened_at"],
                low={int(p): int(o) for p, o in wd["low"]},
                high={int(p): int(o) for p, o in wd["high"]},
                seen={decode_key(k) for k in wd["seen"]},
                truncated=bool(wd["truncated"]),
                staged=bool(wd["staged"]),
                problem=wd["problem"],
                cutover=wd.get("cutover", {}),
                high_time_us=wd.get("high_time_us"),
                saved=True,
                positions=Positions(**wd["positions"]) if "positions" in wd else None,
            )
            rec.windows[w.window_id] = w
        return rec


def _window_to_dict(w: Window) -> dict:
    seen = [encode_key(k) for k in w.seen]
    seen.sort(key=lambda e: json.dumps(e, sort_keys=True))  # deterministic output
    out = {
        "id": w.window_id,
        "chunk_ids": list(w.chunk_ids),
        "opened_at": w.opened_at,
        "low": sorted([p, o] for p, o in w.low.items()),
        "high": sorted([p, o] for p, o in w.high.items()),
        "seen": seen,
        "truncated": w.truncated,
        "staged": w.staged,
        "problem": w.problem,
    }
    if w.cutover:  # only key mode unique's windows: the others' state stays as it was
        out["cutover"] = w.cutover
    if w.high_time_us is not None:
        out["high_time_us"] = w.high_time_us
    if w.positions is not None:  # only positional windows: the others' state stays as it was
        out["positions"] = asdict(w.positions)
    return out


# -- the emission rule --------------------------------------------------------------------


def high_sequence(window: Window) -> int:
    """The sequence of a ready window's emitted rows: its HIGH watermark's binlog position
    (every partition's HIGH marker carries the same one; copies with different counters
    are a ``problem``, the window never ready)."""
    return window.high[next(iter(window.high))]


def window_survives(window: Window, truncated_through: int) -> bool:
    """False if a truncate came after LOW: seen in the stream (``truncated``), or a cut
    the table applied at a later position than HIGH (``truncated_through``: a truncate,
    drop or reset read since). Nothing of such a window is emitted."""
    return not window.truncated and high_sequence(window) >= truncated_through


def unseen_mask(rows: pa.Table, keys: list[str], seen: set) -> pa.Array:
    """True for the rows whose key (the ``keys`` columns, as a tuple) is not in ``seen``;
    in bulk: a snapshot window is often large and ``seen`` small."""
    if not seen:
        return pa.repeat(pa.scalar(True), rows.num_rows)
    if len(keys) == 1:
        col = rows.column(keys[0])
        values = pa.array([k[0] for k in seen], col.type)
        return pc.invert(pc.is_in(col, value_set=values))
    tuples = zip(*[rows.column(k).to_pylist() for k in keys])
    return pa.array([key not in seen for key in tuples])


def emitted_rows(window: Window, rows: pa.Table, keys: list[str], truncated_through: int = 0) -> pa.Table:
    """Of a ready window's staged ``rows`` (all of them or a slice), those emitted: none if
    the window does not survive (``window_survives``), else the rows whose key was not
    seen since LOW, as ``r`` changes at the HIGH sequence (columns ``_cdc_op`` and
    ``_cdc_seq`` appended). The window stays open (and keeps recording keys) until
    ``finish``: an interrupted emission can be run again."""
    rows = (
        rows.filter(unseen_mask(rows, keys, window.seen))
        if window_survives(window, truncated_through)
        else rows.slice(0, 0)
    )
    seq = high_sequence(window)
    return rows.append_column("_cdc_op", pa.repeat(pa.scalar("r"), rows.num_rows)).append_column(
        "_cdc_seq", pa.repeat(pa.scalar(seq, pa.int64()), rows.num_rows)
    )


def swept_keys(
    window: Window, asked: pa.Table, read: pa.Table, keys: list[str], truncated_through: int = 0
) -> pa.Table:
    """The deletes a ready *key-list* window emits (``cdc repair``): of the ``asked`` keys
    (a table of the ``keys`` columns: keys a sink holds that may be gone at the source),
    those the window's SELECT did not return (``read``: the staged rows' keys) and that
    were not seen since LOW, as ``d`` changes at the HIGH sequence; none if the window
    does not survive.

    Why this is exact: the SELECT ran between LOW and HIGH and did not find k, so k was
    absent at some instant after LOW; k was not changed from LOW until the emission, so it
    is still absent, and any later change of k carries a sequence above HIGH and wins. A
    re-read of the source (``emitted_rows``) cannot remove a row only the sink holds;
    this can, and never deletes a row the source has."""
    if not window_survives(window, truncated_through) or asked.num_rows == 0:
        gone = asked.slice(0, 0)
    else:
        gone = asked.filter(unseen_mask(asked, keys, window.seen))
        if read.num_rows and gone.num_rows:
            gone = gone.filter(_absent_mask(gone, read, keys))
    seq = high_sequence(window)
    return gone.append_column("_cdc_op", pa.repeat(pa.scalar("d"), gone.num_rows)).append_column(
        "_cdc_seq", pa.repeat(pa.scalar(seq, pa.int64()), gone.num_rows)
    )


def _absent_mask(rows: pa.Table, other: pa.Table, keys: list[str]) -> pa.Array:
    """True for the rows of ``rows`` whose key (exactly equal values) ``other`` lacks."""
    if len(keys) == 1:
        col = rows.column(keys[0])
        return pc.invert(pc.is_in(col, value_set=pc.cast(other.column(keys[0]), col.type).combine_chunks()))
    present = set(zip(*[other.column(k).to_pylist() for k in keys]))
    return pa.array([key not in present for key in zip(*[rows.column(k).to_pylist() for k in keys])])


# -- exact JSON form of keys -----------------------------------------------------------
# Every value becomes [tag, payload]; tuples nest. Ints are written as strings so that
# readers with 64-bit floats for JSON numbers can't round them.


def encode_key(value: Any) -> list:
    """A key (tuple of int/str/bytes/float/Decimal/None/bool/date/time...) as JSON data."""
    if value is None:
        return ["n", None]
    if isinstance(value, bool):
        return ["?", value]
    if isinstance(value, int):
        return ["i", str(int(value))]
    if isinstance(value, float):
        return ["f", value.hex()]
    if isinstance(value, Decimal):
        return ["d", str(value)]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ["b", bytes(value).hex()]
    if isinstance(value, tuple):
        return ["t", [encode_key(v) for v in value]]
    if isinstance(value, _dt.datetime):
        return ["dt", value.isoformat()]
    if isinstance(value, _dt.date):
        return ["da", value.isoformat()]
    if isinstance(value, _dt.time):
        return ["ti", value.isoformat()]
    if isinstance(value, _dt.timedelta):
        return ["td", [value.days, value.seconds, value.microseconds]]
    raise TypeError(f"can't encode a key value of type {type(value).__name__}: {value!r}")


def decode_key(data: list) -> Any:
    """Inverse of ``encode_key``."""
    tag, payload = data
    if tag == "n":
        return None
    if tag == "?":
        return bool(payload)
    if tag == "i":
        return int(payload)
    if tag == "f":
        return float.fromhex(payload)
    if tag == "d":
        return Decimal(payload)
    if tag == "s":
        return payload
    if tag == "b":
        return bytes.fromhex(payload)
    if tag == "t":
        return tuple(decode_key(v) for v in payload)
    if tag == "dt":
        return _dt.datetime.fromisoformat(payload)
    if tag == "da":
        return _dt.date.fromisoformat(payload)
    if tag == "ti":
        return _dt.time.fromisoformat(payload)
    if tag == "td":
        return _dt.timedelta(days=payload[0], seconds=payload[1], microseconds=payload[2])
    raise ValueError(f"unknown key tag {tag!r}")
