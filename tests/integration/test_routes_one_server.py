"""Routes within one server (issue 24, point 2): `orders_0` and `orders_1` of one MariaDB
routed into one logical table `<db>.orders`, rows there before anything starts (the merger
snapshots each physical table in its own windows), AUTO_INCREMENT keys equal in both,
writes all along, kill -9 of the merger. Both sinks equal a plain SELECT of the two
tables, each row with its origin `<db>.<table>` (no shard on one server); `cdc verify`
says so too. Then a TRUNCATE of `orders_1` empties that table's rows only, and a RENAME of
it to `orders_5` (routed too) moves its rows to that origin."""

from __future__ import annotations

import re
import time

import pytest

from tests.cli_util import run_cli
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, write_merger_config
from tests.shard_harness import Writers, fill, sink_readers, sql, wait_equal

pytestmark = pytest.mark.integration


def source_rows(servers: dict, db: str) -> set[tuple]:
    """(id, v, origin) of every row of every ``orders_<n>`` table of the server."""
    (info,) = servers.values()
    listed = sql(info, f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'", fetch=True)
    return {
        (id_, v, f"{db}.{table}")
        for (table,) in listed
        if re.fullmatch(r"orders_\d+", table)
        for id_, v in sql(info, f"SELECT id, v FROM {db}.{table}", fetch=True)
    }


def sink_rows(stack, work, db: str) -> dict:
    out = {}
    for name, reader in sink_readers(stack, work).items():
        try:
            cols = reader.columns(db, "orders")
            out[name] = (
                "no table" if cols is None else set(reader.rows(db, "orders", ["id", "v", "__cdc_origin"], cols))
            )
        finally:
            reader.close()
    return out


@pytest.mark.timeout(600)
def test_two_tables_of_one_server_into_one_logical_table(tmp_path, stack, unique_name):
    db = f"rt_{unique_name}"
    servers = {"": stack}
    fill(stack, db, 150)
    routes = [{"match": rf"{db}\.orders_\d+", "to": f"{db}.orders"}]
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], routes=routes)
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        routes=routes,
        **{"snapshot.chunk_size": 100, "snapshot.chunks_per_window": 2},
    )
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    writers = Writers(servers, db).start()
    try:
        time.sleep(6)
        merger.kill9()
        merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
        time.sleep(3)
        writers.finish()
        assert not writers.errors, writers.errors
        rows = wait_equal(stack, servers, tmp_path, db, [ingest, merger], source=source_rows, sinks=sink_rows)
        assert len({r[0] for r in rows}) < len(rows), "equal keys in both tables, told apart by the origin"
        assert {r[2] for r in rows} == {f"{db}.orders_0", f"{db}.orders_1"}
        sql(stack, f"TRUNCATE TABLE {db}.orders_1", f"INSERT INTO {db}.orders_1 (v) VALUES ('after')")
        rows = wait_equal(stack, servers, tmp_path, db, [ingest, merger], source=source_rows, sinks=sink_rows)
        assert {r for r in rows if r[2] == f"{db}.orders_1"} == {(1, "after", f"{db}.orders_1")}
        sql(stack, f"RENAME TABLE {db}.orders_1 TO {db}.orders_5")
        rows = wait_equal(stack, servers, tmp_path, db, [ingest, merger], source=source_rows, sinks=sink_rows)
        assert {r for r in rows if r[2] != f"{db}.orders_0"} == {(1, "after", f"{db}.orders_5")}
        merger.stop()
        checked = run_cli("verify", "-c", str(mcfg), "--retries", "0", timeout=300)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        writers.finish()
        ingest.stop()
        merger.stop()
