"""`cdc verify` of a sharded source (issue 24): two shards, two physical tables each routed
into one logical table (key mode origin). Once the pipeline has caught up, verify compares
each sink's logical table with the union of the shards and finds them equal; then the
PostgreSQL sink is changed behind the pipeline's back (one origin's row deleted, another
origin's row changed, a row of an origin the source does not have) and verify names
exactly those rows, each key with its origin, and the table."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.cli_util import run_cli
from tests.shard_harness import fill, running_shards, servers, start_pipeline, wait_equal

pytestmark = pytest.mark.integration

ROWS = 40  # per physical table: chunks of 100 hold one table each


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 2)


def verify(cfg: Path, *args: str):
    res = run_cli("verify", "-c", str(cfg), "--retries", "0", *args, timeout=300)
    return res, (json.loads(res.stdout) if "--json" in args and res.stdout.strip() else {})


def by_sink(data: dict) -> dict:
    return {t["sink"]: t for t in data["tables"]}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_verify_compares_the_union_of_the_shards(tmp_path, stack, shard_state, unique_name):
    db = f"shv_{unique_name}"
    prefix = f"shv{unique_name}"
    shards = servers(shard_state)
    assert sorted(shards) == ["shard1", "shard2"]
    for info in shards.values():
        fill(info, db, ROWS)
    ingest_cfg, merger_cfg, ingest, merger = start_pipeline(tmp_path, stack, shards, prefix, db)
    try:
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
    finally:
        merger.stop()
        ingest.stop()

    res, data = verify(merger_cfg, "--json")
    assert res.returncode == 0, (res.stdout, res.stderr)
    found = by_sink(data)
    assert sorted(found) == ["delta", "postgres"]
    for t in found.values():
        assert t["table"] == f"{db}.orders" and t["verdict"] == "equal", t
        assert t["source_rows"] == t["sink_rows"] == 4 * ROWS, t
        # one chunk per origin, each settled by the SQL digests: the sinks' digest queries
        # hold the origin filter (without it the digests differ and the rows settle the chunk)
        assert t["chunks"] == 4 and t["digest_chunks"] == 4 and t["row_path"] is None, t

    # behind the pipeline's back: one origin's row gone, another's changed, a row of no origin
    pg = stack.postgres
    with psycopg.connect(
        host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.database, autocommit=True
    ) as conn:
        table = sql.Identifier(db, "orders")
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE id = 3 AND __cdc_origin = %s").format(table),
            (f"shard1/{db}.orders_0",),
        )
        conn.execute(
            sql.SQL("UPDATE {} SET v = 'changed' WHERE id = 5 AND __cdc_origin = %s").format(table),
            (f"shard2/{db}.orders_1",),
        )
        conn.execute(
            sql.SQL("INSERT INTO {} (id, v, __cdc_origin, _cdc_seq) VALUES (1, 'ghost', %s, 0)").format(table),
            (f"shard9/{db}.orders_0",),
        )

    res, data = verify(merger_cfg, "--json")
    assert res.returncode == 1, (res.stdout, res.stderr)
    found = by_sink(data)
    assert found["delta"]["verdict"] == "equal" and found["delta"]["digest_chunks"] == 4, found["delta"]
    p = found["postgres"]
    assert p["table"] == f"{db}.orders" and p["verdict"] == "different", p
    assert p["missing"] == [[3, f"shard1/{db}.orders_0"]], p
    assert p["different"] == [{"key": [5, f"shard2/{db}.orders_1"], "columns": ["v"]}], p
    assert p["extra"] == [] and p["unlisted"] == 0 and p["mismatched_chunks"] == 2 and p["digest_chunks"] == 2, p
    assert f"shard9/{db}.orders_0" in p["note"] and "1 rows" in p["note"], p
    assert p["source_rows"] == 4 * ROWS and p["sink_rows"] == 4 * ROWS, p

    # the table as people read it names the table and the rows
    res, _ = verify(merger_cfg, "--sink", "postgres")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert f"{db}.orders" in res.stdout and "different" in res.stdout
    assert f"(3, shard1/{db}.orders_0)" in res.stdout and f"shard9/{db}.orders_0" in res.stdout
