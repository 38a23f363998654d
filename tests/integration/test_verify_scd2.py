"""`cdc verify` of an SCD type 2 table in PostgreSQL (issue 27, item 5) against the real
stack: a MariaDB source table, its history written by the real ``PostgresSink`` from the
source's own rows (a snapshot, then updates, deletes and keys inserted again, each change
applied to both), the command run as a subprocess.

The oracle is the damage the test does behind the sink's back with plain SQL: each case
changes the result in one way the test writes down beforehand (a current row's value, a
current row gone, a stray current row, a closed version's value, two open versions of a
key, overlapping versions, a version that ends before it starts). The current rows are
compared with the source like a latest table; the history's values are not compared, its
shape is.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pymysql
import pytest

from cdc.quoting import quote_ident
from merger.history.modes import COMMIT_US, LATEST, SCD2Mode, TableModes
from merger.schema.canonical import arrow_schema, snapshot_select
from merger.sinks.postgres import PostgresSink
from merger.snapshot.direct_read import canonical_source_rows
from merger.verify.current_versions import CurrentVersions
from merger.verify.sinks.postgres import PostgresReader
from tests.integration.test_verify import root_catalog
from tests.merger_harness import write_merger_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROWS = 300
T0 = int(dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1_000_000)
HOUR = 3_600_000_000


def _my(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _pg(stack):
    p = stack.postgres
    return psycopg.connect(host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database)


def _verify(cfg: Path, *args: str) -> tuple[int, dict, str]:
    res = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "verify", "-c", str(cfg), "--json", "--retries", "0", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    data = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, data, res.stderr


class History:
    """The source table ``h`` and its SCD type 2 table, written change by change."""

    def __init__(self, stack, db: str):
        self.stack, self.db = stack, db
        self.spec = root_catalog(stack).table_spec(db, "h")
        self.schema = arrow_schema(self.spec)
        self.sink = PostgresSink(stack.postgres, modes=TableModes({f"{db}.h": SCD2Mode(), f"{db}.plain": LATEST}))
        self.sink.ensure_table((db, "h"), self.schema, ["id"])
        self.version = 0

    def rows(self, ids=None) -> pa.Table:
        """The source rows as the pipeline's snapshot reads them (of ``ids`` only, if given)."""
        conn = _my(self.stack)
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                cur.execute(f"SELECT {snapshot_select(self.spec)} FROM {quote_ident(self.db)}.h ORDER BY id")
                names = [d[0] for d in cur.description]
                rows = canonical_source_rows(self.spec, names, cur.fetchall())
        finally:
            conn.close()
        if ids is None:
            return rows
        keep = pa.array([i in set(ids) for i in rows.column("id").to_pylist()], pa.bool_())
        return rows.filter(keep)

    def apply(self, rows: pa.Table, op: str, seq: int, at_us: int) -> None:
        n = rows.num_rows
        batch = (
            rows.append_column("_cdc_op", pa.array([op] * n, pa.string()))
            .append_column("_cdc_seq", pa.array([seq] * n, pa.int64()))
            .append_column(COMMIT_US, pa.array([at_us] * n, pa.int64()))
        )
        self.version += 1
        assert self.sink.apply((self.db, "h"), self.version, batch)

    def deletes(self, ids, seq: int, at_us: int) -> None:
        rows = pa.Table.from_pylist([{"id": i} for i in ids], schema=pa.schema([self.schema.field("id")]))
        for f in self.schema:
            if f.name != "id":
                rows = rows.append_column(f, pa.nulls(rows.num_rows, f.type))
        self.apply(rows.select(self.schema.names), "d", seq, at_us)


@pytest.fixture
def world(stack, tmp_path):
    db = "s" + uuid.uuid4().hex[:8]
    conn = _my(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.h (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.executemany(f"INSERT INTO {db}.h VALUES (%s, %s, %s)", [(i, f"v{i}", i % 7) for i in range(1, ROWS + 1)])
        cur.execute(f"CREATE TABLE {db}.log (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {db}.log VALUES (1, 1)")
    history = History(stack, db)
    # the snapshot, then updates, deletes and two of the deleted keys inserted again
    history.apply(history.rows(), "r", 100, T0)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {db}.h SET v = CONCAT('changed ', id), n = n + 1 WHERE id <= 50")
        cur.execute(f"DELETE FROM {db}.h WHERE id BETWEEN 251 AND 260")
    history.apply(history.rows(range(1, 51)), "u", 200, T0 + HOUR)
    history.deletes(range(251, 261), 201, T0 + HOUR)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {db}.h VALUES (255, 'back', 1), (256, 'back', 2)")
    history.apply(history.rows([255, 256]), "c", 300, T0 + 2 * HOUR)
    conn.close()
    cfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        "unused",
        [db],
        tmp_path,
        **{
            "sinks.delta": None,
            "snapshot.chunk_size": 100,
            "sinks.postgres.tables": {f"{db}.h": {"mode": "scd2"}, f"{db}.log": {"mode": "changelog"}},
        },
    )
    yield {"db": db, "cfg": cfg, "history": history}
    history.sink.close()


def _pg_exec(stack, *statements):
    with _pg(stack) as c:
        for s in statements:
            c.execute(s)


def _open_index(stack, db: str) -> str:
    with _pg(stack) as c:
        (name,) = c.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'h' AND indexdef LIKE '%%WHERE%%'",
            (db,),
        ).fetchone()
    return name


def _keys(items) -> set:
    return {tuple(k) for k in items}


def test_an_intact_history_is_equal_by_digests_and_by_rows(world):
    db = world["db"]
    for args in ((), ("--compare", "rows")):
        code, data, err = _verify(world["cfg"], f"{db}.h", *args)
        assert code == 0, (data, err)
        (h,) = data["tables"]
        current = ROWS - 10 + 2
        assert (h["verdict"], h["source_rows"], h["sink_rows"], h["history_faults"]) == ("equal", current, current, [])
        assert h["chunks"] == 3 and h["mismatched_chunks"] == 0
        assert h["digest_chunks"] == (0 if args else 3), h
    # a change log stays skipped (and a skipped table is not a success)
    code, data, err = _verify(world["cfg"], f"{db}.log")
    assert code == 3, (data, err)
    (log,) = data["tables"]
    assert log["verdict"] == "skipped" and "a changelog table" in log["note"], log


def test_damage_is_named_exactly(world):
    db, stack = world["db"], world["history"].stack
    t = f'"{db}"."h"'
    _pg_exec(
        stack,
        # a current row's value; a current row gone (its closed version stays: like a deleted key)
        f"UPDATE {t} SET v = 'damaged' WHERE id = 3 AND __current",
        f"DELETE FROM {t} WHERE id = 4 AND __current",
        # a stray current row: a key the source does not hold
        f"INSERT INTO {t} (id, v, n, __start_at, __start_seq, __last_seq) VALUES (1000, 'stray', 0, now(), 500, 500)",
        # a closed version's value: history is not compared with the source
        f"UPDATE {t} SET v = 'rewritten' WHERE id = 5 AND NOT __current",
        # two open versions of key 6 (the partial unique index would refuse it)
        f'DROP INDEX "{db}"."{_open_index(stack, db)}"',
        f"UPDATE {t} SET __end_seq = NULL, __end_at = NULL WHERE id = 6 AND NOT __current",
        # key 7's first version ends after its second starts
        f"UPDATE {t} SET __end_seq = 250 WHERE id = 7 AND NOT __current",
        # deleted key 252's version ends before it starts
        f"UPDATE {t} SET __end_at = __start_at - interval '1 day' WHERE id = 252",
    )
    code, data, err = _verify(world["cfg"], f"{db}.h")
    assert code == 1, (data, err)
    (h,) = data["tables"]
    assert h["verdict"] == "different"
    assert _keys(h["missing"]) == {(4,)}
    assert _keys(h["extra"]) == {(6,), (1000,)}  # 6: held twice among the current rows
    assert [(d["key"], d["columns"]) for d in h["different"]] == [([3], ["v"])]
    assert h["unlisted"] == 0
    assert h["history_faults"] == [
        {
            "kind": "several_current",
            "what": "keys with more than one current version",
            "count": 1,
            "examples": [[6]],
        },
        {
            "kind": "overlapping",
            "what": "versions that overlap the next version of their key",
            "count": 2,
            "examples": [[6], [7]],
        },
        {
            "kind": "reversed",
            "what": "versions that end before they start, or have only one of __end_seq and __end_at",
            "count": 1,
            "examples": [[252]],
        },
    ]
    # the text says the same
    res = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "verify", "-c", str(world["cfg"]), "--retries", "0", f"{db}.h"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert res.returncode == 1, res.stderr
    out = " ".join(res.stdout.split())
    assert "history: 1 keys with more than one current version (keys 6)" in out, res.stdout
    assert "history: 2 versions that overlap the next version of their key (keys 6, 7)" in out, res.stdout
    assert "missing in the sink: 4" in out and "extra in the sink: 6, 1000" in out, res.stdout


def test_a_closed_version_alone_changed_is_equal(world):
    db, stack = world["db"], world["history"].stack
    _pg_exec(stack, f'UPDATE "{db}"."h" SET v = \'rewritten\', n = -1 WHERE NOT __current')
    code, data, err = _verify(world["cfg"], f"{db}.h")
    assert code == 0, (data, err)
    assert data["tables"][0]["verdict"] == "equal"


def test_torn_boundary_and_last_change_outside_its_version(world):
    db, stack = world["db"], world["history"].stack
    t = f'"{db}"."h"'
    _pg_exec(
        stack,
        # key 8: its first version ends at its second's sequence but an hour earlier
        f"UPDATE {t} SET __end_at = __end_at - interval '1 hour' WHERE id = 8 AND NOT __current",
        # key 9: its closed version's last change at its end; key 10's current one before its start
        f"UPDATE {t} SET __last_seq = __end_seq WHERE id = 9 AND NOT __current",
        f"UPDATE {t} SET __last_seq = __start_seq - 1 WHERE id = 10 AND __current",
    )
    code, data, err = _verify(world["cfg"], f"{db}.h")
    assert code == 1, (data, err)
    (h,) = data["tables"]
    assert (h["missing"], h["extra"], h["different"]) == ([], [], [])
    assert [(f["kind"], f["count"], f["examples"]) for f in h["history_faults"]] == [
        ("torn", 1, [[8]]),
        ("last_seq_outside", 2, [[9], [10]]),
    ]


def test_positions_are_each_keys_last_change(world):
    """A verify window's test reads the position of each key's last change: the open
    version's last change, or the end of a deleted key's version."""
    history = world["history"]
    p = history.stack.postgres
    reader = PostgresReader(
        {"host": p.host, "port": p.port, "user": p.user, "password": p.password, "dbname": p.database}
    )
    try:
        view = CurrentVersions(reader)
        cols = view.columns(world["db"], "h")
        assert set(cols) == {"id", "v", "n"}
        got = view.positions_with_keys(
            world["db"], "h", cols, ["id"], ["int"], [("1",), ("100",), ("252",), ("255",), ("999",)]
        )
        assert sorted(got) == [(1, 200), (100, 100), (252, 201), (255, 300)]
    finally:
        reader.close()
