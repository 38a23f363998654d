"""Verify can fail: mutation tests of `cdc verify` (merger.verify.chunked) and of the tests'
whole-table oracle (merger.verify.table).

The source is a real MariaDB table holding the tricky values (unsigned BIGINT max,
DECIMAL(65,30), BIT(1/12/64), TIME beyond ±24 h, DATETIME(6), TIMESTAMP(6), zero dates
under sql_mode='', CHAR, VARBINARY with trailing zero bytes, BINARY(n), emoji and NUL, JSON,
ENUM '', SET, FLOAT/DOUBLE, GEOMETRY, BOOLEAN). The sink tables are written by hand here,
in PostgreSQL and Delta, with the values the sinks must hold (the representations in
docs/operations/verify-and-repair.md), neither through the pipeline nor through verify's own code. Verify
passes on them, and names the key and column (or the missing/extra key) of every
mutation injected into a copy.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pymysql
import pytest
import yaml

from merger.verify.chunked import TableVerifier
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sinks.postgres import PostgresReader
from merger.verify.source import SourceReader
from merger.verify.table import compare_table

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc
D65 = Decimal("12345678901234567890123456789012345.123456789012345678901234567891")
D65_MIN = Decimal("-99999999999999999999999999999999999.999999999999999999999999999999")
WKB_1_2 = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2)
WKB_0_0 = bytes.fromhex("010100000000000000000000000000000000000000")  # POINT(0 0)
F32_PI = 3.1415927410125732  # the float32 nearest 3.14159274

# column: (MariaDB type, PostgreSQL type, Delta Arrow type)
COLUMNS = {
    "id": ("INT PRIMARY KEY", "integer NOT NULL", pa.int32()),
    "u": ("BIGINT UNSIGNED", "numeric(20,0)", pa.decimal128(20, 0)),
    "d": ("DECIMAL(65,30)", "numeric(65,30)", pa.string()),
    "b1": ("BIT(1)", "boolean", pa.bool_()),
    "b12": ("BIT(12)", "bytea", pa.binary()),
    "b64": ("BIT(64)", "bytea", pa.binary()),
    "t": ("TIME(6)", "interval", pa.int64()),
    "dt6": ("DATETIME(6)", "timestamp", pa.timestamp("us")),
    "ts": ("TIMESTAMP(6) NULL", "timestamptz", pa.timestamp("us", tz="UTC")),
    "dd": ("DATE", "date", pa.date32()),
    "y": ("YEAR", "integer", pa.int32()),
    "zd": ("DATE NOT NULL", "date", pa.date32()),
    "zdn": ("DATE NULL", "date", pa.date32()),
    "c": ("CHAR(5)", "text", pa.string()),
    "s": ("VARCHAR(40)", "text", pa.string()),
    "vb": ("VARBINARY(10)", "bytea", pa.binary()),
    "bn": ("BINARY(4)", "bytea", pa.binary()),
    "j": ("JSON", "jsonb", pa.string()),
    "e": ("ENUM('a','b')", "text", pa.string()),
    "st": ("SET('x','y')", "text", pa.string()),
    "f": ("FLOAT", "real", pa.float32()),
    "db": ("DOUBLE", "double precision", pa.float64()),
    "g": ("GEOMETRY", "bytea", pa.binary()),
    "bo": ("BOOLEAN", "boolean", pa.bool_()),
}

# the source rows as SQL literals (sql_mode='', time_zone '+00:00')
SOURCE_ROWS = [
    "(1, 18446744073709551615, '12345678901234567890123456789012345.123456789012345678901234567891', b'1', "
    "b'110001100001', b'1111111111111111111111111111111111111111111111111111111111111111', '838:59:59', "
    "'9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '9999-12-31', 2155, '0000-00-00', '0000-00-00', "
    "'ab', CONCAT('emoji 😀 a', CHAR(0), 'b'), X'610000', 'a', '{\"b\": 1, \"a\": [1.0, 2]}', '', 'x,y', 3.14159274, "
    "1.7976931348623157e308, ST_GeomFromText('POINT(1 2)', 4326), 5)",
    "(2, 0, '-99999999999999999999999999999999999.999999999999999999999999999999', b'0', b'0', "
    "b'1000000000000000000000000000000000000000000000000000000000000000', '-838:59:59', "
    "'1000-01-01 00:00:00', '1970-01-01 00:00:01', '1000-01-01', 1901, '2020-02-29', '2020-00-10', "
    "'', '', X'', X'00000000', '[]', 'b', '', -3.4028234e38, -2.2250738585072014e-308, "
    "ST_GeomFromText('POINT(0 0)'), 0)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, '1970-01-01', NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]

NULLS = {k: None for k in COLUMNS}


def sink_rows(sink: str) -> list[dict]:
    """The values each sink must hold for SOURCE_ROWS, written out by hand."""
    pg = sink == "postgres"
    return [
        {
            "id": 1,
            "u": Decimal(18446744073709551615),
            "d": D65 if pg else str(D65),
            "b1": True,
            "b12": b"\x0c\x61",
            "b64": b"\xff" * 8,
            "t": dt.timedelta(hours=838, minutes=59, seconds=59) if pg else 3020399 * 10**6,
            "dt6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
            "dd": dt.date(9999, 12, 31),
            "y": 2155,
            "zd": dt.date(1970, 1, 1),
            "zdn": None,
            "c": "ab",
            "s": "emoji 😀 ab" if pg else "emoji 😀 a\x00b",  # PostgreSQL: nul_policy strip
            "vb": b"a\x00\x00",
            "bn": b"a\x00\x00\x00",
            "j": {"a": [1.0, 2], "b": 1} if pg else '{"b": 1, "a": [1.0, 2]}',
            "e": "",
            "st": "x,y",
            "f": F32_PI,
            "db": 1.7976931348623157e308,
            "g": WKB_1_2,
            "bo": True,
        },
        {
            "id": 2,
            "u": Decimal(0),
            "d": D65_MIN if pg else str(D65_MIN),
            "b1": False,
            "b12": b"\x00\x00",
            "b64": b"\x80" + b"\x00" * 7,
            "t": -dt.timedelta(hours=838, minutes=59, seconds=59) if pg else -3020399 * 10**6,
            "dt6": dt.datetime(1000, 1, 1),
            "ts": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
            "dd": dt.date(1000, 1, 1),
            "y": 1901,
            "zd": dt.date(2020, 2, 29),
            "zdn": None,
            "c": "",
            "s": "",
            "vb": b"",
            "bn": b"\x00" * 4,
            "j": [] if pg else "[]",
            "e": "b",
            "st": "",
            "f": -3.4028234663852886e38,
            "db": -2.2250738585072014e-308,
            "g": WKB_0_0,
            "bo": False,
        },
        {**NULLS, "id": 3, "y": 0, "zd": dt.date(1970, 1, 1)},
    ]


def _pg_connect(stack):
    import psycopg

    pg = stack.postgres
    return psycopg.connect(
        host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.database, autocommit=True
    )


def write_postgres(stack, schema: str, table: str, rows: list[dict]) -> None:
    from psycopg import sql
    from psycopg.types.json import Jsonb

    with _pg_connect(stack) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        cols = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(pg)) for n, (_, pg, _) in COLUMNS.items()]
        cols.append(sql.SQL("_cdc_seq bigint NOT NULL"))
        conn.execute(
            sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (id))").format(
                sql.Identifier(schema, table), sql.SQL(", ").join(cols)
            )
        )
        names = list(COLUMNS) + ["_cdc_seq"]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(schema, table),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(sql.Placeholder() * len(names)),
        )
        for r in rows:
            values = [Jsonb(r[n]) if n == "j" and r[n] is not None else r[n] for n in COLUMNS]
            conn.execute(insert, values + [1])


def write_delta(base: Path, db: str, table: str, rows: list[dict]) -> None:
    from deltalake import write_deltalake

    schema = pa.schema([pa.field(n, t) for n, (_, _, t) in COLUMNS.items()] + [pa.field("_cdc_seq", pa.int64())])
    data = pa.Table.from_pylist([{**r, "_cdc_seq": 1} for r in rows], schema=schema)
    write_deltalake(str(base / db / table), data, mode="overwrite")


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory):
    import uuid

    db = "vm" + uuid.uuid4().hex[:8]
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
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
        cur.execute(f"CREATE TABLE {db}.tricky ({', '.join(f'`{n}` {t}' for n, (t, _, _) in COLUMNS.items())})")
        cur.execute(f"INSERT INTO {db}.tricky VALUES {', '.join(SOURCE_ROWS)}")
    work = tmp_path_factory.mktemp("mutations")
    schemas: list[str] = []
    yield {"db": db, "stack": stack, "work": work, "conn": conn, "schemas": schemas}
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {db}")
    conn.close()
    from psycopg import sql

    with _pg_connect(stack) as pg:
        for s in schemas:
            pg.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(s)))


def copies(world, tag: str, pg_rows: list[dict], delta_rows: list[dict], nul_policy: str = "strip") -> dict:
    """A sink copy of both sinks holding these rows; their readers."""
    schema = f"{world['db']}_{tag}"
    world["schemas"].append(schema)
    write_postgres(world["stack"], schema, "tricky", pg_rows)
    base = world["work"] / tag
    write_delta(base, world["db"], "tricky", delta_rows)
    pg = world["stack"].postgres
    return {
        "delta": DeltaReader(str(base)),
        "postgres": PostgresReader(
            {"host": pg.host, "port": pg.port, "user": pg.user, "password": pg.password, "dbname": pg.database},
            schema=schema,
            nul_policy=nul_policy,
        ),
    }


def source_reader(world) -> SourceReader:
    s = world["stack"].mariadb
    return SourceReader(
        lambda: pymysql.connect(ssl_disabled=True, host=s.host, port=s.port, user="root", password=s.root_password)
    )


def verify(world, readers: dict, chunk_size: int = 2) -> dict:
    source = source_reader(world)
    try:
        table = source.describe(world["db"], "tricky")
        results = TableVerifier(source, table, ["id"], readers, chunk_size, retries=0).run()
        whole = {name: compare_table(source, r, world["db"], "tricky") for name, r in readers.items()}
    finally:
        source.close()
        for r in readers.values():
            r.close()
    return {r.sink: (r, whole[r.sink]) for r in results}


def test_the_source_reads_as_expected(world):
    """What pymysql returns for the plain SELECT (the source side of the canonical form)."""
    source = source_reader(world)
    try:
        t = source.describe(world["db"], "tricky")
        rows = {r[0]: dict(zip(t.column_names, r)) for r in source.rows(t)}
    finally:
        source.close()
    assert t.primary_key == ("id",) and t.column("j").is_json and t.column("b12").bits == 12
    r1, r2 = rows[1], rows[2]
    assert r1["u"] == 18446744073709551615 and r1["d"] == D65
    assert r1["b12"] == b"\x0c\x61" and r1["b1"] == b"\x01" and r1["b64"] == b"\xff" * 8
    assert r1["t"] == dt.timedelta(hours=838, minutes=59, seconds=59)
    assert r2["t"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert r1["ts"] == dt.datetime(2038, 1, 19, 3, 14, 7, 999999)  # UTC
    assert r1["zd"] == "0000-00-00" and r2["zdn"] == "2020-00-10"  # pymysql: text for what Python cannot hold
    assert r1["s"] == "emoji 😀 a\x00b" and r1["vb"] == b"a\x00\x00" and r1["bn"] == b"a\x00\x00\x00"
    assert r1["c"] == "ab" and r1["e"] == "" and r1["st"] == "x,y" and r1["bo"] == 5
    assert r1["f"] == 3.14159  # 6 significant digits over the text protocol
    assert r1["g"] == (4326).to_bytes(4, "little") + WKB_1_2
    assert rows[3]["y"] == 0


def test_correct_sinks_are_equal(world):
    found = verify(world, copies(world, "ok", sink_rows("postgres"), sink_rows("delta")))
    for name, (res, whole) in found.items():
        assert res.verdict == "equal", (name, res)
        assert res.source_rows == res.sink_rows == 3 and res.chunks == 2
        assert whole.ok, whole.summary()


def _set(rows: list[dict], key: int, **values) -> list[dict]:
    return [{**r, **values} if r["id"] == key else dict(r) for r in rows]


def mutation_matrix():
    """(name, function(rows, sink) -> rows, expected: ('different', key, column) |
    ('missing', key) | ('extra', key), sinks to mutate)"""

    def shift(v, **kw):
        return v + dt.timedelta(**kw)

    return [
        ("bit byte order reversed", lambda r, s: _set(r, 1, b12=b"\x61\x0c"), ("different", 1, "b12")),
        ("bit64 byte order reversed", lambda r, s: _set(r, 2, b64=b"\x00" * 7 + b"\x80"), ("different", 2, "b64")),
        ("bit(1) flipped", lambda r, s: _set(r, 2, b1=True), ("different", 2, "b1")),
        ("timestamp shifted by a zone", lambda r, s: _set(r, 1, ts=shift(r[0]["ts"], hours=1)), ("different", 1, "ts")),
        (
            "timestamp read as local time",
            lambda r, s: _set(r, 2, ts=dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
            ("different", 2, "ts"),
        ),
        (
            "decimal scale changed",
            lambda r, s: _set(r, 1, d=D65.scaleb(-1) if s == "postgres" else str(D65.scaleb(-1))),
            ("different", 1, "d"),
        ),
        (
            "decimal last digit",
            lambda r, s: _set(r, 1, d=Decimal(str(D65)[:-1] + "2") if s == "postgres" else str(D65)[:-1] + "2"),
            ("different", 1, "d"),
        ),
        ("unsigned max wrapped", lambda r, s: _set(r, 1, u=Decimal(-1)), ("different", 1, "u")),
        ("string one char short", lambda r, s: _set(r, 1, s=r[0]["s"][:-1]), ("different", 1, "s")),
        ("char padded", lambda r, s: _set(r, 1, c="ab   "), ("different", 1, "c")),
        ("varbinary trailing zero dropped", lambda r, s: _set(r, 1, vb=b"a\x00"), ("different", 1, "vb")),
        ("binary padding dropped", lambda r, s: _set(r, 1, bn=b"a"), ("different", 1, "bn")),
        (
            "time beyond 24 h wrapped",
            lambda r, s: _set(
                r, 1, t=dt.timedelta(hours=22, minutes=59, seconds=59) if s == "postgres" else 82799 * 10**6
            ),
            ("different", 1, "t"),
        ),
        (
            "negative time as positive",
            lambda r, s: _set(
                r, 2, t=dt.timedelta(hours=838, minutes=59, seconds=59) if s == "postgres" else 3020399 * 10**6
            ),
            ("different", 2, "t"),
        ),
        (
            "datetime microsecond lost",
            lambda r, s: _set(r, 1, dt6=dt.datetime(9999, 12, 31, 23, 59, 59, 999000)),
            ("different", 1, "dt6"),
        ),
        ("zero date in a NOT NULL column as NULL", lambda r, s: _set(r, 1, zd=None), ("different", 1, "zd")),
        ("year 0 as 1900", lambda r, s: _set(r, 3, y=1900), ("different", 3, "y")),
        (
            "json value changed",
            lambda r, s: _set(r, 1, j={"a": [1.0, 3], "b": 1} if s == "postgres" else '{"b": 1, "a": [1.0, 3]}'),
            ("different", 1, "j"),
        ),
        ("enum '' as NULL", lambda r, s: _set(r, 1, e=None), ("different", 1, "e")),
        ("float changed", lambda r, s: _set(r, 1, f=3.1416), ("different", 1, "f")),
        ("geometry changed", lambda r, s: _set(r, 2, g=WKB_1_2), ("different", 2, "g")),
        ("boolean flipped", lambda r, s: _set(r, 1, bo=False), ("different", 1, "bo")),
        ("a missing row", lambda r, s: [x for x in r if x["id"] != 2], ("missing", 2)),
        ("an extra row", lambda r, s: r + [{**NULLS, "id": 99, "zd": dt.date(1970, 1, 1)}], ("extra", 99)),
    ]


@pytest.mark.parametrize("name,mutate,expected", mutation_matrix(), ids=[m[0] for m in mutation_matrix()])
def test_every_mutation_is_found(world, name, mutate, expected):
    tag = "m" + str(abs(hash(name)) % 10**8)
    found = verify(
        world, copies(world, tag, mutate(sink_rows("postgres"), "postgres"), mutate(sink_rows("delta"), "delta"))
    )
    for sink, (res, whole) in found.items():
        assert res.verdict == "different", (name, sink, res)
        assert not whole.ok, (name, sink)
        if expected[0] == "different":
            _, key, column = expected
            assert res.different == [((key,), (column,))], (name, sink, res)
            assert [(k, c) for k, c, _, _ in whole.different] == [((key,), column)]
            assert not res.missing and not res.extra
        else:
            kind, key = expected
            assert getattr(res, kind) == [(key,)], (name, sink, res)
            assert res.different == []


def test_nul_characters_by_sink_and_policy(world):
    rows_pg, rows_delta = sink_rows("postgres"), sink_rows("delta")
    # a NUL stripped in Delta is a difference (Delta holds it)
    found = verify(world, copies(world, "nuldelta", rows_pg, _set(rows_delta, 1, s="emoji 😀 ab")))
    assert found["delta"][0].different == [((1,), ("s",))]
    assert found["postgres"][0].verdict == "equal"
    # PostgreSQL under nul_policy replace holds U+FFFD: equal only when verify applies the same policy
    replaced = _set(rows_pg, 1, s="emoji 😀 a\ufffdb")
    found = verify(world, copies(world, "nulrepl", replaced, rows_delta, nul_policy="replace"))
    assert found["postgres"][0].verdict == "equal" and found["delta"][0].verdict == "equal"
    found = verify(world, copies(world, "nulrepl2", replaced, rows_delta, nul_policy="strip"))
    assert found["postgres"][0].different == [((1,), ("s",))]
    # pause: the sink cannot hold the row's value, so it never equals
    found = verify(world, copies(world, "nulpause", rows_pg, rows_delta, nul_policy="pause"))
    assert found["postgres"][0].different == [((1,), ("s",))]


def test_the_command_passes_and_fails(world, tmp_path):
    """`cdc verify` itself on a correct copy (exit 0) and on a copy with today's BIT
    representation, little-endian (exit 1, the column named)."""
    stack = world["stack"]
    copies(world, "cliok", sink_rows("postgres"), sink_rows("delta"))
    little = copies(
        world, "clibit", _set(sink_rows("postgres"), 1, b12=b"\x61\x0c"), _set(sink_rows("delta"), 1, b12=b"\x61\x0c")
    )
    from cdc import stack as local_stack

    def config(tag):
        cfg = {
            "topic_prefix": "unused",
            "mysql": {
                "host": stack.mariadb.host,
                "port": stack.mariadb.port,
                "user": "root",
                "password_file": str(local_stack.secret_file(stack, "mysql_root_password")),
            },
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap},
            "table_include": [f"{world['db']}\\.tricky"],
            "state_dir": str(tmp_path / "state"),
            "sinks": {
                "delta": {"path": str(world["work"] / tag)},
                "postgres": {
                    "host": stack.postgres.host,
                    "port": stack.postgres.port,
                    "user": stack.postgres.user,
                    "dbname": stack.postgres.database,
                    "schema": f"{world['db']}_{tag}",
                    "password_file": str(local_stack.secret_file(stack, "postgres_password")),
                },
            },
            "snapshot": {"chunk_size": 100},
        }
        path = tmp_path / f"{tag}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    for tag, code in (("cliok", 0), ("clibit", 1)):
        res = subprocess.run(
            [sys.executable, "-m", "cdc.cli", "verify", "-c", str(config(tag)), "--json", "--retries", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert res.returncode == code, (tag, res.stdout, res.stderr)
        data = json.loads(res.stdout)
        for t in data["tables"]:
            if code == 0:
                assert t["verdict"] == "equal", t
            else:
                assert t["different"] == [{"key": [1], "columns": ["b12"]}], t
    assert little["delta"].base.endswith("clibit")
