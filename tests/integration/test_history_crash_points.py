"""History tables (issue 27) under a random workload, with the merger killed (SIGKILL) at
each crash point (merger/crashpoints.py): mid-emission of the snapshot, after the
PostgreSQL or the Delta sink's write, before the batch's state is saved. At the end each
change log (PostgreSQL, Delta) holds every change once, in order, and each SCD type 2
table (PostgreSQL's of one table, Delta's of another) the versions they give.

The oracle is the source's binlog, read with `mariadb-binlog` (MariaDB's own decoder,
no code of ingest): from the position where the workload started, the row events of each
table in binlog order. The change log must hold, per key, exactly those changes (an update
of the key: a delete of the old key and an insert of the new one) after the key's snapshot
row; the SCD type 2 table, per key, the versions those changes open and close (every
column tracked), and they tile time."""

from __future__ import annotations

import random
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import IS_CI
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import CrashingMerger, pg_conn, root_conn, write_merger_config

pytestmark = pytest.mark.integration

ROWS = 3000
LOG, VERSIONS, DELTA_VERSIONS = "lg", "sc", "ds"  # ds: an SCD type 2 table in Delta (latest in PostgreSQL)


class Writer(threading.Thread):
    """Random single- and multi-row statements on both tables, one autocommit statement
    at a time; key changes move a row to a key no other statement uses."""

    def __init__(self, conn):
        super().__init__(daemon=True)
        self.conn = conn
        self.stop_event, self.error, self.rnd = threading.Event(), None, random.Random(11)
        self.moved = 0

    def run(self):
        r = self.rnd
        try:
            with self.conn.cursor() as cur:
                while not self.stop_event.is_set():
                    t = r.choice((LOG, VERSIONS, DELTA_VERSIONS))
                    k = r.randint(1, ROWS + 300)
                    op = r.random()
                    if op < 0.3:
                        cur.execute(f"INSERT INTO {t} VALUES (%s, %s, 'ins') ON DUPLICATE KEY UPDATE v = v + 1", (k, k))
                    elif op < 0.6:
                        cur.execute(f"UPDATE {t} SET v = v + 1, s = 'upd' WHERE id BETWEEN %s AND %s", (k, k + 3))
                    elif op < 0.7:
                        cur.execute(f"UPDATE {t} SET s = 'same' WHERE id = %s", (k,))  # once: then it changes nothing
                    elif op < 0.9:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
                    else:
                        self.moved += 1
                        cur.execute(f"UPDATE {t} SET id = %s WHERE id = %s", (1_000_000 + self.moved, k))
                    time.sleep(0.005)
        except Exception as exc:  # pragma: no cover - reported by the test
            self.error = exc


_VALUE = re.compile(r"^###   @(\d+)=(.*)$")


def _value(text: str):
    if text == "NULL":
        return None
    if text.startswith("'"):
        assert text.endswith("'") and "\\" not in text, text  # the workload writes plain ASCII
        return text[1:-1]
    return int(text)


def binlog_changes(stack, db: str, start: tuple[str, int]) -> dict[str, list[tuple]]:
    """Per table, its row changes from ``start`` on, in binlog order, as the change log
    writes them: (op, id, v, s); a delete keeps the key only, a key change is a delete and
    an insert."""
    # the files themselves: the stack's server calls itself 8.0.0-10.11..., which
    # mariadb-binlog's remote reading refuses
    with root_conn(stack) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        names = [r[0] for r in cur.fetchall()]
    datadir = Path(getattr(stack.mariadb, "datadir", "") or "/nonexistent")
    if not datadir.is_dir():
        pytest.skip("the binlog oracle reads the binlog files of a local server (the local stack)")
    files = [str(datadir / n) for n in names[names.index(start[0]) :]]
    out = subprocess.run(
        ["mariadb-binlog", "--base64-output=DECODE-ROWS", "--verbose", f"--start-position={start[1]}", *files],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    changes: dict[str, list[tuple]] = {LOG: [], VERSIONS: [], DELTA_VERSIONS: []}
    head = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]+)`\.`([^`]+)`$")
    kind = table = None
    images: list[list] = []

    def flush():
        if table is None or table not in changes:
            return
        rows = changes[table]
        if kind == "INSERT INTO":
            (after,) = images
            rows.append(("c", *after))
        elif kind == "DELETE FROM":
            (before,) = images
            rows.append(("d", before[0], None, None))
        else:
            before, after = images
            if before[0] == after[0]:
                rows.append(("u", *after))
            else:
                rows += [("d", before[0], None, None), ("c", *after)]

    for line in out.stdout.splitlines():
        h = head.match(line)
        if h:
            flush()
            kind, table, images = h.group(1), (h.group(3) if h.group(2) == db else None), []
            continue
        if line in ("### WHERE", "### SET"):
            images.append([])
            continue
        v = _VALUE.match(line)
        if v and kind is not None:
            images[-1].append(_value(v.group(2)))
            continue
        if not line.startswith("###") and kind is not None:
            flush()
            kind = table = None
    flush()
    return changes


def _rows(stack, db, table, columns):
    with pg_conn(stack) as c:
        if c.execute("SELECT to_regclass(%s)", (f'"{db}"."{table}"',)).fetchone()[0] is None:
            return []
        return [tuple(r) for r in c.execute(f'SELECT {columns} FROM "{db}"."{table}"').fetchall()]


def log_rows(stack, db):
    """(op, id, v, s, seq) of the PostgreSQL change log, in sequence order."""
    rows = _rows(stack, db, LOG, "__op, id, v, s, __seq")
    return sorted(rows, key=lambda r: (r[4], r[0] != "d"))


def delta_rows(path, columns) -> list[tuple]:
    """A Delta table's rows (``columns``), read with deltalake; none while it does not exist."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        t = DeltaTable(str(path)).to_pyarrow_table(columns=list(columns))
    except TableNotFoundError:
        return []
    return list(zip(*(t[c].to_pylist() for c in columns)))


def delta_log_rows(path):
    """(op, id, v, s, seq) of the Delta change log, in sequence order."""
    return sorted(delta_rows(path, ("__op", "id", "v", "s", "__seq")), key=lambda r: (r[4], r[0] != "d"))


def version_rows(stack, db):
    """(id, v, s, current, start_seq, end_seq) of the SCD type 2 table, by key and start."""
    rows = _rows(stack, db, VERSIONS, "id, v, s, __current, __start_seq, __end_seq")
    return sorted(rows, key=lambda r: (r[0], r[4]))


def delta_version_rows(path):
    """(id, v, s, current, start_seq, end_seq) of the Delta SCD type 2 table, by key and start."""
    rows = delta_rows(path, ("id", "v", "s", "__current", "__start_seq", "__end_seq"))
    return sorted(rows, key=lambda r: (r[0], r[4]))


def per_key(changes):
    out: dict = {}
    for op, i, v, s in changes:
        out.setdefault(i, []).append((op, v, s))
    return out


def versions_model(initial: dict, changes: list[tuple]) -> list[tuple]:
    """(id, v, s, current) of every version: the snapshot's, then each change of values
    opens a version, a delete closes the current one."""
    versions = {i: [[i, v, s, True]] for i, (v, s) in initial.items()}
    for op, i, v, s in changes:
        vs = versions.setdefault(i, [])
        current = vs[-1] if vs and vs[-1][3] else None
        if op == "d":
            if current is not None:
                current[3] = False
            continue
        if current is not None and current[1:3] == [v, s]:
            continue
        if current is not None:
            current[3] = False
        vs.append([i, v, s, True])
    return [tuple(x) for i in sorted(versions) for x in versions[i]]


def _wait(what, check, merger, timeout_s):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if merger is not None and not merger.alive():
            raise AssertionError(f"merger exited:\n{merger.log_text()[-4000:]}")
        last = check()
        if last is None:
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout_s}s: {str(last)[:2000]}\n{merger.log_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_history_tables_exact_after_kill9_at_each_crash_point(stack, unique_name, tmp_path):
    db = f"hc_{unique_name}"
    root = root_conn(stack)
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for t in (LOG, VERSIONS, DELTA_VERSIONS):
            cur.execute(f"CREATE TABLE {db}.{t} (id INT PRIMARY KEY, v BIGINT, s VARCHAR(20))")
            cur.execute(f"INSERT INTO {db}.{t} SELECT seq, seq, 'init' FROM mysql.seq_1_to_{ROWS}")
    initial = {i: (i, "init") for i in range(1, ROWS + 1)}
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    tables = {f"{db}.{LOG}": {"mode": "changelog"}, f"{db}.{VERSIONS}": {"mode": "scd2"}}
    delta_log = tmp_path / "delta" / db / LOG  # the Delta sink: a change log of lg, sc's latest state
    delta_versions = tmp_path / "delta" / db / DELTA_VERSIONS  # and ds's versions
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        **{
            "sinks.delta.tables": {f"{db}.{LOG}": {"mode": "changelog"}, f"{db}.{DELTA_VERSIONS}": {"mode": "scd2"}},
            "sinks.postgres.tables": tables,
            "snapshot.chunk_size": 1000,
            "snapshot.emit_rows_per_batch": 400,
        },
    )
    writer = Writer(root_conn(stack, db))
    merger = None
    try:
        wait_caught_up(stack, unique_name, proc=ingest)
        # the snapshot, killed while a window's rows are half emitted, then finished
        merger = CrashingMerger(mcfg, tmp_path / "merger-emission.log", "mid_emission@2").start()
        merger.wait_killed(300)
        merger = CrashingMerger(mcfg, tmp_path / "merger-snapshot.log", None).start()

        def snapshot_counts():
            got = (
                len(log_rows(stack, db)),
                len(version_rows(stack, db)),
                len(delta_log_rows(delta_log)),
                len(delta_version_rows(delta_versions)),
            )
            return None if got == (ROWS, ROWS, ROWS, ROWS) else got

        _wait("the snapshot did not reach the four tables", snapshot_counts, merger, 400)
        merger.kill9()
        with root.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        writer.start()
        points = ["after_write:PostgresSink@3", "after_write:DeltaSink@4", "before_state_save@3"]
        if not IS_CI:  # the same kinds of point again, later in a merger's life
            points += ["after_write:PostgresSink@8", "before_state_save@6"]
        for n, point in enumerate(points):
            merger = CrashingMerger(mcfg, tmp_path / f"merger{n}.log", point).start()
            merger.wait_killed(300)
        merger = CrashingMerger(mcfg, tmp_path / "merger-last.log", None).start()
        time.sleep(2)  # the writes go on while it starts
        writer.stop_event.set()
        writer.join(30)
        assert writer.error is None, writer.error
        changes = binlog_changes(stack, db, (file, pos))
        assert min(len(c) for c in changes.values()) > 300, {k: len(v) for k, v in changes.items()}
        want_log = ROWS + len(changes[LOG])

        def log_counts():
            got = (len(log_rows(stack, db)), len(delta_log_rows(delta_log)))
            return None if min(got) >= want_log else got

        _wait(f"the change logs did not reach {want_log} rows", log_counts, merger, 400)
        want_versions = versions_model(initial, changes[VERSIONS])
        _wait(
            "the SCD type 2 table does not hold the versions",
            lambda: None if [r[:4] for r in version_rows(stack, db)] == want_versions else "differs",
            merger,
            400,
        )
        want_delta_versions = versions_model(initial, changes[DELTA_VERSIONS])
        _wait(
            "the Delta SCD type 2 table does not hold the versions",
            lambda: None if [r[:4] for r in delta_version_rows(delta_versions)] == want_delta_versions else "differs",
            merger,
            400,
        )
        time.sleep(3)  # a few more batches: nothing may be appended twice
        log = log_rows(stack, db)
        delta_history = delta_version_rows(delta_versions)
        dlog = delta_log_rows(delta_log)
        history = version_rows(stack, db)
        with root.cursor() as cur:
            cur.execute(f"SELECT id, v, s FROM {db}.{VERSIONS} ORDER BY id")
            source_sc = [tuple(r) for r in cur.fetchall()]
        latest_sc = sorted(delta_rows(tmp_path / "delta" / db / VERSIONS, ("id", "v", "s")))
        assert merger.alive() and "Traceback" not in merger.log_text()
    finally:
        writer.stop_event.set()
        if merger is not None:
            merger.stop()
        ingest.stop()
        root.close()

    # each change log: the snapshot's row of each key, then exactly the binlog's changes
    want = per_key(changes[LOG])
    for sink, rows in (("postgres", log), ("delta", dlog)):
        assert len(rows) == want_log, (sink, len(rows), want_log)
        snapshot = [r for r in rows if r[0] == "r"]
        assert sorted(r[1:4] for r in snapshot) == [(i, v, s) for i, (v, s) in sorted(initial.items())], sink
        streamed = [r for r in rows if r[0] != "r"]
        assert min(r[4] for r in streamed) > max(r[4] for r in snapshot), sink
        got = per_key([r[:4] for r in streamed])
        assert got.keys() == want.keys(), sink
        wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        assert not wrong, (sink, list(wrong.items())[:5])
    assert [r[4] for r in log] == [r[4] for r in dlog]  # the same sequences in both sinks
    # the Delta sink keeps sc's latest state: the source's rows
    assert latest_sc == source_sc
    # each SCD type 2 table: the model's versions, tiling time, at most one current per key
    for rows, model in ((history, want_versions), (delta_history, want_delta_versions)):
        assert [r[:4] for r in rows] == model
        by_key: dict = {}
        for r in rows:
            by_key.setdefault(r[0], []).append(r)
        for vs in by_key.values():
            for a, b in zip(vs, vs[1:]):
                assert a[5] is not None and a[5] <= b[4], vs
            assert [v[3] for v in vs].count(True) <= 1, vs


def test_binlog_oracle_reads_a_key_change_as_delete_and_insert(stack, unique_name):
    """The oracle itself, on statements whose changes are known."""
    db = f"hb_{unique_name}"
    root = root_conn(stack)
    try:
        with root.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.{LOG} (id INT PRIMARY KEY, v BIGINT, s VARCHAR(20))")
            cur.execute("SHOW MASTER STATUS")
            start = cur.fetchone()[:2]
            cur.execute(f"INSERT INTO {db}.{LOG} VALUES (1, 1, 'a'), (2, NULL, 'b')")
            cur.execute(f"UPDATE {db}.{LOG} SET v = 5 WHERE id = 1")
            cur.execute(f"UPDATE {db}.{LOG} SET id = 3 WHERE id = 2")
            cur.execute(f"UPDATE {db}.{LOG} SET v = 5 WHERE id = 1")  # changes nothing: no row event
            cur.execute(f"DELETE FROM {db}.{LOG} WHERE id = 1")
        assert binlog_changes(stack, db, start)[LOG] == [
            ("c", 1, 1, "a"),
            ("c", 2, None, "b"),
            ("u", 1, 5, "a"),
            ("d", 2, None, None),
            ("c", 3, None, "b"),
            ("d", 1, None, None),
        ]
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        root.close()
