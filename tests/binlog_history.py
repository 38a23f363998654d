"""An independent model of history tables (issue 27), built from the source's binlog order.

The binlog is read with MariaDB's own decoder, ``mariadb-binlog --base64-output=DECODE-ROWS
-vv --print-table-metadata`` (no code of ingest or the merger): with
``binlog_row_metadata=FULL`` each table map names its columns and primary key, so column
additions, drops, moves and type changes are followed without knowing the DDL.

``parse`` turns that text into ``RowChange``s in binlog order: an insert, an update (a key
change is a delete of the old key and an insert of the new, as Debezium writes it), a
delete, or a TRUNCATE of a table. Values are compared in one canonical form (``canon``)
that each side reaches from its own types: the binlog's text, a pymysql row, a psycopg row,
a deltalake Arrow value. Strings keep the binlog's printed form (bytes below 0x20 as
``\\xNN``, everything else as is): every other side's strings are printed the same way.

The models are the issue's semantics, written plainly:

* ``changelog``: a table's change log holds, in sequence order, every change once (a
  delete keeps its key only, a TRUNCATE is one row with no key), plus at most one snapshot
  row per key, equal to the key's state at its place; a key that existed throughout has
  exactly one;
* ``versions``: an SCD type 2 table holds, per key, a version per change of values (every
  column tracked): an insert or update that changes a value closes the current version and
  opens one; a delete or TRUNCATE closes it. A key present before the changes starts with
  its snapshot version, unless the snapshot read it only after some of its changes: then
  its history starts with them (both are accepted; a key no change touched must have its
  snapshot version).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

INSERT, UPDATE, DELETE, TRUNCATE, SNAPSHOT = "c", "u", "d", "t", "r"
DDL = "ddl"  # an ALTER TABLE or CREATE INDEX of the table: its place in the binlog


@dataclass(frozen=True)
class RowChange:
    op: str  # c, u, d, t, ddl
    table: str
    key: tuple | None  # canonical key values; None for a TRUNCATE or DDL
    values: Mapping[str, Any] | None  # canonical after image (c, u); None for d and t
    before: Mapping[str, Any] | None = None  # canonical before image (u, d); None for c and t


# ----------------------------------------------------------------------------- values


def printed(s: str) -> str:
    """A string as mariadb-binlog prints it: bytes below 0x20 as ``\\xNN``."""
    return "".join(f"\\x{ord(ch):02x}" if ord(ch) < 0x20 else ch for ch in s)


def canon(v: Any) -> Any:
    """One form for a value read by any client: numbers as Decimal, datetimes naive UTC,
    strings as the binlog prints them."""
    if v is None:
        return None
    if isinstance(v, bool):
        return Decimal(int(v))
    if isinstance(v, (int, Decimal)):
        return Decimal(v)
    if isinstance(v, float):
        return Decimal(repr(v))
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(timezone.utc).replace(tzinfo=None)
        return v
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    if isinstance(v, str):
        return printed(v)
    raise TypeError(f"no canonical form for {type(v).__name__} {v!r}")


_INT = re.compile(r"^(-?\d+)(?: \((\d+)\))?$")


def binlog_value(text: str, column_type: str) -> Any:
    """A value printed by mariadb-binlog (``text``: between ``@N=`` and the type comment),
    of a column declared ``column_type`` in the table map, in canonical form."""
    if text == "NULL":
        return None
    upper = column_type.upper()
    if upper.startswith(("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT")):
        m = _INT.match(text)
        if not m:
            raise ValueError(f"not an integer: {text!r} ({column_type})")
        # an integer whose top bit is set is printed signed, then unsigned in parentheses
        return Decimal(m.group(2) if m.group(2) and "UNSIGNED" in upper else m.group(1))
    if upper.startswith("DECIMAL"):
        return Decimal(text)
    if not (text.startswith("'") and text.endswith("'")):
        raise ValueError(f"not a quoted value: {text!r} ({column_type})")
    inner = text[1:-1]
    if upper.startswith(("DATETIME", "TIMESTAMP")):
        return datetime.fromisoformat(inner)
    return inner  # already as printed


# ----------------------------------------------------------------------------- reading


_TABLE_MAP = re.compile(r"Table_map: `([^`]+)`\.`([^`]+)` mapped to number \d+$")
_COLUMN = re.compile(r"^#\s+(?:Columns\()?`([^`]+)` (.*)[,)]$")
_PRIMARY = re.compile(r"^# Primary Key\((.*)\)$")
_ROWS = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]+)`\.`([^`]+)`$")
_VALUE = re.compile(r"^###   @(\d+)=(.*)$")
_USE = re.compile(r"^use `([^`]+)`/\*!\*/;$")
# a table named in a DDL: `db`.`t`, db.t, `t` or t
_NAME = r"(?:`?([^`\s.]+)`?\.)?`?([^`\s.(]+)`?"
_TRUNCATE = re.compile(rf"^TRUNCATE (?:TABLE )?{_NAME}\s*$", re.IGNORECASE)
_ALTER = re.compile(rf"^(?:ALTER TABLE|CREATE (?:UNIQUE )?INDEX \S+ ON) {_NAME}", re.IGNORECASE)


class BinlogText:
    """The row changes of one database in mariadb-binlog's text, in binlog order."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.columns: dict[str, list[tuple[str, str]]] = {}  # table -> [(name, type)] of its last map
        self.keys: dict[str, list[str]] = {}
        self.changes: list[RowChange] = []
        self._use: str | None = None
        self._mapping: str | None = None  # the table whose map's columns are being read
        self._rows: tuple[str, str | None] | None = None  # (kind, table) of the rows being read
        self._images: list[list[tuple[int, str]]] = []

    def feed(self, lines: Iterable[str]) -> list[RowChange]:
        for line in lines:
            self._line(line.rstrip("\n"))
        self._flush()
        return self.changes

    def _line(self, line: str) -> None:
        m = _ROWS.match(line)
        if m:
            self._flush()
            self._rows, self._images = (m.group(1), m.group(3) if m.group(2) == self.db else None), []
            return
        if self._rows is not None:
            if line in ("### WHERE", "### SET"):
                self._images.append([])
                return
            v = _VALUE.match(line)
            if v:
                value = v.group(2)
                if " /* " in value:  # -vv's type comment
                    value = value.rsplit(" /* ", 1)[0]
                self._images[-1].append((int(v.group(1)), value))
                return
            self._flush()
        m = _TABLE_MAP.search(line)
        if m:
            self._mapping = m.group(2) if m.group(1) == self.db else None
            if self._mapping:
                self.columns[self._mapping] = []
            return
        if self._mapping is not None:
            c = _COLUMN.match(line)
            if c:
                self.columns[self._mapping].append((c.group(1), c.group(2)))
                return
            p = _PRIMARY.match(line)
            if p:
                self.keys[self._mapping] = [k.strip() for k in p.group(1).split(",")]
                self._mapping = None
                return
        m = _USE.match(line)
        if m:
            self._use = m.group(1)
            return
        for pattern, op in ((_TRUNCATE, TRUNCATE), (_ALTER, DDL)):
            m = pattern.match(line)
            if m:
                if (m.group(1) or self._use) == self.db:
                    self.changes.append(RowChange(op, m.group(2), None, None))
                return

    def _image(self, table: str, image: list[tuple[int, str]]) -> tuple[tuple, dict]:
        columns = self.columns[table]
        values = {}
        for n, text in image:
            name, type_ = columns[n - 1]
            values[name] = binlog_value(text, type_)
        if table not in self.keys:
            raise AssertionError(f"no primary key in the table map of {table}: binlog_row_metadata=FULL?")
        return tuple(values[k] for k in self.keys[table]), values

    def _flush(self) -> None:
        if self._rows is None:
            return
        kind, table = self._rows
        self._rows = None
        if table is None:
            return
        images = [self._image(table, im) for im in self._images]
        if kind == "INSERT INTO":
            ((key, after),) = images
            self.changes.append(RowChange(INSERT, table, key, after))
        elif kind == "DELETE FROM":
            ((key, before),) = images
            self.changes.append(RowChange(DELETE, table, key, None, before))
        else:
            (old, before), (new, after) = images
            if old == new:
                self.changes.append(RowChange(UPDATE, table, new, after, before))
            else:
                self.changes.append(RowChange(DELETE, table, old, None, before))
                self.changes.append(RowChange(INSERT, table, new, after))


def read_binlog(datadir: Path, files: Sequence[str], start_position: int, db: str) -> list[RowChange]:
    """The row changes of ``db`` in the binlog ``files`` (the first from ``start_position``)."""
    out = subprocess.run(
        [
            "mariadb-binlog",
            "--base64-output=DECODE-ROWS",
            "-vv",
            "--print-table-metadata",
            f"--start-position={start_position}",
            *(str(datadir / f) for f in files),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise AssertionError(f"mariadb-binlog failed: {out.stderr[-2000:]}")
    return BinlogText(db).feed(out.stdout.splitlines())


# ----------------------------------------------------------------------------- models
#
# ``changes`` of one table include its DDL places (DDL and TRUNCATE), and ``captured`` is the
# source's state (a plain SELECT) right after each of them, in order. A DDL may change rows
# without row events (ADD COLUMN with a default); the merger then snapshots the table again,
# at some time after the DDL (it is planned when the merger reads the DDL, which may be
# after later DDLs). So after each DDL place a key may have one more snapshot row, equal
# to the source's state where it stands in the log.

State = Mapping[tuple, Mapping[str, Any]]


def row_values(columns: Iterable[str], values: Mapping[str, Any] | None) -> dict:
    """A change's values over a sink table's ``columns``: a column the image lacks (added
    after, or dropped before the change) is None."""
    values = values or {}
    return {c: values.get(c) for c in columns}


def logged_values(change: RowChange, columns: Sequence[str], key_columns: Sequence[str]) -> dict:
    """A change's row in a change log: the after image; a delete's key only; nothing for
    a TRUNCATE."""
    if change.op in (INSERT, UPDATE):
        return row_values(columns, change.values)
    if change.op == DELETE:
        key = dict(zip(key_columns, change.key))
        return {c: key.get(c) for c in columns}
    return {c: None for c in columns}


def logged_before(change: RowChange, columns: Sequence[str]) -> dict:
    """A change's before image in a change log kept ``image: before_after``: an update's
    old row, a delete's removed row (also a key change's delete); nothing otherwise."""
    return row_values(columns, change.before) if change.op in (UPDATE, DELETE) else {c: None for c in columns}


def is_place(change: RowChange) -> bool:
    """A DDL place: where the source's state is captured."""
    return change.op in (DDL, TRUNCATE)


class _Timeline:
    """The source's state along one table's changes, DDL places taking the captured state."""

    def __init__(self, changes: Sequence[RowChange], initial: State, captured: Sequence[State], columns):
        self.changes, self.captured, self.columns = changes, list(captured), columns
        self.state = {k: row_values(columns, v) for k, v in initial.items()}
        self.i = 0  # next change
        self.places = 0  # DDL places passed

    def _place(self) -> None:
        if self.places < len(self.captured):
            self.state = {k: row_values(self.columns, v) for k, v in self.captured[self.places].items()}
        elif self.changes[self.i].op == TRUNCATE:
            self.state = {}
        self.places += 1

    def advance_to_logged(self) -> None:
        """Past the next change a change log holds (and the DDL places before it)."""
        while is_place(self.changes[self.i]) and self.changes[self.i].op != TRUNCATE:
            self._place()
            self.i += 1
        c = self.changes[self.i]
        if c.op == TRUNCATE:
            self._place()
        elif c.op == DELETE:
            self.state.pop(c.key, None)
        else:
            self.state[c.key] = row_values(self.columns, c.values)
        self.i += 1

    def candidates(self) -> list[tuple[int, dict]]:
        """(DDL places passed, state) at this point in the log: the DDLs right ahead may
        already be behind a snapshot row placed here."""
        out = [(self.places, self.state)]
        j, places = self.i, self.places
        while j < len(self.changes) and self.changes[j].op == DDL:
            state = self.captured[places] if places < len(self.captured) else out[-1][1]
            places += 1
            out.append((places, {k: row_values(self.columns, v) for k, v in state.items()}))
            j += 1
        return out


def changelog_faults(
    changes: Sequence[RowChange],
    initial: State,
    rows: Sequence[tuple[str, tuple | None, Mapping[str, Any]]],
    columns: Sequence[str],
    key_columns: Sequence[str],
    captured: Sequence[State] = (),
    befores: Sequence[Mapping[str, Any]] | None = None,
) -> list[str]:
    """What a change log (``rows``: (op, key, values over ``columns``), canonical, in
    sequence order) has wrong against the table's binlog ``changes`` after a state
    ``initial`` (key -> values): an empty list when it is exact. ``befores``: each row's
    before image (over ``columns``), for a log kept ``image: before_after``."""
    faults: list[str] = []
    logged = [c for c in changes if c.op != DDL]
    want = [(c.op, logged_values(c, columns, key_columns)) for c in logged]
    streamed = [(r[0], dict(r[2])) for r in rows if r[0] != SNAPSHOT]
    if befores is not None:  # image: before_after
        want = [(*w, logged_before(c, columns)) for w, c in zip(want, logged)]
        streamed = [(*s, dict(b)) for s, b in zip(streamed, (b for r, b in zip(rows, befores) if r[0] != SNAPSHOT))]
        nulls = {c: None for c in columns}
        if any(b != nulls for r, b in zip(rows, befores) if r[0] == SNAPSHOT):
            faults.append("a snapshot row with a before image")
    if len(streamed) != len(want):
        faults.append(f"{len(streamed)} changes logged, the binlog has {len(want)}")
    for i, (got, exp) in enumerate(zip(streamed, want)):
        if got != exp:
            faults.append(f"change {i}: logged {got}, the binlog has {exp}")
            break
    if faults:
        return faults
    # snapshot rows: each equal to the key's state at its place; one per key from the first
    # snapshot and at most one more per DDL before it (a re-snapshot reads the key once)
    throughout = set(initial)
    for c in changes:
        if c.op == TRUNCATE:
            throughout.clear()
        elif c.op == DELETE:
            throughout.discard(c.key)
    timeline = _Timeline(changes, initial, captured, columns)
    snapshots: dict[tuple, int] = {}  # key -> its snapshot rows so far
    twice: list[tuple] = []
    for op, key, values in rows:
        if op != SNAPSHOT:
            timeline.advance_to_logged()
            continue
        candidates = timeline.candidates()
        fitting = [places for places, state in candidates if state.get(key) == dict(values)]
        if not fitting:
            have = [state.get(key) for _, state in candidates]
            faults.append(f"snapshot row of key {key}: {dict(values)}, the source had {have}")
            continue
        # the first snapshot, then at most one more per DDL before the row
        snapshots[key] = snapshots.get(key, 0) + 1
        if snapshots[key] > 1 + max(fitting):
            twice.append(key)
    if twice:
        faults.append(f"{len(twice)} keys have more snapshot rows than snapshots, e.g. {twice[:3]}")
    missing = [k for k in throughout if k not in snapshots]
    if missing:
        faults.append(f"{len(missing)} keys that existed throughout have no snapshot row, e.g. {missing[:3]}")
    return faults


def _key_events(changes: Sequence[RowChange], initial: State, captured: Sequence[State], key: tuple, columns):
    """One key's events: ["s", values, forced] for a snapshot that may read it (at the
    start, and after each DDL place where the captured state has it), its own changes, the
    table's truncates, and ["p"] at each DDL place. A snapshot that is not forced may have
    read the key only after a change, which its row repeats (or not at all)."""
    points = [initial, *captured]
    events: list[list] = []

    def snapshot(p: int) -> None:
        state = points[p] if p < len(points) else {}
        if key in state:
            events.append(["s", row_values(columns, state[key]), True])

    snapshot(0)
    places = 0
    for c in changes:
        if is_place(c):
            if c.op == TRUNCATE:
                events.append([TRUNCATE, None, True])
            events.append(["p", None, True])
            places += 1
            snapshot(places)
        elif c.key == key:
            events.append([c.op, row_values(columns, c.values) if c.values is not None else None, True])
    # The first snapshot finishes before the first DDL (the test waits for it): it read the
    # key unless the key changed before. A re-snapshot is planned only once the merger
    # reads its DDL, so it may read the key after later DDLs and changes: only the last
    # snapshot that can read the key, with no change of the key after it, is sure to.
    first_change = next((i for i, e in enumerate(events) if e[0] in (INSERT, UPDATE, DELETE)), len(events))
    first_place = next((i for i, e in enumerate(events) if e[0] == "p"), len(events))
    snapshots = [i for i, e in enumerate(events) if e[0] == "s"]
    for i in snapshots:
        events[i][2] = False
    if snapshots and snapshots[0] < first_place:
        events[0][2] = first_change > first_place
    if snapshots and not any(e[0] in (INSERT, UPDATE, DELETE) for e in events[snapshots[-1] :]):
        events[snapshots[-1]][2] = True
    return events


def _versions_of(events: Iterable[tuple]) -> list[tuple[dict, bool]]:
    vs: list[list] = []
    for op, values, _ in events:
        if op == "p":
            continue
        current = vs[-1] if vs and vs[-1][1] else None
        if op in (DELETE, TRUNCATE):
            if current is not None:
                current[1] = False
            continue
        if current is not None and current[0] == values:
            continue
        if current is not None:
            current[1] = False
        vs.append([values, True])
    return [(v, cur) for v, cur in vs]


def versions(
    changes: Sequence[RowChange], initial: State, columns: Sequence[str], captured: Sequence[State] = ()
) -> dict[tuple, list[tuple[dict, bool]]]:
    """Per key, its versions (values over ``columns``, current) when every snapshot reads
    every key it can: the start state and each DDL place's captured state."""
    keys = _all_keys(changes, initial, captured)
    out = {}
    for key in keys:
        vs = _versions_of(_key_events(changes, initial, captured, key, columns))
        if vs:
            out[key] = vs
    return out


def _all_keys(changes, initial, captured) -> list[tuple]:
    keys = set(initial) | {c.key for c in changes if c.key is not None}
    for state in captured:
        keys |= set(state)
    return sorted(keys, key=str)


def versions_faults(
    changes: Sequence[RowChange],
    initial: State,
    got: Mapping[tuple, Sequence[tuple[Mapping[str, Any], bool]]],
    columns: Sequence[str],
    captured: Sequence[State] = (),
) -> list[str]:
    """What an SCD type 2 table (``got``: per key, (values, current) by start sequence)
    has wrong against the model: a version per change of values; a snapshot row that
    found a value the history lacks opens one too, and a snapshot that read the key only
    after a change of it adds nothing."""
    faults = []
    for key in sorted(set(_all_keys(changes, initial, captured)) | set(got), key=str):
        have = [(dict(v), cur) for v, cur in got.get(key, [])]
        events = _key_events(changes, initial, captured, key, columns)
        optional = [i for i, e in enumerate(events) if e[0] == "s" and not e[2]]
        if len(optional) > 12:
            optional = optional[:12]  # the rest taken as read
        options = []
        for mask in range(1 << len(optional)):
            skipped = {optional[b] for b in range(len(optional)) if mask >> b & 1}
            vs = _versions_of(e for i, e in enumerate(events) if i not in skipped)
            if vs == have:
                break
            options.append(vs)
        else:
            faults.append(f"key {key}: versions {have}, the binlog gives {options[0] if options else []}")
    return faults
