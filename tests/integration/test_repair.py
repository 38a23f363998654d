"""`cdc repair` and `cdc verify --repair` against the real pipeline (MariaDB, ingest, the
broker, the merger in Spark local mode, Delta and PostgreSQL) while a workload writes.

Each sink is damaged behind the merger's back (rows deleted, changed, added; a PostgreSQL
timestamp set to 'infinity', a value the source cannot hold; a Delta data file deleted
from storage), then repaired through the merger's key-list windows. Afterwards the
independent comparison (a plain SELECT of the source against each sink read in its own
types, ``tests.merger_harness.SinkChecker``) is equal, and the rows nobody damaged kept
their sequence (nothing else was rewritten).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import (
    MergerProcess,
    SinkChecker,
    Workload,
    pg_conn,
    root_conn,
    run_cdc,
    write_merger_config,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROWS = 6000
PAIRS = [(r, f"{'k' if j % 2 else 'K'}{j:03d}") for r in ("alpha", "Beta", "gamma", "Delta") for j in range(50)]


def item_change(rnd: random.Random) -> tuple[str, tuple]:
    """An insert, update or delete of an even ``items`` id up to ROWS*2, for the Workload: the
    odd ids are the damaged ones, so what verify finds is exactly the damage."""
    k = 2 * rnd.randint(1, ROWS)
    op = rnd.random()
    if op < 0.4:
        return "UPDATE items SET qty = qty + 1, name = CONCAT('w', %s) WHERE id = %s", (k, k)
    if op < 0.7:
        return (
            "INSERT INTO items (id, name, qty, updated) VALUES (%s, 'new', 1, NOW(6)) "
            "ON DUPLICATE KEY UPDATE qty = qty - 1",
            (k,),
        )
    return "DELETE FROM items WHERE id = %s", (k,)


def _pg_seqs(stack, db: str, ids: list[int]) -> dict:
    with pg_conn(stack) as c:
        rows = c.execute(f'SELECT id, _cdc_seq FROM "{db}"."items" WHERE id = ANY(%s)', (ids,)).fetchall()
    return dict(rows)


def _damage_postgres(stack, db: str, rnd: random.Random, present: list[int]) -> dict:
    picked = rnd.sample(present, 12)
    gone, changed, infinite = picked[:5], picked[5:10], picked[10:]
    with pg_conn(stack) as c:
        c.execute(f'DELETE FROM "{db}"."items" WHERE id = ANY(%s)', (gone,))
        c.execute(f'UPDATE "{db}"."items" SET name = \'damaged\' WHERE id = ANY(%s)', (changed,))
        c.execute(f'UPDATE "{db}"."items" SET updated = \'infinity\' WHERE id = ANY(%s)', (infinite,))
        for k in (-1, -2, -3):  # rows only the sink holds (the source never has negative ids)
            c.execute(
                f'INSERT INTO "{db}"."items" (id, name, qty, updated, _cdc_seq) VALUES (%s, %s, 0, now(), 1)',
                (k, "stray"),
            )
        c.execute(f'DELETE FROM "{db}"."pairs" WHERE region = %s AND code = %s', ("Beta", "k001"))
        c.execute(f"UPDATE \"{db}\".\"pairs\" SET v = -5 WHERE region = 'gamma' AND code = 'K010'")
        c.execute(f"INSERT INTO \"{db}\".\"pairs\" (region, code, v, _cdc_seq) VALUES ('beta', 'k001', 0, 1)")
    return {"gone": gone, "changed": changed, "infinite": infinite}


def _damage_delta(path: Path, rnd: random.Random, present: list[int]) -> dict:
    picked = rnd.sample(present, 10)
    gone, changed = picked[:5], picked[5:]
    for attempt in range(5):  # the merger commits too: a conflict is retried
        try:
            dt = DeltaTable(str(path))
            dt.delete(f"id IN ({', '.join(map(str, gone))})")
            dt = DeltaTable(str(path))
            dt.update(updates={"name": "'damaged'"}, predicate=f"id IN ({', '.join(map(str, changed))})")
            dt = DeltaTable(str(path))
            stray = dt.to_pyarrow_table(filters=[("id", "=", changed[0])]).slice(0, 1)
            stray = stray.set_column(
                stray.schema.get_field_index("id"), "id", pa_array([-7], stray.schema.field("id").type)
            )
            write_deltalake(str(path), stray, mode="append")
            break
        except CommitFailedError:
            if attempt == 4:
                raise
            time.sleep(0.5)
    return {"gone": gone, "changed": changed}


def pa_array(values, typ):
    import pyarrow as pa

    return pa.array(values, typ)


def _delete_a_delta_file(path: Path) -> int:
    """Deletes one data file of the table from storage while the log still names it: the
    rows it held. (The merger's MERGE rewrites files all the time: a file it removed from
    the log just before is no damage, so the file must still be named after its deletion.)"""
    import pyarrow.parquet as pq

    for _ in range(20):
        files = DeltaTable(str(path)).file_uris()
        biggest = max(files, key=lambda f: Path(f.removeprefix("file://")).stat().st_size)
        victim = Path(biggest.removeprefix("file://"))
        rows = pq.ParquetFile(victim).metadata.num_rows
        victim.unlink()
        if biggest in DeltaTable(str(path)).file_uris():
            return rows
        time.sleep(0.2)
    raise AssertionError("every data file deleted had just left the table's log")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_repair_mends_damage_in_both_sinks_while_writes_flow(stack, tmp_path, unique_name):
    db = f"rep_{unique_name}"
    conn = root_conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
        cur.execute(f"USE {db}")
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, updated DATETIME(6))")
        cur.execute(
            f"INSERT INTO items SELECT seq, CONCAT('item ', seq), seq % 17, "
            f"'2024-01-01' + INTERVAL seq MINUTE FROM seq_1_to_{ROWS}"
        )
        cur.execute(
            "CREATE TABLE pairs (region VARCHAR(20) NOT NULL, code VARCHAR(20) NOT NULL, v INT, "
            "PRIMARY KEY (region, code))"
        )
        cur.executemany("INSERT INTO pairs VALUES (%s, %s, %s)", [(r, c, i) for i, (r, c) in enumerate(PAIRS)])
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    mcfg = write_merger_config(
        stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, **{"snapshot.chunk_size": 2000}
    )
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    workload = Workload(stack, db, item_change, rate=150, seed=7)
    log = []
    started = time.monotonic()
    try:
        for table in ("items", "pairs"):
            checker.wait_equal(db, table, timeout_s=300, proc=merger)
        log.append(("sinks equal", time.monotonic() - started))
        workload.start()
        time.sleep(3)
        rnd = random.Random(11)
        odd = list(range(1, ROWS + 1, 2))  # the workload never writes them
        pg_damage = _damage_postgres(stack, db, rnd, odd)
        delta_damage = _damage_delta(tmp_path / "delta" / db / "items", rnd, odd)
        (tmp_path / "damage.json").write_text(json.dumps({"postgres": pg_damage, "delta": delta_damage}))
        damaged = set(sum(pg_damage.values(), []) + sum(delta_damage.values(), []))
        untouched = [k for k in odd if k not in damaged][::37]
        seqs_before = _pg_seqs(stack, db, untouched)

        res = run_cdc("verify", "-c", str(mcfg), "--json", f"{db}.items", f"{db}.pairs")
        (tmp_path / "verify_before.json").write_text(res.stdout + res.stderr)
        assert res.returncode == 1, res.stdout + res.stderr  # the damage is seen
        log.append(("verified", time.monotonic() - started))
        res = run_cdc("repair", "-c", str(mcfg), "--json", f"{db}.items", f"{db}.pairs", timeout=600)
        (tmp_path / "repair.json").write_text(res.stdout + res.stderr)
        assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: a row the workload changed meanwhile
        repairs = {r["table"]: r for r in json.loads(res.stdout)["repairs"]}
        log.append(("repaired", time.monotonic() - started))
        items, pairs = repairs[f"{db}.items"], repairs[f"{db}.pairs"]
        assert items["error"] is None and pairs["error"] is None, repairs
        # what verify found, per sink, is exactly the damage; the merger re-read the rows
        # the source holds and deleted the 4 strays
        assert items["by_sink"] == {
            "postgres": {"inserted": 5, "updated": 7, "deleted": 3},
            "delta": {"inserted": 5, "updated": 5, "deleted": 1},
        }, items
        assert items["rows_deleted"] == 4 and items["rows_read"] >= 5 + 7, items
        assert pairs["by_sink"]["postgres"] == {"inserted": 1, "updated": 1, "deleted": 1}, pairs
        assert pairs["rows_deleted"] == 1 and pairs["rows_read"] == 2, pairs
        # nothing else was rewritten: the odd rows nobody damaged kept their sequence
        after = _pg_seqs(stack, db, untouched)
        assert after == seqs_before, "repair rewrote rows it had no reason to"

        # a data file of the Delta table deleted from storage: the merger pauses the table
        # when a write meets it; `cdc repair` removes it from the log and reads its rows again
        lost = _delete_a_delta_file(tmp_path / "delta" / db / "items")
        res = run_cdc("repair", "-c", str(mcfg), "--json", f"{db}.items", timeout=600)
        (tmp_path / "repair_file.json").write_text(res.stdout + res.stderr)
        assert res.returncode in (0, 1), res.stdout + res.stderr
        (items,) = json.loads(res.stdout)["repairs"]
        log.append(("lost file repaired", time.monotonic() - started))
        assert items["error"] is None and items["delta_files_forgotten"] == 1, items
        assert items["by_sink"]["delta"]["inserted"] >= lost // 2, (lost, items)  # the workload rewrites some

        # --where: every row either side holds in a key range, whatever verify says; the
        # condition runs on the source and on each sink (here the same SQL in all three)
        with pg_conn(stack) as c:
            c.execute(f'UPDATE "{db}"."items" SET qty = -1 WHERE id BETWEEN 101 AND 121')
            c.execute(f'INSERT INTO "{db}"."items" (id, name, qty, updated, _cdc_seq) VALUES (-20, \'x\', 0, now(), 1)')
        res = run_cdc(
            "repair", "-c", str(mcfg), "--json", f"{db}.items", "--where", "id BETWEEN -30 AND 121", timeout=600
        )
        (tmp_path / "repair_where.json").write_text(res.stdout + res.stderr)
        assert res.returncode in (0, 1), res.stdout + res.stderr
        (items,) = json.loads(res.stdout)["repairs"]
        log.append(("--where repaired", time.monotonic() - started))
        assert items["error"] is None and items["rows_deleted"] >= 1 and items["keys"] >= 22, items
        assert items["by_sink"]["postgres"]["rows"] >= 22, items

        workload.stop()
        for table in ("items", "pairs"):
            checker.wait_equal(db, table, timeout_s=240, proc=merger)
        log.append(("done", time.monotonic() - started))
        assert merger.alive() and "Traceback" not in merger.log_text()
    finally:
        workload.stop_event.set()
        merger.stop()
        ingest.stop()
        checker.close()
        conn.close()
        print(f"timings: {[(what, round(t, 1)) for what, t in log]}")
