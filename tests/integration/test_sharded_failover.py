"""One shard of a sharded source fails over to its GTID replica (issue 24, point 5): shard1
is reached through a switchable TCP proxy (as the one-server failover test does), shard2
directly; both take writes all along. shard1's replica is caught up, promoted and the
proxy moved to it: ingest carries on there at the next epoch of that shard alone, the
other shard never stops, and both sinks equal the union of the shards (shard1 read on its
new primary) by a plain SELECT of each."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from cdc import stack as local_stack
from cdc import stack_shards
from tests.failover_harness import TcpProxy, WriteLoad, caught_up, promote
from tests.ingest_harness import IngestProcess
from tests.merger_harness import MergerProcess
from tests.shard_harness import TABLES, offsets_record, sql, wait_equal, write_configs

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
        time.sleep(10)
        # shard1's failover: its writes paused, its replica caught up and promoted, the address moved
        loads[0].pause()
        caught_up(primary1, replica1)
        promote(replica1)
        proxy.switch(replica1.mariadb.port)
        loads[0].resume()
        time.sleep(8)
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
