"""DDL that reaches one shard first (docs/sharding.md, section 5), end to end: two shards,
each with two physical tables routed into one logical table.

1. ingest and the merger up, the sinks equal to the shards;
2. ``ADD COLUMN note`` on shard1's tables only, writes using it there, writes without it
   on shard2: the sinks hold the union (shard2's rows with NULL in ``note``);
3. the same ALTER on shard2, more writes: equal again;
4. ``MODIFY note INT`` on shard1 only: the logical table pauses, `cdc status` names both
   shards.

The oracle is a plain SELECT of every physical table of both shards (``note`` read where
the table has it, else NULL), against each sink read by its own reader.

A TRUNCATE of one physical table of one shard, while the logical table is snapshotted and
written on both shards, empties that origin's rows only; a DROP of another one too, and the
table created again is an origin again, and a table renamed into the logical table brings
its rows under its new origin (``test_a_truncate_and_a_drop_of_one_shards_table``)."""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import pytest

from tests.changelog_reader import changelog_rows
from tests.cli_util import merger_status, wait_for
from tests.ingest_harness import IngestProcess
from tests.merger_harness import MergerProcess
from tests.shard_harness import (
    COLUMNS,
    TABLES,
    fill,
    running_shards,
    servers,
    sink_readers,
    sql,
    start_pipeline,
    write_configs,
    writer,
)
from tests.shard_harness import source_rows as plain_source_rows
from tests.shard_harness import wait_equal as wait_equal_rows

pytestmark = pytest.mark.integration

NOTE_COLUMNS = [*COLUMNS, "note"]


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 2)


def has_note(info, db: str, table: str) -> bool:
    return bool(
        sql(
            info,
            "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s' "
            "AND COLUMN_NAME = 'note'" % (db, table),
            fetch=True,
        )
    )


def source_rows(shards: dict, db: str) -> set[tuple]:
    out = set()
    for name, info in shards.items():
        for table in TABLES:
            note = "note" if has_note(info, db, table) else "NULL"
            for id_, v, n in sql(info, f"SELECT id, v, {note} FROM {db}.{table}", fetch=True):
                out.add((id_, v, f"{name}/{db}.{table}", None if n is None else str(n)))
    return out


def sink_rows(stack, work: Path, db: str) -> dict[str, set[tuple] | str]:
    out = {}
    for name, reader in sink_readers(stack, work).items():
        try:
            cols = reader.columns(db, "orders")
            if cols is None:
                out[name] = "no table"
            elif "note" not in cols:
                out[name] = {(*r, None) for r in reader.rows(db, "orders", COLUMNS, cols)}
            else:
                rows = reader.rows(db, "orders", NOTE_COLUMNS, cols)
                out[name] = {(i, v, o, None if n is None else str(n)) for i, v, o, n in rows}
        except Exception as exc:  # noqa: BLE001 - shown in the failure
            out[name] = f"{type(exc).__name__}: {exc}"
        finally:
            reader.close()
    return out


def wait_equal(stack, shards, work: Path, db: str, procs, timeout_s: float = 240) -> set[tuple]:
    """``shard_harness.wait_equal`` with the ``note`` column."""
    return wait_equal_rows(stack, shards, work, db, procs, timeout_s, source=source_rows, sinks=sink_rows)


def writes(info, db: str, rnd: random.Random, n: int, note: bool) -> None:
    """Inserts and updates on both physical tables, ``note`` set (a number, so that the
    conflict's MODIFY to INT keeps the values) only where asked."""
    for _ in range(n):
        table = rnd.choice(TABLES)
        if note:
            sql(info, f"INSERT INTO {db}.{table} (v, note) VALUES ('w{rnd.random():.5f}', '{rnd.randrange(1000)}')")
            sql(info, f"UPDATE {db}.{table} SET note = '{rnd.randrange(1000)}' ORDER BY RAND() LIMIT 1")
        else:
            sql(info, f"INSERT INTO {db}.{table} (v) VALUES ('w{rnd.random():.5f}')")
            sql(info, f"UPDATE {db}.{table} SET v = 'u{rnd.random():.5f}' ORDER BY RAND() LIMIT 1")
        if rnd.random() < 0.2:
            sql(info, f"DELETE FROM {db}.{table} ORDER BY RAND() LIMIT 1")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_column_added_on_one_shard_first_then_a_conflict(tmp_path, stack, two_shards, unique_name):
    db = f"shd_{unique_name}"
    prefix = f"shd{unique_name}"
    shards = servers(two_shards)
    assert sorted(shards) == ["shard1", "shard2"]
    for info in shards.values():
        fill(info, db, 60)
    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db)
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
    rnd = random.Random(7)
    try:
        wait_equal(stack, shards, tmp_path, db, [ingest, merger])

        # shard1 first: the sinks get the column at once, shard2's rows carry NULL in it
        for table in TABLES:
            sql(shards["shard1"], f"ALTER TABLE {db}.{table} ADD COLUMN note VARCHAR(20) NULL")
        writes(shards["shard1"], db, rnd, 20, note=True)
        writes(shards["shard2"], db, rnd, 20, note=False)
        rows = wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        assert any(o.startswith("shard1/") and n is not None for _, _, o, n in rows)
        assert all(n is None for _, _, o, n in rows if o.startswith("shard2/"))

        # shard2 catches up: nothing to change in the sinks, its notes arrive
        for table in TABLES:
            sql(shards["shard2"], f"ALTER TABLE {db}.{table} ADD COLUMN note VARCHAR(20) NULL")
        writes(shards["shard2"], db, rnd, 20, note=True)
        writes(shards["shard1"], db, rnd, 10, note=True)
        rows = wait_equal(stack, shards, tmp_path, db, [ingest, merger])
        assert any(o.startswith("shard2/") and n is not None for _, _, o, n in rows)
        assert merger_status(merger_cfg)["tables"][f"{db}.orders"]["phase"] == "streaming"

        # a change the shards disagree on: the logical table pauses, naming both shards
        sql(shards["shard1"], f"ALTER TABLE {db}.orders_0 MODIFY note INT")
        writes(shards["shard1"], db, rnd, 5, note=True)

        def paused():
            table = merger_status(merger_cfg)["tables"][f"{db}.orders"]
            return table if table["phase"] == "paused" else None

        table = wait_for(paused, "the logical table paused", 120, merger)
        error = table["error"]
        for word in ("shard1", "shard2", "note", f"{db}.orders", "cdc resume", "cdc snapshot"):
            assert word in error, error
        assert merger.alive() and ingest.alive()
    finally:
        ingest.stop()
        merger.stop()


def existing_rows(shards: dict, db: str) -> set[tuple]:
    """(id, v, origin) of every row of every physical table routed into ``<db>.orders``
    (``orders_<n>``) that exists now."""
    out = set()
    for name, info in shards.items():
        listed = sql(info, f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'", fetch=True)
        for (table,) in listed:
            if re.fullmatch(r"orders_\d+", table):
                rows = sql(info, f"SELECT id, v FROM {db}.{table}", fetch=True)
                out |= {(i, v, f"{name}/{db}.{table}") for i, v in rows}
    return out


def wait_changelog_equal(stack, shards: dict, topic: str, db: str, source, timeout_s: float = 60) -> None:
    """Until a plain consumer of the changelog topic holds what the shards hold."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = {(r["id"], r["v"], r["__cdc_origin"]) for r in changelog_rows(stack.kafka.bootstrap, topic).values()}
        expected = source(shards, db)
        if held == expected:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the changelog differs: extra {sorted(held - expected)[:5]}, missing {sorted(expected - held)[:5]}"
            )
        time.sleep(2)


ROWS_TRUNCATED = 1500  # per physical table: 60 chunks of 100 rows, the snapshot lasts a while


@pytest.mark.timeout(600)
def test_a_truncate_and_a_drop_of_one_shards_table(tmp_path, stack, two_shards, unique_name):
    """shard2 truncates its orders_1 in the middle of the logical table's snapshot, while
    both shards are written: every sink (the Kafka changelog too, read with a plain
    consumer) then holds what the four physical tables hold, shard2's orders_1 only what
    was written after its TRUNCATE. Then shard1 drops its orders_0: its rows go, the rest
    stay; created again, its rows come back under its origin. Last, shard1 renames its
    orders_1 to orders_7 (routed too): the rows are then under orders_7's origin only."""
    db = f"sht_{unique_name}"
    prefix = f"sht{unique_name}"
    shards = servers(two_shards)
    for info in shards.values():
        fill(info, db, ROWS_TRUNCATED)
    stop, errors = threading.Event(), []
    writers = [
        threading.Thread(target=writer, args=(info, db, stop, seed, errors), daemon=True)
        for seed, info in enumerate(shards.values())
    ]
    _, merger_cfg, ingest, merger = start_pipeline(tmp_path, stack, shards, prefix, db, changelog=f"{prefix}m")
    try:
        for t in writers:
            t.start()

        def snapshotting():
            try:
                table = merger_status(merger_cfg)["tables"].get(f"{db}.orders") or {}
            except AssertionError:  # no status written yet
                return False
            return table.get("chunks_done", 0) >= 2 or table.get("phase") == "streaming"

        wait_for(snapshotting, "the snapshot under way", 120, merger)
        sql(shards["shard2"], f"TRUNCATE TABLE {db}.orders_1")  # its AUTO_INCREMENT starts again at 1
        time.sleep(3)
        stop.set()
        for t in writers:
            t.join(30)
        assert not errors, errors
        sql(shards["shard2"], f"INSERT INTO {db}.orders_1 (v) VALUES ('after-truncate')")
        rows = wait_equal_rows(stack, shards, tmp_path, db, [ingest, merger])
        shard2_t1 = {r for r in rows if r[2] == f"shard2/{db}.orders_1"}
        assert ("after-truncate" in {v for _, v, _ in shard2_t1}) and len(shard2_t1) < ROWS_TRUNCATED, shard2_t1
        assert any(r[2] == f"shard1/{db}.orders_1" for r in rows)

        wait_changelog_equal(stack, shards, f"{prefix}m.{db}.orders", db, plain_source_rows)

        # shard1 drops its orders_0 (on_drop: truncate, the default): its rows go, the rest stay;
        # created again, the table is an origin again
        sql(shards["shard1"], f"DROP TABLE {db}.orders_0")
        rows = wait_equal_rows(stack, shards, tmp_path, db, [ingest, merger], source=existing_rows)
        assert not any(r[2] == f"shard1/{db}.orders_0" for r in rows) and len(rows) > ROWS_TRUNCATED
        sql(
            shards["shard1"],
            f"CREATE TABLE {db}.orders_0 (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))",
            f"INSERT INTO {db}.orders_0 (v) VALUES ('created again')",
        )
        rows = wait_equal_rows(stack, shards, tmp_path, db, [ingest, merger])
        assert (1, "created again", f"shard1/{db}.orders_0") in rows
        wait_changelog_equal(stack, shards, f"{prefix}m.{db}.orders", db, plain_source_rows)

        # shard1 renames its orders_1 to orders_7, routed too: the rows move to that origin
        before = {(i, v) for i, v, o in rows if o == f"shard1/{db}.orders_1"}
        sql(shards["shard1"], f"RENAME TABLE {db}.orders_1 TO {db}.orders_7")
        rows = wait_equal_rows(stack, shards, tmp_path, db, [ingest, merger], source=existing_rows)
        assert {(i, v) for i, v, o in rows if o == f"shard1/{db}.orders_7"} == before and before
        assert not any(o == f"shard1/{db}.orders_1" for _, _, o in rows)
        wait_changelog_equal(stack, shards, f"{prefix}m.{db}.orders", db, existing_rows)
        assert ingest.alive() and merger.alive()
    finally:
        stop.set()
        ingest.stop()
        merger.stop()
