"""Key mode unique (issue 24): a keyspace of three shards whose keys are unique across
them, a key range moved from one shard to another under writes with `cdc shard move`
(begin, the copy, the target following the source's writes, the switch, the cleanup), with
kill -9 of ingest and of the merger at the switch; then the shard that took the range
fails over to its GTID replica under writes, and half of the range moves on to a third
shard while the merger snapshots the table.

The oracle shares no code with the pipeline: a plain SELECT of every shard's table (after
the cleanup each key is on one shard), against each sink read by its own reader
(psycopg, deltalake), by the source key. A key written on two shards with no move pauses
the table with an error naming both."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from pathlib import Path

import pymysql
import pytest

from cdc import stack as local_stack
from cdc import stack_shards
from tests.cli_util import merger_status, run_cli, wait_for
from tests.failover_harness import TcpProxy, caught_up, promote
from tests.ingest_harness import IngestProcess
from tests.merger_harness import MergerProcess
from tests.shard_harness import offsets_record, running_shards, servers, sink_readers, sql, wait_equal, write_configs

pytestmark = pytest.mark.integration

FIRST = {"shard1": 0, "shard2": 1000, "shard3": 2000}  # each shard's keys at the start
KEYS_PER_SHARD = 200


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 3, replicas=True)


class KeyspaceWriter:
    """Writes random keys on their owner shard until stopped; a range being moved is also
    written on its target (the copy follows the source until the switch). ``pause()`` holds
    every write (the switch is made with the writes stopped)."""

    def __init__(self, shards: dict, db: str, seed: int = 7):
        self.shards, self.db = shards, db
        self.rnd = random.Random(seed)
        self.owner = {k: name for name, first in FIRST.items() for k in range(first, first + KEYS_PER_SHARD)}
        self.mirror: tuple[range, str] | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list = []
        self.writes = 0
        self.conns = {name: self.connect(name) for name in shards}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def connect(self, name: str):
        info = self.shards[name]
        return pymysql.connect(
            ssl_disabled=True,
            host="127.0.0.1",
            port=info.mariadb.port,
            user="root",
            password=info.mariadb.root_password,
            autocommit=True,
        )

    def write(self, shard: str, key: int, value: str | None) -> None:
        with self.conns[shard].cursor() as cur:
            if value is None:
                cur.execute(f"DELETE FROM {self.db}.orders_0 WHERE id = %s", (key,))
            else:
                cur.execute(
                    f"INSERT INTO {self.db}.orders_0 (id, v) VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)",
                    (key, value),
                )

    def _run(self) -> None:
        keys = sorted(self.owner)
        try:
            while not self.stop.is_set():
                with self.lock:
                    key = self.rnd.choice(keys)
                    value = None if self.rnd.random() < 0.15 else f"w{self.writes}"
                    self.write(self.owner[key], key, value)
                    if self.mirror and key in self.mirror[0]:
                        self.write(self.mirror[1], key, value)
                    self.writes += 1
                time.sleep(0.004)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def start(self) -> "KeyspaceWriter":
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        for conn in self.conns.values():
            conn.close()

    def copy(self, keys: range, source: str, target: str) -> None:
        """The copy of a range to its target; from now on the target follows the source."""
        with self.lock:
            rows = sql(
                self.shards[source],
                f"SELECT id, v FROM {self.db}.orders_0 WHERE id >= {keys.start} AND id < {keys.stop}",
                fetch=True,
            )
            for key, value in rows:
                self.write(target, key, value)
            self.mirror = (keys, target)

    def switched(self, keys: range, target: str) -> None:
        for key in keys:
            self.owner[key] = target
        self.mirror = None


def source_rows(shards: dict, db: str) -> set[tuple]:
    """(id, v) of every shard's table; a key on two shards is a failure of the scenario."""
    out: dict = {}
    for name, info in shards.items():
        for key, value in sql(info, f"SELECT id, v FROM {db}.orders_0", fetch=True):
            assert key not in out, f"key {key} on two shards: {out[key]} and {name}"
            out[key] = (value, name)
    return {(k, v) for k, (v, _) in out.items()}


def sink_rows(stack, work, db: str) -> dict:
    out = {}
    for name, reader in sink_readers(stack, work).items():
        try:
            cols = reader.columns(db, "orders")
            out[name] = "no table" if cols is None else set(reader.rows(db, "orders", ["id", "v"], cols))
        except Exception as exc:  # noqa: BLE001 - shown in the failure
            out[name] = f"{type(exc).__name__}: {exc}"
        finally:
            reader.close()
    return out


def move(merger_cfg, *args: str) -> str:
    res = run_cli("shard", "move", *args, "-c", str(merger_cfg), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_range_moved_between_shards_under_writes_and_kill9_ends_exactly_once(
    tmp_path, stack, shard_state, unique_name
):
    db = f"shu_{unique_name}"
    prefix = f"shu{unique_name}"
    primaries = servers(shard_state)
    replica2 = local_stack.StackInfo.load(
        Path(next(s.replica for s in stack_shards.load(shard_state) if s.name == "shard2"))
    )
    # shard2 is reached through a proxy (its address moves at the failover), as every client of it
    proxy = TcpProxy(primaries["shard2"].mariadb.port)
    p2 = primaries["shard2"]
    shards = {**primaries, "shard2": dataclasses.replace(p2, mariadb=dataclasses.replace(p2.mariadb, port=proxy.port))}
    for name, info in shards.items():
        first = FIRST[name]
        rows = ", ".join(f"({k}, 'first-{k}')" for k in range(first, first + KEYS_PER_SHARD // 2))
        sql(
            info,
            f"CREATE DATABASE {db}",
            f"CREATE TABLE {db}.orders_0 (id INT PRIMARY KEY, v VARCHAR(40))",
            f"INSERT INTO {db}.orders_0 VALUES {rows}",
        )
    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db, key_mode="unique")
    merger_cfg.write_text(merger_cfg.read_text() + "key_mode: unique\n")
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
    writer = KeyspaceWriter(shards, db).start()
    moved = range(0, 100)
    try:
        time.sleep(5)
        out = move(
            merger_cfg,
            "begin",
            "--table",
            f"{db}.orders",
            "--from",
            "shard1",
            "--to",
            "shard2",
            "--low",
            "0",
            "--high",
            "100",
        )
        assert "move 1 begun" in out, out
        writer.copy(moved, "shard1", "shard2")
        time.sleep(3)  # the target follows the source's writes of the range
        with writer.lock:  # the writes stopped: the switch, and kill -9 of both at it
            wrong = run_cli("shard", "move", "switch", "2", "-c", str(merger_cfg), timeout=60)
            assert wrong.returncode != 0 and "no move 2" in wrong.stdout + wrong.stderr
            assert "Traceback" not in wrong.stderr
            out = move(merger_cfg, "switch", "1")
            assert "move 1 switched" in out, out
            ingest.kill9()
            merger.kill9()
            writer.switched(moved, "shard2")
        ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
        sql(shards["shard1"], f"DELETE FROM {db}.orders_0 WHERE id >= 0 AND id < 100")  # the cleanup
        time.sleep(2)
        merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
        time.sleep(4)
        # shard2, which holds the range now, fails over to its replica: writes paused, the
        # replica caught up and promoted, the proxy moved
        with writer.lock:
            caught_up(p2, replica2)
            promote(replica2)
            proxy.switch(replica2.mariadb.port)
            writer.conns["shard2"].close()
            writer.conns["shard2"] = writer.connect("shard2")
        time.sleep(3)
        # the range moves on, from shard2 to shard3, half of it, with the processes up
        onward = range(0, 50)
        move(
            merger_cfg,
            "begin",
            "--table",
            f"{db}.orders",
            "--from",
            "shard2",
            "--to",
            "shard3",
            "--low",
            "0",
            "--high",
            "50",
        )
        writer.copy(onward, "shard2", "shard3")
        # a snapshot of the table across the move: shard3's windows hold copies it does not
        # own yet, and those that straddle the switch leave their rows to a later snapshot
        snap = run_cli("snapshot", f"{db}.orders", "-c", str(merger_cfg), timeout=60)
        assert snap.returncode == 0, snap.stdout + snap.stderr
        time.sleep(2)
        with writer.lock:
            assert "move 2 switched" in move(merger_cfg, "switch", "2")
            writer.switched(onward, "shard3")
        sql(shards["shard2"], f"DELETE FROM {db}.orders_0 WHERE id >= 0 AND id < 50")
        time.sleep(3)
    finally:
        writer.finish()
    assert not writer.errors, writer.errors
    try:
        expected = wait_equal(stack, shards, tmp_path, db, [ingest, merger], source=source_rows, sinks=sink_rows)
        assert writer.writes > 1000
        entries = offsets_record(stack, prefix)["shards"]
        assert (entries["shard2"]["server_id"], entries["shard2"]["epoch"]) == (201, 1), entries
        assert [row[1] for row in entries["shard2"]["cutover"]] == ["begin", "switch", "switch"], entries
        assert {k for k, _ in expected} & set(moved), "moved keys are live"
        on = {
            name: {k for k, _ in sql(info, f"SELECT id, v FROM {db}.orders_0", fetch=True)}
            for name, info in shards.items()
        }
        assert not on["shard1"] & set(moved) and not on["shard2"] & set(onward)

        # a key written on two shards with no move: the table pauses, naming both origins
        sql(shards["shard1"], f"INSERT INTO {db}.orders_0 VALUES (999999, 'on shard1')")
        time.sleep(3)
        sql(shards["shard3"], f"INSERT INTO {db}.orders_0 VALUES (999999, 'on shard3')")

        def paused():
            table = merger_status(merger_cfg)["tables"][f"{db}.orders"]
            text = str(table)
            return table if "999999" in text and "shard1/" in text and "shard3/" in text else None

        wait_for(paused, "the table paused on a key of two shards", 120, merger)
    finally:
        ingest.stop()
        merger.stop()
        proxy.close()
