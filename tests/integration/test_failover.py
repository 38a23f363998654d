"""Failover to a GTID replica (issue 22 item 1), on a private primary/replica pair behind a
switchable TCP proxy (tests/failover_harness.py; the shared broker and PostgreSQL).

* Switches under a steady write load, ingest running through one and killed -9 right after
  the next: ingest carries on on each new primary at the next epoch, and both sinks equal
  the last primary row for row.
* A lossy switch (a replica stopped before the last transactions ingest read, then written
  to): ingest stops with one line and the way out, and writes nothing of the new server.
* A switch to a replica that lacks only what ingest had sent but not committed (issue 41
  item 6): the local broker shows the aborted records to the merger, so ingest stops too."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from cdc import stack as local_stack
from tests.failover_harness import (
    TcpProxy,
    WriteLoad,
    caught_up,
    promote,
    query_one,
    root,
    start_replica,
    start_server,
    using_gtid,
)
from tests.ingest_harness import IngestProcess, read_resume_point, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config

TABLES = ["a", "b"]


@pytest.fixture
def pair(stack, tmp_path):
    """(primary, replica, proxy, the stack as clients see it: MariaDB through the proxy)."""
    if not stack.mariadb.datadir:
        pytest.skip("needs the local stack's MariaDB binaries")
    dirs = [tmp_path / "primary", tmp_path / "replica"]
    proxy = None
    try:
        primary = start_server(dirs[0], 1)
        with root(primary).cursor() as cur:
            # the replica's binlog starts at binlog.000001: its positions are lower than the
            # primary's, as after a real failover
            for _ in range(3):
                cur.execute("FLUSH NO_WRITE_TO_BINLOG BINARY LOGS")
        replica = start_replica(primary, dirs[1], 2)
        proxy = TcpProxy(primary.mariadb.port)
        via = local_stack.StackInfo(
            state_dir=str(tmp_path / "via"),
            mariadb=dataclasses.replace(primary.mariadb, port=proxy.port),
            kafka=stack.kafka,
            postgres=stack.postgres,
        )
        yield primary, replica, proxy, via
    finally:
        if proxy is not None:
            proxy.close()
        for d in dirs:
            local_stack.down(d, components=("mariadb",))


def test_the_harness_replica_is_a_gtid_replica(tmp_path):
    """What the failover tests fail over to is what the docs and users run: a replica that
    connects with its GTID position (MariaDB's replica falls back to a binlog file and
    offset, ``Using_Gtid=No``, when its primary reports a version below 10)."""
    dirs = [tmp_path / "primary", tmp_path / "replica"]
    try:
        primary = start_server(dirs[0], 1)
        replica = start_replica(primary, dirs[1], 2)
        assert using_gtid(replica) == "Slave_Pos"
        with root(primary).cursor() as cur:
            cur.execute("CREATE DATABASE gtid_check")
        caught_up(primary, replica)
        assert using_gtid(replica) == "Slave_Pos"
        errors = (dirs[1] / "mariadb" / "error.log").read_text()
        assert "Falling back to Using_Gtid=No" not in errors
        # one that replicates by file and offset (set up while its primary reported a
        # version below 10, as the stack's replicas once did) is switched to GTID when started
        with root(replica).cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("CHANGE MASTER TO MASTER_USE_GTID=no")
            cur.execute("START SLAVE")
        assert using_gtid(replica) == "No"
        with root(primary).cursor() as cur:
            cur.execute("CREATE TABLE gtid_check.t (id INT PRIMARY KEY)")
        replica = start_replica(primary, dirs[1], 2)
        assert using_gtid(replica) == "Slave_Pos"
        assert query_one(
            replica, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'gtid_check'"
        ) == (1,)
    finally:
        for d in dirs:
            local_stack.down(d, components=("mariadb",))


def _create_tables(info, db: str, rows: int) -> None:
    conn = root(info)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        for t in TABLES:
            cur.execute(f"CREATE TABLE {db}.{t} (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL)")
            cur.execute(f"INSERT INTO {db}.{t} SELECT seq, CONCAT('s', seq), 0 FROM seq_1_to_{rows}")
    conn.close()


def _resume_point(via, prefix: str):
    key = json.dumps({"server": prefix}, separators=(",", ":")).encode()
    return read_resume_point({"bootstrap.servers": via.kafka.bootstrap}, f"{prefix}.offsets", key, timeout_s=10)


def _fail_over(load: WriteLoad, old, new, proxy: TcpProxy) -> None:
    """Writes paused, the replica caught up and promoted, the address moved, writes resumed."""
    load.pause()
    caught_up(old, new)
    promote(new)
    proxy.switch(new.mariadb.port)
    load.resume()


def _reparent(server, primary) -> None:
    """The old primary becomes a replica of the new one, from its own GTID position."""
    with root(server).cursor() as cur:
        cur.execute("SET GLOBAL read_only = 1")
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='root', MASTER_PASSWORD=%s, "
            "MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1",
            (primary.mariadb.port, primary.mariadb.root_password),
        )
        cur.execute("START SLAVE")


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_switch_to_the_gtid_replica_under_load_and_kill9_ingest(pair, tmp_path, unique_name):
    """Two failovers under a steady write load: A -> B while ingest runs (it reconnects and
    goes on at epoch 1), then B -> A (A made a replica of B first) with ingest killed -9 at
    once and started again (epoch 2). The sinks equal the last primary row for row."""
    primary, replica, proxy, via = pair
    db = f"fo_{unique_name}"
    _create_tables(via, db, 500)
    icfg = write_config(via, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    mcfg = write_merger_config(via, tmp_path / "merger.yaml", unique_name, [db], tmp_path)
    ingest = IngestProcess(icfg, tmp_path / "ingest1.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    load = WriteLoad(via, proxy.port, db, TABLES)
    checker = SinkChecker(via, tmp_path)
    try:
        wait_caught_up(via, unique_name, proc=ingest)
        load.start()
        time.sleep(3)

        _fail_over(load, primary, replica, proxy)  # ingest running: it reconnects by itself
        time.sleep(3)
        assert query_one(via, "SELECT @@server_id")[0] == 2
        point = wait_caught_up(via, unique_name, proc=ingest)
        assert (point.server_id, point.epoch) == (2, 1), point

        _reparent(primary, replica)
        before = load.statements
        _fail_over(load, replica, primary, proxy)
        ingest.kill9()  # right after the switch
        ingest = IngestProcess(icfg, tmp_path / "ingest2.log").start()
        time.sleep(4)
        load.stop()
        assert load.statements > before + 50, (before, load.statements)  # writes went on on the new primary
        assert query_one(via, "SELECT @@server_id")[0] == 1

        point = wait_caught_up(via, unique_name, proc=ingest)
        assert (point.server_id, point.epoch) == (1, 2), point
        for t in TABLES:
            checker.wait_equal(db, t, timeout_s=240, proc=merger)
        logs = (tmp_path / "ingest1.log").read_text(errors="replace") + ingest.log_text()
        for epoch in (1, 2):
            assert f"continuing there, positions at epoch {epoch}" in logs, logs[-3000:]
        assert "error: " not in logs and "Traceback" not in logs, logs[-3000:]
    finally:
        if load.is_alive():
            load.stop()
        checker.close()
        merger.stop()
        ingest.stop()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_lossy_switch_stops_ingest_with_the_way_out(pair, tmp_path, unique_name):
    primary, replica, proxy, via = pair
    db = f"fl_{unique_name}"
    _create_tables(via, db, 10)
    caught_up(primary, replica)
    cfg = write_config(via, tmp_path / "ingest.yaml", unique_name, [db])
    ingest = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        wait_caught_up(via, unique_name, proc=ingest)
        # the replica stops receiving; the primary commits three more that ingest reads
        with root(replica).cursor() as cur:
            cur.execute("STOP SLAVE")
        with root(primary).cursor() as cur:
            for i in range(3):
                cur.execute(f"INSERT INTO {db}.a VALUES (%s, 'lost', 0)", (100 + i,))
        read = wait_caught_up(via, unique_name, proc=ingest)
        # promoted as it is, written to (its own GTIDs take the lost ones' seq_nos), switched to
        promote(replica)
        with root(replica).cursor() as cur:
            for i in range(5):
                cur.execute(f"INSERT INTO {db}.b VALUES (%s, 'new', 0)", (200 + i,))
        proxy.switch(replica.mariadb.port)

        assert ingest.wait_exit(60), "ingest went on on a server that lacks transactions it has read"
        log = ingest.log_text()
        errors = [line for line in log.splitlines() if "error: " in line]
        assert len(errors) == 1 and "Traceback" not in log, log[-3000:]
        assert "does not hold GTID" in errors[0] and read.gtid_state in errors[0], errors[0]
        assert "new topic_prefix" in errors[0], errors[0]
        records, _ = read_records(via.kafka.bootstrap, [f"{unique_name}.{db}.b"])
        assert not [k for k in rebuild(records, ["id"]) if k[0] >= 200]  # nothing of the new server
        assert _resume_point(via, unique_name).gtid_state == read.gtid_state
    finally:
        ingest.stop()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_an_address_moved_under_an_open_stream_is_noticed_while_idle(pair, tmp_path, unique_name):
    """The address moves but the binlog connection stays with the old primary (no writes
    there any more, the server keeps it open): the idle check (every 10 s) sees the address
    lead to another server and reconnects; the new server is checked like every connect."""
    primary, replica, proxy, via = pair
    db = f"fi_{unique_name}"
    _create_tables(via, db, 10)
    cfg = write_config(via, tmp_path / "ingest.yaml", unique_name, [db])
    ingest = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        wait_caught_up(via, unique_name, proc=ingest)
        caught_up(primary, replica)
        promote(replica)
        proxy.switch(replica.mariadb.port, close_existing=False)
        with root(via).cursor() as cur:
            assert query_one(via, "SELECT @@server_id")[0] == 2
            cur.execute(f"INSERT INTO {db}.b VALUES (300, 'new', 0)")
        point = wait_caught_up(via, unique_name, timeout_s=60, proc=ingest)
        assert (point.server_id, point.epoch) == (2, 1), point
        records, _ = read_records(via.kafka.bootstrap, [f"{unique_name}.{db}.b"])
        [new] = [r for r in records if r.value is not None and r.position and r.position.epoch == 1]
        assert rebuild([new], ["id"]) == {(300,): {"id": 300, "v": "new", "n": 0}}
        assert "error: " not in ingest.log_text()
    finally:
        ingest.stop()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_binlog_connection_gone_silent_is_read_again(pair, tmp_path, unique_name):
    """The binlog connection stays open but nothing comes through any more (a half-open
    connection after a network fault): the server's heartbeats stop arriving, so ingest
    counts the stream lost after `binlog_silence_s` (5 s here; 20 by default) and reads it
    again, on a new connection, from its position."""
    primary, replica, proxy, via = pair
    db = f"fs_{unique_name}"
    _create_tables(via, db, 10)
    cfg = write_config(via, tmp_path / "ingest.yaml", unique_name, [db], binlog_silence_s=5)
    ingest = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        wait_caught_up(via, unique_name, proc=ingest)
        proxy.silence()
        silenced_at = time.monotonic()
        with root(primary).cursor() as cur:
            for i in range(5):
                cur.execute(f"INSERT INTO {db}.b VALUES (%s, 'after', 0)", (400 + i,))
        point = wait_caught_up(via, unique_name, timeout_s=90, proc=ingest)
        # read again after binlog_silence_s, not the default 20 s: the setting reaches the stream
        assert time.monotonic() - silenced_at < 15, time.monotonic() - silenced_at
        assert point.server_id == query_one(primary, "SELECT @@server_id")[0]
        records, _ = read_records(via.kafka.bootstrap, [f"{unique_name}.{db}.b"])
        after = {k: v for k, v in rebuild(records, ["id"]).items() if k[0] >= 400}
        assert after == {(400 + i,): {"id": 400 + i, "v": "after", "n": 0} for i in range(5)}
        inserts = [r for r in records if r.value is not None and min(rebuild([r], ["id"]))[0] >= 400]
        assert len(inserts) == 5, "each change once"
        log = ingest.log_text()
        assert "source connection lost" in log and "Traceback" not in log, log[-3000:]
    finally:
        ingest.stop()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_switch_to_a_replica_lacking_records_sent_but_not_committed_stops(pair, tmp_path, unique_name):
    """Issue 41 item 6. commit_every_ms 10 s: X is committed, then T's records are sent and
    wait in the open Kafka transaction; the address moves to the replica (stopped after X,
    promoted). The open transaction is aborted, but the local broker shows aborted records
    to read_committed consumers: T's rows reach the merger though the new server never had
    T. Ingest stops naming T's GTID (before issue 41 it went on at epoch 1)."""
    primary, replica, proxy, via = pair
    db = f"fa_{unique_name}"
    _create_tables(via, db, 10)
    cfg = write_config(
        via, tmp_path / "ingest.yaml", unique_name, [db], commit_every_ms=10_000, heartbeat_interval_ms=0
    )
    ingest = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        deadline = time.monotonic() + 60
        while "no committed position: starting at GTID" not in ingest.log_text():  # X is read, not skipped
            assert ingest.alive() and time.monotonic() < deadline, ingest.log_text()[-3000:]
            time.sleep(0.3)
        with root(primary).cursor() as cur:
            cur.execute(f"INSERT INTO {db}.a VALUES (50, 'x', 0)")
        caught_up(primary, replica)
        with root(replica).cursor() as cur:
            cur.execute("STOP SLAVE")
        x = wait_caught_up(via, unique_name, timeout_s=40, proc=ingest)  # X committed: the next commit >= 10 s away
        with root(primary).cursor() as cur:
            cur.execute(f"INSERT INTO {db}.a SELECT seq, 'lost', 0 FROM {db}.seq_100_to_129")
        t = query_one(primary, "SELECT @@gtid_binlog_pos")[0]
        time.sleep(1.5)  # T read and sent into the open transaction
        promote(replica)
        proxy.switch(replica.mariadb.port)
        assert ingest.wait_exit(60), "ingest went on on a server that lacks a transaction it had sent"
        log = ingest.log_text()
        errors = [line for line in log.splitlines() if "error: " in line]
        assert len(errors) == 1 and "Traceback" not in log, log[-3000:]
        assert "continuing there" not in log, log[-3000:]  # stopped at the connect, before any write
        assert f"GTID {t}" in errors[0] and "mariadb-binlog" in errors[0], errors[0]
        assert _resume_point(via, unique_name).gtid_state == x.gtid_state  # T was never committed
    finally:
        ingest.stop()
