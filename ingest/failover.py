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

Both are decided against what ingest has SENT, not only what it committed (issue 41): a
sharded source's failed shard leaves its records past its committed entry in the shared
open Kafka transaction, which the next commit of any shard publishes; a broker that shows
records of aborted transactions to read_committed consumers (the local one) shows a one-server
source's aborted ones. A server that lacks a transaction whose records were sent would leave
changes it never had in the sinks (``Continuation.lost``): ingest stops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cdc.wire.position import MAX_EPOCH
from cdc.wire.resume_point import ResumePoint
from ingest.position import advance_gtid_state, backwards_reason, highest_gtid_state, parse_gtid


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
    lacks or replaced what ingest read; ``unverifiable``: that cannot be told; ``lost``: it
    lacks ``lacks``, a transaction past the committed position whose records ingest sent)."""

    epoch: int
    moved: bool  # another server than the one ingest's position is on
    backwards: str | None = None
    unverifiable: str | None = None
    lost: str | None = None
    lacks: str | None = None  # the GTID of ``lost``


def continuation(read: ResumePoint, server: ServerState, sent: str = "") -> Continuation:
    """The verdict on ``server`` for a position ``read`` (what ingest committed or read) and
    ``sent``, the GTID state of the transactions whose records ingest handed to the broker
    (any part of them; past ``read`` they count all the same: see the module docstring)."""
    verdict = _continuation(read, server)
    if verdict.backwards or verdict.unverifiable or not sent:
        return verdict
    ahead = ResumePoint(highest_gtid_state(",".join(read_gtids(read)), sent))
    if verdict.moved:
        missing = _missing(ahead, server)
    else:
        missing = _behind(ahead, server.gtid_binlog_pos)
    if missing is None:
        return verdict
    gtid, has = missing
    what = (
        f"GTID {gtid}, whose changes ingest has already sent to Kafka (past its committed position "
        f"{read.gtid_state or '<empty>'})"
    )
    if not verdict.moved:
        lost = (
            f"the source's GTID position {server.gtid_binlog_pos or '<empty>'} is behind {what}: the server lost "
            f"transactions it had logged (a crash with sync_binlog != 1, or a restored backup)"
        )
    elif has is None or parse_gtid(has)[2] < parse_gtid(gtid)[2]:
        lost = (
            f"{_moved(read, server)}, and its GTID position {server.gtid_binlog_pos or '<empty>'} is behind {what} "
            f"(a replica that had not caught up when it was promoted)"
        )
    else:
        lost = (
            f"{_moved(read, server)}, and its binlog does not hold {what}, but {has} in that domain (a failover that "
            f"lost transactions of the old primary)"
        )
    return dataclasses.replace(verdict, lost=lost, lacks=gtid)


def _moved(read: ResumePoint, server: ServerState) -> str:
    return (
        f"the source is another server now (server_id {server.server_id}; ingest's position is on "
        f"server_id {read.server_id})"
    )


def _behind(read: ResumePoint, gtid_binlog_pos: str) -> tuple[str, str | None] | None:
    """The first of ``read``'s GTIDs beyond the same server's position, and that domain's entry."""
    latest = {parse_gtid(g)[0]: g for g in gtid_binlog_pos.split(",") if g.strip()}
    for gtid in read_gtids(read):
        domain, _, seq = parse_gtid(gtid)
        has = latest.get(domain)
        if has is None or parse_gtid(has)[2] < seq:
            return gtid, has
    return None


def _continuation(read: ResumePoint, server: ServerState) -> Continuation:
    if read.server_id is None or read.server_id == server.server_id:
        reason = backwards_reason(read, server.gtid_binlog_pos, list(server.binlog_files))
        return Continuation(read.epoch, False, backwards=reason)
    moved = _moved(read, server)
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
    missing = _missing(read, server)
    if missing is None:
        return None
    gtid, has = missing
    if has is None or parse_gtid(has)[2] < parse_gtid(gtid)[2]:
        return (
            f"and its GTID position {server.gtid_binlog_pos or '<empty>'} is behind ingest's {gtid} (a replica "
            f"that had not caught up, a restored backup, or RESET MASTER)"
        )
    return (
        f"and its binlog does not hold GTID {gtid}, which ingest has read, but {has} in that domain (a failover "
        f"that lost transactions of the old primary, or a server that did not replicate from it)"
    )


def _missing(read: ResumePoint, server: ServerState) -> tuple[str, str | None] | None:
    """The first GTID ingest has read that ``server``'s binlog does not hold, and the entry
    of that domain in the server's GTID position; or None."""
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
        return gtid, latest.get(domain)
    return None
