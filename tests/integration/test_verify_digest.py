"""Verify's fast path (merger.verify.sql_digest) against the real servers: MariaDB hashes
the source chunk, PostgreSQL and DataFusion over Delta hash the sink chunk.

The sink tables are written through the sink classes from the source rows (so they hold
the sinks' real column types). Equal tables must be settled by the digests alone, every
chunk; and every one-value change of the mutation list, one column at a time in a copy
of the row, must make that chunk's digests differ (the chunk is then read row by row,
which names the key and the column). A digest more lenient than the row comparison
would settle the changed chunk and the verdict would be "equal": the test fails.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pymysql
import pytest

from merger.schema.canonical import arrow_schema
from merger.sinks.delta import DeltaSink
from merger.sinks.postgres import PostgresSink
from merger.verify.chunked import TableVerifier
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sinks.postgres import PostgresReader
from merger.verify.source import SourceReader
from tests.integration.test_verify import changes, pipeline_rows, root_catalog

pytestmark = pytest.mark.integration

ROWS = 60
CHUNK = 10
NUL_ROWS = (55, 60)  # in the last chunk only: PostgreSQL cannot hold NUL

COLUMNS = (
    "id INT PRIMARY KEY, u BIGINT UNSIGNED, i8 TINYINT, i16 SMALLINT UNSIGNED, i24 MEDIUMINT, yr YEAR, "
    "flag BOOLEAN, dec4 DECIMAL(12,4), big DECIMAL(30,10), c CHAR(6), s VARCHAR(40), txt TEXT, "
    "lat VARCHAR(20) CHARACTER SET latin1, en ENUM('a','b','c'), st SET('x','y'), vb VARBINARY(16), bl BLOB, "
    "bn BINARY(4), d DATE, dt6 DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL, tm TIME(6)"
)


def source_row(i: int) -> tuple:
    if i % 7 == 0:  # a row of NULLs
        return (i, *([None] * 22))
    return (
        i,
        18446744073709551615 - i,
        -128 + i,
        65535 - i,
        -8388608 + i,
        1901 + i,
        i % 2,
        Decimal(-i) / 3 if i % 3 else Decimal("0.0000"),
        Decimal(f"12345678901234567890.{i:010d}"),
        "ab" if i % 2 else "",
        f"name {i} é😀" + ("\x00x" if i in NUL_ROWS else "") + (" " if i % 4 == 0 else ""),
        "t" * (i * 37),
        "café",
        "abc"[i % 3],
        ("", "x", "y", "x,y")[i % 4],
        bytes(range(i % 16)),
        bytes([i % 256]) * (i * 11),
        bytes([i, 0, 0, 0])[: 1 + i % 4],
        dt.date(1000 + i * 100, 1 + i % 12, 1 + i % 28),
        dt.datetime(2024, 2, 29, 23, 59, 59, i),
        dt.datetime(1970, 1, 1, 0, 0, i % 60),
        dt.datetime(2038, 1, 19, 3, 14, 7, 999999 - i),
        dt.timedelta(hours=-838 + i * 20, microseconds=i),
    )


# (column, new value from the old): each a change the row comparison reports
MUTATIONS = [
    ("u", lambda v: v - 1),
    ("i8", lambda v: v + 1),
    ("i16", lambda v: v - 1),
    ("yr", lambda v: v + 1),
    ("flag", lambda v: (not v) if isinstance(v, bool) else 1 - v),
    ("dec4", lambda v: v + Decimal("0.0001")),
    ("big", lambda v: v + Decimal("0.0000000001")),
    ("c", lambda v: v + "c"),
    ("s", lambda v: v[:-1]),
    ("s", lambda v: v.replace("é", "e")),
    ("s", lambda v: None),
    ("txt", lambda v: v + "t"),
    ("lat", lambda v: "cafe"),
    ("en", lambda v: "b" if v != "b" else "a"),
    ("st", lambda v: "y,x"),
    ("vb", lambda v: v + b"\x00"),
    ("bl", lambda v: v[:-1] + b"\x01"),
    ("d", lambda v: v + dt.timedelta(days=1)),
    ("dt6", lambda v: v + dt.timedelta(microseconds=1)),
    ("dt0", lambda v: v + dt.timedelta(seconds=1)),
    ("ts", lambda v: v - dt.timedelta(microseconds=1)),
    ("tm", lambda v: v + (1 if isinstance(v, int) else dt.timedelta(microseconds=1))),
    ("id", None),  # the row deleted from the sink
]


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory):
    db = "vd" + uuid.uuid4().hex[:8]
    work = tmp_path_factory.mktemp("digest")
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
    )
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        cur.execute(f"CREATE TABLE `{db}`.fast ({COLUMNS})")
        cur.executemany(
            f"INSERT INTO `{db}`.fast VALUES ({', '.join(['%s'] * 23)})", [source_row(i) for i in range(1, ROWS + 1)]
        )
        cur.execute(f"CREATE TABLE `{db}`.floats (id INT PRIMARY KEY, x DOUBLE)")
        cur.execute(f"INSERT INTO `{db}`.floats VALUES (1, 0.1), (2, NULL)")
    catalog = root_catalog(stack)
    sinks = {"delta": DeltaSink(work / "delta"), "postgres": PostgresSink(stack.postgres)}
    schemas = {}
    for name in ("fast", "floats"):
        spec = catalog.table_spec(db, name)
        schemas[name] = arrow_schema(spec)
        rows = pipeline_rows(conn, spec, ["id"])
        for sink in sinks.values():
            sink.ensure_table((db, name), schemas[name], ["id"])
            sink.apply((db, name), 1, changes(rows, "r", 1))
    conn.close()
    pg = stack.postgres
    readers = {
        "delta": lambda: DeltaReader(str(work / "delta")),
        "postgres": lambda: PostgresReader(
            {"host": pg.host, "port": pg.port, "user": pg.user, "password": pg.password, "dbname": pg.database}
        ),
    }
    yield {"db": db, "stack": stack, "sinks": sinks, "schemas": schemas, "readers": readers}
    for sink in sinks.values():
        sink.close()


def verify(world, table: str = "fast", digests: bool = True, **narrowing) -> dict:
    s = world["stack"].mariadb
    source = SourceReader(
        lambda: pymysql.connect(ssl_disabled=True, host=s.host, port=s.port, user="root", password=s.root_password)
    )
    readers = {n: make() for n, make in world["readers"].items()}
    try:
        spec = source.describe(world["db"], table)
        results = TableVerifier(source, spec, ["id"], readers, CHUNK, retries=0, digests=digests, **narrowing).run()
    finally:
        source.close()
        for r in readers.values():
            r.close()
    return {r.sink: r for r in results}


def settled_when_equal(sink: str) -> int:
    """Chunks an equal copy settles by digest: in PostgreSQL, not the chunk whose values
    hold NUL (the sink's NUL rule changed them; its rows are compared under that rule)."""
    return ROWS // CHUNK - (1 if sink == "postgres" else 0)


def test_equal_tables_are_settled_by_the_digests(world):
    for sink, r in verify(world).items():
        assert r.verdict == "equal", (sink, r.to_json())
        assert r.row_path is None, (sink, r.row_path)
        assert r.chunks == ROWS // CHUNK
        assert r.digest_chunks == settled_when_equal(sink), (sink, r.to_json())
        assert r.source_rows == r.sink_rows == ROWS
        assert r.nul_values_changed == (len(NUL_ROWS) if sink == "postgres" else 0), (sink, r.to_json())


def test_a_column_without_sql_text_takes_the_row_path_and_says_why(world):
    results = verify(world, "floats")
    for sink, r in results.items():
        assert r.verdict == "equal", r.to_json()
        assert r.digest_chunks == 0
        assert "'x'" in r.row_path and "double" in r.row_path, r.row_path
    for sink, r in verify(world, "fast", digests=False).items():
        assert r.verdict == "equal" and r.digest_chunks == 0 and "--compare rows" in r.row_path


def _row(world, sink: str, key: int) -> pa.Table:
    return world["sinks"][sink].rows_with_keys((world["db"], "fast"), ["id"], [(key,)])


@pytest.mark.parametrize("sink", ["delta", "postgres"])
def test_every_change_makes_the_digests_differ(world, sink):
    """One mutation at a time, each on a row whose value is not NULL, then put back."""
    table = (world["db"], "fast")
    writer = world["sinks"][sink]
    seq = 10
    for n, (column, mutate) in enumerate(MUTATIONS):
        key = 1 + (n * 5 + 1) % (ROWS - CHUNK)  # not in the last chunk (NUL)
        while key % 7 == 0:  # a non-NULL row
            key += 1
        original = _row(world, sink, key)
        assert original.num_rows == 1, (sink, key)
        if mutate is None:
            changed, op = original, "d"
        else:
            values = original.to_pylist()[0]
            values[column] = mutate(values[column])
            changed, op = pa.Table.from_pylist([values], schema=original.schema), "u"
        seq += 1
        writer.apply(table, seq, changes(changed, op, seq))
        try:
            r = verify(world)[sink]
        finally:
            seq += 1
            writer.apply(table, seq, changes(original, "u", seq))
        what = f"{sink}: {column} of id {key}"
        assert r.verdict == "different", what
        assert r.digest_chunks == settled_when_equal(sink) - 1, (what, r.to_json())  # the digest saw it
        if mutate is None:
            assert r.missing == [(key,)], (what, r.to_json())
        else:
            assert r.different == [((key,), (column,))], (what, r.to_json())
    r = verify(world)[sink]
    assert r.verdict == "equal" and r.digest_chunks == settled_when_equal(sink), r.to_json()


@pytest.mark.parametrize("sink", ["delta", "postgres"])
def test_a_narrowed_chunk_names_every_differing_key_as_the_row_path_does(world, sink):
    """Chunks whose digests differ, cut down to one-row sub-ranges by sub-range digests:
    the same missing, extra and different keys as every row compared."""
    table = (world["db"], "fast")
    writer = world["sinks"][sink]
    gone, changed, twin = 3, 24, 6  # rows without NULLs or NUL, in the first and third chunks
    extra_key = ROWS + 100  # beyond the last chunk's start: in the last chunk
    originals = {k: _row(world, sink, k) for k in (gone, changed, twin)}
    values = originals[changed].to_pylist()[0]
    values["s"] += "!"
    edited = pa.Table.from_pylist([values], schema=originals[changed].schema)
    values = originals[twin].to_pylist()[0]
    values["id"] = extra_key
    extra = pa.Table.from_pylist([values], schema=originals[twin].schema)
    writer.apply(table, 2001, changes(originals[gone], "d", 2001))
    writer.apply(table, 2002, changes(edited, "u", 2002))
    writer.apply(table, 2003, changes(extra, "u", 2003))
    try:
        narrowed = verify(world, leaf_rows=1, fanout=2)[sink]
        rows = verify(world, digests=False)[sink]
    finally:
        writer.apply(table, 2004, changes(originals[gone], "u", 2004))
        writer.apply(table, 2005, changes(originals[changed], "u", 2005))
        writer.apply(table, 2006, changes(extra, "d", 2006))
    assert narrowed.missing == rows.missing == [(gone,)], narrowed.to_json()
    assert narrowed.extra == rows.extra == [(extra_key,)], narrowed.to_json()
    assert narrowed.different == rows.different == [((changed,), ("s",))], narrowed.to_json()
    assert narrowed.mismatched_chunks == rows.mismatched_chunks
    assert narrowed.narrowed_chunks == narrowed.mismatched_chunks == 3, narrowed.to_json()
    assert (narrowed.source_rows, narrowed.sink_rows) == (rows.source_rows, rows.sink_rows) == (ROWS, ROWS)
    assert narrowed.digest_chunks == narrowed.chunks - narrowed.mismatched_chunks
    assert verify(world)[sink].verdict == "equal"
