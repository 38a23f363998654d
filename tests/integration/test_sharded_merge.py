"""A sharded source end to end (issue 24): three shards, each with two physical tables
routed into one logical table, rows there before anything starts (so the merger
snapshots every origin, each window on its own shard), AUTO_INCREMENT keys that collide
across shards and tables, writes on every shard all along, kill -9 of ingest and of the
merger under the writes, a key range moved from shard1 to shard2 the usual way (key mode
origin) with kill -9 of both at the switch, then a fourth shard added mid-run (listed in both configs, both
restarted, `cdc snapshot --shard shard4` of the logical table).

The oracle shares no code with the pipeline: a plain SELECT of every physical table of
every shard, each row with its origin written here (`<shard>/<db>.<table>`), against each
sink read by its own reader (`merger.verify.sinks`: psycopg, deltalake)."""

from __future__ import annotations

import random
import time
import urllib.request

import pytest

from cdc import stack_shards
from merger.state.store import StateStore
from tests.cli_util import merger_status, run_cli, wait_for
from tests.ingest_harness import IngestProcess
from tests.merger_harness import MergerProcess
from tests.shard_harness import (
    Writers,
    fill,
    running_shards,
    servers,
    sink_rows,
    source_rows,
    sql,
    wait_equal,
    write_configs,
)

pytestmark = pytest.mark.integration

METRICS_PORT = 19000 + random.randrange(1000)


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 3)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_three_shards_then_a_fourth_into_one_table_of_both_sinks(tmp_path, stack, shard_state, unique_name):
    db = f"shm_{unique_name}"
    prefix = f"shm{unique_name}"
    shards = servers(shard_state)
    assert sorted(shards) == ["shard1", "shard2", "shard3"]
    for info in shards.values():
        fill(info, db, 250)
    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db, metrics_port=METRICS_PORT)
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
    writers = Writers(shards, db).start()
    try:
        # the snapshot is under way (a window done): kill -9 both, in turn, under the writes
        store = StateStore(tmp_path / "state")
        wait_for(lambda: any(p.get("done") for p in store.all_plans().values()), "a snapshot window done", 120, merger)
        ingest.kill9()
        ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
        time.sleep(3)
        merger.kill9()
        merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
        time.sleep(4)
    finally:
        writers.finish()
    assert not writers.errors, writers.errors
    try:
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        # what an operator sees per shard: the merger's status, ingest's metrics. The sinks
        # can be equal before the last window is emitted, and a shard's lag is known once the
        # restarted merger has applied one of its changes: one more change on each, then polled
        for name, info in shards.items():
            sql(info, f"INSERT INTO {db}.orders_1 (v) VALUES ('{name}-status')")

        def settled():
            status = merger_status(merger_cfg)["tables"][f"{db}.orders"].get("shards") or {}
            done = sorted(status) == ["shard1", "shard2", "shard3"] and all(
                s["chunks_done"] == s["chunks_total"] > 0 and s["lag_ms"] is not None for s in status.values()
            )
            return status if done else None

        wait_for(settled, "every shard's snapshot emitted and its lag known in cdc status", 180, merger)
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).read().decode()
        for name in ("shard1", "shard2", "shard3"):
            assert f'cdc_ingest_shard_connected{{shard="{name}"}} 1.0' in scraped
        expected = source_rows(shards, db)
        assert len({(id_, origin.split("/")[0]) for id_, _, origin in expected}) > len({r[0] for r in expected})

        # a key range moved from shard1 to shard2 the usual way, in key mode origin: copied to
        # shard2, ingest and the merger killed -9 at the switch, the range's writes go to
        # shard2, then it is deleted from shard1. Each moved row ends once, under shard2's
        # origin, with its last value
        moved = range(500_000, 500_040)
        rows = ", ".join(f"({i}, 'm{i}')" for i in moved)
        sql(shards["shard1"], f"INSERT INTO {db}.orders_0 (id, v) VALUES {rows}")
        time.sleep(2)
        sql(shards["shard2"], f"INSERT INTO {db}.orders_0 (id, v) VALUES {rows}")  # the copy
        ingest.kill9()
        merger.kill9()
        for i in moved[:10]:  # the switch: the range is written on shard2 now
            sql(shards["shard2"], f"UPDATE {db}.orders_0 SET v = 'moved-{i}' WHERE id = {i}")
        ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
        merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
        sql(shards["shard1"], f"DELETE FROM {db}.orders_0 WHERE id >= {moved[0]}")  # the cleanup
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        found = [r for r in sink_rows(stack, tmp_path, db)["postgres"] if r[0] in moved]
        assert sorted(found) == sorted(
            (i, f"moved-{i}" if i < moved[10] else f"m{i}", f"shard2/{db}.orders_0") for i in moved
        )

        # a fourth shard, with rows of its own, while the three stay written
        stack_shards.up(shard_state, 4, replicas=False)
        shards = servers(shard_state)
        fill(shards["shard4"], db, 120)
        ingest.stop()
        merger.stop()
        ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db, metrics_port=METRICS_PORT)
        ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
        merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
        wrong = run_cli("snapshot", f"{db}.orders", "--shard", "shard9", "-c", str(merger_cfg), timeout=60)
        assert wrong.returncode != 0 and "--shard shard9" in wrong.stderr and "Traceback" not in wrong.stderr
        done = run_cli("snapshot", f"{db}.orders", "--shard", "shard4", "-c", str(merger_cfg), timeout=60)
        assert done.returncode == 0, done.stderr
        writers = Writers(shards, db, seed=10).start()
        time.sleep(3)
        writers.finish()
        assert not writers.errors, writers.errors
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        assert any(origin.startswith("shard4/") for _, _, origin in source_rows(shards, db))
        status = merger_status(merger_cfg)["tables"][f"{db}.orders"]["shards"]
        # the snapshot of the new shard read its tables only
        assert status["shard4"]["chunks_total"] > 0 and status["shard1"]["chunks_total"] == 0, status
    finally:
        ingest.stop()
        merger.stop()
