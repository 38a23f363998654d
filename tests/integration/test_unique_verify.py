"""`cdc verify` in key mode unique (merger/verify/union_source.py): two shards, keys 10..14
moved from shard1 to shard2 (switched; shard1's leftovers not deleted yet, two of them
stale) and keys 25..26 being moved from shard2 to shard1 (begun: shard1 holds a copy).
The sinks hold one row per key, moved rows unchanged since still naming shard1 as their
origin: verify finds them equal to the union of the rows each shard owns; a sink row
changed behind the pipeline's back is named."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tests.cli_util import run_cli
from tests.merger_harness import write_merger_config
from tests.shard_harness import running_shards, servers, shard_list, sql

pytestmark = pytest.mark.integration

CUTOVER = (
    "CREATE TABLE IF NOT EXISTS cdc.cdc_cutover (move_id INT, kind VARCHAR(8), table_name VARCHAR(255), "
    "low_key TEXT, high_key TEXT, source VARCHAR(64), target VARCHAR(64), created_at TIMESTAMP(6) "
    "DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (move_id, kind))"
)


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 2)


def _move(info, number: int, kind: str, table: str, low: int, high: int, source: str, target: str) -> None:
    sql(
        info,
        "CREATE DATABASE IF NOT EXISTS cdc",
        CUTOVER,
        f"INSERT INTO cdc.cdc_cutover (move_id, kind, table_name, low_key, high_key, source, target) VALUES "
        f"({number}, '{kind}', '{table}', '{json.dumps(low)}', '{json.dumps(high)}', '{source}', '{target}')",
    )


def _source(info, db: str, rows: dict[int, str]) -> None:
    sql(info, f"CREATE DATABASE IF NOT EXISTS {db}", f"CREATE TABLE {db}.orders_0 (id INT PRIMARY KEY, v VARCHAR(40))")
    values = ", ".join(f"({k}, '{v}')" for k, v in sorted(rows.items()))
    sql(info, f"INSERT INTO {db}.orders_0 (id, v) VALUES {values}")


def _sinks(stack, work):
    from merger.sinks.delta import DeltaSink
    from merger.sinks.postgres import PostgresSink

    return [DeltaSink(str(work / "delta")), PostgresSink(stack.postgres)]


@pytest.mark.timeout(600)
def test_verify_compares_the_rows_each_shard_owns(tmp_path, stack, shard_state, unique_name):
    db = f"uv_{unique_name}"
    logical = f"{db}.orders"
    shards = servers(shard_state)
    s1, s2 = shards["shard1"], shards["shard2"]
    one = {k: f"v{k}" for k in range(1, 21)}
    one.update({13: "stale", 14: "stale", 25: "v25", 26: "v26"})  # leftovers of move 1, the copy of move 2
    two = {k: f"v{k}" for k in range(10, 15)}
    two.update({13: "b13", 14: "b14"})  # changed on shard2 after its switch
    two.update({k: f"v{k}" for k in range(21, 31)})
    _source(s1, db, one)
    _source(s2, db, two)
    _move(s2, 1, "begin", logical, 10, 15, "shard1", "shard2")
    _move(s1, 1, "switch", logical, 10, 15, "shard1", "shard2")
    _move(s2, 1, "switch", logical, 10, 15, "shard1", "shard2")
    _move(s1, 2, "begin", logical, 25, 27, "shard2", "shard1")

    owned = {k: (v, "shard1") for k, v in one.items() if not 10 <= k < 15 and k not in (25, 26)}
    owned.update({k: (v, "shard1" if k < 13 else "shard2") for k, v in two.items() if k < 15})  # 10..12 unchanged
    owned.update({k: (v, "shard2") for k, v in two.items() if k >= 21})
    schema = pa.schema([("id", pa.int32()), ("v", pa.string()), ("__cdc_origin", pa.string())])
    rows = [{"id": k, "v": v, "__cdc_origin": f"{s}/{db}.orders_0"} for k, (v, s) in sorted(owned.items())]
    changes = pa.Table.from_pylist(
        [{**r, "_cdc_op": "c", "_cdc_seq": 1} for r in rows],
        schema=schema.append(pa.field("_cdc_op", pa.string())).append(pa.field("_cdc_seq", pa.int64())),
    )
    sinks = _sinks(stack, tmp_path)
    for sink in sinks:
        sink.ensure_table((db, "orders"), schema, ["id"])
        sink.apply((db, "orders"), 1, changes)
    cfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        f"uv{unique_name}",
        [db],
        tmp_path,
        shards=shard_list(shards),
        routes=[{"match": rf"{db}\.orders_\d+", "to": logical}],
        key_mode="unique",
    )

    def verify():
        res = run_cli("verify", "-c", str(cfg), "--retries", "0", "--chunk-size", "8", "--json", timeout=300)
        return res, {t["sink"]: t for t in json.loads(res.stdout)["tables"]} if res.stdout.strip() else {}

    res, found = verify()
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert sorted(found) == ["delta", "postgres"]
    for t in found.values():
        assert t["table"] == logical and t["verdict"] == "equal" and t["source_rows"] == len(owned), t

    # behind the pipeline's back: key 11 changed, key 26 (still shard2's) deleted
    gone = pa.Table.from_pylist(
        [
            {"id": 11, "v": "changed", "__cdc_origin": f"shard1/{db}.orders_0", "_cdc_op": "u", "_cdc_seq": 2},
            {"id": 26, "v": "v26", "__cdc_origin": f"shard2/{db}.orders_0", "_cdc_op": "d", "_cdc_seq": 2},
        ],
        schema=changes.schema,
    )
    for sink in sinks:
        sink.apply((db, "orders"), 2, gone)
        sink.close()
    res, found = verify()
    assert res.returncode == 1, (res.stdout, res.stderr)
    for t in found.values():
        assert t["verdict"] == "different", t
        assert t["missing"] == [[26]] and [d["key"] for d in t["different"]] == [[11]], t
