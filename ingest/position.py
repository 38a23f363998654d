"""Where ingest is in the binlog, and the order of source positions.

Two things live here:

* ``ResumePoint`` (cdc.wire.resume_point): what ingest commits to its offsets topic with each Kafka transaction.
  ``gtid_state`` is the MariaDB GTID position (``domain-server-seq`` per domain) of the
  last source transaction whose changes are all committed to Kafka. When a large source
  transaction is cut into several Kafka transactions (always at a row-event boundary),
  ``trx_gtid`` names it and ``trx_events`` counts its row events already committed, so
  a restart skips exactly those.
* ``EventPosition`` (cdc.wire.position): the position carried by every record (header
  ``cdc.position``): binlog file, start offset of the binlog event, row index inside the
  event, and the epoch (one more at each failover ingest continued across, see
  ingest.failover, committed here as ``ResumePoint.epoch``). It only grows along the
  binlog, so a consumer drops any record at or below the highest position it already
  took from a partition: that is what makes a replayed suffix (after ingest was killed)
  harmless even on brokers that show aborted records.
"""

from __future__ import annotations

from cdc.wire.position import FILE_SEQ
from cdc.wire.resume_point import ResumePoint


def file_number(name: str | None) -> int:
    m = FILE_SEQ.search(name or "")
    return int(m.group(1)) if m else -1


def backwards_reason(committed: ResumePoint, gtid_binlog_pos: str, binlog_files: list[str]) -> str | None:
    """Why the same server's binlog is no longer the one ``committed`` points into, or None.

    Positions (file, offset) order the changes only along one binlog. After ``RESET
    MASTER``, new changes could carry positions at or below ones already written, and every
    consumer would drop them as replays. (Another server: ``ingest.failover``.)"""
    have = {parse_gtid(g)[0]: parse_gtid(g)[2] for g in gtid_binlog_pos.split(",") if g.strip()}
    for gtid in committed.gtid_state.split(","):
        if not gtid.strip():
            continue
        domain, _, seq = parse_gtid(gtid)
        if have.get(domain, 0) < seq:
            return (
                f"the source's GTID position {gtid_binlog_pos or '<empty>'} is behind ingest's "
                f"{committed.gtid_state} (RESET MASTER, or a server that lacks transactions ingest has read)"
            )
    if committed.file and binlog_files and file_number(committed.file) > max(file_number(f) for f in binlog_files):
        return (
            f"ingest's position is in {committed.file}, but the source's newest binlog is "
            f"{max(binlog_files, key=file_number)} (RESET MASTER?)"
        )
    return None


def parse_gtid(gtid: str) -> tuple[int, int, int]:
    """'0-1-42' -> (domain, server_id, seq)."""
    try:
        domain, server, seq = (int(x) for x in gtid.split("-"))
    except ValueError:
        raise ValueError(f"not a MariaDB GTID (domain-server-seq): {gtid!r}") from None
    return domain, server, seq


def advance_gtid_state(state: str, gtid: str) -> str:
    """The GTID state after ``gtid`` committed: replace that domain's entry."""
    domain = parse_gtid(gtid)[0]
    entries = {parse_gtid(g)[0]: g for g in state.split(",") if g.strip()}
    entries[domain] = gtid
    return ",".join(entries[d] for d in sorted(entries))


def highest_gtid_state(state: str, more: str) -> str:
    """Per domain the entry of higher seq_no of two GTID states (``state`` keeps a tie): what
    ingest has sent, across re-reads of an earlier stretch (issue 41)."""
    entries = {parse_gtid(g)[0]: g for g in state.split(",") if g.strip()}
    for g in more.split(","):
        if g.strip():
            domain, _, seq = parse_gtid(g)
            if domain not in entries or parse_gtid(entries[domain])[2] < seq:
                entries[domain] = g.strip()
    return ",".join(entries[d] for d in sorted(entries))


def event_start(log_pos: int, event_size: int, file_end: int) -> int | None:
    """Where an event starts in its binlog file, from its header (``log_pos``: where it
    ends), or None if that 4-byte field wrapped: the file passed 4 GiB (one transaction
    larger than the rest of the file's room). ``file_end``: the highest end read in the file."""
    start = log_pos - event_size
    if start < 0 or log_pos < file_end:
        return None
    return start
