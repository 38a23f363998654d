"""History tables (issue 27) under the fuzzer's workload (tests/fuzz_sql.py), with the
merger killed (SIGKILL) again and again at its crash points while the workload runs: both
modes on both sinks (PostgreSQL keeps change logs of two tables and SCD type 2 histories
of the other two; Delta the other way round), compared with an independent model of each
table's history built from the source's binlog order (tests/binlog_history.py: MariaDB's
own decoder, no code of ingest or the merger).

The workload is the fuzzer's default one: multi-row and multi-table statements,
transactions with savepoints and rollbacks, key changes (also to a collation-equal key),
collation-equal keys, unicode and control characters, DECIMAL and DATETIME extremes,
ADD / DROP / MODIFY COLUMN, indexes, TRUNCATE. It starts while the merger snapshots the
tables; each DDL waits until every snapshot has finished (a snapshot behind a schema change
is a known open limit of the latest-state sinks too: test_fuzz.py's PIPELINE_SYNC).

Bounded for CI; ``CDC_HISTORY_FUZZ_SEED`` and ``CDC_HISTORY_FUZZ_STATEMENTS`` run others."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests import binlog_history as bh
from tests.fuzz_run import SeedRun
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import CrashingMerger, pg_conn, root_conn, write_merger_config

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("CDC_HISTORY_FUZZ_SEED", "5"))
STATEMENTS = int(os.environ.get("CDC_HISTORY_FUZZ_STATEMENTS", "300"))
PACE_S = 0.12
# the merger is killed at these, in turn, while the workload runs
CRASH_POINTS = [
    "mid_emission@2",
    "after_write:PostgresSink@4",
    "after_write:DeltaSink@5",
    "before_state_save@4",
    "after_write:PostgresSink@9",
    "after_write:DeltaSink@9",
    "before_state_save@8",
]
# per table, what each sink keeps: both modes in both sinks, both images of change logs
LOG, LOG_BEFORE, SCD2 = {"mode": "changelog"}, {"mode": "changelog", "image": "before_after"}, {"mode": "scd2"}
MODES = {
    "t_int": {"postgres": LOG, "delta": SCD2},
    "t_str": {"postgres": LOG_BEFORE, "delta": SCD2},
    "t_ubig": {"postgres": SCD2, "delta": LOG},
    "t_comp": {"postgres": SCD2, "delta": LOG_BEFORE},
}
BEFORE = "__before_"
CDC_COLUMNS = ("__", "_cdc")


# ----------------------------------------------------------------------------- the source


def source_state(conn, db: str, table: str) -> tuple[list[str], dict]:
    """The table's key columns and rows (key -> values), canonical, by a plain SELECT."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
            "AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
            (db, table),
        )
        keys = [r[0] for r in cur.fetchall()]
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        names = [d[0] for d in cur.description]
        rows = {}
        for r in cur.fetchall():
            values = {n: bh.canon(v) for n, v in zip(names, r)}
            rows[tuple(values[k] for k in keys)] = values
    return keys, rows


# ----------------------------------------------------------------------------- the sinks, each in its own types


def pg_table(stack, db: str, table: str) -> list[dict]:
    with pg_conn(stack) as c:
        if c.execute("SELECT to_regclass(%s)", (f'"{db}"."{table}"',)).fetchone()[0] is None:
            return []
        cur = c.execute(f'SELECT * FROM "{db}"."{table}"')
        names = [d.name for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


def delta_table(path: Path) -> list[dict]:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    except TableNotFoundError:
        return []


def user_columns(rows: list[dict]) -> list[str]:
    return [c for c in (rows[0] if rows else {}) if not c.startswith(CDC_COLUMNS)]


def log_rows(rows: list[dict], keys: list[str]) -> tuple[list[tuple[str, tuple, dict]], list[dict]]:
    """A change log's rows, (op, key, values) canonical, in sequence order (a key change's
    delete and insert share their sequence: the delete first), and each row's before image
    (``__before_<column>``; all None in a log of after images)."""
    columns = user_columns(rows)
    ordered = sorted(rows, key=lambda r: (r["__seq"], r["__op"] != "d"))
    out, befores = [], []
    for r in ordered:
        values = {c: bh.canon(r[c]) for c in columns}
        out.append((r["__op"], tuple(values[k] for k in keys), values))
        befores.append({c: bh.canon(r.get(BEFORE + c)) for c in columns})
    return out, befores


def version_rows(rows: list[dict], keys: list[str]) -> tuple[dict, list[str]]:
    """An SCD type 2 table's versions per key, (values, current) by start, and what breaks
    the tiling (overlaps, an open version that is not the last, several current)."""
    columns = user_columns(rows)
    by_key: dict[tuple, list[dict]] = {}
    for r in rows:
        by_key.setdefault(tuple(bh.canon(r[k]) for k in keys), []).append(r)
    versions, faults = {}, []
    for key, vs in by_key.items():
        vs.sort(key=lambda r: r["__start_seq"])
        for a, b in zip(vs, vs[1:]):
            if a["__end_seq"] is None or a["__end_seq"] > b["__start_seq"]:
                faults.append(f"key {key}: version from {a['__start_seq']} overlaps the next from {b['__start_seq']}")
        for v in vs:
            if v["__current"] != (v["__end_seq"] is None):
                faults.append(
                    f"key {key}: version from {v['__start_seq']}: current={v['__current']}, end {v['__end_seq']}"
                )
        versions[key] = [({c: bh.canon(v[c]) for c in columns}, bool(v["__current"])) for v in vs]
    return versions, faults


class Sinks:
    """Reads each table's history from the sink that keeps it in a given mode."""

    def __init__(self, stack, db: str, delta_root: Path):
        self.stack, self.db, self.delta_root = stack, db, delta_root

    def rows(self, table: str, sink: str) -> list[dict]:
        if sink == "postgres":
            return pg_table(self.stack, self.db, table)
        return delta_table(self.delta_root / self.db / table)

    def faults(self, table: str, keys: list[str], initial: dict, changes: list, captured: list) -> list[str]:
        faults = []
        for sink, mode in MODES[table].items():
            rows = self.rows(table, sink)
            if not rows:
                faults.append(f"{sink} {table}: no rows")
                continue
            columns = user_columns(rows)
            if mode["mode"] == "changelog":
                got, befores = log_rows(rows, keys)
                with_before = mode.get("image") == "before_after"
                if with_before and not all(BEFORE + c in rows[0] for c in columns):
                    faults.append(f"{sink} {table}: no {BEFORE}<column> for each column: {list(rows[0])}")
                befores = befores if with_before else None
                found = bh.changelog_faults(changes, initial, got, columns, keys, captured, befores)
            else:
                got, found = version_rows(rows, keys)
                found += bh.versions_faults(changes, initial, got, columns, captured)
            faults += [f"{sink} {mode['mode']} {table}: {f}"[:1500] for f in found]
        return faults


# ----------------------------------------------------------------------------- the test


def _statuses(state: Path) -> dict:
    try:
        return json.loads((state / "status.json").read_text()).get("tables") or {}
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_history_tables_follow_the_binlog_under_the_fuzzers_workload_with_kill9s(stack, unique_name, tmp_path):
    if not Path(stack.mariadb.datadir or "/nonexistent").is_dir():
        pytest.skip("the binlog oracle reads the binlog files of a local server (the local stack)")
    db = f"hf_{unique_name}"
    run = SeedRun(stack, db, SEED, STATEMENTS, None)
    run.create()
    root = root_conn(stack)
    tables = [t.name for t in run.workload.tables]
    assert sorted(tables) == sorted(MODES)
    initial = {}
    key_columns = {}
    for t in tables:
        key_columns[t], initial[t] = source_state(root, db, t)
    with root.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start_file, start_pos = cur.fetchone()[:2]
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=3)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    per_sink = {sink: {f"{db}.{t}": modes[sink] for t, modes in MODES.items()} for sink in ("postgres", "delta")}
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        **{
            "sinks.postgres.tables": per_sink["postgres"],
            "sinks.delta.tables": per_sink["delta"],
            "snapshot.chunk_size": 100,
            "snapshot.emit_rows_per_batch": 60,
        },
    )
    state = tmp_path / "state"
    errors: list[str] = []

    def before_ddl(sql: str) -> None:
        deadline = time.monotonic() + 600
        while True:
            st = _statuses(state)
            mine = {t: st.get(f"{db}.{t}") or {} for t in tables}
            bad = {t: s.get("error") for t, s in mine.items() if s.get("error")}
            if bad:
                raise AssertionError(f"tables stopped: {bad}")
            if all(s.get("snapshot") == "finished" for s in mine.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the snapshots did not finish before {sql!r}: {mine}")
            time.sleep(0.5)

    captured: dict[str, list] = {t: [] for t in tables}  # the source's state after each DDL

    def after_ddl(sql: str) -> None:
        names = sql.split("`")
        table = names[3] if sql.upper().startswith("CREATE INDEX") else names[1]
        captured[table].append(source_state(root, db, table)[1])

    def workload():
        try:
            run.run(PACE_S, before_ddl=before_ddl, after_ddl=after_ddl)
        except BaseException as exc:  # reported by the test
            errors.append(f"{type(exc).__name__}: {exc}")

    writer = threading.Thread(target=workload, daemon=True)
    merger = None
    kills = 0
    try:
        wait_caught_up(stack, unique_name, proc=ingest)
        writer.start()
        for n, point in enumerate(CRASH_POINTS):
            merger = CrashingMerger(mcfg, tmp_path / f"merger{n}.log", point).start()
            deadline = time.monotonic() + 300
            while merger.proc.poll() is None and time.monotonic() < deadline and (writer.is_alive() or n == 0):
                time.sleep(0.5)
            if merger.proc.poll() is None:  # the workload ended before this point was reached
                merger.kill9()  # one more kill (a graceful stop took seconds)
                break
            assert merger.proc.returncode == -9, (point, merger.proc.returncode, merger.log_text()[-3000:])
            kills += 1
        merger = CrashingMerger(mcfg, tmp_path / "merger-last.log", None).start()
        writer.join(STATEMENTS * PACE_S + 900)
        assert not writer.is_alive(), "the workload did not end"
        assert not errors, errors
        assert kills >= 4, f"only {kills} kills happened while the workload ran"
        changes_all = bh.read_binlog(Path(stack.mariadb.datadir), _binlog_files(root, start_file), start_pos, db)
        changes = {t: [c for c in changes_all if c.table == t] for t in tables}
        places = {t: sum(bh.is_place(c) for c in changes[t]) for t in tables}
        assert places == {t: len(captured[t]) for t in tables}, (places, {t: len(c) for t, c in captured.items()})
        sinks = Sinks(stack, db, tmp_path / "delta")
        deadline = time.monotonic() + 400
        while True:
            assert merger.alive(), merger.log_text()[-4000:]
            faults = [f for t in tables for f in sinks.faults(t, key_columns[t], initial[t], changes[t], captured[t])]
            if not faults or time.monotonic() > deadline:
                break
            time.sleep(1)
        time.sleep(3)  # a few more batches: nothing may be written twice
        faults = [f for t in tables for f in sinks.faults(t, key_columns[t], initial[t], changes[t], captured[t])]
        statuses = {t: (_statuses(state).get(f"{db}.{t}") or {}).get("error") for t in tables}
        log = merger.log_text()
    finally:
        if merger is not None:
            merger.stop()
        ingest.stop()
        root.close()
    assert not any(statuses.values()), statuses
    assert "Traceback" not in log
    counts = {t: len(c) for t, c in changes.items()}
    print(f"HISTORY FUZZ seed {SEED}: {run.stats.executed} statements, {kills} kills, changes {counts}, DDL {places}")
    assert min(counts.values()) > 50, counts  # the workload changed every table
    assert not faults, f"{len(faults)} faults (seed {SEED}, {kills} kills, changes {counts}):\n" + "\n".join(
        faults[:20]
    )
    run.drop()


def _binlog_files(conn, first: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        names = [r[0] for r in cur.fetchall()]
    return names[names.index(first) :]
