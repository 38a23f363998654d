"""Whether the server behind the source address continues the binlog ingest has read, and
at which epoch ingest's positions go on. Pure: the facts come from ``checks.read_server_state``,
read on the binlog connection itself before its first event.

* The same server (its ``@@server_id`` is the one ingest's position is on): its binlog must
  not have gone behind what ingest read (``position.backwards_reason``: RESET MASTER).
* Another server (a failover): ingest continues when that server's binlog holds every
  transaction ingest has read, the very ones, not others with the same sequence numbers.
  ``@@gtid_binlog_state`` holds, per domain and originating server_id, the last seq_no the
  server logged; under ``gtid_strict_mode`` a replica logs an origin's transactions in
  order and no seq_no twice in a domain, so holding ``d-s-m`` with ``m >= n`` means it
  holds ``d-s-n`` (the test MariaDB applies to a replica that connects with a GTID
  position). Its binlog coordinates are not comparable with the old server's, so ingest's
  positions go on at the next epoch (``EventPosition.epoch``), which sorts above them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc.wire.position import MAX_EPOCH
from ingest.position import ResumePoint, advance_gtid_state, backwards_reason, parse_gtid


@dataclass(frozen=True)
class ServerState:
    """What a source server says about itself and its binlog."""

    server_id: int
    gtid_binlog_pos: str  # the last GTID per domain
    gtid_binlog_state: str  # the last GTID per domain and originating server_id
    gtid_strict_mode: bool
    binlog_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Continuation:
    """The verdict on a server: ``epoch`` to go on at, or why not (``backwards``: its binlog
    lacks or replaced what ingest read; ``unverifiable``: that cannot be told)."""

    epoch: int
    moved: bool  # another server than the one ingest's position is on
    backwards: str | None = None
    unverifiable: str | None = None


def continuation(read: ResumePoint, server: ServerState) -> Continuation:
    """The verdict on ``server`` for a position ``read`` (what ingest committed or read)."""
    if read.server_id is None or read.server_id == server.server_id:
        reason = backwards_reason(read, server.gtid_binlog_pos, list(server.binlog_files))
        return Continuation(read.epoch, False, backwards=reason)
    moved = (
        f"the source is another server now (server_id {server.server_id}; ingest's position is on "
        f"server_id {read.server_id})"
    )
    epoch = read.epoch + 1
    if not server.gtid_strict_mode:
        return Continuation(
            epoch,
            True,
            unverifiable=f"{moved}, and its gtid_strict_mode is OFF, so whether it holds the transactions ingest "
            f"has read cannot be told",
        )
    reason = missing_transaction(read, server)
    if reason:
        return Continuation(epoch, True, backwards=f"{moved}, {reason}")
    if epoch > MAX_EPOCH:
        return Continuation(
            epoch, True, backwards=f"{moved}, and ingest has continued across {MAX_EPOCH} changes of server already"
        )
    return Continuation(epoch, True)


def read_gtids(read: ResumePoint) -> list[str]:
    """Every domain's last GTID ingest has read: the committed state, and the transaction cut
    in pieces whose first pieces are committed."""
    state = read.gtid_state
    if read.trx_gtid:
        state = advance_gtid_state(state, read.trx_gtid)
    return [g for g in state.split(",") if g.strip()]


def missing_transaction(read: ResumePoint, server: ServerState) -> str | None:
    """Why ``server``'s binlog does not hold every transaction ingest has read, or None."""
    logged: dict[tuple[int, int], int] = {}
    for g in server.gtid_binlog_state.split(","):
        if g.strip():
            domain, origin, seq = parse_gtid(g)
            logged[(domain, origin)] = max(seq, logged.get((domain, origin), 0))
    latest = {parse_gtid(g)[0]: g for g in server.gtid_binlog_pos.split(",") if g.strip()}
    for gtid in read_gtids(read):
        domain, origin, seq = parse_gtid(gtid)
        if logged.get((domain, origin), 0) >= seq:
            continue
        has = latest.get(domain)
        if has is None or parse_gtid(has)[2] < seq:
            return (
                f"and its GTID position {server.gtid_binlog_pos or '<empty>'} is behind ingest's {gtid} (a replica "
                f"that had not caught up, a restored backup, or RESET MASTER)"
            )
        return (
            f"and its binlog does not hold GTID {gtid}, which ingest has read, but {has} in that domain (a failover "
            f"that lost transactions of the old primary, or a server that did not replicate from it)"
        )
    return None
