"""Every column type through the whole pipeline, checked by the independent verify.

MariaDB tables hold every type with extreme values. Rows 1..n are written outside the
binlog into tables new to the running pipeline (tests/shared_pipeline.py), so they reach the
sinks through the snapshot alone (chunk SELECTs); rows 101..100+n,
the same values, are written after the snapshots finished (they reach the sinks through
the binlog, ingest and Kafka: the stream). Then both sinks (Delta and PostgreSQL) must
equal the source, compared through plain SELECTs, each sink's own client and one
canonical form (merger.verify, docs/operations/verify-and-repair.md "Verify a sink"). A failure lists
every differing value: table, sink, key, column, source value and sink value (canonical).
"""

from __future__ import annotations

import time

import pymysql
import pytest

from tests.merger_harness import SinkChecker

pytestmark = pytest.mark.integration

STREAM_OFFSET = 100  # row id + 100: the same values, streamed

TABLES = {
    "nums": """
        id INT PRIMARY KEY,
        ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT,
        miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
        d65 DECIMAL(65,30), d10 DECIMAL(10,2), d38 DECIMAL(38,0), d39 DECIMAL(39,5),
        f FLOAT, f2 FLOAT(10,3), db DOUBLE, db2 DOUBLE(12,4),
        b1 BIT(1), b8 BIT(8), b12 BIT(12), b64 BIT(64), bo BOOLEAN, t1 TINYINT(1), y YEAR""",
    "times": """
        id INT PRIMARY KEY,
        dd DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL,
        t0 TIME, t6 TIME(6),
        zd DATE NOT NULL, zdt DATETIME NOT NULL, zts TIMESTAMP NOT NULL DEFAULT '2000-01-01 00:00:00',
        zdd DATE NOT NULL DEFAULT '1999-12-31', zdn DATE NULL""",
    "texts": """
        id INT PRIMARY KEY,
        c CHAR(10), vc VARCHAR(100), tx TEXT, lt LONGTEXT, lat VARCHAR(20) CHARACTER SET latin1,
        e ENUM('a','b','c'), st SET('x','y','z'), j JSON,
        bn BINARY(4), vb VARBINARY(10), bl BLOB""",
    "nul": """
        id INT PRIMARY KEY, s VARCHAR(20), tx TEXT, c CHAR(5)""",
    "geo": """
        id INT PRIMARY KEY, g GEOMETRY, p POINT, ls LINESTRING, poly POLYGON""",
}

# rows as SQL value lists (session sql_mode='', time_zone '+00:00')
ROWS = {
    "nums": [
        "(1, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, "
        "18446744073709551615, '99999999999999999999999999999999999.999999999999999999999999999999', "
        "99999999.99, 99999999999999999999999999999999999999, '9999999999999999999999999999999999.99999', "
        "3.4028234e38, 9999999.999, 1.7976931348623157e308, 99999999.9999, b'1', b'11111111', b'110001100001', "
        "b'1111111111111111111111111111111111111111111111111111111111111111', 1, 1, 2155)",
        "(2, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, "
        "'-99999999999999999999999999999999999.999999999999999999999999999999', -99999999.99, "
        "-99999999999999999999999999999999999999, '-9999999999999999999999999999999999.99999', "
        "-3.4028234e38, -9999999.999, -1.7976931348623157e308, -99999999.9999, b'0', b'00000000', b'000000000001', "
        "b'1000000000000000000000000000000000000000000000000000000000000000', 0, 0, 1901)",
        "(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9223372036854775808, '0.000000000000000000000000000001', 0.01, 1, "
        "'0.00001', 1.17549435e-38, 0.001, 5e-324, 0.0001, b'0', b'10000000', b'100000000000', "
        "b'0000000000000000000000000000000000000000000000000000000000000001', 5, -1, 0)",
        "(4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        "(5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12345678901234567890, "
        "'12345678901234567890123456789012345.123456789012345678901234567891', 1.5, "
        "12345678901234567890123456789012345678, '1234567890123456789012345678901234.12345', "
        "16777217, 1.2345, 0.30000000000000004, 1.00005, b'1', b'01010101', b'011000001100', "
        "b'0000000100000010000000110000010000000101000001100000011100001000', 2, 0, 1999)",
    ],
    "times": [
        "(1, '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999', "
        "'2038-01-19 03:14:07', '2038-01-19 03:14:07.999999', '838:59:59', '838:59:59.999999', "
        "'9999-12-31', '9999-12-31 23:59:59', '2038-01-19 03:14:07', '9999-12-31', '9999-12-31')",
        "(2, '1000-01-01', '1000-01-01 00:00:00', '1000-01-01 00:00:00.000', '1000-01-01 00:00:00.000000', "
        "'1970-01-01 00:00:01', '1970-01-01 00:00:01.000001', '-838:59:59', '-838:59:59.999999', "
        "'1000-01-01', '1000-01-01 00:00:00', '1970-01-01 00:00:01', '1000-01-01', '1000-01-01')",
        # zero dates (sql_mode=''): nullable -> NULL, NOT NULL -> the valid default, else the epoch
        "(3, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', "
        "'0000-00-00 00:00:00', '0000-00-00 00:00:00', '00:00:00', '-00:00:00.500000', "
        "'0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00', '0000-00-00')",
        # partly zero dates
        "(4, '2020-00-10', '2020-01-00 10:00:00', NULL, NULL, NULL, NULL, '-00:00:01', '00:00:00.000001', "
        "'2020-02-00', '2020-00-01 00:00:00', '2020-01-01 00:00:00', '2020-00-00', '2020-00-10')",
        # years below 100 (Debezium's time adjuster would move them)
        "(5, '0001-01-01', '0069-12-31 12:00:00', '0070-01-01 00:00:00.5', '0099-12-31 23:59:59.999999', "
        "'2000-02-29 12:00:00', '1999-12-31 23:59:59.5', '24:00:00', '-24:00:00.000001', "
        "'0001-01-01', '0050-06-15 00:00:00', '2024-02-29 00:00:00', '0099-01-01', '0010-10-10')",
        "(6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2020-01-01', '2020-01-01 00:00:00', "
        "'2020-01-01 00:00:00', '2020-01-01', NULL)",
    ],
    "texts": [
        "(1, 'ab', 'trailing  ', 'emoji 😀 𝄞 中文', REPEAT('x', 70000), 'café', '', 'x,z', "
        '\'{"b": 1, "a": [1.0, 2, "😀", null, true], "n": 12345678901234567890.123456789, "e": "\\\\u00e9"}\', '
        "'a', X'610000', X'00')",
        "(2, '', '', '', '', '', 'c', '', '[]', X'00000000', X'', X'')",
        "(3, ' lead', ' ', 'line\\nbreak\\ttab \\\\ quote\\' \"', 'ü', 'ÿ', 'a', 'x,y,z', "
        '\'{"deep": {"x": [[], {}], "s": "\\\\"q\\\\""}}\', X\'FFFFFFFF\', X\'00FF00FF00\', '
        "X'000102030405060708090A0B0C0D0E0F')",
        "(4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        "(5, 'abcdefghij', REPEAT('é', 100), '𝄞', 'tab\\tend', 'x', 'b', 'y', '\"just a string\"', "
        "'abcd', X'616263000000', X'00000000000000')",
    ],
    "nul": [
        "(1, CONCAT('a', CHAR(0), 'b'), CONCAT(CHAR(0), 'start'), CONCAT('x', CHAR(0)))",
        "(2, 'no nul', 'none', 'c')",
    ],
    "geo": [
        "(1, ST_GeomFromText('POINT(1 2)', 4326), ST_GeomFromText('POINT(-1.5 2.25)'), "
        "ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)'), ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0))', 3857))",
        "(2, ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))'), POINT(0, 0), NULL, NULL)",
        "(3, NULL, NULL, NULL, NULL)",
    ],
}


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


def _write(conn, statements: list[str], binlog: bool = True) -> None:
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, invalid ENUM values
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SET SESSION sql_log_bin = {int(binlog)}")
        for s in statements:
            cur.execute(s)
        cur.execute("SET SESSION sql_log_bin = 1")


def _snapshots_finished(work, db: str, tables) -> bool:
    plans = [work / "state" / "snapshots" / f"{db}.{t}.json" for t in tables]
    return all(p.exists() and '"finished_at"' in p.read_text() for p in plans)


def _differences(checker: SinkChecker, db: str, tables) -> list[str]:
    out = []
    for table in tables:
        for sink, c, err in checker.compare(db, table):
            if c is None:
                out.append(f"{table} {sink}: {err}")
                continue
            if c.source_rows != c.sink_rows:
                out.append(f"{table} {sink}: source {c.source_rows} rows, sink {c.sink_rows}")
            out += [f"{table} {sink}: row {k} missing" for k in c.missing]
            out += [f"{table} {sink}: row {k} extra" for k in c.extra]
            out += [
                f"{table} {sink}: row {k[0]} column {col}: source {a!r}, sink {b!r}" for k, col, a, b in c.different
            ]
    return out


# NUL characters in their own run: a sink that refuses them stops the merger, which must
# not hide what happens to every other type
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("tables", [("nums", "times", "texts", "geo"), ("nul",)], ids=["types", "nul"])
def test_every_type_reaches_both_sinks_unchanged(stack, unique_name, tables, pipeline):
    run(stack, pipeline, pipeline.database(f"tm_{unique_name}"), {t: TABLES[t] for t in tables})


def run(stack, pipeline, db, tables: dict) -> None:
    conn = _conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
    _write(conn, [f"CREATE TABLE {db}.{t} ({cols})" for t, cols in tables.items()])
    # the first rows left out of the binlog: only the snapshot of the new tables brings them
    _write(conn, [f"INSERT INTO {db}.{t} VALUES {', '.join(ROWS[t])}" for t in tables], binlog=False)
    merger, ingest, work = pipeline.merger, pipeline.ingest, pipeline.work
    mark = pipeline.mark()
    checker = SinkChecker(stack, work)
    try:
        deadline = time.monotonic() + 600
        while not _snapshots_finished(work, db, tables):
            assert merger.alive(), merger.log_text()[-4000:]
            assert ingest.alive(), ingest.log_text()[-4000:]
            assert time.monotonic() < deadline, "snapshots did not finish:\n" + merger.log_text()[-4000:]
            time.sleep(2)
        # the same values again, now through the binlog, ingest and Kafka
        _write(
            conn,
            [
                f"INSERT INTO {db}.{t} SELECT id + {STREAM_OFFSET}, "
                + ", ".join(f"`{c}`" for c in _columns(conn, db, t)[1:])
                + f" FROM {db}.{t}"
                for t in tables
            ],
        )
        expected = {t: 2 * len(ROWS[t]) for t in tables}
        # wait for the streamed rows; rows the pipeline loses never come: stop waiting when
        # the counts stood still for 90 s (reported below)
        deadline = time.monotonic() + 400
        counts, since = None, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < 90:
            now = {t: checker.counts(db, t) for t in tables}
            if all(c["delta"] == c["postgres"] == expected[t] for t, c in now.items()):
                counts = now
                break
            if now != counts:
                counts, since = now, time.monotonic()
            assert merger.alive(), merger.log_text()[-4000:]
            time.sleep(3)
        # a value that differs now may still be in flight: compare until the differences stand still
        previous, found = None, _differences(checker, db, tables)
        settle = time.monotonic() + 60
        while found and found != previous and time.monotonic() < settle:
            time.sleep(5)
            previous, found = found, _differences(checker, db, tables)
        # `cdc verify`'s chunked comparison agrees with the whole-table one, table by table
        for table in tables:
            for res in checker.verify(db, table, chunk_size=3):
                differs = any(line.startswith(f"{table} {res.sink}:") for line in found)
                assert res.verdict == ("different" if differs else "equal"), (table, res, found)
        assert not found, (
            "sinks differ from the source (snapshot rows: id < 100, streamed rows: id > 100):\n"
            + "\n".join(found)
            + f"\ncounts: {counts}\nmerger log:\n"
            + pipeline.merger_log_since(mark)[-3000:]
        )
    finally:
        checker.close()
        conn.close()


def _columns(conn, db: str, table: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        return [r[0] for r in cur.fetchall()]
