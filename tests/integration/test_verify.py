"""`cdc verify` against the real stack: source tables in MariaDB, sink tables written
directly through the Delta and PostgreSQL sink classes, the command run as a subprocess.

Tables: an integer key; a composite string key in a case-insensitive collation (so the
source's key order differs from the sinks' code point order, and chunks of the two sides
hold different keys); a table without a primary key (verified through
snapshot.chunk_keys). The command must pass on equal data and name exactly the keys that
differ after a sink row is deleted, a value changed and an extra row added.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from cdc import stack as local_stack
from cdc.config import MySQLConfig
from cdc.quoting import quote_ident
from merger.schema.canonical import arrow_schema, snapshot_select
from merger.schema.catalog import SourceCatalog
from merger.sinks.delta import DeltaSink
from merger.sinks.postgres import PostgresSink
from merger.snapshot.direct_read import canonical_source_rows
from merger.verify.sinks.delta import DeltaReader
from merger.verify.source import SourceReader
from tests.merger_harness import SinkChecker, write_merger_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 700
# mixed case and accents: utf8mb4_general_ci sorts 'b' < 'C' < 'd', code points 'C' < 'b' < 'd'
REGIONS = ["alpha", "Beta", "gamma", "Delta", "épsilon", "Zeta", "eta"]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def verify_json(cfg: Path, *args: str) -> tuple[int, dict, str]:
    res = run_cli("verify", "-c", str(cfg), "--json", *args)
    data = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, data, res.stderr


def by_table(data: dict) -> dict:
    return {(t["table"], t["sink"]): t for t in data["tables"]}


def changes(rows: pa.Table, op: str, seq: int) -> pa.Table:
    n = rows.num_rows
    return rows.append_column("_cdc_op", pa.array([op] * n, pa.string())).append_column(
        "_cdc_seq", pa.array([seq] * n, pa.int64())
    )


def pipeline_rows(conn, spec, keys) -> pa.Table:
    """The source rows as the pipeline's snapshot reads them (to write the sinks with)."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            f"SELECT {snapshot_select(spec)} FROM {quote_ident(spec.db)}.{quote_ident(spec.table)} "
            f"ORDER BY {', '.join(quote_ident(k) for k in keys)}"
        )
        names = [d[0] for d in cur.description]
        return canonical_source_rows(spec, names, cur.fetchall())


def root_catalog(stack) -> SourceCatalog:
    """The pipeline's catalog of the source, as root (its table specs write the sinks)."""
    return SourceCatalog(
        MySQLConfig(
            host=stack.mariadb.host,
            port=stack.mariadb.port,
            user="root",
            password_file=str(local_stack.secret_file(stack, "mysql_root_password")),
        )
    )


def one_row(schema: pa.Schema, **values) -> pa.Table:
    return pa.Table.from_pylist([values], schema=schema)


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory):
    """The source tables and identical sink tables; yields what the tests need."""
    import uuid

    import pymysql

    db = "v" + uuid.uuid4().hex[:8]
    work = tmp_path_factory.mktemp("verify")
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
        cur.execute(
            f"CREATE TABLE `{db}`.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, "
            "price DECIMAL(10,2), updated DATETIME(6), note TEXT)"
        )
        cur.executemany(
            f"INSERT INTO `{db}`.items VALUES (%s, %s, %s, %s, %s, %s)",
            [
                (
                    i * 3,
                    f"item {i}",
                    i % 17,
                    Decimal(i) / 4,
                    dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i, microseconds=i),
                    None if i % 5 else "n",
                )
                for i in range(1, ITEMS + 1)
            ],
        )
        cur.execute(
            f"CREATE TABLE `{db}`.`pair keys` (region VARCHAR(20) NOT NULL, code VARCHAR(20) NOT NULL, "
            "v INT, PRIMARY KEY (region, code))"
        )
        cur.executemany(
            f"INSERT INTO `{db}`.`pair keys` VALUES (%s, %s, %s)",
            [
                (r, c, i)
                for i, (r, c) in enumerate((r, f"{'k' if j % 2 else 'K'}{j:03d}") for r in REGIONS for j in range(60))
            ],
        )
        cur.execute(f"CREATE TABLE `{db}`.nokey (a INT NOT NULL, b VARCHAR(10), KEY (a))")
        cur.executemany(f"INSERT INTO `{db}`.nokey VALUES (%s, %s)", [(i, str(i)) for i in range(150)])
    conn.close()

    catalog = root_catalog(stack)
    delta = DeltaSink(work / "delta")
    pg = PostgresSink(stack.postgres)
    schemas, keys = {}, {"items": ["id"], "pair keys": ["region", "code"], "nokey": ["a"]}
    for name in keys:
        spec = catalog.table_spec(db, name)
        schemas[name] = arrow_schema(spec)
        conn = pymysql.connect(
            ssl_disabled=True,
            host=stack.mariadb.host,
            port=stack.mariadb.port,
            user="root",
            password=stack.mariadb.root_password,
        )
        rows = pipeline_rows(conn, spec, keys[name])
        conn.close()
        for sink in (delta, pg):
            sink.ensure_table((db, name), schemas[name], keys[name])
            sink.apply((db, name), 1, changes(rows, "r", 1))
    cfg = write_merger_config(
        stack,
        work / "merger.yaml",
        "unused",
        [db],
        work,
        **{"snapshot.chunk_size": 100, "snapshot.chunk_keys": {f"{db}.nokey": ["a"]}},
    )
    yield {"db": db, "cfg": cfg, "work": work, "delta": delta, "pg": pg, "schemas": schemas, "stack": stack}
    pg.close()


def test_equal_tables_pass(world):
    db = world["db"]
    code, data, err = verify_json(world["cfg"], "--retries", "0")
    assert code == 0, (data, err)
    tables = by_table(data)
    assert set(tables) == {(f"{db}.{t}", s) for t in ("items", "pair keys", "nokey") for s in ("delta", "postgres")}
    for (table, _), t in tables.items():
        expected = {"items": ITEMS, "pair keys": len(REGIONS) * 60, "nokey": 150}[table.split(".", 1)[1]]
        assert t["verdict"] == "equal", t
        assert t["source_rows"] == t["sink_rows"] == expected
        assert t["chunks"] == -(-expected // 100)
        assert t["mismatched_chunks"] == 0
    # the fast path: items is settled by SQL digests; a key whose order differs between
    # the source and the sinks (a case-insensitive string) is compared row by row, and says so
    for sink in ("delta", "postgres"):
        assert tables[(f"{db}.items", sink)]["digest_chunks"] == tables[(f"{db}.items", sink)]["chunks"]
        assert tables[(f"{db}.items", sink)]["row_path"] is None
        assert tables[(f"{db}.pair keys", sink)]["digest_chunks"] == 0
        assert "order" in tables[(f"{db}.pair keys", sink)]["row_path"]
    code, data, err = verify_json(world["cfg"], f"{db}.items", "--compare", "rows")
    assert code == 0, (data, err)
    assert [(t["digest_chunks"], t["verdict"]) for t in data["tables"]] == [(0, "equal"), (0, "equal")]
    # the harness's in-process check agrees
    checker = SinkChecker(world["stack"], world["work"])
    try:
        results = checker.verify(db, "pair keys", chunk_size=100)
    finally:
        checker.close()
    assert [(r.sink, r.verdict, r.source_rows, r.chunks) for r in results] == [
        ("delta", "equal", len(REGIONS) * 60, 5),
        ("postgres", "equal", len(REGIONS) * 60, 5),
    ]
    # the human-readable table, and one table by name
    res = run_cli("verify", f"{db}.items", "-c", str(world["cfg"]), "--sink", "postgres")
    assert res.returncode == 0, res.stderr
    assert f"{db}.items" in res.stdout and "equal" in res.stdout and "delta" not in res.stdout


def test_differences_are_found_with_their_keys(world):
    db, delta, pg, schemas = world["db"], world["delta"], world["pg"], world["schemas"]
    items, pairs = (db, "items"), (db, "pair keys")
    s_items, s_pairs = schemas["items"], schemas["pair keys"]
    # Delta, items: delete id 30, change the qty of id 600, add id 100000
    delta.apply(items, 2, changes(one_row(s_items, id=30), "d", 2))
    row = delta.rows_with_keys(items, ["id"], [(600,)])
    row = row.set_column(row.schema.get_field_index("qty"), "qty", pa.array([999], row.schema.field("qty").type))
    delta.apply(items, 3, changes(row, "u", 3))
    delta.apply(items, 4, changes(one_row(s_items, id=100000, name="ghost"), "c", 4))
    # PostgreSQL, pair keys: delete ('gamma','k001'), change ('Zeta','K010').v, add ('beta','K000')
    # (a key equal to an existing one in the source's case-insensitive collation)
    pg.apply(pairs, 2, changes(one_row(s_pairs, region="gamma", code="k001"), "d", 2))
    pg.apply(pairs, 3, changes(one_row(s_pairs, region="Zeta", code="K010", v=-1), "u", 3))
    pg.apply(pairs, 4, changes(one_row(s_pairs, region="beta", code="K000", v=0), "c", 4))

    code, data, err = verify_json(world["cfg"], "--retries", "1", "--retry-wait", "100ms")
    assert code == 1, (data, err)
    t = by_table(data)
    d_items = t[(f"{db}.items", "delta")]
    assert d_items["verdict"] == "different"
    assert d_items["missing"] == [[30]]
    assert d_items["extra"] == [[100000]]
    assert d_items["different"] == [{"key": [600], "columns": ["qty"]}]
    assert d_items["source_rows"] == ITEMS and d_items["sink_rows"] == ITEMS
    assert d_items["mismatched_chunks"] == 3  # chunks of ids 3..300, 303..600, 1803..
    p_pairs = t[(f"{db}.pair keys", "postgres")]
    assert p_pairs["verdict"] == "different"
    assert p_pairs["missing"] == [["gamma", "k001"]]
    assert p_pairs["extra"] == [["beta", "K000"]]
    assert p_pairs["different"] == [{"key": ["Zeta", "K010"], "columns": ["v"]}]
    for other in (
        (f"{db}.items", "postgres"),
        (f"{db}.pair keys", "delta"),
        (f"{db}.nokey", "delta"),
        (f"{db}.nokey", "postgres"),
    ):
        assert t[other]["verdict"] == "equal", t[other]

    res = run_cli("verify", f"{db}.items", "-c", str(world["cfg"]), "--retries", "0", "--sink", "delta")
    assert res.returncode == 1
    assert "different" in res.stdout and "100000" in res.stdout and "qty" in res.stdout

    # repair: the command passes again
    src = world["pg"].rows_with_keys(items, ["id"], [(30,), (600,)])
    delta.apply(items, 5, changes(src, "u", 5))
    delta.apply(items, 6, changes(one_row(s_items, id=100000), "d", 6))
    pg.apply(pairs, 5, changes(one_row(s_pairs, region="gamma", code="k001", v=2 * 60 + 1), "c", 5))
    pg.apply(pairs, 6, changes(one_row(s_pairs, region="Zeta", code="K010", v=5 * 60 + 10), "u", 6))
    pg.apply(pairs, 7, changes(one_row(s_pairs, region="beta", code="K000"), "d", 7))
    code, data, err = verify_json(world["cfg"], "--retries", "0")
    assert code == 0, (data, err)


def test_rows_in_flight_are_not_reported(world):
    """A chunk that differs at first and is equal on re-check is equal (the sink caught up)."""
    from cdc.config import MergerConfig, load_model
    from merger.verify.chunked import TableVerifier

    db, delta = world["db"], world["delta"]
    items = (db, "items")
    cfg = load_model(MergerConfig, world["cfg"])
    held = delta.rows_with_keys(items, ["id"], [(603,)])
    delta.apply(items, 10, changes(held, "d", 10))
    waits = []

    def catch_up(seconds):  # the merger applies the change while verify waits
        waits.append(seconds)
        delta.apply(items, 11, changes(held, "u", 11))

    source = SourceReader(cfg.mysql)
    try:
        table = source.describe(db, "items")
        [res] = TableVerifier(
            source,
            table,
            ["id"],
            {"delta": DeltaReader(str(world["work"] / "delta"))},
            100,
            retries=3,
            retry_wait=0.5,
            sleep=catch_up,
        ).run()
    finally:
        source.close()
    assert waits == [0.5]
    assert res.verdict == "equal" and res.in_flight_chunks == 1 and res.source_rows == ITEMS


def test_user_errors_are_one_line(world, tmp_path):
    db, cfg = world["db"], world["cfg"]
    for args, expected in (
        ((f"{db}.nope",), "unknown table"),
        (("nodot",), "<database>.<table>"),
        (("--sink", "kafka"), "--sink"),
        (("--retry-wait", "soon"), "--retry-wait"),
        (("--compare", "hashes"), "--compare"),
    ):
        res = run_cli("verify", "-c", str(cfg), *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = run_cli("verify", "-c", str(cfg), "--retries", "many")  # click's usage error
    assert res.returncode == 2 and "--retries" in res.stderr and "Traceback" not in res.stderr
    # a server that does not answer
    raw = yaml.safe_load(cfg.read_text())
    raw["mysql"]["port"] = 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    res = run_cli("verify", "-c", str(bad))
    assert res.returncode == 2 and "unreachable" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    raw["mysql"]["port"] = world["stack"].mariadb.port
    raw["sinks"]["postgres"]["port"] = 1
    bad.write_text(yaml.safe_dump(raw))
    res = run_cli("verify", "-c", str(bad), "--sink", "postgres")
    assert res.returncode == 2 and "unreachable" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    raw["sinks"]["postgres"]["port"] = world["stack"].postgres.port
    # a table without a primary key and no snapshot.chunk_keys: a clear error for that table
    del raw["snapshot"]["chunk_keys"]
    bad.write_text(yaml.safe_dump(raw))
    code, data, _ = verify_json(bad, f"{db}.nokey")
    assert code == 2
    assert {t["verdict"] for t in data["tables"]} == {"error"}
    assert "snapshot.chunk_keys" in data["tables"][0]["error"]
    # an unknown config key
    bad.write_text(yaml.safe_dump({**raw, "nonsense": 1}))
    res = run_cli("verify", "-c", str(bad))
    assert res.returncode == 2 and "nonsense" in res.stderr


@pytest.mark.timeout(300)
def test_unsigned_keys_beyond_int64(stack, tmp_path):
    """A BIGINT UNSIGNED key on both sides of 2^63, in chunks of 100. Delta stores it as
    decimal(20, 0), whose log statistics saturate at 2^63 - 1: a digest query or a read
    that skipped files by them found no rows above 2^63 (and so could not see an extra
    sink row there), and a bound above 2^63 overflowed Arrow's int64."""
    import uuid

    import pymysql

    db = "vu" + uuid.uuid4().hex[:8]
    ids = [2**63 - 125 + i for i in range(250)]
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.ubig (id BIGINT UNSIGNED PRIMARY KEY, v VARCHAR(10))")
            cur.executemany(f"INSERT INTO `{db}`.ubig VALUES (%s, %s)", [(i, f"v{n}") for n, i in enumerate(ids)])
        conn.commit()
        spec = root_catalog(stack).table_spec(db, "ubig")
        schema, rows = arrow_schema(spec), pipeline_rows(conn, spec, ["id"])
    finally:
        conn.close()
    delta, pg = DeltaSink(tmp_path / "delta"), PostgresSink(stack.postgres)
    try:
        for sink in (delta, pg):
            sink.ensure_table((db, "ubig"), schema, ["id"])
            sink.apply((db, "ubig"), 1, changes(rows, "r", 1))
        cfg = write_merger_config(
            stack, tmp_path / "merger.yaml", "unused", [db], tmp_path, **{"snapshot.chunk_size": 100}
        )
        code, data, err = verify_json(cfg, "--retries", "0")
        assert code == 0, (data, err)
        t = by_table(data)
        for sink in ("delta", "postgres"):
            assert t[(f"{db}.ubig", sink)]["verdict"] == "equal"
            assert t[(f"{db}.ubig", sink)]["source_rows"] == t[(f"{db}.ubig", sink)]["sink_rows"] == 250
        assert "statistics" in t[(f"{db}.ubig", "delta")]["row_path"]
        # Delta: a row above 2^63 deleted, an extra one at 2^64 - 2
        delta.apply((db, "ubig"), 2, changes(one_row(schema, id=ids[200]), "d", 2))
        delta.apply((db, "ubig"), 3, changes(one_row(schema, id=2**64 - 2, v="ghost"), "c", 3))
        code, data, err = verify_json(cfg, "--retries", "0", "--sink", "delta")
        assert code == 1, (data, err)
        d = by_table(data)[(f"{db}.ubig", "delta")]
        # a key only the sink has is shown as the sink returned it (Delta: a decimal, in JSON a string)
        assert d["missing"] == [[ids[200]]] and [[int(k) for k in r] for r in d["extra"]] == [[2**64 - 2]], d
    finally:
        pg.close()


def test_a_skipped_sink_is_not_a_success(world, tmp_path):
    """Issue 22 item 10: a run in which a sink was only skipped (nothing compared for it)
    exits 3 with one line saying what was skipped and why, not 0. Only the sinks that can
    be read (--sink) give 0; a difference (1) or an error (2) still wins over a skip."""
    db = world["db"]
    raw = yaml.safe_load(world["cfg"].read_text())
    raw["sinks"]["kafka_changelog"] = {"topic_prefix": "merged"}
    with_changelog = tmp_path / "with_changelog.yaml"
    with_changelog.write_text(yaml.safe_dump(raw))
    res = run_cli("verify", f"{db}.items", "-c", str(with_changelog), "--retries", "0")
    assert res.returncode == 3, (res.stdout, res.stderr)
    skipped = [line for line in res.stderr.splitlines() if "nothing was compared" in line]
    assert len(skipped) == 1, res.stderr
    assert "kafka_changelog" in skipped[0] and f"{db}.items" in skipped[0] and "key range" in skipped[0], skipped
    code, data, err = verify_json(with_changelog, f"{db}.items", "--retries", "0")
    assert code == 3 and data["exit_code"] == 3 and not data["ok"], (data, err)
    assert {(t["sink"], t["verdict"]) for t in data["tables"]} == {
        ("delta", "equal"),
        ("postgres", "equal"),
        ("kafka_changelog", "skipped"),
    }
    assert "nothing was compared" in err
    # only the changelog sink: verified nothing at all
    raw["sinks"] = {"kafka_changelog": {"topic_prefix": "merged"}}
    only_changelog = tmp_path / "only_changelog.yaml"
    only_changelog.write_text(yaml.safe_dump(raw))
    code, data, err = verify_json(only_changelog, f"{db}.items")
    assert code == 3 and [t["verdict"] for t in data["tables"]] == ["skipped"], (data, err)
    # the sinks that can be read, alone: a success
    code, data, err = verify_json(with_changelog, f"{db}.items", "--retries", "0", "--sink", "postgres")
    assert code == 0 and "nothing was compared" not in err, (data, err)
