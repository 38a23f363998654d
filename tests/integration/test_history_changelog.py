"""PostgreSQL tables in modes ``changelog`` and ``scd2``, a Delta change log and a Delta SCD
type 2 table (issue 27),
end to end: ingest and the merger as processes on the real stack, the merger killed with
SIGKILL between two runs of a workload that both tables get, statement by statement.

The oracle shares no code with the sink: the test writes one row per autocommit
statement from one connection, so the binlog order is the order of its statements, and
it writes down, for each statement, the change the log must show (op, key, the row after
it). The log is read back with psycopg (the Delta one with deltalake) and ordered by ``__seq``; a snapshot's rows share
their window's sequence and are compared as a set. The SCD type 2 table's versions are
those the test derives from the same changes (every column tracked: a change of values
opens a version, a delete or truncate closes it), and they tile time. A table of the same
database in the default mode must still hold the source's rows."""

from __future__ import annotations

import json
import time

import psycopg
import pyarrow.compute as pc
import pymysql
import pytest
from deltalake import DeltaTable

from tests.cli_util import run_cli
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, write_merger_config

pytestmark = pytest.mark.integration

COLUMNS = ("v", "n", "w")


def _conn(stack, db):
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


class Workload:
    """Runs statements and writes down the change each one makes to the log."""

    def __init__(self, stack, db):
        self.conn = _conn(stack, db)
        self.expected: list[tuple] = []  # (op, id, v, n, w) in commit order
        self.befores: list[tuple | None] = []  # per expected change: the row before it (id, v, n, w), or None
        self.times: list[tuple[float, float]] = []  # per expected change: wall clock around its statement

    def _row(self, key):
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = DATABASE() "
                "AND table_name = 't' AND column_name = 'w'"
            )
            w = "w" if cur.fetchone()[0] else "NULL"
            cur.execute(f"SELECT id, v, n, {w} FROM t WHERE id = %s", (key,))
            return cur.fetchone()

    def run(self, sql, *args, changes):
        """``changes``: what the statement does, as (op, key) in order; values read back.
        The statement runs on ``h`` (the SCD type 2 table) and ``b`` (a change log with the
        before image) too, then on ``t``; the row before it is read from ``t`` first."""
        prior = {key: self._row(key) for op, key in changes if op in ("u", "d")}
        with self.conn.cursor() as cur:
            cur.execute(sql.format(t="h"), args)
            cur.execute(sql.format(t="b"), args)
        before = time.time()
        with self.conn.cursor() as cur:
            cur.execute(sql.format(t="t"), args)
        after = time.time()
        for op, key in changes:
            if op in ("c", "u"):
                self.expected.append((op, *self._row(key)))
            elif op == "d":
                self.expected.append(("d", key, None, None, None))
            else:  # truncate
                self.expected.append(("t", None, None, None, None))
            self.times.append((before, after))
            self.befores.append(tuple(prior[key]) if op in ("u", "d") else None)


def _log(stack, db) -> list[tuple] | None:
    with _pg(stack) as c:
        if c.execute("SELECT to_regclass(%s)", (f'"{db}"."t"',)).fetchone()[0] is None:
            return None
        has_w = c.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = 't' "
            "AND column_name = 'w'",
            (db,),
        ).fetchone()[0]
        w = "w" if has_w else "NULL::int"
        return c.execute(
            f'SELECT __op, id, v, n, {w}, __seq, extract(epoch from __at)::float8, __version FROM "{db}"."t" '
            "ORDER BY __seq, id"
        ).fetchall()


def _before_log(stack, work, db) -> tuple[list | None, list | None]:
    """The before_after logs of ``b`` (PostgreSQL, Delta): (op, id, v, n, w, before image
    or None) by ``__seq``; a snapshot's rows come first, in key order."""

    def rows(cols: dict) -> list:
        get = [cols.get(c) or [None] * len(cols["__op"]) for c in ("__op", "id", "v", "n", "w")]
        before = [cols.get(f"__before_{c}") or [None] * len(cols["__op"]) for c in ("id", "v", "n", "w")]
        out = []
        for i, seq in enumerate(cols["__seq"]):
            image = tuple(b[i] for b in before)
            out.append(
                (
                    seq,
                    -1 if get[1][i] is None else get[1][i],
                    (*(g[i] for g in get), None if image == (None,) * 4 else image),
                )
            )
        return [r[2] for r in sorted(out, key=lambda r: r[:2])]

    with _pg(stack) as c:
        if c.execute("SELECT to_regclass(%s)", (f'"{db}"."b"',)).fetchone()[0] is None:
            pg = None
        else:
            cur = c.execute(f'SELECT * FROM "{db}"."b"')
            names, got = [d.name for d in cur.description], cur.fetchall()
            pg = rows({n: [r[i] for r in got] for i, n in enumerate(names)})
    try:
        t = DeltaTable(str(work / "delta" / db / "b")).to_pyarrow_table()
        delta = rows({n: t[n].to_pylist() for n in t.column_names})
    except Exception:  # not created yet
        delta = None
    return pg, delta


def _delta_log(work, db) -> list[tuple] | None:
    """The Delta change log, as ``_log`` reads PostgreSQL's (``__at`` in seconds)."""
    try:
        t = DeltaTable(str(work / "delta" / db / "t")).to_pyarrow_table()
    except Exception:  # not created yet
        return None
    at = [None if us is None else us / 1_000_000 for us in pc.cast(t["__at"], "int64").to_pylist()]
    w = t["w"].to_pylist() if "w" in t.column_names else [None] * t.num_rows
    cols = [t[c].to_pylist() for c in ("__op", "id", "v", "n")] + [w, t["__seq"].to_pylist(), at]
    rows = list(zip(*cols, t["__version"].to_pylist()))
    return sorted(rows, key=lambda r: (r[5], -1 if r[1] is None else r[1]))


def _count(stack, db) -> int:
    return len(_log(stack, db) or [])


def _wait(what, check, merger, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if merger is not None and not merger.alive():
            raise AssertionError(f"merger exited:\n{merger.log_text()[-4000:]}")
        last = check()
        if last is None:
            return
        time.sleep(2)
    raise AssertionError(f"{what} within {timeout_s}s: {last}\n{merger.log_text()[-3000:] if merger else ''}")


@pytest.mark.timeout(900)
def test_history_tables_hold_every_change_once_in_order_across_a_kill9(stack, tmp_path, unique_name):
    db = f"cl_{unique_name}"
    setup = _conn(stack, None)
    with setup.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.execute(f"CREATE TABLE {db}.plain (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3), (4, NULL, 4)")
        cur.execute(f"CREATE TABLE {db}.h LIKE {db}.t")
        cur.execute(f"INSERT INTO {db}.h SELECT * FROM {db}.t")
        cur.execute(f"CREATE TABLE {db}.b LIKE {db}.t")
        cur.execute(f"INSERT INTO {db}.b SELECT * FROM {db}.t")
        cur.execute(f"INSERT INTO {db}.plain VALUES (1, 'a'), (2, 'b')")
    setup.close()
    snapshot = {("r", i, v, n, None) for i, v, n in ((1, "one", 1), (2, "two", 2), (3, "three", 3), (4, None, 4))}
    first_h = [(i, v, n, None, True) for i, v, n in ((1, "one", 1), (2, "two", 2), (3, "three", 3), (4, None, 4))]

    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    both = {"mode": "changelog", "image": "before_after"}
    tables = {f"{db}.t": {"mode": "changelog"}, f"{db}.h": {"mode": "scd2"}, f"{db}.b": both}
    extra = {"sinks.delta.tables": tables, "sinks.postgres.tables": tables}
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, **extra)
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    work = Workload(stack, db)
    try:
        snapped = time.time()
        _wait(
            "the snapshot rows did not reach the change log",
            lambda: None if _count(stack, db) == 4 else f"{_count(stack, db)} rows",
            merger,
        )
        # and the SCD type 2 table's (its own window: a key changed inside it would be left out)
        _wait("the snapshot did not reach the SCD type 2 table", lambda: _scd2_differs(stack, db, first_h), merger)
        work.run("INSERT INTO {t} VALUES (10, 'ten', 10)", changes=[("c", 10)])
        work.run("UPDATE {t} SET v = 'uno' WHERE id = 1", changes=[("u", 1)])
        work.run("UPDATE {t} SET n = n + 1 WHERE id = 10", changes=[("u", 10)])
        work.run("DELETE FROM {t} WHERE id = 2", changes=[("d", 2)])
        work.run("UPDATE {t} SET id = 20 WHERE id = 3", changes=[("d", 3), ("c", 20)])  # a key change
        _wait(
            "the first changes did not reach the log",
            lambda: None if _count(stack, db) >= 10 else _count(stack, db),
            merger,
        )
        merger.kill9()
        # while the merger is down: more changes, a TRUNCATE, a column added
        work.run("INSERT INTO {t} VALUES (11, 'eleven', 11)", changes=[("c", 11)])
        work.run("UPDATE {t} SET v = 'ONE' WHERE id = 1", changes=[("u", 1)])
        work.run("TRUNCATE TABLE {t}", changes=[("t", None)])
        work.run("INSERT INTO {t} VALUES (1, 'again', 100)", changes=[("c", 1)])
        work.run("ALTER TABLE {t} ADD COLUMN w INT", changes=[])
        work.run("INSERT INTO {t} VALUES (30, 'thirty', 30, 3)", changes=[("c", 30)])
        work.run("UPDATE {t} SET w = 7 WHERE id = 1", changes=[("u", 1)])
        work.run("DELETE FROM {t} WHERE id = 30", changes=[("d", 30)])
        with work.conn.cursor() as cur:
            cur.execute("INSERT INTO plain VALUES (3, 'c')")
            cur.execute("UPDATE plain SET v = 'B' WHERE id = 2")
        merger = MergerProcess(mcfg, tmp_path / "merger2.log").start()
        want = len(snapshot) + len(work.expected)
        _wait(
            f"the change log did not reach {want} rows",
            lambda: None if _count(stack, db) >= want else _count(stack, db),
            merger,
        )
        with work.conn.cursor() as cur:
            cur.execute("SELECT id, v FROM plain ORDER BY id")
            plain = cur.fetchall()

        def plain_equal():
            with _pg(stack) as c:
                got = c.execute(f'SELECT id, v FROM "{db}"."plain" ORDER BY id').fetchall()
            return None if [tuple(r) for r in got] == [tuple(r) for r in plain] else got

        _wait("the table in the default mode does not hold the source's rows", plain_equal, merger)
        want_h = _scd2_model(snapshot, work.expected)
        _wait("the SCD type 2 table does not hold the versions", lambda: _scd2_differs(stack, db, want_h), merger)
        _wait(
            f"the Delta change log did not reach {want} rows",
            lambda: None if len(_delta_log(tmp_path, db) or []) >= want else len(_delta_log(tmp_path, db) or []),
            merger,
        )

        def before_logs_full():
            got = _before_log(stack, tmp_path, db)
            return None if all(len(g or []) >= want for g in got) else [len(g or []) for g in got]

        _wait(f"the before_after change logs did not reach {want} rows", before_logs_full, merger)
        _wait(
            "the Delta SCD type 2 table does not hold the versions",
            lambda: None if [r[:5] for r in _delta_scd2(tmp_path, db)] == want_h else _delta_scd2(tmp_path, db),
            merger,
        )
        time.sleep(3)  # a few more batches: nothing may be appended twice
        before_logs = _before_log(stack, tmp_path, db)
        log = _log(stack, db)
        delta_log = _delta_log(tmp_path, db)
        history = _scd2(stack, db)
        delta_history = _delta_scd2(tmp_path, db)
        checked = run_cli("verify", "-c", str(mcfg), "--json", f"{db}.t", f"{db}.h", f"{db}.plain", timeout=300)
    finally:
        merger.stop()
        ingest.stop()
        work.conn.close()

    for sink_log in (log, delta_log):
        _check_log(sink_log, want, snapshot, work, snapped)
    # the before_after logs: the same changes, each with the row before it as the test read it
    for got in before_logs:
        assert len(got) == want, got
        assert {g for g in got[:4]} == {(*r, None) for r in snapshot}, got[:4]
        assert got[4:] == [(*e, b) for e, b in zip(work.expected, work.befores)]
    assert [r[:7] for r in delta_log] == [tuple(r[:7]) for r in log]  # the same changes, sequences and times
    # cdc verify: a change log has no latest state to compare, in either sink; the plain table and the
    # SCD type 2 tables are compared
    results = {(r["table"], r["sink"]): r for r in json.loads(checked.stdout)["tables"]}
    for sink in ("postgres", "delta"):
        assert results[(f"{db}.t", sink)]["verdict"] == "skipped", checked.stdout
        note = results[(f"{db}.t", sink)]["note"]
        assert note == f"a changelog table (sinks.{sink}.tables): no latest state to compare", note
        assert results[(f"{db}.plain", sink)]["verdict"] == "equal", checked.stdout
    for sink in ("postgres", "delta"):  # an SCD type 2 table: its current versions, and its shape
        h = results[(f"{db}.h", sink)]
        assert h["verdict"] == "equal" and h["history_faults"] == [], checked.stdout
    # the Delta SCD type 2 table holds the same versions as PostgreSQL's, at the same sequences and times
    assert delta_history == history
    # the SCD type 2 table, after the same batches: the versions the changes give
    assert [r[:5] for r in history] == want_h
    keys: dict = {}
    for row in history:
        keys.setdefault(row[0], []).append(row)
    for versions in keys.values():
        for a, b in zip(versions, versions[1:]):  # versions tile time: none overlaps the next
            assert a[6] is not None and a[6] <= b[5] and a[8] <= b[7], versions
        assert [v[4] for v in versions].count(True) <= 1
    # the snapshot opened keys 1 and 4 at its window's HIGH, before every streamed change
    assert keys[1][0][5] == keys[4][0][5] < keys[10][0][5]


def _check_log(log: list[tuple], want: int, snapshot: set, work: Workload, snapped: float) -> None:
    """A change log (op, id, v, n, w, __seq, __at in seconds, __version) holds the
    workload's changes once each, in order."""
    got = [tuple(r[:5]) for r in log]
    assert len(got) == want, f"{len(got)} rows, {want} changes:\n{got}"
    assert {g for g in got[:4]} == snapshot, got[:4]
    assert len({r[5] for r in log[:4]}) == 1  # one window: its HIGH's sequence
    assert got[4:] == work.expected
    seqs = [r[5] for r in log]
    assert seqs == sorted(seqs) and len(set(seqs[4:])) == len(seqs[4:])
    versions = [r[7] for r in log]
    assert versions == sorted(versions), "a later change appended by an earlier write"
    # times: the binlog's whole seconds of each statement; the snapshot's at its HIGH marker
    assert all(snapped - 2 <= r[6] <= time.time() for r in log[:4]), [r[6] for r in log[:4]]
    for row, (before, after) in zip(log[4:], work.times):
        assert int(before) - 1 <= row[6] <= after + 1, (row, before, after)


def _scd2(stack, db) -> list[tuple]:
    """(id, v, n, w, current, start_seq, end_seq, start_at, end_at) by key and start."""
    with _pg(stack) as c:
        if c.execute("SELECT to_regclass(%s)", (f'"{db}"."h"',)).fetchone()[0] is None:
            return []
        has_w = c.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = 'h' "
            "AND column_name = 'w'",
            (db,),
        ).fetchone()[0]
        w = "w" if has_w else "NULL::int"
        rows = c.execute(
            f"SELECT id, v, n, {w}, __current, __start_seq, __end_seq, extract(epoch from __start_at)::float8, "
            f'extract(epoch from __end_at)::float8 FROM "{db}"."h" ORDER BY id, __start_seq'
        ).fetchall()
    return [tuple(r) for r in rows]


def _delta_scd2(work, db) -> list[tuple]:
    """The Delta SCD type 2 table, as ``_scd2`` reads PostgreSQL's (times in seconds)."""
    try:
        t = DeltaTable(str(work / "delta" / db / "h")).to_pyarrow_table()
    except Exception:  # not created yet
        return []
    cols = [t[c].to_pylist() if c in t.column_names else [None] * t.num_rows for c in ("id", "v", "n", "w")]
    cols += [t[c].to_pylist() for c in ("__current", "__start_seq", "__end_seq")]
    for c in ("__start_at", "__end_at"):
        cols.append([None if us is None else us / 1_000_000 for us in pc.cast(t[c], "int64").to_pylist()])
    return sorted(zip(*cols), key=lambda r: (r[0], r[5]))


def _scd2_model(snapshot: set, expected: list[tuple]) -> list[tuple]:
    """(id, v, n, w, current) of each version, every column tracked: a change of values
    opens a version, a delete or truncate closes the current one."""
    versions: dict = {}
    for op, i, v, n, w in [*sorted(snapshot, key=lambda r: r[1]), *expected]:
        if op == "t":
            for vs in versions.values():
                vs[-1][4] = False
            continue
        vs = versions.setdefault(i, [])
        current = vs[-1] if vs and vs[-1][4] else None
        if op == "d":
            if current:
                current[4] = False
            continue
        if current is not None and current[1:4] == [v, n, w]:
            continue
        if current is not None:
            current[4] = False
        vs.append([i, v, n, w, True])
    return [tuple(x) for i in sorted(versions) for x in versions[i]]


def _scd2_differs(stack, db, want: list[tuple]):
    got = [r[:5] for r in _scd2(stack, db)]
    return None if got == want else got
