"""The source's binlog position, read without writing (positional snapshot windows).

A positional window's LOW and HIGH (``merger.dblog``, "Watermarks without writes") are
positions read from the server ingest follows. Each is read inside ``START TRANSACTION
WITH CONSISTENT SNAPSHOT``: MariaDB then reports, in ``binlog_snapshot_file`` and
``binlog_snapshot_position``, the binlog position that snapshot is consistent with (every
transaction before it visible, none after). ``SHOW MASTER STATUS`` would not do for LOW: a
transaction is written to the binlog before InnoDB makes it visible, so a SELECT started
just after could miss a change that lies below the position read. A chunk SELECT that
starts after this snapshot was taken sees at least what the snapshot sees.

Nothing here needs a privilege beyond connecting: no ``BINLOG MONITOR``, no write.

The position becomes a sequence the way ingest's records carry theirs
(``cdc.wire.position.EventPosition.sequence``), with the epoch of ingest's committed
position (``ResumePoint.epoch``), whose ``server_id`` must be the server read here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc.wire.position import EventPosition
from cdc.wire.resume_point import ResumePoint
from merger.errors import MergerError


@dataclass(frozen=True)
class BinlogPoint:
    """A position of one server's binlog: the next event starts at ``pos`` of ``file``."""

    server_id: int
    file: str
    pos: int

    def sequence(self, epoch: int) -> int:
        """The sequence of an event starting here (row 0, part 0) in ingest's ``epoch``."""
        return EventPosition(self.file, self.pos, epoch=epoch).checked().sequence()


def read_binlog_point(conn) -> BinlogPoint:
    """The binlog position consistent with a snapshot taken now (``conn``: pymysql, not
    inside a transaction). The transaction is ended before returning."""
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%%'")
            status = {str(name).lower(): value for name, value in cur.fetchall()}
            cur.execute("SELECT @@server_id")
            (server_id,) = cur.fetchone()
        finally:
            cur.execute("COMMIT")
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos in (None, ""):
        raise MergerError(
            "snapshot.watermarks is positions, but the source reports no binlog position "
            "(binlog_snapshot_file is empty): is its binary log on (log_bin)?"
        )
    return BinlogPoint(int(server_id), str(file), int(pos))


@dataclass(frozen=True)
class Committed:
    """How far ingest has committed, as a sequence comparable with a ``BinlogPoint``'s."""

    server_id: int | None
    epoch: int
    sequence: int


def committed_of(point: ResumePoint | None) -> Committed | None:
    """Ingest's committed position as a sequence; None before its first commit or while it
    has no binlog position yet (it then has committed nothing a window could wait for)."""
    if point is None or not point.file or not point.pos:
        return None
    epoch = point.epoch or 0
    return Committed(point.server_id, epoch, EventPosition(point.file, point.pos, epoch=epoch).sequence())


def other_server(point: BinlogPoint, committed: Committed) -> str | None:
    """Why positions read from ``point``'s server cannot be compared with what ingest
    committed, or None. Ingest stamps each commit with the server it reads."""
    if committed.server_id is not None and committed.server_id != point.server_id:
        return (
            f"the snapshot reads server_id {point.server_id}, but ingest follows server_id "
            f"{committed.server_id}: with snapshot.watermarks positions the merger's source must be "
            "the server ingest reads"
        )
    return None
