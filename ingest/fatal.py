"""The one-line texts of ingest's fatal errors: what happened, and what the user does."""

from __future__ import annotations

import re

from cdc.wire.position import EventPosition
from cdc.wire.resume_point import ResumePoint
from ingest.lease import TTL_S, Lease
from ingest.producer import RecordTooLarge


def binlog_gone_message(prefix: str, committed: ResumePoint | None, exc: BaseException) -> str:
    """What to do when the server no longer has the binlog at ingest's position."""
    where = f"GTID {committed.gtid_state or '<empty>'}" if committed else "the requested position"
    server = str(exc.args[1]).splitlines()[0][:200] if len(exc.args) > 1 else ""
    return (
        f"the source no longer has the binlog at ingest's position ({where}; server: {server}): "
        f"the changes since then cannot be read. Start afresh from the current position: delete "
        f"topic {prefix}.offsets (or use a new topic_prefix), restart ingest with start.mode: current, "
        f"then re-snapshot every table (cdc snapshot <db.table>, or a merger with a new state_dir)"
    )


def backwards_message(prefix: str, reason: str) -> str:
    """The source's binlog went behind what ingest read: what to do."""
    return (
        f"{reason}. Changes written from here would carry positions that consumers take for "
        f"replays and drop. Start afresh: use a new topic_prefix (or delete topic {prefix}.offsets "
        f"and the table topics), restart ingest with start.mode: current, and re-snapshot every table "
        f"into emptied sinks (a merger with a new state_dir and the new topic_prefix, after dropping its "
        f"sink tables: their rows carry positions of the old binlog, which new ones never overwrite)"
    )


def unverifiable_failover_message(reason: str) -> str:
    """Another server whose binlog cannot be shown to hold what ingest read: what to do."""
    return (
        f"{reason}. Set gtid_strict_mode=ON on that server (and on every server it may fail over to; "
        f"MariaDB's failover setting) and restart ingest: it continues there if the server's binlog holds "
        f"every transaction ingest has read, else it says so"
    )


def lost_changes_message(reason: str, gtid: str, committed: str) -> str:
    """A server that lacks a transaction whose records ingest has sent (issue 41): what to do."""
    return (
        f"{reason}. Going on would leave changes this server never had in Kafka and in the sinks (a sharded "
        f"source's other shards commit a failed shard's records; a broker that shows records of aborted "
        f"transactions, as the local one does, shows them anyway), so ingest stopped and wrote nothing of this "
        f"server. Ways out: (1) give this server the missing transactions from the old server's binlog "
        f"(mariadb-binlog --start-position={committed or '<committed GTID>'} <its binlogs> | mariadb, run against "
        f"this server; or fail back to the old server), then start ingest again: it goes on once the server holds "
        f"GTID {gtid}; (2) to accept their loss, start ingest again (a new process knows only its committed "
        f"position {committed or '<empty>'}, which this server holds) and, once the merger has caught up, run "
        f"`cdc verify --repair` on the tables: it undoes in the sinks the changes this server never had"
    )


def too_large_message(prefix: str, exc: RecordTooLarge) -> str:
    """A change too large for the broker: which one, and what to do."""
    where = ""
    if exc.position:
        pos = EventPosition.decode(exc.position)
        where = f" at binlog {pos.file}:{pos.pos} (row {pos.row})"
    key = (exc.key or b"").decode("utf-8", "replace")
    key = key if len(key) <= 200 else key[:200] + "..."
    table = exc.topic[len(prefix) + 1 :] if exc.topic.startswith(prefix + ".") else exc.topic
    if exc.by_broker:
        limit = (
            f"the broker refused it (its message.max.bytes, or the topic's max.message.bytes, is "
            f"below that): raise those, and kafka.max_message_bytes ({exc.limit:,}) with them"
        )
    else:
        limit = (
            f"more than kafka.max_message_bytes ({exc.limit:,}): raise it, and the broker's "
            f"message.max.bytes and the topic's max.message.bytes if they are lower"
        )
    return (
        f"the change of {table} with key {key}{where} is a record of {exc.size:,} bytes, {limit}; "
        f"or leave the large column out (column_exclude). Ingest stopped before this change and "
        f"resumes at it when restarted"
    )


def exposed_rollback_message(prefix: str, config, tables, where: str, what: str) -> str:
    """A rollback of changes already written to Kafka (a transaction cut in pieces)."""
    return (
        f"transaction {where}: {what} rolls back row changes of {', '.join(sorted(tables))} that "
        f"ingest already wrote to Kafka, because the transaction had more than commit_every_events "
        f"({config.commit_every_events}) changes, or more than hold_max_mb ({config.hold_max_mb} MB) of "
        f"them, before it. Set those above the size of such transactions, delete topic {prefix}.offsets "
        f"and the table topics (or use a new topic_prefix), restart ingest with start.mode: current and "
        f"re-snapshot"
    )


def unclassified_ddl_message(prefix: str, tables, where: str, statement: str) -> str:
    """A DDL that touches captured tables in a way ingest cannot tell: stop before it."""
    names = ", ".join(f"{db}.{t}" for db, t in tables)
    text = " ".join(statement.split())
    text = text if len(text) <= 300 else text[:300] + "..."
    return (
        f"the statement at {where} changes captured table(s) {names} in a way ingest cannot classify, "
        f"so their sink tables would go stale without a change on the topics: {text!r}. Ingest stopped "
        f"before it and stops here again when restarted. To go on: add the table(s) to table_exclude, "
        f"restart ingest until it is past this statement, then remove them from table_exclude and "
        f"re-snapshot them (cdc snapshot <db.table>); and please report the statement"
    )


def offsets_blocked_message(prefix: str, waited_s: float) -> str:
    """Positions are on the offsets topic but none is readable: never start from start.mode."""
    return (
        f"ingest cannot read its committed position: a transaction of another producer stayed open on "
        f"{prefix}.offsets for {waited_s:.0f}s (another ingest or tool writing topic_prefix {prefix}, or "
        f"a stuck producer), which hides the positions behind it. Starting from start.mode would lose "
        f"every change since the last commit, so ingest stopped. Stop that producer (or wait for its "
        f"transaction timeout), check that the broker is healthy, then restart ingest"
    )


def instance_running_message(prefix: str, lease: Lease, age_s: float) -> str:
    """Another ingest holds the prefix's lease (or a shard's, ``<prefix>/<shard>``): this one
    does not start."""
    if "/" in prefix:
        # a whole sharded ingest holds every shard's lease too: it and `cdc ingest --shard`
        # exclude each other (issue 41)
        name, _, shard = prefix.rpartition("/")
        return (
            f"another ingest follows shard {shard} of topic_prefix {name}: {lease.describe()}, lease renewed "
            f"{age_s:.0f}s ago. One shard is followed by one ingest, either the sharded source's whole ingest "
            f"(`cdc ingest`) or its own (`cdc ingest --shard {shard}`), never both: stop that one first (if it "
            f"is gone, start this one again after {TTL_S:.0f}s)"
        )
    return (
        f"another ingest is running for topic_prefix {prefix}: {lease.describe()}, lease renewed "
        f"{age_s:.0f}s ago. Only one ingest may write a topic_prefix: stop that one first (if it is gone, "
        f"start this one again after {TTL_S:.0f}s), or give this one its own topic_prefix"
    )


def taken_over_message(prefix: str, lease: Lease | None) -> str:
    """A newer ingest fenced this one: it stops (restarting would fence the newer one back)."""
    who = lease.describe() if lease is not None else "another instance"
    if "/" in prefix:  # a shard's lease: a whole sharded ingest or `cdc ingest --shard` (issue 41)
        name, _, shard = prefix.rpartition("/")
        return (
            f"another ingest took over shard {shard} of topic_prefix {name}: {who}. One shard is followed by one "
            f"ingest (the whole sharded one or `cdc ingest --shard {shard}`), so this one stopped (its open Kafka "
            f"transaction is aborted). If the other one is the mistake, stop it and start this one again"
        )
    return (
        f"another ingest took over topic_prefix {prefix}: {who}. Only one ingest may write a "
        f"topic_prefix, so this one stopped (its open Kafka transaction is aborted; the other one "
        f"resumes from the last committed position). If the other one is the mistake, stop it and "
        f"start this one again"
    )


def position_wrapped_message(prefix: str, file: str | None, log_pos: int, file_end: int) -> str:
    """The binlog file passed 4 GiB: its positions wrapped, changes after it cannot be ordered."""
    return (
        f"binlog {file} is larger than 4 GiB: an event's position ({log_pos}) wrapped below the "
        f"previous one ({file_end}) in the event header's 4-byte field, so the changes from here would "
        f"sort before those already written and consumers would drop them. Ingest stopped before them. "
        f"Keep transactions well below 4 GiB (max_binlog_cache_size <= 4G, as MariaDB recommends); then "
        f"start afresh after this file: delete topic {prefix}.offsets (or use a new topic_prefix), start "
        f"ingest with start.mode: current, and re-snapshot every table"
    )


def dotted_database_message(db: str) -> str:
    """A captured database whose name has a '.': refused, never misrouted."""
    pattern = re.escape(db).replace("\\", "\\\\")
    return (
        f"database {db!r} is captured, but its name has a '.': ingest cannot capture it (a table's name "
        f"db.table is read up to its first '.', so its tables would be taken for tables of another "
        f'database). Exclude it (database_exclude: ["{pattern}"]) or rename it, then start ingest again'
    )


def broker_outage_message(prefix: str, waited_s: float, bound_s: float, error: str) -> str:
    """The broker stayed unreachable longer than kafka.outage_max_s."""
    return (
        f"ingest for topic_prefix {prefix}: the Kafka broker has been unreachable for {waited_s:.0f}s, longer than "
        f"kafka.outage_max_s ({bound_s:.0f}s); last: {error}. Nothing after the last committed position was "
        f"written; check the broker and start ingest again (it resumes there), or raise kafka.outage_max_s "
        f"(0: wait for as long as it takes)"
    )


def position_lost_message(prefix: str, topic: str, committed) -> str:
    """The broker came back without ingest's committed position: it lost its topics."""
    return (
        f"ingest for topic_prefix {prefix}: the broker no longer holds ingest's committed position ({topic} has "
        f"none; the last one committed was GTID {committed.gtid_state}): the broker lost its topics (restarted "
        f"without its storage?), and with them every change consumers had not read. Ingest stopped instead of "
        f"writing into new, empty topics. Restore the broker's data and start ingest again; or start afresh: "
        f"delete the topics of {prefix} and the merger's state_dir, start ingest (it begins at start.mode) and "
        f"snapshot every table again"
    )


def sharded_position_message(prefix: str, shards: list[str]) -> str:
    """A one-server config meets a sharded ingest's position on the offsets topic."""
    return (
        f"topic {prefix}.offsets holds the position of a sharded source (shards {', '.join(shards)}), and this "
        f"ingest's config lists no shards: list them under `shards` (docs/sharding.md), or use another "
        f"topic_prefix for a one-server source"
    )


def one_server_position_message(prefix: str) -> str:
    """A sharded config meets a one-server ingest's position on the offsets topic."""
    return (
        f"topic {prefix}.offsets holds the position of a one-server source, and this ingest's config lists "
        f"shards: a sharded source needs its own topic_prefix (the one-server topics' rows carry no origin), "
        f"or run it without `shards`"
    )


def routed_change_message(prefix: str, tables, kind: str, where: str, statement: str) -> str:
    """A statement that drops, renames or empties a table of a logical table of several
    origins (routes, shards), which ingest does not carry over (yet)."""
    names = ", ".join(f"{db}.{table}" for db, table in tables)
    return (
        f"{kind} of {names} at {where}: the table is one origin of a logical table (routes or shards), and "
        f"ingest cannot yet say which of the sink table's rows the statement removes. Ingest stops before it "
        f"(nothing after it is written). Statement: {statement[:300]!r}. To go on: exclude the table "
        f"(table_exclude) and restart ingest, then `cdc snapshot` the logical table; see docs/sharding.md"
    )
