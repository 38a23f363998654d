"""The ways a snapshot window is staged give the same rows: Spark tasks reading with
JDBC or with ConnectorX (large tables) and the direct streamed SELECT of a table smaller
than one chunk (merger.snapshot.direct_read), for every MariaDB column type, on the real
server and a real Spark session."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql
import pytest

from cdc import stack as local_stack
from cdc.config import MergerConfig
from merger.batch.processor import BatchProcessor
from merger.dblog import encode_key
from merger.schema.canonical import from_snapshot
from merger.schema.catalog import SourceCatalog
from merger.snapshot.direct_read import is_whole_table, stage_table
from merger.state.store import StateStore
from tests.integration.test_types import WORKLOAD

pytestmark = pytest.mark.integration


def test_is_whole_table():
    whole = {"lo": encode_key(None), "hi": encode_key(None)}
    assert is_whole_table([whole])
    assert not is_whole_table([whole, whole])
    assert not is_whole_table([{"lo": encode_key(None), "hi": encode_key((5,))}])


def _staged(path, rt) -> pa.Table:
    files = sorted(path.glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    return from_snapshot(rt.spec, rt.schema, table).sort_by([(k, "ascending") for k in rt.keys])


@pytest.mark.timeout(600)
def test_direct_read_stages_what_spark_jdbc_stages(stack, tmp_path, unique_name):
    from merger.snapshot.runner import SnapshotRunner
    from merger.spark.session import make_spark

    db = f"dr_{unique_name}"
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        for stmt in WORKLOAD:
            sql, args = stmt if isinstance(stmt, tuple) else (stmt, None)
            if sql.startswith("UPDATE alltypes SET id"):
                break
            cur.execute(sql.format(db=db), args) if args is None else cur.execute(sql, args)
            if sql.startswith("CREATE DATABASE"):
                cur.execute(f"USE `{db}`")
        cur.execute("INSERT INTO defaults_t (id, k2, dtz) VALUES (1, 'a', '2020-01-01'), (2, 'b', NOW())")
    cfg = MergerConfig(
        mysql={
            "host": stack.mariadb.host,
            "port": stack.mariadb.port,
            "user": "root",
            "password_file": str(local_stack.secret_file(stack, "mysql_root_password")),
        },
        state_dir=str(tmp_path / "state"),
        spark_conf={"spark.driver.memory": "1g"},
    )
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("x", store, [], SourceCatalog(cfg.mysql), lambda topic: 1)
    spark = make_spark(cfg)
    try:
        runner = SnapshotRunner(cfg, spark, store, processor)
        for name, split in (("alltypes", (3,)), ("defaults_t", ("a", 2))):
            rt = processor.table(f"{db}.{name}")
            direct = tmp_path / f"{name}-direct"
            # batches of 2 rows: several row groups, one of them all NULL
            rows = stage_table(conn, rt.spec, None, direct, batch_rows=2)
            # two chunks: the Spark JDBC path
            chunks = [
                {"lo": encode_key(None), "hi": encode_key(split)},
                {"lo": encode_key(split), "hi": encode_key(None)},
            ]
            assert not is_whole_table(chunks)
            for reader in ("jdbc", "connectorx"):  # Spark tasks: JDBC, or ConnectorX + pyarrow
                runner.reader = reader
                wid = f"w-{name}-{reader}"
                spark_rows = runner._read_chunks(f"{db}.{name}", rt, chunks, None, wid)
                assert rows == spark_rows > 1, reader
                a, b = _staged(direct, rt), _staged(store.staging_dir(f"{db}.{name}", wid), rt)
                assert a.schema == b.schema, reader
                differ = [c for c in a.column_names if not a.column(c).equals(b.column(c))]
                assert not differ, (reader, {c: (a.column(c).to_pylist(), b.column(c).to_pylist()) for c in differ})
    finally:
        spark.stop()
        conn.close()


def test_split_evenly_gives_consecutive_runs_of_near_equal_length():
    from merger.snapshot.runner import split_evenly

    items = list(range(10))
    for parts in range(1, 14):
        runs = split_evenly(items, parts)
        assert [x for r in runs for x in r] == items  # consecutive, nothing lost or repeated
        assert len(runs) == min(parts, len(items))
        assert max(map(len, runs)) - min(map(len, runs)) <= 1
    assert split_evenly([], 3) == [[]]


def test_connectorx_read_errors_say_whether_to_retry(stack, tmp_path):
    """A read task's error carries the mark merger.mysql.source retries on (server unreachable)
    or the one it stops on (a server error to fix), at once."""
    from merger.mysql.source import is_transient
    from merger.snapshot.chunk_read import UNAVAILABLE_MARK, stage_query

    source = {
        "host": stack.mariadb.host,
        "port": stack.mariadb.port,
        "user": "root",
        "password": stack.mariadb.root_password,
        "connect_timeout_s": 5,
    }
    out = str(tmp_path / "part.parquet")
    with pytest.raises(RuntimeError) as down:
        stage_query({**source, "port": local_stack.free_port()}, "SELECT 1", out, 10)
    assert UNAVAILABLE_MARK in str(down.value)
    with pytest.raises(RuntimeError) as missing:
        stage_query(source, "SELECT * FROM cdc.no_such_table_here", out, 10)
    assert "cdc-source-error" in str(missing.value) and "1146" in str(missing.value)
    with pytest.raises(RuntimeError) as denied:
        stage_query({**source, "password": "wrong"}, "SELECT 1", out, 10)
    assert "Access denied" in str(denied.value)

    class PythonException(Exception):  # as Spark hands a task's error to the driver
        __module__ = "pyspark.errors"

    assert is_transient(PythonException(str(down.value)))
    assert not is_transient(PythonException(str(missing.value)))
    assert not is_transient(PythonException(str(denied.value)))
    assert stage_query(source, "SELECT 1 AS x UNION ALL SELECT 2", out, 10) == 2
