"""History tables (issue 27) of a sharded source (issue 24) end to end: two shards, each
with the tables ``ta`` and ``tb`` (one logical table each, key mode origin: the sink key
is the source key plus ``__cdc_origin``, so the same ids on both shards are different
rows). ``ta`` is a change log in PostgreSQL and an SCD type 2 table in Delta, ``tb`` the
other way round. Rows on both shards before anything starts (the snapshot), then writes
on both shards (inserts, updates, deletes, key changes), a TRUNCATE of ``ta`` on shard1
only and of ``tb`` on shard2 only, more writes after them (keys the truncate removed
come back), and the merger killed (SIGKILL) right after a PostgreSQL write in the middle.

The oracle shares no code with the pipeline: each shard's binlog read by MariaDB's own
decoder (tests/binlog_history.py) gives that shard's model, and every sink table's rows
of origin ``shardN/<db>.<table>`` (read with psycopg and deltalake) must match shard N's
model exactly, change by change or version by version: a truncate on one shard logs and
closes that origin only. Then `cdc verify` finds the SCD type 2 tables of the sharded
source equal, and, after one origin's current version is changed behind the pipeline's
back in PostgreSQL, names that table and key as different."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pymysql
import pytest

from tests import binlog_history as bh
from tests.cli_util import run_cli, wait_for
from tests.ingest_harness import IngestProcess
from tests.integration.test_history_fuzz import (
    _binlog_files,
    delta_table,
    log_rows,
    pg_table,
    source_state,
    user_columns,
    version_rows,
)
from tests.merger_harness import CrashingMerger, pg_conn, write_merger_config
from tests.shard_harness import ingest_config, running_shards, servers, shard_list

pytestmark = pytest.mark.integration

ROWS = 30  # per table and shard, ids 1..ROWS on both shards
MODES = {"ta": {"postgres": "changelog", "delta": "scd2"}, "tb": {"postgres": "scd2", "delta": "changelog"}}
TRUNCATED = {"ta": "shard1", "tb": "shard2"}  # each table truncated on one shard only
CRASH_AT = "after_write:PostgresSink@3"
ROUNDS = 30  # of writes on each shard; the truncates after ROUNDS // 2
PACE_S = 0.25


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 2)


def _conn(info) -> pymysql.Connection:
    m = info.mariadb
    return pymysql.connect(
        ssl_disabled=True, host="127.0.0.1", port=m.port, user="root", password=m.root_password, autocommit=True
    )


def _write_round(cur, db: str, rnd: random.Random, n: int, shard: str) -> None:
    """One round of writes on one shard: each table gets an insert, an update, a
    multi-row update, a delete and, every few rounds, a key change."""
    for t in MODES:
        cur.execute(f"INSERT INTO {db}.{t} VALUES (%s, %s, %s)", (1000 + n, f"{shard}-new-{n}", n))
        cur.execute(f"UPDATE {db}.{t} SET v = %s WHERE id = %s", (f"{shard}-u{n}", rnd.randint(1, ROWS)))
        lo = rnd.randint(1, ROWS)
        cur.execute(f"UPDATE {db}.{t} SET n = n + 1 WHERE id BETWEEN %s AND %s", (lo, lo + 2))
        cur.execute(f"DELETE FROM {db}.{t} WHERE id = %s", (rnd.randint(1, ROWS + 40),))
        if n % 4 == 1:  # a key change: a delete of the old key and an insert of the new one
            cur.execute(f"UPDATE {db}.{t} SET id = id + 5000 WHERE id = %s", (rnd.randint(1, ROWS),))


class Model:
    """Each shard's binlog from where the test started, as that shard's model."""

    def __init__(self, shards: dict, db: str):
        self.shards, self.db = shards, db
        self.keys, self.initial, self.start = {}, {}, {}
        for name, info in shards.items():
            conn = _conn(info)
            try:
                for t in MODES:
                    self.keys[t], self.initial[name, t] = source_state(conn, db, t)
                with conn.cursor() as cur:
                    cur.execute("SHOW MASTER STATUS")
                    self.start[name] = cur.fetchone()[:2]
            finally:
                conn.close()

    def changes(self) -> dict:
        """(shard, table) -> the table's RowChanges in that shard's binlog order."""
        out = {}
        for name, info in self.shards.items():
            conn = _conn(info)
            try:
                first, pos = self.start[name]
                files = _binlog_files(conn, first)
            finally:
                conn.close()
            found = bh.read_binlog(Path(info.mariadb.datadir), files, pos, self.db)
            for t in MODES:
                out[name, t] = [c for c in found if c.table == t]
        return out

    def faults(self, stack, delta_root: Path) -> list[str]:
        """What any sink's rows of any origin have wrong against that origin's shard."""
        changes = self.changes()
        faults = []
        for t, modes in MODES.items():
            for sink, mode in modes.items():
                if sink == "postgres":
                    rows = pg_table(stack, self.db, t)
                else:
                    rows = delta_table(delta_root / self.db / t)
                origins = {r["__cdc_origin"] for r in rows}
                expected = {f"{name}/{self.db}.{t}" for name in self.shards}
                if origins - expected:
                    faults.append(f"{sink} {mode} {t}: rows of unknown origins {sorted(origins - expected)}")
                for name in self.shards:
                    mine = [r for r in rows if r["__cdc_origin"] == f"{name}/{self.db}.{t}"]
                    if not mine:
                        faults.append(f"{sink} {mode} {t} of {name}: no rows")
                        continue
                    columns = user_columns(mine)
                    keys, initial, ch = self.keys[t], self.initial[name, t], changes[name, t]
                    if mode == "changelog":
                        logged, _ = log_rows(mine, keys)  # image: after (no before columns)
                        found = bh.changelog_faults(ch, initial, logged, columns, keys)
                    else:
                        got, found = version_rows(mine, keys)
                        found += bh.versions_faults(ch, initial, got, columns)
                    faults += [f"{sink} {mode} {t} of {name}: {f}"[:1500] for f in found]
        return faults


def _wait_model(model: Model, stack, delta_root: Path, merger, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert merger.alive(), merger.log_text()[-4000:]
        faults = model.faults(stack, delta_root)
        if not faults:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(faults)} faults:\n" + "\n".join(faults[:20]))
        time.sleep(3)


def _verify(cfg: Path, *args: str) -> tuple[int, dict, str]:
    res = run_cli("verify", "-c", str(cfg), "--json", "--retries", "0", *args, timeout=300)
    return res.returncode, (json.loads(res.stdout) if res.stdout.strip() else {}), res.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_history_tables_of_a_sharded_source_follow_each_shards_binlog(tmp_path, stack, shard_state, unique_name):
    db = f"hs_{unique_name}"
    prefix = f"hs{unique_name}"
    shards = servers(shard_state)
    assert sorted(shards) == ["shard1", "shard2"]
    for name, info in shards.items():
        if not Path(info.mariadb.datadir or "/nonexistent").is_dir():
            pytest.skip("the binlog oracle reads the binlog files of local servers (the local stack's shards)")
        conn = _conn(info)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            for t in MODES:
                cur.execute(f"CREATE TABLE {db}.{t} (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
                values = ", ".join(f"({i}, '{name}-{t}-{i}', {i})" for i in range(1, ROWS + 1))
                cur.execute(f"INSERT INTO {db}.{t} VALUES {values}")  # the same ids on both shards
        conn.close()
    model = Model(shards, db)

    icfg = ingest_config(tmp_path / "ingest.yaml", stack, shards, prefix, db)
    per_sink = {sink: {f"{db}.{t}": {"mode": m[sink]} for t, m in MODES.items()} for sink in ("postgres", "delta")}
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        prefix,
        [db],
        tmp_path,
        shards=shard_list(shards),
        **{"sinks.postgres.tables": per_sink["postgres"], "sinks.delta.tables": per_sink["delta"]},
    )
    delta_root = tmp_path / "delta"
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = CrashingMerger(mcfg, tmp_path / "merger0.log", None).start()
    conns = {name: _conn(info) for name, info in shards.items()}
    try:
        # the snapshot of both origins of both tables, before any change
        _wait_model(model, stack, delta_root, merger, 240)
        merger.stop()

        # writes on both shards, the merger killed right after its 3rd PostgreSQL write
        merger = CrashingMerger(mcfg, tmp_path / "merger1.log", CRASH_AT).start()
        wait_for(lambda: "merger running" in merger.log_text(), "the merger's stream started", 180, merger)
        rnds = {name: random.Random(i) for i, name in enumerate(shards)}
        killed, killed_at = False, "after the writes"
        for n in range(ROUNDS):
            for name, conn in conns.items():
                with conn.cursor() as cur:
                    if n == ROUNDS // 2:
                        for t, shard in TRUNCATED.items():
                            if shard == name:  # unqualified, after USE: as the binlog model reads it
                                cur.execute(f"USE {db}")
                                cur.execute(f"TRUNCATE TABLE {t}")
                    _write_round(cur, db, rnds[name], n, name)
            time.sleep(PACE_S)
            if not killed and merger.proc.poll() is not None:
                assert merger.proc.returncode == -9, (merger.proc.returncode, merger.log_text()[-3000:])
                killed, killed_at = True, f"in round {n} of {ROUNDS}"
                merger = CrashingMerger(mcfg, tmp_path / "merger2.log", None).start()
        if not killed:  # the merger was slow to start: its 3rd write comes after the writes
            merger.wait_killed(180)
            merger = CrashingMerger(mcfg, tmp_path / "merger2.log", None).start()

        _wait_model(model, stack, delta_root, merger, 240)
        time.sleep(3)  # a few more batches: nothing may be written twice
        faults = model.faults(stack, delta_root)
        assert not faults, f"{len(faults)} faults:\n" + "\n".join(faults[:20])
        assert "Traceback" not in merger.log_text()
        counts = {f"{name}.{t}": len(c) for (name, t), c in model.changes().items()}
        print(f"HISTORY SHARDED: merger killed at {CRASH_AT} {killed_at}; binlog changes {counts}")
        # each truncate is in its own shard's model only, and logged for that origin only
        changes = model.changes()
        for t, shard in TRUNCATED.items():
            for name in shards:
                truncates = [c for c in changes[name, t] if c.op == bh.TRUNCATE]
                assert len(truncates) == (1 if name == shard else 0), (t, name, truncates)
            log_sink = next(s for s, m in MODES[t].items() if m == "changelog")
            rows = pg_table(stack, db, t) if log_sink == "postgres" else delta_table(delta_root / db / t)
            assert [r["__cdc_origin"] for r in rows if r["__op"] == "t"] == [f"{shard}/{db}.{t}"], (t, log_sink)
    finally:
        for conn in conns.values():
            conn.close()
        merger.stop()
        ingest.stop()

    # cdc verify of each SCD type 2 table of the sharded source (a change log has no latest
    # state to compare: verify would skip it and exit 3), origin by origin: equal
    scd2 = {t: next(s for s, m in modes.items() if m == "scd2") for t, modes in MODES.items()}
    for t, sink in scd2.items():
        code, data, err = _verify(mcfg, "--sink", sink, f"{db}.{t}")
        assert code == 0, (t, sink, code, data, err)
        (result,) = data["tables"]
        assert (result["table"], result["sink"], result["verdict"]) == (f"{db}.{t}", sink, "equal"), result
        assert result["source_rows"] == result["sink_rows"] > 0, result
        assert result["chunks"] == 2, result  # one per origin

    # one origin's current version changed in PostgreSQL: verify names that table and key
    assert scd2["tb"] == "postgres"
    origin = f"shard2/{db}.tb"
    with pg_conn(stack) as c:
        row = c.execute(
            f'SELECT id FROM "{db}"."tb" WHERE __cdc_origin = %s AND __end_seq IS NULL ORDER BY id LIMIT 1', (origin,)
        ).fetchone()
        assert row is not None
        damaged = row[0]
        done = c.execute(
            f'UPDATE "{db}"."tb" SET v = \'damaged\' WHERE id = %s AND __cdc_origin = %s AND __end_seq IS NULL',
            (damaged, origin),
        )
        assert done.rowcount == 1
    code, data, err = _verify(mcfg, "--sink", "postgres", f"{db}.tb")
    assert code == 1, (code, data, err)
    (bad,) = data["tables"]
    assert bad["verdict"] == "different", bad
    assert bad["different"] == [{"key": [damaged, origin], "columns": ["v"]}], bad
    assert bad["missing"] == [] and bad["extra"] == [], bad
