"""A sharded source end to end (issue 24): three shards, each with two physical tables
routed into one logical table, rows there before anything starts (so the merger
snapshots every origin, each window on its own shard), AUTO_INCREMENT keys that collide
across shards and tables, writes on every shard all along, kill -9 of ingest and of the
merger under the writes, a key range moved from shard1 to shard2 the usual way (key mode
origin) with kill -9 of both at the switch, then a fourth shard added mid-run (listed in both configs, both
restarted, `cdc snapshot` of the logical table).

The oracle shares no code with the pipeline: a plain SELECT of every physical table of
every shard, each row with its origin written here (`<shard>/<db>.<table>`), against each
sink read by its own reader (`merger.verify.sinks`: psycopg, deltalake)."""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from pathlib import Path

import pymysql
import pytest
import yaml

from cdc import stack as local_stack
from cdc import stack_shards
from merger.verify.sinks import DeltaReader, PostgresReader
from tests.cli_util import merger_status, run_cli
from tests.ingest_harness import IngestProcess
from tests.merger_harness import MergerProcess, write_merger_config

pytestmark = pytest.mark.integration

TABLES = ("orders_0", "orders_1")
METRICS_PORT = 19000 + random.randrange(1000)
COLUMNS = ["id", "v", "__cdc_origin"]


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    state = tmp_path_factory.mktemp("shards")
    try:
        stack_shards.up(state, 3, replicas=False)
        yield state
    finally:
        stack_shards.down(state)


def servers(state: Path) -> dict[str, local_stack.StackInfo]:
    return {s.name: local_stack.StackInfo.load(Path(s.primary)) for s in stack_shards.load(state)}


def sql(info: local_stack.StackInfo, *statements: str, fetch: bool = False):
    conn = pymysql.connect(
        host="127.0.0.1", port=info.mariadb.port, user="root", password=info.mariadb.root_password, autocommit=True
    )
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return cur.fetchall() if fetch else None
    finally:
        conn.close()


def shard_list(shards: dict) -> list[dict]:
    return [
        {
            "name": name,
            "mysql": {
                "host": "127.0.0.1",
                "port": info.mariadb.port,
                "user": "root",
                "password_file": str(local_stack.secret_file(info, "mysql_root_password")),
            },
        }
        for name, info in shards.items()
    ]


def write_configs(tmp_path: Path, stack, shards: dict, prefix: str, db: str) -> tuple[Path, Path]:
    routes = [{"match": rf"{db}\.orders_\d+", "to": f"{db}.orders"}]
    ingest = {
        "topic_prefix": prefix,
        "server_id": 7000 + (abs(hash(prefix)) % 20000),
        "kafka": {"bootstrap_servers": stack.kafka.bootstrap},
        "database_include": [db, "cdc"],
        "heartbeat_interval_ms": 1000,
        "shards": shard_list(shards),
        "routes": routes,
        "metrics_port": METRICS_PORT,
    }
    (tmp_path / "ingest.yaml").write_text(yaml.safe_dump(ingest))
    merger = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        prefix,
        [db],
        tmp_path,
        shards=shard_list(shards),
        routes=routes,
        **{"snapshot.chunk_size": 100, "snapshot.chunks_per_window": 2},
    )
    return tmp_path / "ingest.yaml", merger


def source_rows(shards: dict, db: str) -> set[tuple]:
    out = set()
    for name, info in shards.items():
        for table in TABLES:
            for id_, v in sql(info, f"SELECT id, v FROM {db}.{table}", fetch=True):
                out.add((id_, v, f"{name}/{db}.{table}"))
    return out


def sink_rows(stack, work: Path, db: str) -> dict[str, set[tuple] | str]:
    pg = stack.postgres
    readers = {
        "delta": DeltaReader(str(work / "delta")),
        "postgres": PostgresReader(
            {"host": pg.host, "port": pg.port, "user": pg.user, "dbname": pg.database, "password": pg.password}
        ),
    }
    out = {}
    for name, reader in readers.items():
        try:
            cols = reader.columns(db, "orders")
            out[name] = "no table" if cols is None else set(reader.rows(db, "orders", COLUMNS, cols))
        except Exception as exc:  # noqa: BLE001 - shown in the failure
            out[name] = f"{type(exc).__name__}: {exc}"
        finally:
            reader.close()
    return out


def wait_equal(stack, shards, work: Path, db: str, procs, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    found = None
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.alive(), proc.log_text()[-4000:]
        expected = source_rows(shards, db)
        found = sink_rows(stack, work, db)
        if all(rows == expected for rows in found.values()):
            return
        time.sleep(3)
    summary = {
        k: (v if isinstance(v, str) else f"{len(v)} rows, {len(v - expected)} extra, {len(expected - v)} missing")
        for k, v in found.items()
    }
    raise AssertionError(f"sinks differ from the shards: {summary}\n" + procs[-1].log_text()[-4000:])


def writer(info, db: str, stop: threading.Event, seed: int, errors: list) -> None:
    rnd = random.Random(seed)
    try:
        conn = pymysql.connect(
            host="127.0.0.1", port=info.mariadb.port, user="root", password=info.mariadb.root_password
        )
        with conn.cursor() as cur:
            while not stop.is_set():
                table = rnd.choice(TABLES)
                op = rnd.random()
                if op < 0.5:
                    cur.execute(f"INSERT INTO {db}.{table} (v) VALUES (%s)", (f"v{rnd.random():.6f}",))
                elif op < 0.8:
                    cur.execute(f"UPDATE {db}.{table} SET v = %s ORDER BY RAND() LIMIT 1", (f"u{rnd.random():.6f}",))
                else:
                    cur.execute(f"DELETE FROM {db}.{table} ORDER BY RAND() LIMIT 1")
                conn.commit()
                time.sleep(0.02)
        conn.close()
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def fill(info, db: str, rows: int) -> None:
    sql(info, f"CREATE DATABASE IF NOT EXISTS {db}")
    for table in TABLES:
        sql(info, f"CREATE TABLE {db}.{table} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))")
        values = ", ".join(f"('{table}-{i}')" for i in range(rows))
        sql(info, f"INSERT INTO {db}.{table} (v) VALUES {values}")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_three_shards_then_a_fourth_into_one_table_of_both_sinks(tmp_path, stack, shard_state, unique_name):
    db = f"shm_{unique_name}"
    prefix = f"shm{unique_name}"
    shards = servers(shard_state)
    assert sorted(shards) == ["shard1", "shard2", "shard3"]
    for info in shards.values():
        fill(info, db, 250)
    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db)
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
    stop, errors = threading.Event(), []
    threads = [
        threading.Thread(target=writer, args=(info, db, stop, i, errors)) for i, info in enumerate(shards.values())
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(20)  # the snapshot is under way: kill -9 both, in turn, under the writes
        ingest.kill9()
        ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
        time.sleep(10)
        merger.kill9()
        merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
        time.sleep(15)
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join(30)
    assert not errors, errors
    try:
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        # what an operator sees per shard: the merger's status, ingest's metrics
        status = merger_status(merger_cfg)["tables"][f"{db}.orders"]["shards"]
        assert sorted(status) == ["shard1", "shard2", "shard3"], status
        assert all(s["chunks_done"] == s["chunks_total"] > 0 and s["lag_ms"] is not None for s in status.values())
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
        ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db)
        ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
        merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
        done = run_cli("snapshot", f"{db}.orders", "-c", str(merger_cfg), timeout=60)
        assert done.returncode == 0, done.stderr
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(info, db, stop, 10 + i, errors))
            for i, info in enumerate(shards.values())
        ]
        for thread in threads:
            thread.start()
        time.sleep(10)
        stop.set()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        assert any(origin.startswith("shard4/") for _, _, origin in source_rows(shards, db))
    finally:
        ingest.stop()
        merger.stop()
