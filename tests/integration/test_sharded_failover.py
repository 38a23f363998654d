"""One shard of a sharded source fails over to its GTID replica (issue 24, point 5): shard1
is reached through a switchable TCP proxy (as the one-server failover test does), shard2
directly; both take writes all along. shard1's replica is caught up, promoted and the
proxy moved to it: ingest carries on there at the next epoch of that shard alone, the
other shard never stops, and both sinks equal the union of the shards (shard1 read on its
new primary) by a plain SELECT of each.

A lossy failover of a shard (issue 41 item 1): its replica lacks a transaction whose records
ingest had sent (past the shard's committed entry, in the shared open transaction, which
another shard's commit publishes): ingest stops, naming the shard, the GTID and the way out.
And two ingests of one shard (issue 41 item 7): a whole sharded ingest and `cdc ingest
--shard` exclude each other."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from cdc import stack as local_stack
from cdc import stack_shards
from cdc.wire.resume_point import PositionVector, ResumePoint
from tests.failover_harness import TcpProxy, WriteLoad, caught_up, promote
from tests.ingest_harness import IngestProcess, read_resume_point
from tests.merger_harness import MergerProcess
from tests.shard_harness import TABLES, ingest_config, offsets_record, sql, wait_equal, write_configs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shard_pairs(tmp_path_factory, stack):
    """{shard: (primary, replica)} of two shards, each with a GTID replica."""
    state = tmp_path_factory.mktemp("shards")
    try:
        stack_shards.up(state, 2, replicas=True)
        yield {
            s.name: (local_stack.StackInfo.load(Path(s.primary)), local_stack.StackInfo.load(Path(s.replica)))
            for s in stack_shards.load(state)
        }
    finally:
        stack_shards.down(state)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_shard_fails_over_to_its_replica_while_the_other_streams(tmp_path, stack, shard_pairs, unique_name):
    db = f"shf_{unique_name}"
    prefix = f"shf{unique_name}"
    (primary1, replica1), (primary2, _) = shard_pairs["shard1"], shard_pairs["shard2"]
    for info in (primary1, primary2):
        sql(info, f"CREATE DATABASE {db}")
        for table in TABLES:
            sql(info, f"CREATE TABLE {db}.{table} (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
            values = ", ".join(f"({i}, 'r{i}', 0)" for i in range(1, 201))
            sql(info, f"INSERT INTO {db}.{table} VALUES {values}")
    proxy = TcpProxy(primary1.mariadb.port)
    via = {"shard1": dataclasses.replace(primary1, mariadb=dataclasses.replace(primary1.mariadb, port=proxy.port))}
    via["shard2"] = primary2
    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, via, prefix, db)
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
    loads = [
        WriteLoad(primary1, proxy.port, db, list(TABLES), seed=1),
        WriteLoad(primary2, primary2.mariadb.port, db, list(TABLES), seed=2),
    ]
    try:
        for load in loads:
            load.start()
        time.sleep(5)
        # shard1's failover: its writes paused, its replica caught up and promoted, the address moved
        loads[0].pause()
        caught_up(primary1, replica1)
        promote(replica1)
        proxy.switch(replica1.mariadb.port)
        loads[0].resume()
        time.sleep(5)
        for load in loads:
            load.stop()
        assert all(load.statements > 100 for load in loads), [load.statements for load in loads]
        now = {"shard1": replica1, "shard2": primary2}
        wait_equal(stack, now, tmp_path, db, [ingest, merger])
        entries = offsets_record(stack, prefix)["shards"]
        assert (entries["shard1"]["server_id"], entries["shard1"]["epoch"]) == (101, 1), entries
        assert (entries["shard2"]["server_id"], entries["shard2"]["epoch"]) == (200, 0), entries
        log = ingest.log_text()
        assert "continuing there, positions at epoch 1" in log and "error: " not in log, log[-3000:]
    finally:
        for load in loads:
            if load.is_alive():
                load.stop()
        proxy.close()
        ingest.stop()
        merger.stop()


def _gtid_pos(info) -> str:
    return sql(info, "SELECT @@gtid_binlog_pos", fetch=True)[0][0]


def _wait_log(ingest: IngestProcess, text: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in ingest.log_text():
        assert ingest.alive() and time.monotonic() < deadline, ingest.log_text()[-3000:]
        time.sleep(0.3)


def _wait_entry(stack, prefix: str, shard: str, gtid: str, timeout_s: float = 40) -> PositionVector:
    """The committed position vector once ``shard``'s entry holds ``gtid`` (read as ingest
    reads it: the local broker's end of a partition may lag its last records)."""
    key = json.dumps({"server": prefix}, separators=(",", ":")).encode()
    deadline = time.monotonic() + timeout_s
    while True:
        vector = read_resume_point({"bootstrap.servers": stack.kafka.bootstrap}, f"{prefix}.offsets", key)
        if vector is not None and gtid in vector.shards.get(shard, ResumePoint("")).gtid_state:
            return vector
        assert time.monotonic() < deadline, f"{shard}'s committed entry did not reach {gtid}: {vector}"
        time.sleep(0.3)


@pytest.mark.timeout(300)
def test_a_lossy_failover_of_one_shard_stops_ingest_with_the_way_out(tmp_path, stack, shard_pairs, unique_name):
    """shard2's replica is stopped after X; shard2's primary then commits T, which ingest
    reads and sends while shard2's entry stays at X (commit_every_ms 15 s: X was committed
    just before); shard1 commits, publishing T's records with its own; shard2's replica is
    promoted as it is and the address moved to it. It lacks T: ingest stops with one line
    naming shard2, T's GTID and the way out (before issue 41 it went on, T's rows stayed)."""
    db, prefix = f"shl_{unique_name}", f"shl{unique_name}"
    (primary1, _), (primary2, replica2) = shard_pairs["shard1"], shard_pairs["shard2"]
    for info in (primary1, primary2):
        sql(info, f"CREATE DATABASE {db}", f"CREATE TABLE {db}.orders_0 (id INT PRIMARY KEY, v VARCHAR(40))")
    proxy = TcpProxy(primary2.mariadb.port)
    via = {"shard1": primary1}
    via["shard2"] = dataclasses.replace(primary2, mariadb=dataclasses.replace(primary2.mariadb, port=proxy.port))
    ingest_cfg, _ = write_configs(tmp_path, stack, via, prefix, db, commit_every_ms=15_000, heartbeat_interval_ms=0)
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    try:
        _wait_log(ingest, "shard shard2: no committed position: starting at GTID")
        sql(primary2, f"INSERT INTO {db}.orders_0 VALUES (1, 'x')")
        x = _gtid_pos(primary2)
        caught_up(primary2, replica2)
        sql(replica2, "STOP SLAVE")
        _wait_entry(stack, prefix, "shard2", x)  # shard2 committed X: its next commit is >= 15 s away
        sql(primary2, f"INSERT INTO {db}.orders_0 SELECT seq, 'lost' FROM {db}.seq_100_to_399")
        t = _gtid_pos(primary2)
        time.sleep(1.5)  # T read and sent into the open transaction
        sql(primary1, f"INSERT INTO {db}.orders_0 VALUES (1, 'shard1')")
        vector = _wait_entry(stack, prefix, "shard1", _gtid_pos(primary1), timeout_s=10)
        assert vector.shards["shard2"].gtid_state == x, vector  # T went out with shard1's commit
        promote(replica2)
        proxy.switch(replica2.mariadb.port)
        assert ingest.wait_exit(60), "ingest went on on a shard server that lacks a transaction it had sent"
        log = ingest.log_text()
        errors = [line for line in log.splitlines() if "error: " in line]
        assert len(errors) == 1 and "Traceback" not in log, log[-3000:]
        assert "continuing there" not in log, log[-3000:]  # stopped at the connect, before any write
        assert "shard shard2" in errors[0] and f"GTID {t}" in errors[0], errors[0]
        assert "mariadb-binlog" in errors[0] and "cdc verify --repair" in errors[0], errors[0]
    finally:
        proxy.close()
        ingest.stop()


@pytest.mark.timeout(200)
def test_a_whole_sharded_ingest_and_one_shard_alone_exclude_each_other(tmp_path, stack, shard_pairs, unique_name):
    """Both orders: the second ingest of shard1 stops at once with one line naming the other."""
    (primary1, _) = shard_pairs["shard1"]
    db = f"shx_{unique_name}"
    sql(primary1, f"CREATE DATABASE {db}")
    for n, (first, second) in enumerate([((), ("--shard", "shard1")), (("--shard", "shard1"), ())]):
        prefix = f"shx{n}{unique_name}"
        cfg = ingest_config(tmp_path / f"ingest{n}.yaml", stack, {"shard1": primary1}, prefix, db)
        running = IngestProcess(cfg, tmp_path / f"first{n}.log", first).start()
        other = None
        try:
            sql(primary1, f"CREATE TABLE {db}.orders_{n} (id INT PRIMARY KEY)")
            deadline = time.monotonic() + 60
            while offsets_record(stack, prefix, "shard1" if first else None) is None:
                assert running.alive() and time.monotonic() < deadline, running.log_text()[-3000:]
                time.sleep(0.5)
            other = IngestProcess(cfg, tmp_path / f"second{n}.log", second).start()
            assert other.wait_exit(60), f"two ingests follow shard1 ({first} and {second})"
            errors = [line for line in other.log_text().splitlines() if "error: " in line]
            assert len(errors) == 1 and "shard shard1" in errors[0], other.log_text()[-3000:]
            assert "another ingest" in errors[0], errors[0]
            assert running.alive(), running.log_text()[-3000:]
        finally:
            if other is not None:
                other.stop()
            running.stop()
