"""`cdc verify` of an SCD type 2 table in the Delta sink (issue 27, item 5) against the real
stack: a MariaDB source table, its history written by the real ``DeltaSink`` from the
source's own rows (a snapshot, then updates, deletes and keys inserted again, each change
applied to both: test_verify_scd2.py's ``History``), the command run as a subprocess.

The oracle is the damage the test does behind the sink's back with ``deltalake`` itself
(``DeltaTable.update`` / ``delete``, ``write_deltalake`` appending): each case changes the
result in one way the test writes down beforehand, the same cases as for PostgreSQL (a
current row's value, a current row gone, a stray current row, a closed version's value,
two open versions of a key, overlapping versions, a version that ends before it starts,
a torn boundary, a last change outside its version). The current rows are compared with
the source like a latest table; the history's values are not compared, its shape is.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pymysql
import pytest
from deltalake import DeltaTable, write_deltalake

from merger.history.modes import LATEST, SCD2Mode, TableModes
from merger.schema.canonical import arrow_schema
from merger.sinks.delta import DeltaSink
from merger.verify.current_versions import CurrentVersions, reader_for_mode
from merger.verify.sinks.delta import DeltaReader
from tests.integration.test_verify import root_catalog
from tests.integration.test_verify_scd2 import HOUR, ROWS, T0, History
from tests.merger_harness import write_merger_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _my(stack):
    m = stack.mariadb
    return pymysql.connect(
        ssl_disabled=True, host=m.host, port=m.port, user="root", password=m.root_password, autocommit=True
    )


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


class DeltaHistory(History):
    """The source table ``h`` and its SCD type 2 table in Delta, written change by change."""

    def __init__(self, stack, db: str, base: Path):
        self.stack, self.db = stack, db
        self.spec = root_catalog(stack).table_spec(db, "h")
        self.schema = arrow_schema(self.spec)
        self.sink = DeltaSink(str(base), modes=TableModes({f"{db}.h": SCD2Mode(), f"{db}.plain": LATEST}))
        self.sink.ensure_table((db, "h"), self.schema, ["id"])
        self.version = 0
        self.path = f"{base}/{db}/h"


@pytest.fixture
def world(stack, tmp_path):
    db = "s" + uuid.uuid4().hex[:8]
    conn = _my(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.h (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.executemany(f"INSERT INTO {db}.h VALUES (%s, %s, %s)", [(i, f"v{i}", i % 7) for i in range(1, ROWS + 1)])
    history = DeltaHistory(stack, db, tmp_path / "delta")
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
            "sinks.postgres": None,
            "snapshot.chunk_size": 100,
            "sinks.delta.tables": {f"{db}.h": {"mode": "scd2"}},
        },
    )
    yield {"db": db, "cfg": cfg, "history": history, "path": history.path, "base": tmp_path / "delta"}
    history.sink.close()


def _keys(items) -> set:
    return {tuple(k) for k in items}


def test_an_intact_history_is_equal_by_digests_and_by_rows(world):
    db = world["db"]
    for args in ((), ("--compare", "rows")):
        code, data, err = _verify(world["cfg"], f"{db}.h", *args)
        assert code == 0, (data, err)
        (h,) = data["tables"]
        current = ROWS - 10 + 2
        assert (h["sink"], h["verdict"], h["source_rows"], h["sink_rows"], h["history_faults"]) == (
            "delta",
            "equal",
            current,
            current,
            [],
        ), h
        assert h["chunks"] == 3 and h["mismatched_chunks"] == 0
        assert h["digest_chunks"] == (0 if args else 3), h


def _stray(path: str, **values) -> None:
    """Append one row to the Delta table (its other columns NULL)."""
    schema = pa.schema(DeltaTable(path).schema().to_arrow())
    row = {f.name: values.get(f.name) for f in schema}
    write_deltalake(path, pa.Table.from_pylist([row], schema=schema), mode="append")


def test_damage_is_named_exactly(world):
    db, path = world["db"], world["path"]
    t = DeltaTable(path)
    # a current row's value; a current row gone (its closed version stays: like a deleted key)
    t.update(predicate="id = 3 AND __end_seq IS NULL", updates={"v": "'damaged'"})
    t.delete("id = 4 AND __end_seq IS NULL")
    # a stray current row: a key the source does not hold
    at = dt.datetime.now(dt.timezone.utc)
    _stray(path, id=1000, v="stray", n=0, __start_at=at, __start_seq=500, __last_seq=500, __current=True)
    # a closed version's value: history is not compared with the source
    t.update(predicate="id = 5 AND __end_seq IS NOT NULL", updates={"v": "'rewritten'"})
    # two open versions of key 6
    t.update(
        predicate="id = 6 AND __end_seq IS NOT NULL",
        updates={"__end_seq": "CAST(NULL AS BIGINT)", "__end_at": "CAST(NULL AS TIMESTAMP)", "__current": "true"},
    )
    # key 7's first version ends after its second starts
    t.update(predicate="id = 7 AND __end_seq IS NOT NULL", updates={"__end_seq": "250"})
    # deleted key 252's version ends before it starts
    t.update(predicate="id = 252", updates={"__end_at": "__start_at - INTERVAL '1 day'"})
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
    db = world["db"]
    DeltaTable(world["path"]).update(predicate="__end_seq IS NOT NULL", updates={"v": "'rewritten'", "n": "-1"})
    for args in ((), ("--compare", "rows")):
        code, data, err = _verify(world["cfg"], f"{db}.h", *args)
        assert code == 0, (data, err)
        assert data["tables"][0]["verdict"] == "equal"


def test_torn_boundary_and_last_change_outside_its_version(world):
    db, t = world["db"], DeltaTable(world["path"])
    # key 8: its first version ends at its second's sequence but an hour earlier
    t.update(predicate="id = 8 AND __end_seq IS NOT NULL", updates={"__end_at": "__end_at - INTERVAL '1 hour'"})
    # key 9: its closed version's last change at its end; key 10's current one before its start
    t.update(predicate="id = 9 AND __end_seq IS NOT NULL", updates={"__last_seq": "__end_seq"})
    t.update(predicate="id = 10 AND __end_seq IS NULL", updates={"__last_seq": "__start_seq - 1"})
    code, data, err = _verify(world["cfg"], f"{db}.h")
    assert code == 1, (data, err)
    (h,) = data["tables"]
    assert (h["missing"], h["extra"], h["different"]) == ([], [], [])
    assert [(f["kind"], f["count"], f["examples"]) for f in h["history_faults"]] == [
        ("torn", 1, [[8]]),
        ("last_seq_outside", 2, [[9], [10]]),
    ]


class IntKey:
    """The canonical form of an integer key column: its decimal text (verify's rule)."""

    @staticmethod
    def sinks(values):
        return [None if v is None else str(v) for v in values]


def test_positions_and_origin_counts_are_of_the_versions(world):
    """A verify window's test reads the position of each key's last change: the open
    version's last change, or the end of a deleted key's version; the reader leaves the
    history's columns out and counts current versions only."""
    view = reader_for_mode(DeltaReader(str(world["base"])), "scd2")
    assert isinstance(view, CurrentVersions) and view.name == "delta"
    cols = view.columns(world["db"], "h")
    assert set(cols) == {"id", "v", "n"}
    got = view.positions_with_keys(
        world["db"], "h", cols, ["id"], ["int"], [("1",), ("100",), ("252",), ("255",), ("999",)], key_canons=[IntKey]
    )
    assert sorted(got) == [(1, 200), (100, 100), (252, 201), (255, 300)]
    counts = view.value_counts(world["db"], "h", "n")
    assert sum(counts.values()) == ROWS - 10 + 2  # the current versions only
    assert reader_for_mode(DeltaReader(str(world["base"])), "changelog") is None
