"""`cdc shard remove` (docs/operations/shards.md, Remove a shard): two shards caught up in the
sinks; shard2 is taken out of both configs and its rows deleted from every sink (the Kafka
changelog's topic too, read back with a plain consumer), which then hold shard1's rows
alone; a second run deletes nothing; with shard2 still listed the command refuses; the
pipeline then goes on with shard1 alone."""

from __future__ import annotations

import time

import pytest

from tests.changelog_reader import changelog_rows
from tests.cli_util import run_cli
from tests.ingest_harness import IngestProcess
from tests.merger_harness import MergerProcess
from tests.shard_harness import (
    fill,
    running_shards,
    servers,
    sink_rows,
    source_rows,
    sql,
    start_pipeline,
    wait_equal,
    write_configs,
)

pytestmark = pytest.mark.integration

ROWS = 30


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 2)


def changelog(stack, prefix: str, db: str) -> set[tuple]:
    """(id, v, origin) of every row a consumer of the changelog topic of ``<db>.orders`` holds."""
    rows = changelog_rows(stack.kafka.bootstrap, f"{prefix}m.{db}.orders")
    return {(r["id"], r["v"], r["__cdc_origin"]) for r in rows.values()}


def remove(cfg, *args: str):
    return run_cli("shard", "remove", "shard2", "-c", str(cfg), *args, timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_remove_a_shard_deletes_its_rows(tmp_path, stack, shard_state, unique_name):
    db = f"shr_{unique_name}"
    prefix = f"shr{unique_name}"
    shards = servers(shard_state)
    assert sorted(shards) == ["shard1", "shard2"]
    for info in shards.values():
        fill(info, db, ROWS)
    ingest_cfg, merger_cfg, ingest, merger = start_pipeline(tmp_path, stack, shards, prefix, db, changelog=f"{prefix}m")
    try:
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        # refused while the merger runs (shard2 out of the config already)
        write_configs(tmp_path, stack, {"shard1": shards["shard1"]}, prefix, db, f"{prefix}m")
        res = remove(merger_cfg, "--delete-rows")
        assert res.returncode == 2 and "merger is running" in res.stderr, (res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
    finally:
        merger.stop()
        ingest.stop()

    one = {"shard1": shards["shard1"]}
    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, one, prefix, db, f"{prefix}m")
    assert changelog(stack, prefix, db) == source_rows(shards, db)
    res = remove(merger_cfg)
    assert res.returncode == 2 and "--delete-rows or --keep-rows" in res.stderr, res.stderr

    res = remove(merger_cfg, "--keep-rows")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert f"{db}.orders postgres: kept {2 * ROWS} rows of shard shard2" in res.stdout, res.stdout
    assert f"{db}.orders delta: kept {2 * ROWS} rows of shard shard2" in res.stdout, res.stdout
    assert f"{db}.orders kafka_changelog: kept {2 * ROWS} rows of shard shard2" in res.stdout, res.stdout
    assert sink_rows(stack, tmp_path, db) == {"delta": source_rows(shards, db), "postgres": source_rows(shards, db)}

    res = remove(merger_cfg, "--delete-rows")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert f"{db}.orders postgres: deleted {2 * ROWS} rows of shard shard2" in res.stdout, res.stdout
    assert f"{db}.orders delta: deleted {2 * ROWS} rows of shard shard2" in res.stdout, res.stdout
    assert f"{db}.orders kafka_changelog: deleted {2 * ROWS} rows of shard shard2" in res.stdout, res.stdout
    expected = source_rows(one, db)
    assert len(expected) == 2 * ROWS
    assert sink_rows(stack, tmp_path, db) == {"delta": expected, "postgres": expected}
    assert changelog(stack, prefix, db) == expected

    res = remove(merger_cfg, "--delete-rows")
    assert res.returncode == 0, (res.stdout, res.stderr)
    for sink in ("postgres", "delta", "kafka_changelog"):
        assert f"{db}.orders {sink}: deleted 0 rows" in res.stdout, res.stdout

    # still listed: refused, nothing touched
    (tmp_path / "both").mkdir()
    _, both_cfg = write_configs(tmp_path / "both", stack, shards, prefix, db)
    res = remove(both_cfg, "--delete-rows")
    assert res.returncode == 2 and "still listed" in res.stderr and "Traceback" not in res.stderr, res.stderr

    # the pipeline goes on with shard1 alone
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest2.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger2.log").start()
    try:
        sql(
            shards["shard1"],
            f"INSERT INTO {db}.orders_0 (v) VALUES ('after')",
            f"DELETE FROM {db}.orders_1 WHERE id = 1",
        )
        rows = wait_equal(stack, one, tmp_path, db, [ingest, merger])
        assert (ROWS + 1, "after", f"shard1/{db}.orders_0") in rows
        deadline = time.monotonic() + 60  # the changelog may commit a moment after the tables
        while changelog(stack, prefix, db) != rows and time.monotonic() < deadline:
            time.sleep(2)
        assert changelog(stack, prefix, db) == rows
    finally:
        merger.stop()
        ingest.stop()
