"""What the sinks hold, end to end (ingest and the merger as processes, the real stack):

* BIT(n) values and text with NUL characters, both snapshotted (rows there before the
  merger starts) and streamed: PostgreSQL read with psycopg and Delta with deltalake,
  compared with a plain pymysql SELECT of the source (not through merger.verify, which
  shares the pipeline's conversions);
* ``sinks.postgres.nul_policy: pause`` pauses only the table with the NUL, and the
  documented way out works;
* a merger started with a new ``state_dir`` against sink tables an earlier merger wrote
  keeps writing them (its batch ids start at 0 again)."""

from __future__ import annotations

import json
import shutil
import time

import psycopg
import pymysql
import pytest
import yaml
from deltalake import DeltaTable

from merger.state.store import StateStore
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config

pytestmark = pytest.mark.integration


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _run(stack, db, *statements):
    conn = _conn(stack, db)
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(*s) if isinstance(s, tuple) else cur.execute(s)
    finally:
        conn.close()


def _source(stack, db, table, columns) -> dict:
    """id -> the row's values as MySQL returns them (BIT as bytes, big-endian)."""
    conn = _conn(stack, db)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, {', '.join(columns)} FROM `{table}` ORDER BY id")
            return {r[0]: tuple(r[1:]) for r in cur.fetchall()}
    finally:
        conn.close()


def _postgres(stack, db, table, columns) -> dict | None:
    p = stack.postgres
    with psycopg.connect(host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database) as c:
        if c.execute("SELECT to_regclass(%s)", (f'"{db}"."{table}"',)).fetchone()[0] is None:
            return None
        rows = c.execute(f'SELECT id, {", ".join(columns)} FROM "{db}"."{table}" ORDER BY id').fetchall()
    return {r[0]: tuple(bytes(v) if isinstance(v, memoryview) else v for v in r[1:]) for r in rows}


def _delta(tmp_path, db, table, columns) -> dict | None:
    path = tmp_path / "delta" / db / table
    if not path.exists():
        return None
    t = DeltaTable(str(path)).to_pyarrow_table(columns=["id", *columns])
    return {r["id"]: tuple(r[c] for c in columns) for r in t.to_pylist()}


def _start(stack, tmp_path, prefix, db, **merger_extra):
    icfg = write_config(stack, tmp_path / "ingest.yaml", prefix, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", prefix, [db], tmp_path, **merger_extra)
    return ingest, MergerProcess(mcfg, tmp_path / "merger.log").start()


def _wait(what: str, check, merger, timeout_s: float = 300):
    """Polls ``check()`` (None when done, else what differs) until done or the timeout."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if not merger.alive():
            raise AssertionError(f"merger exited:\n{merger.log_text()[-4000:]}")
        last = check()
        if last is None:
            return
        time.sleep(2)
    raise AssertionError(f"{what} within {timeout_s}s: {last}\n{merger.log_text()[-3000:]}")


def _differences(expected: dict, got: dict | None) -> str | None:
    if got is None:
        return "no sink table yet"
    if got == expected:
        return None
    keys = sorted(set(expected) | set(got))
    return str([(k, expected.get(k), got.get(k)) for k in keys if expected.get(k) != got.get(k)][:5])


def _status(tmp_path) -> dict:
    return StateStore(tmp_path / "state").read_status() or {"tables": {}}


BIT_COLUMNS = ["b1", "b2", "b12", "b17", "b64"]
TEXT_COLUMNS = ["v"]
# BIT values as integer parameters, which MariaDB stores bit for bit
BIT_ROW = "INSERT INTO bits VALUES (%s, %s, %s, %s, %s, %s)"


@pytest.mark.timeout(900)
def test_bit_and_nul_values_reach_the_sinks_as_the_source_holds_them(stack, unique_name, pipeline):
    db = pipeline.database(f"vb_{unique_name}")
    all_ones = (1, 3, 2**12 - 1, 2**17 - 1, 2**64 - 1)
    work, merger, ingest = pipeline.work, pipeline.merger, pipeline.ingest
    _run(stack, None, f"CREATE DATABASE {db}")
    _run(
        stack,
        db,
        "CREATE TABLE bits (id INT PRIMARY KEY, b1 BIT(1), b2 BIT(2), b12 BIT(12), b17 BIT(17), b64 BIT(64))",
        "CREATE TABLE texts (id INT PRIMARY KEY, v VARCHAR(40))",
        # snapshotted: left out of the binlog, the snapshot of the new tables brings them
        "SET SESSION sql_log_bin = 0",
        (BIT_ROW, (1, 1, 2, 0b110001100001, 0x10203, 0x0102030405060708)),
        (BIT_ROW, (2, 0, 0, 0, 0, 0)),
        (BIT_ROW, (3, *all_ones)),
        "INSERT INTO bits (id) VALUES (4)",
        ("INSERT INTO texts VALUES (1, %s), (2, %s), (3, %s)", ("a\x00b", "\x00", "plain")),
    )

    def snapshot_done():
        got = _postgres(stack, db, "bits", BIT_COLUMNS)
        return None if got and len(got) == 4 else got

    _wait("the snapshot of bits did not reach PostgreSQL", snapshot_done, merger)
    # streamed: inserted and updated while the merger runs
    _run(
        stack,
        db,
        (BIT_ROW, (11, 1, 1, 0b110001100001, 1, 1)),
        (BIT_ROW, (12, *all_ones)),
        (BIT_ROW, (13, 0, 0, 0, 0, 0)),
        (BIT_ROW, (14, 0, 2, 0x800, 0x10000, 2**63)),
        ("UPDATE bits SET b12 = %s, b17 = %s, b64 = %s WHERE id = 2", (0xC61, 0x1FFFE, 0xFF00)),
        "UPDATE bits SET b64 = NULL, b1 = 1 WHERE id = 1",
        "DELETE FROM bits WHERE id = 3",
        ("INSERT INTO texts VALUES (11, %s), (12, %s)", ("x\x00\x00y", "no nul")),
        ("UPDATE texts SET v = %s WHERE id = 3", ("now \x00 with",)),
    )
    source = _source(stack, db, "bits", BIT_COLUMNS)
    assert source[12] == (b"\x01", b"\x03", b"\x0f\xff", b"\x01\xff\xff", b"\xff" * 8)  # big-endian
    assert source[2][1:3] == (b"\x00", b"\x0c\x61")
    # BIT(1) is a boolean in the sinks, BIT(n>1) the bytes MySQL returns
    expected = {k: ((None if v[0] is None else v[0] == b"\x01"),) + v[1:] for k, v in source.items()}
    _wait(
        "PostgreSQL bits differ from the source",
        lambda: _differences(expected, _postgres(stack, db, "bits", BIT_COLUMNS)),
        merger,
    )
    _wait(
        "Delta bits differ from the source",
        lambda: _differences(expected, _delta(work, db, "bits", BIT_COLUMNS)),
        merger,
    )

    texts = _source(stack, db, "texts", TEXT_COLUMNS)
    assert texts[1] == ("a\x00b",) and texts[11] == ("x\x00\x00y",)
    # Delta holds the text as it is; PostgreSQL without the NULs (nul_policy: strip)
    _wait(
        "Delta texts differ from the source",
        lambda: _differences(texts, _delta(work, db, "texts", TEXT_COLUMNS)),
        merger,
    )
    stripped = {k: (v[0].replace("\x00", ""),) for k, v in texts.items()}
    _wait(
        "PostgreSQL texts differ from the source without its NULs",
        lambda: _differences(stripped, _postgres(stack, db, "texts", TEXT_COLUMNS)),
        merger,
    )

    def both_streaming():
        # the status file is written after a batch: the phase may lag the rows by one batch
        tables = _status(work)["tables"]
        phases = {t: tables.get(f"{db}.{t}", {}).get("phase") for t in ("bits", "texts")}
        return None if set(phases.values()) == {"streaming"} else phases

    _wait("both tables did not reach the streaming phase", both_streaming, merger, timeout_s=120)
    assert ingest.alive()


@pytest.mark.timeout(1200)
def test_nul_policy_pause_pauses_only_that_table_until_an_operator_acts(stack, tmp_path, unique_name):
    db = f"vp_{unique_name}"
    _run(stack, None, f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    _run(
        stack,
        db,
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO a VALUES (1, 'one'), (2, 'two')",
        "INSERT INTO b VALUES (1, 'one')",
    )
    ingest, merger = _start(stack, tmp_path, unique_name, db, **{"sinks.postgres.nul_policy": "pause"})
    checker = SinkChecker(stack, tmp_path)
    try:
        for t in ("a", "b"):
            checker.wait_equal(db, t, proc=merger)
        _run(
            stack,
            db,
            ("INSERT INTO a VALUES (3, %s)", ("bad\x00",)),
            "UPDATE a SET v = 'later' WHERE id = 1",
            "INSERT INTO b VALUES (2, 'two')",
        )

        def paused():
            table = _status(tmp_path)["tables"].get(f"{db}.a") or {}
            return None if table.get("phase") == "paused" else table

        _wait("table a was not paused", paused, merger)
        error = _status(tmp_path)["tables"][f"{db}.a"]["error"]
        assert f"table {db}.a: key {{'id': 3}}: column 'v' holds a NUL character" in error, error
        assert "nul_policy" in error and f"cdc resume {db}.a" in error
        # the other table keeps flowing
        _run(stack, db, "INSERT INTO b VALUES (3, 'three')", "UPDATE b SET v = 'uno' WHERE id = 1")
        checker.wait_equal(db, "b", proc=merger)
        assert merger.alive()
        assert _postgres(stack, db, "a", ["v"]) == {1: ("one",), 2: ("two",)}  # nothing of a's batch

        # the documented way out: nul_policy strip, restart, `cdc resume`
        merger.stop()
        cfg = yaml.safe_load((tmp_path / "merger.yaml").read_text())
        cfg["sinks"]["postgres"]["nul_policy"] = "strip"
        (tmp_path / "merger.yaml").write_text(yaml.safe_dump(cfg))
        merger.start()
        StateStore(tmp_path / "state").request("resume", f"{db}.a")
        expected = {1: ("later",), 2: ("two",), 3: ("bad",)}
        _wait(
            "table a did not catch up after `cdc resume`",
            lambda: _differences(expected, _postgres(stack, db, "a", ["v"])),
            merger,
        )
        _wait(
            "Delta table a differs from the source",
            lambda: _differences(_source(stack, db, "a", ["v"]), _delta(tmp_path, db, "a", ["v"])),
            merger,
        )
        _wait(
            "table a did not reach the streaming phase",
            lambda: (
                None
                if _status(tmp_path)["tables"].get(f"{db}.a", {}).get("phase") == "streaming"
                else _status(tmp_path)
            ),
            merger,
            timeout_s=120,
        )
    finally:
        merger.stop()
        ingest.stop()
        checker.close()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_merger_with_a_new_state_dir_keeps_writing_existing_sink_tables(stack, tmp_path, unique_name):
    """The docs' remedy for several situations is a merger with a new state_dir. Its batch
    ids start at 0 again, below the versions the sinks recorded from the earlier merger
    (batch id x 10^6 + step): its writes must not be skipped as replays."""
    db = f"vs_{unique_name}"
    _run(stack, None, f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    _run(
        stack,
        db,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_300",
    )
    # a batch per trigger, triggers 0.1 s apart: many batches in a few seconds
    ingest, merger = _start(stack, tmp_path, unique_name, db, trigger_interval_ms=100, min_batch_gap_ms=0)
    checker = SinkChecker(stack, tmp_path)
    try:
        checker.wait_equal(db, "t", proc=merger)
        # many small batches: the first merger's batch ids (and so the sinks' versions) grow
        conn = _conn(stack, db)
        try:
            with conn.cursor() as cur:
                for i in range(90):
                    cur.execute("UPDATE t SET n = n + 1 WHERE id = %s", (1 + i % 300,))
                    time.sleep(0.15)
        finally:
            conn.close()
        checker.wait_equal(db, "t", proc=merger)
        first_batches = _status(tmp_path)["last_batch"]
        assert first_batches >= 40, first_batches  # else the check below proves little

        merger.stop()
        shutil.rmtree(tmp_path / "state")
        merger.start()  # same config, same sinks, a fresh state_dir
        _run(
            stack,
            db,
            "INSERT INTO t VALUES (1001, 'new', 1), (1002, 'new', 2)",
            "UPDATE t SET v = 'changed' WHERE id <= 20",
            "DELETE FROM t WHERE id BETWEEN 50 AND 59",
            "UPDATE t SET id = 2000 WHERE id = 100",
        )
        checker.wait_equal(db, "t", proc=merger, timeout_s=300)
        # the status file is written every few seconds: it may lag the sinks' rows
        _wait(
            "the new merger's status names its last batch",
            lambda: None if _status(tmp_path).get("last_batch") is not None else _status(tmp_path),
            merger,
        )
        assert _status(tmp_path)["last_batch"] < first_batches  # the case this test is about
        bases = json.loads((tmp_path / "state" / "version_bases.json").read_text())
        assert bases[f"{db}.t"] > first_batches * 1_000_000
    finally:
        merger.stop()
        ingest.stop()
        checker.close()
