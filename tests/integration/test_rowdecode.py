"""ingest.rowdecode / ingest.binlog: rows decoded by the generated decoders (and the lean
reader path) are exactly what mysql-replication returns: same values, same types, same
``none_sources``, same dict layout, same event attributes.

* Unit tests (no database): random rows events synthesised byte by byte for random tables
  of every handled column type, decoded by the library and by ours (the generated
  function, the library-built fast event and the lean-built fast event).
* Integration tests (a MariaDB of the local stack in its own state dir, ``/tmp/rd-stack``
  or $ROWDECODE_STACK_DIR; started if needed and stopped again if this module started it):
  workloads covering every column type, NULLs, edge values, multi-row events, partial row
  images, wide tables and old temporal formats, plus random tables (hypothesis), read from
  the binlog by the stock library reader and by ingest's reader, compared event by event.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import TableMapEvent

from ingest import binlog, rowdecode
from tests.unit.test_rowdecode import STOCK_ROWS, outcome


def _state_dir() -> Path:
    return Path(os.environ.get("ROWDECODE_STACK_DIR", "/tmp/rd-stack"))


@pytest.fixture(scope="module")
def mariadb():
    from cdc import stack as local_stack

    state = _state_dir()
    try:
        running = bool(local_stack.status(state).get("mariadb", {}).get("running"))
    except local_stack.StackError:
        running = False
    info = local_stack.up(state, components=("mariadb",))
    yield info.mariadb
    if not running:
        local_stack.down(state, components=("mariadb",))


def _root(m):
    import pymysql

    return pymysql.connect(
        ssl_disabled=True,
        host=m.host,
        port=m.port,
        user="root",
        password=m.root_password,
        autocommit=True,
        charset="utf8mb4",
        read_timeout=120,
        write_timeout=120,
    )


class _StockReader(BinLogStreamReader):
    # MariaDB non-blocking dumps end in a connection reset without this fix (the library
    # then replays from the start); ingest's reader carries the same fix
    def _BinLogStreamReader__set_mariadb_settings(self):
        prelude = BinLogStreamReader._BinLogStreamReader__set_mariadb_settings(self)
        return (len(prelude) - 4).to_bytes(4, "little") + prelude[4:]


def read_rows_events(m, start: str, db: str, how: str, timeout_s: float = 180) -> list[dict]:
    """Rows events of database ``db`` from GTID ``start`` to the binlog's end, read by the
    stock library ('stock'), ingest's reader ('lean') or ingest's reader on the library's
    path only ('wrapper')."""
    settings_ = {
        "host": m.host,
        "port": m.port,
        "user": "root",
        "password": m.root_password,
        "read_timeout": 120,
        "connect_timeout": 10,
    }
    sid = random.randint(100_000, 4_000_000)
    if how == "stock":
        reader = _StockReader(
            connection_settings=settings_,
            server_id=sid,
            is_mariadb=True,
            auto_position=start,
            blocking=False,
            only_events=[TableMapEvent, *STOCK_ROWS],
        )
    else:
        reader = binlog.open_reader({**settings_, "password": m.root_password}, sid, start, blocking=False)
        assert isinstance(reader, binlog.IngestBinLogStreamReader)
        if how == "wrapper":
            reader._lean = False
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        for ev in reader:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{how}: binlog not read in {timeout_s}s")
            if isinstance(ev, STOCK_ROWS) and ev.schema == db:
                base = next(c for c in STOCK_ROWS if isinstance(ev, c))
                out.append(
                    {
                        "class": base.__name__,
                        "event_type": ev.event_type,
                        "table": ev.table,
                        "table_id": ev.table_id,
                        "log_pos": ev.packet.log_pos,
                        "event_size": ev.packet.event_size,
                        "server_id": ev.packet.server_id,
                        "timestamp": ev.timestamp,
                        "primary_key": ev.primary_key,
                        "fast": isinstance(ev, tuple(rowdecode.FAST_ROWS_CLASSES.values())),
                        # (the library raises on some data, e.g. latin1 bytes Python's
                        # cp1252 does not map: ours must raise the same)
                        "rows": outcome(lambda: ev.rows),
                    }
                )
    finally:
        reader.close()
    return out


def assert_same_decoding(m, start: str, db: str, min_events: int = 1) -> list[dict]:
    stock = read_rows_events(m, start, db, "stock")
    assert len(stock) >= min_events
    before = dict(rowdecode.STATS)
    for how in ("lean", "wrapper"):
        ours = read_rows_events(m, start, db, how)
        assert len(ours) == len(stock), how
        for a, b in zip(stock, ours):
            assert b["fast"], how
            b = {k: v for k, v in b.items() if k != "fast"}
            a = {k: v for k, v in a.items() if k != "fast"}
            assert b == a, (how, a["table"], a["log_pos"])
    if any(e["rows"][0] == "ok" for e in stock):
        assert rowdecode.STATS["native_events"] > before["native_events"]
    return stock


def _gtid(cur) -> str:
    cur.execute("SELECT @@gtid_binlog_pos")
    return cur.fetchone()[0]


@pytest.mark.integration
def test_alltypes_workload_decodes_like_the_library(mariadb):
    """tests/unit/test_types.py's workload (every column type, edge values, zero dates, NULLs,
    updates, a primary-key change, deletes, DDL)."""
    from tests.integration.test_types import WorkloadRun

    db = "rd" + uuid.uuid4().hex[:8]
    run = WorkloadRun(mariadb, db)
    run.m = type(
        "M", (), {"host": mariadb.host, "port": mariadb.port, "user": "root", "password": mariadb.root_password}
    )()
    try:
        run.run()
        before = dict(rowdecode.STATS)
        events = assert_same_decoding(mariadb, run.gtid_start, db, min_events=15)
        # the alltypes and defaults tables were decoded natively, not by the library
        assert rowdecode.STATS["library_events"] == before["library_events"]
        assert {e["table"] for e in events} >= {"alltypes", "defaults_t", "nopk"}
    finally:
        with _root(mariadb) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


EDGE_DDL = [
    """CREATE TABLE dec_t (id INT PRIMARY KEY, d1 DECIMAL(1,0), d55 DECIMAL(5,5), d90 DECIMAL(9,0),
       d99 DECIMAL(9,9), d100 DECIMAL(10,0), d189 DECIMAL(18,9), d1910 DECIMAL(19,10), d380 DECIMAL(38,0),
       d650 DECIMAL(65,0), d6530 DECIMAL(65,30), du DECIMAL(12,4) UNSIGNED)""",
    """CREATE TABLE tmp_t (id INT PRIMARY KEY, t0 TIME, t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4),
       t5 TIME(5), t6 TIME(6), dt0 DATETIME, dt1 DATETIME(1), dt2 DATETIME(2), dt3 DATETIME(3),
       dt4 DATETIME(4), dt5 DATETIME(5), dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts1 TIMESTAMP(1) NULL,
       ts4 TIMESTAMP(4) NULL, ts6 TIMESTAMP(6) NULL, d DATE, y YEAR)""",
    """CREATE TABLE str_t (id INT PRIMARY KEY, c1 CHAR(1), c255 CHAR(255) CHARACTER SET latin1,
       c100u CHAR(100), v300 VARCHAR(300), vl VARCHAR(2000) CHARACTER SET latin1, va VARCHAR(10) CHARACTER SET ascii,
       vb VARBINARY(300), b4 BINARY(4), vcp VARCHAR(10) CHARACTER SET cp1251, vu16 VARCHAR(10) CHARACTER SET utf16,
       vswe VARCHAR(10) CHARACTER SET swe7, vgbk VARCHAR(10) CHARACTER SET gbk, vu3 VARCHAR(10) CHARACTER SET utf8mb3,
       tt TINYTEXT, t TEXT, mt MEDIUMTEXT, lt LONGTEXT CHARACTER SET latin1, tb TINYBLOB, b BLOB, mb MEDIUMBLOB,
       lb LONGBLOB, j JSON, g GEOMETRY, p POINT)""",
    """CREATE TABLE misc_t (id BIGINT UNSIGNED PRIMARY KEY, b1 BIT(1), b7 BIT(7), b9 BIT(9), b17 BIT(17),
       b33 BIT(33), b64 BIT(64), e ENUM('a','b','c'), e300 ENUM({e300}), s SET('a','b','c'), s64 SET({s64}),
       f FLOAT, f2 FLOAT(7,3) UNSIGNED, d DOUBLE, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED,
       mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, y YEAR)""",
]


def _edge_statements() -> list:
    e300 = ",".join(f"'v{i}'" for i in range(300))
    s64 = ",".join(f"'m{i}'" for i in range(64))
    stmts: list = [ddl.format(e300=e300, s64=s64) for ddl in EDGE_DDL]
    stmts += [
        "INSERT INTO dec_t VALUES (1, 9, 0.99999, 999999999, 0.999999999, 9999999999, 999999999.999999999, "
        "999999999.9999999999, 99999999999999999999999999999999999999, "
        "99999999999999999999999999999999999999999999999999999999999999999, "
        "12345678901234567890123456789012345.123456789012345678901234567890, 12345678.1234)",
        "INSERT INTO dec_t VALUES (2, -9, -0.99999, -999999999, -0.999999999, -9999999999, -999999999.999999999, "
        "-999999999.9999999999, -99999999999999999999999999999999999999, "
        "-99999999999999999999999999999999999999999999999999999999999999999, "
        "-0.000000000000000000000000000001, 0)",
        "INSERT INTO dec_t VALUES (3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), (4, 1, 0.00001, 1, 0.000000001, -1, "
        "-0.000000001, 0.0000000001, -1, 1, -1.5, 0.0001), (5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL)",
        "INSERT INTO tmp_t VALUES (1, '838:59:59', '838:59:59.9', '-838:59:59.99', '-00:00:00.001', "
        "'-12:34:56.7891', '00:00:00.00001', '-838:59:59.999999', '1000-01-01 00:00:00', "
        "'9999-12-31 23:59:59.9', '2024-02-29 12:00:00.01', '1970-01-01 00:00:00.999', '2000-01-01 00:00:00.0001', "
        "'1969-12-31 23:59:59.99999', '0001-01-01 00:00:00.000001', '1970-01-01 00:00:01', "
        "'2038-01-19 03:14:07.9', '2001-02-03 04:05:06.0007', '1999-12-31 23:59:59.999999', '9999-12-31', 2155)",
        "INSERT INTO tmp_t VALUES (2, '-00:00:01', '-00:00:00.1', '-00:00:00.01', '-01:00:00.5', '-00:00:00.0001', "
        "'-00:00:00.00001', '-00:00:00.000001', '0000-00-00 00:00:00', '0000-00-00 00:00:00.0', "
        "'2020-00-00 00:00:00.00', '0000-01-01 00:00:00.000', '2020-02-00 00:00:00.0000', "
        "'0000-00-00 00:00:00.00000', '0000-00-00 00:00:00.000000', '0000-00-00 00:00:00', "
        "'0000-00-00 00:00:00.0', '0000-00-00 00:00:00.0000', '0000-00-00 00:00:00.000000', '0000-00-00', 0)",
        "INSERT INTO tmp_t VALUES (3, '00:00:00', '00:00:00.0', '23:59:59.99', '12:00:00.5', '00:00:00.0001', "
        "'00:00:00.00001', '00:00:00.000001', '2024-01-01 00:00:00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, '2020-00-15', 1901)",
        (
            "INSERT INTO str_t VALUES (1, 'x', %s, %s, %s, %s, 'ascii', %s, %s, %s, %s, 'swe', %s, %s, "
            "'tiny', %s, 'mt', %s, %s, %s, %s, %s, %s, ST_GeomFromText('MULTIPOINT(1 1, 2 2)'), POINT(-1.5, 2))",
            (
                "é" * 255,
                "😀" * 100,
                "ü" * 300,
                "y" * 2000,
                bytes(range(256)) + b"\x00" * 44,
                b"\x00\xff\x00\x01",
                "привет",
                "aé😀",
                "中文",
                "ok€",
                "t" * 70000,
                "x" * 300,
                b"\x00" * 3,
                b"\xff" * 70000,
                b"m" * 70000,
                b"\x01\x02",
                '{"a": [1, 2, {"b": null}], "c": "é"}',
            ),
        ),
        "INSERT INTO str_t (id) VALUES (2)",
        "INSERT INTO str_t (id, c1, c255, c100u, v300, vl, va, vb, b4, tt, t, mt, lt, tb, b, mb, lb, j) VALUES "
        "(3, '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '[]')",
        (
            "INSERT INTO misc_t VALUES (18446744073709551615, 1, 127, 511, 131071, 8589934591, 18446744073709551615, "
            "'c', 'v299', 'a,b,c', %s, 3.4e38, 9999.999, -1.7976931348623157e308, -128, 255, -32768, 65535, "
            "-8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 2000)",
            (",".join(f"m{i}" for i in range(64)),),
        ),
        "INSERT INTO misc_t VALUES (0, 0, 0, 0, 0, 0, 0, '', 'v0', '', '', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)",
        "INSERT INTO misc_t (id) VALUES (1)",
        # updates and deletes, full images
        "UPDATE dec_t SET d6530 = -d6530, d1 = NULL WHERE id IN (1, 2, 3)",
        "UPDATE tmp_t SET t3 = '-00:00:00.5', dt6 = '2024-06-15 12:30:45.123456' WHERE id > 0",
        "UPDATE misc_t SET s = '', e = 'a', b64 = b'1010' WHERE id < 5",
        "DELETE FROM str_t WHERE id = 2",
        # partial images: MINIMAL (before: primary key only; after: changed columns) and NOBLOB
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "UPDATE misc_t SET f = 1.5, s = 'b', e300 = 'v1' WHERE id = 0",
        "UPDATE str_t SET v300 = 'minimal', lb = 'blob' WHERE id = 1",
        "DELETE FROM dec_t WHERE id = 5",
        "INSERT INTO dec_t (id, d100) VALUES (6, 42)",
        "SET SESSION binlog_row_image = 'NOBLOB'",
        "UPDATE str_t SET c1 = 'z' WHERE id IN (1, 3)",
        "DELETE FROM str_t WHERE id = 3",
        "SET SESSION binlog_row_image = 'FULL'",
    ]
    return stmts


@pytest.mark.integration
def test_edge_values_partial_images_decode_like_the_library(mariadb):
    db = "rd" + uuid.uuid4().hex[:8]
    with _root(mariadb) as conn, conn.cursor() as cur:
        try:
            start = _gtid(cur)
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{db}`")
            for stmt in _edge_statements():
                sql, args = stmt if isinstance(stmt, tuple) else (stmt, None)
                cur.execute(sql, args)
            events = assert_same_decoding(mariadb, start, db, min_events=20)
            assert {e["table"] for e in events} == {"dec_t", "tmp_t", "str_t", "misc_t"}
        finally:
            cur.execute("SET SESSION binlog_row_image = 'FULL'")
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


@pytest.mark.integration
def test_multi_row_and_wide_table_events_decode_like_the_library(mariadb):
    """Many rows per event (and per statement: several rows events), NULL mixes, a table
    of 300 columns (2-byte column count: the reader's library path, still natively decoded)."""
    db = "rd" + uuid.uuid4().hex[:8]
    rnd = random.Random(7)
    with _root(mariadb) as conn, conn.cursor() as cur:
        try:
            start = _gtid(cur)
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")
            cur.execute(
                "CREATE TABLE m (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(10,2), d DATETIME(3), "
                "e DOUBLE, f TEXT)"
            )
            rows = []
            for i in range(5000):
                rows.append(
                    (
                        i,
                        rnd.choice([None, rnd.randint(-(2**31), 2**31 - 1)]),
                        rnd.choice([None, "some text value", "é" * rnd.randint(0, 40)]),
                        rnd.choice([None, "12.34", "-99999999.99", "0.01"]),
                        rnd.choice([None, "2024-01-02 03:04:05.678", "0000-00-00 00:00:00"]),
                        rnd.choice([None, rnd.random() * 1e300, -0.0]),
                        rnd.choice([None, "x" * rnd.randint(0, 3000)]),
                    )
                )
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("BEGIN")
            cur.executemany("INSERT INTO m VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)  # multi-row statements
            cur.execute("COMMIT")
            cur.execute("UPDATE m SET a = a + 1, b = NULL WHERE id % 3 = 0")
            cur.execute("DELETE FROM m WHERE id % 5 = 0")
            cols = ", ".join(
                f"c{i} {rnd.choice(['INT', 'VARCHAR(5)', 'DATE', 'BIT(3)', 'DOUBLE'])}" for i in range(299)
            )
            cur.execute(f"CREATE TABLE wide (id INT PRIMARY KEY, {cols})")
            cur.execute("INSERT INTO wide (id, c0, c10, c298) VALUES (1, 1, 1, 1), (2, NULL, NULL, NULL)")
            cur.execute("UPDATE wide SET c5 = 0 WHERE id = 1")
            cur.execute("DELETE FROM wide")
            events = assert_same_decoding(mariadb, start, db, min_events=10)
            assert (
                sum(len(e["rows"][1][1]) for e in events if e["table"] == "m" and e["class"] == "WriteRowsEvent")
                == 5000
            )
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


@pytest.mark.integration
def test_old_temporal_formats_decode_like_the_library(mariadb):
    """TIME/DATETIME/TIMESTAMP in the pre-5.6 binlog formats (mysql56_temporal_format=OFF)."""
    db = "rd" + uuid.uuid4().hex[:8]
    with _root(mariadb) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.mysql56_temporal_format")
        saved = cur.fetchone()[0]
        try:
            start = _gtid(cur)
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")
            cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
            cur.execute("CREATE TABLE old_t (id INT PRIMARY KEY, t TIME, dt DATETIME, ts TIMESTAMP NULL)")
            cur.execute(f"SET GLOBAL mysql56_temporal_format = {saved}")
            cur.execute(
                "INSERT INTO old_t VALUES (1, '838:59:59', '9999-12-31 23:59:59', '2038-01-19 03:14:07'), "
                "(2, '-12:34:56', '0000-00-00 00:00:00', '0000-00-00 00:00:00'), "
                "(3, '00:00:00', '2020-00-10 00:00:00', '1970-01-01 00:00:01'), (4, NULL, NULL, NULL)"
            )
            cur.execute("UPDATE old_t SET t = '01:02:03' WHERE id < 3")
            events = assert_same_decoding(mariadb, start, db, min_events=2)
            assert events
        finally:
            cur.execute(f"SET GLOBAL mysql56_temporal_format = {saved}")
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


# ------------------------------------------------------------------- random tables (hypothesis)


def _sql_types():
    """(DDL type, strategy of Python values for it)."""
    ints = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}
    out = []
    for name, bits in ints.items():
        out.append((name, st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)))
        out.append((name + " UNSIGNED", st.integers(0, (1 << bits) - 1)))
    out += [
        ("FLOAT", st.floats(width=32, allow_nan=False, allow_infinity=False)),
        ("DOUBLE", st.floats(allow_nan=False, allow_infinity=False)),
        ("YEAR", st.sampled_from([0, 1901, 1970, 2000, 2155])),
        ("BIT(5)", st.integers(0, 31)),
        ("BIT(64)", st.integers(0, (1 << 64) - 1)),
        ("DATE", st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31))),
        ("ENUM('a','b','c')", st.sampled_from(["a", "b", "c", ""])),
        ("SET('x','y','z')", st.sampled_from(["", "x", "x,y", "z,y,x"])),
        ("VARCHAR(20)", st.text(max_size=20)),
        ("VARCHAR(300)", st.text(max_size=300)),
        ("CHAR(10) CHARACTER SET latin1", st.text(st.characters(max_codepoint=255), max_size=10)),
        ("VARBINARY(50)", st.binary(max_size=50)),
        ("BINARY(3)", st.binary(max_size=3)),
        ("TEXT", st.text(max_size=100)),
        ("BLOB", st.binary(max_size=100)),
        (
            "JSON",
            st.recursive(
                st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=5),
                lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                max_leaves=5,
            ).map(json.dumps),
        ),
    ]
    for fsp in range(7):
        out.append((f"DATETIME({fsp})", st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31))))
        out.append((f"TIMESTAMP({fsp}) NULL", st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))))
        out.append((f"TIME({fsp})", st.timedeltas(-dt.timedelta(hours=838), dt.timedelta(hours=838))))
    for p, s in ((1, 0), (5, 2), (10, 2), (18, 9), (20, 10), (30, 0), (65, 30), (4, 4)):
        out.append(
            (
                f"DECIMAL({p},{s})",
                st.decimals(
                    -(Decimal(10) ** (p - s)) + 1,
                    Decimal(10) ** (p - s) - 1,
                    places=s,
                    allow_nan=False,
                    allow_infinity=False,
                ),
            )
        )
    return out


SQL_TYPES = _sql_types()


@pytest.mark.integration
@settings(
    max_examples=int(os.environ.get("ROWDECODE_RANDOM_TABLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_random_tables_decode_like_the_library(mariadb, data):
    ncols = data.draw(st.integers(1, 12), label="ncols")
    types = [data.draw(st.sampled_from(SQL_TYPES), label=f"type{i}") for i in range(ncols)]
    row = st.tuples(*[st.one_of(st.none(), strat) for _, strat in types])
    inserts = data.draw(st.lists(row, min_size=1, max_size=8), label="rows")
    updates = data.draw(st.lists(row, max_size=3), label="updates")
    db = "rd" + uuid.uuid4().hex[:8]
    names = ", ".join(f"c{i}" for i in range(ncols))
    marks = ", ".join(["%s"] * ncols)
    with _root(mariadb) as conn, conn.cursor() as cur:
        try:
            start = _gtid(cur)
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{db}`")
            cur.execute(
                f"CREATE TABLE r (id INT AUTO_INCREMENT PRIMARY KEY, "
                f"{', '.join(f'c{i} {t}' for i, (t, _) in enumerate(types))})"
            )
            cur.execute(f"INSERT INTO r ({names}) VALUES ({marks})", inserts[0])
            if len(inserts) > 1:
                cur.executemany(f"INSERT INTO r ({names}) VALUES ({marks})", inserts[1:])
            for k, values in enumerate(updates):
                sets = ", ".join(f"c{i} = %s" for i in range(ncols))
                cur.execute(f"UPDATE r SET {sets} WHERE id %% {k + 2} = 0", values)
            cur.execute("DELETE FROM r WHERE id % 2 = 1")
            assert_same_decoding(mariadb, start, db, min_events=2)
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
