"""Schema changes end to end: real MariaDB, ingest, the broker, the merger (Spark local
mode), Delta and PostgreSQL. One merger run goes through the whole matrix, one table per
scenario, so that a few Spark processes cover it: every ALTER form that changes existing
rows without row events, RENAME TABLE (to a new name, and a swap), DROP and CREATE again
(other rows, another definition), TRUNCATE, CREATE TABLE ... LIKE / AS SELECT, a
partitioned table, and DDL while a snapshot window of the table is open. After each
phase every sink table equals its source table row for row, and the sink tables of names
the source no longer has are empty."""

from __future__ import annotations

import time

import pytest

from merger.state.store import StateStore
from tests.ingest_harness import IngestProcess, write_config
from tests.kafka_util import list_topics, read_records
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.source_db import root_connection
from tests.support import readback

pytestmark = pytest.mark.integration

BIG_ROWS = 60_000

SETUP = [
    "CREATE TABLE add_nn (id INT PRIMARY KEY, v VARCHAR(20))",
    "INSERT INTO add_nn SELECT seq, CONCAT('v', seq) FROM seq_1_to_200",
    "CREATE TABLE add_def (id INT PRIMARY KEY, v VARCHAR(20), d INT DEFAULT 1)",
    "INSERT INTO add_def (id, v) SELECT seq, CONCAT('v', seq) FROM seq_1_to_200",
    "CREATE TABLE ren_col (id INT PRIMARY KEY, old_name VARCHAR(20), n INT)",
    "INSERT INTO ren_col SELECT seq, CONCAT('o', seq), seq FROM seq_1_to_200",
    "CREATE TABLE conv (id INT PRIMARY KEY, i INT, d DECIMAL(10,2), s VARCHAR(20))",
    "INSERT INTO conv SELECT seq, seq * 3, seq + 0.57, CONCAT('a-long-string-', seq) FROM seq_1_to_200",
    "CREATE TABLE gen (id INT PRIMARY KEY, a INT)",
    "INSERT INTO gen SELECT seq, seq FROM seq_1_to_200",
    "CREATE TABLE cs (id INT PRIMARY KEY, s VARCHAR(20) CHARACTER SET utf8mb4) CHARACTER SET utf8mb4",
    "INSERT INTO cs SELECT seq, CONCAT('żółw-é-', seq) FROM seq_1_to_200",
    "CREATE TABLE drop_col (id INT PRIMARY KEY, keep_me INT, gone VARCHAR(20))",
    "INSERT INTO drop_col SELECT seq, seq, 'stale' FROM seq_1_to_200",
    "CREATE TABLE dropre (id INT PRIMARY KEY, a VARCHAR(10), b INT)",
    "INSERT INTO dropre SELECT seq, 'old', seq FROM seq_1_to_50",
    "CREATE TABLE trunc (id INT PRIMARY KEY, v INT)",
    "INSERT INTO trunc SELECT seq, seq FROM seq_1_to_100",
    "CREATE TABLE ren_a (id INT PRIMARY KEY, v VARCHAR(20))",
    "INSERT INTO ren_a SELECT seq, CONCAT('a', seq) FROM seq_1_to_100",
    "CREATE TABLE sw1 (id INT PRIMARY KEY, x INT)",
    "INSERT INTO sw1 SELECT seq, 1 FROM seq_1_to_20",
    "CREATE TABLE sw2 (id INT PRIMARY KEY, y VARCHAR(10))",
    "INSERT INTO sw2 SELECT seq, 'two' FROM seq_100_to_110",
    "CREATE TABLE part (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), "
    "PARTITION p1 VALUES LESS THAN (200), PARTITION p2 VALUES LESS THAN MAXVALUE)",
    "INSERT INTO part SELECT seq, seq FROM seq_1_to_300",
    "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(30), n INT)",
    f"INSERT INTO big SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_{BIG_ROWS}",
]

# each scenario: its statements (session sql_mode '' so that conversions truncate, as a
# non-strict server does), then a few row changes written with the new definition
MATRIX = [
    # existing rows read 0 in the new column, without any row event
    "ALTER TABLE add_nn ADD COLUMN must INT NOT NULL",
    "UPDATE add_nn SET must = 5 WHERE id <= 10",
    "INSERT INTO add_nn VALUES (1000, 'new', 7)",
    # a default for existing rows, a nullable column without one, then SET DEFAULT for later rows
    "ALTER TABLE add_def ADD COLUMN e INT DEFAULT 42, ADD COLUMN n INT",
    "ALTER TABLE add_def ALTER COLUMN d SET DEFAULT 9",
    "INSERT INTO add_def (id, v) VALUES (1000, 'new')",
    "UPDATE add_def SET n = id WHERE id <= 5",
    # the old name must not keep stale values, the new one must hold them
    "ALTER TABLE ren_col RENAME COLUMN old_name TO new_name",
    "UPDATE ren_col SET new_name = 'changed' WHERE id <= 3",
    # conversions: INT -> VARCHAR, DECIMAL rounding, VARCHAR truncation
    "ALTER TABLE conv MODIFY i VARCHAR(20), MODIFY d DECIMAL(10,0), MODIFY s VARCHAR(5)",
    "INSERT INTO conv VALUES (1000, 'text', 3, 'abcde')",
    # generated columns, virtual and stored
    "ALTER TABLE gen ADD COLUMN gv INT AS (a * 2) VIRTUAL, ADD COLUMN gs INT AS (a + 1) STORED",
    "UPDATE gen SET a = a + 100 WHERE id <= 10",
    # a lossy conversion of the character set
    "ALTER TABLE cs CONVERT TO CHARACTER SET latin1",
    "INSERT INTO cs VALUES (1000, 'après')",
    # a dropped column must not stay behind with stale values
    "ALTER TABLE drop_col DROP COLUMN gone",
    "UPDATE drop_col SET keep_me = -keep_me WHERE id <= 3",
    # dropped, created again with another definition and other rows
    "UPDATE dropre SET b = -1 WHERE id <= 10",
    "DROP TABLE dropre",
    "CREATE TABLE dropre (id BIGINT PRIMARY KEY, c TEXT, a INT)",
    "INSERT INTO dropre SELECT seq, CONCAT('new', seq), seq FROM seq_30_to_60",
    "TRUNCATE TABLE trunc",
    "INSERT INTO trunc VALUES (5, 50), (500, 5000)",
    # renamed to a name new to the merger
    "RENAME TABLE ren_a TO ren_b",
    "UPDATE ren_b SET v = 'moved' WHERE id <= 5",
    # a swap through a temporary name: each name then holds the other table
    "RENAME TABLE sw1 TO sw_tmp, sw2 TO sw1, sw_tmp TO sw2",
    "INSERT INTO sw1 VALUES (999, 'swapped')",
    "INSERT INTO sw2 VALUES (999, 9)",
    # a copy of a definition, and a copy of rows
    "CREATE TABLE like_t LIKE add_nn",
    "INSERT INTO like_t SELECT * FROM add_nn WHERE id <= 20",
    "CREATE TABLE ctas (PRIMARY KEY (id)) AS SELECT id, v, d FROM add_def",
    "UPDATE ctas SET v = 'ctas' WHERE id <= 3",
    # a partitioned table: a column with a default, rows gone with their partitions
    "ALTER TABLE part ADD COLUMN e INT DEFAULT 3",
    "ALTER TABLE part TRUNCATE PARTITION p0",
    "ALTER TABLE part DROP PARTITION p1",
    "INSERT INTO part VALUES (5, 5, 5), (150, 150, 150), (1000, 1, 1)",
    "UPDATE part SET v = -v WHERE id BETWEEN 200 AND 210",
]

TABLES = [
    "add_nn",
    "add_def",
    "ren_col",
    "conv",
    "gen",
    "cs",
    "drop_col",
    "dropre",
    "trunc",
    "ren_b",
    "sw1",
    "sw2",
    "like_t",
    "ctas",
    "part",
    "big",
]
GONE = ["ren_a"]  # names the source no longer has: their sink tables end empty


def _run(stack, db: str, statements: list[str]) -> None:
    conn = root_connection(stack, db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def _wait(condition, what: str, timeout_s: float, merger) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if not merger.alive():
            raise AssertionError(f"merger exited while waiting for {what}:\n{merger.log_text()[-4000:]}")
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s\n{merger.log_text()[-3000:]}"
        time.sleep(0.5)


def _assert_empty(checker: SinkChecker, db: str, table: str, merger, timeout_s: float = 120) -> None:
    def empty():
        counts = [readback.count(sink, (db, table)) for sink in (checker.delta, checker.pg)]
        return all(c == 0 for c in counts)

    _wait(empty, f"the sink tables of {db}.{table} emptied", timeout_s, merger)


@pytest.mark.timeout(1500)
def test_every_ddl_leaves_every_sink_equal_to_the_source(stack, tmp_path, unique_name):
    db = f"dm_{unique_name}"
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
    conn.close()
    _run(stack, db, SETUP)
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=3)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    # small windows, one emitted per batch: the snapshot of `big` lasts many batches
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        **{
            "snapshot.chunk_size": 2000,
            "snapshot.chunks_per_window": 1,
            "snapshot.parallelism": 1,
            "snapshot.emit_rows_per_batch": 2000,
        },
    )
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    store = StateStore(tmp_path / "state")
    try:
        # DDL while a snapshot window of the table is open: a column added with values in
        # existing rows and a column renamed, in the middle of big's snapshot
        def big_running():
            plan = store.load_plan(f"{db}.big") or {}
            return 2 <= len(plan.get("done", [])) and not plan.get("finished_at")

        _wait(big_running, "the snapshot of big running", 300, merger)
        _run(
            stack,
            db,
            [
                "ALTER TABLE big ADD COLUMN must INT NOT NULL DEFAULT 4, RENAME COLUMN v TO v2",
                "UPDATE big SET v2 = 'during', must = 8 WHERE id % 1000 = 0",
                "DELETE FROM big WHERE id % 1000 = 1",
            ],
        )
        for table in ("add_nn", "conv", "dropre", "ren_a", "sw1", "sw2", "part"):
            checker.wait_equal(db, table, proc=merger)

        _run(stack, db, MATRIX)
        for table in TABLES:
            checker.wait_equal(db, table, proc=merger, timeout_s=300)
        for table in GONE:
            _assert_empty(checker, db, table, merger)
        # the columns the source no longer has are gone from the sinks too
        for sink in (checker.delta, checker.pg):
            for table, gone in (("ren_col", "old_name"), ("drop_col", "gone"), ("big", "v")):
                assert gone not in readback.rows(sink, (db, table)).column_names, (type(sink).__name__, table)
        assert ingest.alive()
    finally:
        merger.stop()
        ingest.stop()
        checker.close()


@pytest.mark.timeout(900)
def test_on_drop_keep_leaves_the_rows_of_a_dropped_table(stack, tmp_path, unique_name):
    db = f"dk_{unique_name}"
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
    conn.close()
    _run(
        stack,
        db,
        ["CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", "INSERT INTO t SELECT seq, 'old' FROM seq_1_to_50"],
    )
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, on_drop="keep")
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    try:
        checker.wait_equal(db, "t", proc=merger)
        _run(
            stack,
            db,
            [
                "DROP TABLE t",
                "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                "INSERT INTO t SELECT seq, 'new' FROM seq_40_to_60",
            ],
        )

        def merged(sink):
            rows = {r["id"]: r["v"] for r in readback.rows(sink, (db, "t")).to_pylist()}
            return len(rows) == 60 and all(rows[i] == ("old" if i < 40 else "new") for i in rows)

        # the sinks are written in parallel: each is waited for on its own
        _wait(lambda: merged(checker.pg), "old rows kept, new ones merged in (PostgreSQL)", 240, merger)
        _wait(lambda: merged(checker.delta), "old rows kept, new ones merged in (Delta)", 240, merger)
    finally:
        merger.stop()
        ingest.stop()
        checker.close()


@pytest.mark.timeout(600)
def test_ddl_in_executable_comments_and_exchanges_reaches_the_sinks(stack, unique_name, pipeline):
    """Two DDL forms the parser used to call OTHER (no schema record, no DDL marker, sinks
    stale): a statement in an executable comment, as mysqldump writes them, and an EXCHANGE
    PARTITION whose first table is not captured while the other one is (the shared
    pipeline captures no table named ``excluded_...``)."""
    db = pipeline.database(f"dx_{unique_name}")
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    conn.close()
    _run(
        stack,
        db,
        [
            "CREATE TABLE exe (id INT PRIMARY KEY, v VARCHAR(20))",
            "INSERT INTO exe SELECT seq, CONCAT('v', seq) FROM seq_1_to_50",
            "CREATE TABLE xc (id INT PRIMARY KEY, v INT)",
            "INSERT INTO xc SELECT seq, seq FROM seq_1_to_40",
            # not captured: its partition p0 is swapped into the captured xc
            "CREATE TABLE excluded_xpart (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
            "(PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN MAXVALUE)",
            "INSERT INTO excluded_xpart SELECT seq, -seq FROM seq_1_to_150",
        ],
    )
    ingest, merger, prefix = pipeline.ingest, pipeline.merger, pipeline.prefix
    checker = SinkChecker(stack, pipeline.work)
    try:
        for table in ("exe", "xc"):
            checker.wait_equal(db, table, proc=merger)
        _run(
            stack,
            db,
            [
                # existing rows get 7 without a row event
                "/*!50100 ALTER TABLE exe ADD COLUMN must INT NOT NULL DEFAULT 7 */",
                "UPDATE exe SET must = 1 WHERE id <= 3",
                # xc's rows are replaced by p0's 99 rows without a row event
                "ALTER TABLE excluded_xpart EXCHANGE PARTITION p0 WITH TABLE xc",
                "UPDATE xc SET v = 1000 WHERE id = 5",
            ],
        )
        for table in ("exe", "xc"):
            checker.wait_equal(db, table, proc=merger, timeout_s=180)
        assert ingest.alive(), ingest.log_text()[-3000:]
        # both statements are schema changes on the topic, each with the captured table
        records, _ = read_records(stack.kafka.bootstrap, [prefix], idle_s=1.0, timeout_s=60)
        touched = {
            (c["id"], r.payload["ddl"].split()[0])
            for r in records
            if r.payload and r.payload.get("ddl")
            for c in r.payload.get("tableChanges") or []
        }
        assert {(f'"{db}"."exe"', "/*!50100"), (f'"{db}"."xc"', "ALTER")} <= touched, touched
        # the other table of the exchange is not captured: no topic of its own
        assert not [t for t in list_topics(stack.kafka.bootstrap, prefix) if "excluded_xpart" in t]
    finally:
        checker.close()
