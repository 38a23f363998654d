"""The local stack's shards (``cdc stack up --shards N``): N more MariaDB servers with the
same setup as the stack's own (binlog in ROW form with full images and metadata, GTIDs in
strict mode), each with a GTID replica to fail over to, as processes under
``<state>/shards/``. A keyspace of this project is such a set of servers with the same
schema (issue 24).

Shard ``i`` (1-based) is named ``shard<i>``; its server has server_id ``100 * i`` and GTID
domain ``i``, so the shards' GTIDs never collide; its replica has server_id ``100 * i + 1``
and the same domain (after a failover the shard's GTIDs go on in its domain, from another
server). Each server is a one-server stack of :mod:`cdc.stack` (its own ``stack.json``);
``<state>/shards.json`` lists them."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from cdc import stack as local_stack
from cdc.stack import StackError, StackInfo

SHARDS_FILE = "shards.json"
REPLICA_SET_UP = "replication-set-up"  # in a replica's state directory, once it replicates
MAX_SHARDS = 16  # a bound for a laptop-sized stack: each server is a process of its own


@dataclass
class ShardServers:
    """One shard of the local stack: where its servers' stack files are."""

    name: str
    domain_id: int
    primary: str  # state directory of the shard's server (a one-server stack)
    replica: str = ""  # state directory of its GTID replica ("" without one)


def shards_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / SHARDS_FILE


def load(state_dir: Path | str) -> list[ShardServers]:
    """The shards of the stack at ``state_dir`` (none without a shards file)."""
    path = shards_path(state_dir)
    if not path.exists():
        return []
    return [ShardServers(**s) for s in json.loads(path.read_text())]


def _save(state_dir: Path, shards: list[ShardServers]) -> None:
    path = shards_path(state_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(s) for s in shards], indent=2))
    os.replace(tmp, path)


def start_server(state_dir: Path, server_id: int, domain_id: int) -> StackInfo:
    """A MariaDB server as a one-server stack at ``state_dir`` (started again if it was).
    It reports its own version, not the stack's ``8.0.0-`` form for Debezium: a replica
    replicates by GTID only from a primary whose version is 10 or more."""
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        info = StackInfo.load(state_dir)
    except StackError:
        info = StackInfo(state_dir=str(state_dir.resolve()))
    info.mariadb.server_id = server_id
    info.mariadb.gtid_domain_id = domain_id
    local_stack.start_mariadb(info, report_mysql8_version=False)
    info.save()
    return info


def _root(info: StackInfo):
    import pymysql

    m = info.mariadb
    return pymysql.connect(
        ssl_disabled=True,
        host=m.host,
        port=m.port,
        user="root",
        password=m.root_password,
        autocommit=True,
        connect_timeout=5,
    )


def start_replica(primary: StackInfo, state_dir: Path, server_id: int) -> StackInfo:
    """A server replicating ``primary`` by GTID (slave_pos; gtid_strict_mode and
    log_slave_updates are on, as on every server of the stack) from the start of its
    binlog, caught up, with the primary's users and passwords. Set up once (a marker file
    says so): after that it is only started again; a set-up cut short goes on from where
    it stopped (replication configured: only started and waited for)."""
    replica = start_server(state_dir, server_id, primary.mariadb.gtid_domain_id)
    done = state_dir / REPLICA_SET_UP
    if done.exists():
        _by_gtid(primary, replica)
        return replica
    p = primary.mariadb
    conn = _root(replica)
    try:
        with conn.cursor() as cur:
            # not in its binlog: a GTID of its own in the shard's domain would break the
            # strict order of the primary's GTIDs it applies
            cur.execute("SET SESSION sql_log_bin = 0")
            for user, password in (("root'@'localhost", p.root_password), ("root'@'127.0.0.1", p.root_password)):
                cur.execute(f"ALTER USER '{user}' IDENTIFIED BY %s", (password,))
            cur.execute(f"ALTER USER '{p.user}'@'%%' IDENTIFIED BY %s", (p.password,))
            # the stack file follows at once: a set-up cut short from here on connects again
            replica.mariadb = dataclasses.replace(
                replica.mariadb, user=p.user, password=p.password, root_password=p.root_password
            )
            replica.save()
            cur.execute("SHOW SLAVE STATUS")
            if cur.fetchone() is None:  # not configured yet (else: cut short after it)
                # its own install statements would put GTIDs before the primary's
                cur.execute("RESET MASTER")
                cur.execute("SET GLOBAL gtid_slave_pos = ''")
                cur.execute(
                    "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='root', "
                    "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                    (p.port, p.root_password),
                )
            cur.execute("START SLAVE")
    finally:
        conn.close()
    caught_up(primary, replica)
    _by_gtid(primary, replica)
    done.write_text("replicating by GTID from the primary\n")
    return replica


def using_gtid(replica: StackInfo) -> str:
    """SHOW SLAVE STATUS' ``Using_Gtid`` of a replica: ``Slave_Pos`` (or ``Current_Pos``) when
    it connects with its GTID position, ``No`` by binlog file and offset ("" if no replica)."""
    conn = _root(replica)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            row = cur.fetchone()
            if row is None:
                return ""
            return row[[d[0] for d in cur.description].index("Using_Gtid")]
    finally:
        conn.close()


def _by_gtid(primary: StackInfo, replica: StackInfo) -> None:
    """The replica connects by GTID. One set up while its primary reported a version below 10
    fell back to a binlog file and offset (MariaDB's replica does so, and keeps it); its
    gtid_slave_pos is right all the same (the SQL thread records every GTID it applies), so
    it is switched back, and waited for. One promoted (replicating nothing) is left alone."""
    if using_gtid(replica) in ("Slave_Pos", "Current_Pos", ""):
        return
    conn = _root(replica)
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("CHANGE MASTER TO MASTER_USE_GTID=slave_pos")
            cur.execute("START SLAVE")
    finally:
        conn.close()
    caught_up(primary, replica)
    mode = using_gtid(replica)
    if mode not in ("Slave_Pos", "Current_Pos"):
        raise StackError(
            f"the replica at port {replica.mariadb.port} replicates with Using_Gtid={mode or 'none'}, not by GTID "
            f"(its primary reports version {primary.mariadb.version!r}: a MariaDB replica needs 10 or more)"
        )


def caught_up(primary: StackInfo, replica: StackInfo, timeout_s: int = 60) -> str:
    """Waits until the replica has applied everything the primary logged; that position."""
    conn = _root(primary)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            target = cur.fetchone()[0]
    finally:
        conn.close()
    conn = _root(replica)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (target, timeout_s))
            if cur.fetchone()[0] != 0:
                cur.execute("SHOW SLAVE STATUS")
                raise StackError(f"replica did not reach {target} in {timeout_s}s: {cur.fetchone()}")
    finally:
        conn.close()
    return target


def up(state_dir: Path | str, count: int, replicas: bool = True) -> list[ShardServers]:
    """Shards 1..``count`` running (idempotent; shards beyond ``count`` already there are
    started too: a shard is removed only with ``down --purge``)."""
    if not 1 <= count <= MAX_SHARDS:
        raise StackError(f"--shards must be between 1 and {MAX_SHARDS}, not {count}")
    state_dir = Path(state_dir)
    known = {s.name: s for s in load(state_dir)}
    for i in range(1, max(count, len(known)) + 1):
        name = f"shard{i}"
        base = state_dir / "shards" / name
        shard = known.get(name) or ShardServers(name=name, domain_id=i, primary=str((base / "primary").resolve()))
        if replicas and not shard.replica:
            shard.replica = str((base / "replica").resolve())
        # listed before its servers start: `down` stops what a failed `up` left running
        known[name] = shard
        _save(state_dir, list(known.values()))
        primary = start_server(Path(shard.primary), 100 * i, shard.domain_id)
        if shard.replica:
            start_replica(primary, Path(shard.replica), 100 * i + 1)
    return list(known.values())


def _started(state_dir: Path | str, replica_first: bool = False) -> Iterator[tuple[ShardServers, str, StackInfo]]:
    """``(shard, "primary" or "replica", its stack)`` of every shard server that was
    started (one listed but never started, by an `up` that failed before it, is left out)."""
    for shard in load(state_dir):
        roles = (("primary", shard.primary), ("replica", shard.replica))
        for role, path in reversed(roles) if replica_first else roles:
            if not path:
                continue
            try:
                info = StackInfo.load(path)
            except StackError:
                continue
            yield shard, role, info


def down(state_dir: Path | str) -> list[str]:
    """Stops every shard server (replicas first); the names of those that ran."""
    return [
        f"{shard.name} {role}"
        for shard, role, info in _started(state_dir, replica_first=True)
        if local_stack.stop(info, "mariadb")
    ]


def status(state_dir: Path | str) -> dict[str, dict]:
    """Per shard server (``shard1``, ``shard1 replica``): pid, port, running, server_id, domain."""
    out = {}
    for shard, role, info in _started(state_dir):
        pid = local_stack.running_pid(Path(info.state_dir), "mariadb", local_stack.mariadb_marker(info))
        name = shard.name if role == "primary" else f"{shard.name} replica"
        out[name] = {
            "pid": pid,
            "port": info.mariadb.port,
            "running": bool(pid) and local_stack.port_open(info.mariadb.port),
            "server_id": info.mariadb.server_id,
            "domain_id": info.mariadb.gtid_domain_id,
        }
    return out
