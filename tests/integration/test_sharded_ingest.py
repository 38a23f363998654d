"""One ingest follows two shards (issue 24): physical tables of both shards routed into one
logical topic, AUTO_INCREMENT keys that collide across shards and tables, kill -9 of ingest
twice while every shard takes writes; and, under writes, one shard's server down for a
while (the other shard goes on) and the broker frozen (every shard goes back to the
committed position vector).

The oracle is independent of ingest: a plain SELECT of each physical table on each shard,
against what a consumer makes of the logical topic (read_committed; a record dropped only
when its partition already gave a position as high of the same shard, the rule every
consumer applies; then the last record of each key). A consumer that compares positions
across shards (the rule before shards) is shown to get it wrong on the same records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cdc import stack as local_stack
from cdc import stack_shards
from tests.cli_util import run_cli
from tests.ingest_harness import ROOT, IngestProcess
from tests.shard_harness import TABLES, Writers, ingest_config, offsets_record, running_shards, servers, sql

pytestmark = pytest.mark.integration

KAFKA_TIMEOUT_S = 6  # kafka.request_timeout_s: a producer's flush gives up after this
FREEZE_S = 15  # longer than that: the open transaction is lost


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory, stack) -> Path:
    yield from running_shards(tmp_path_factory, 2)


@pytest.fixture
def shards(shard_dir) -> dict[str, local_stack.StackInfo]:
    stack_shards.up(shard_dir, 2, replicas=False)  # started again if a test stopped one
    return servers(shard_dir)


def create_tables(shards: dict, db: str) -> None:
    """``db`` on every shard, with the same AUTO_INCREMENT tables (their keys collide)."""
    for info in shards.values():
        sql(info, f"CREATE DATABASE {db}")
        for table in TABLES:
            sql(info, f"CREATE TABLE {db}.{table} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))")


def source_values(shards: dict, db: str) -> dict[tuple, str]:
    """(origin, id) -> v, by a plain SELECT of every physical table of every shard."""
    out = {}
    for name, info in shards.items():
        for table in TABLES:
            for id_, v in sql(info, f"SELECT id, v FROM {db}.{table}", fetch=True):
                out[(f"{name}/{db}.{table}", id_)] = v
    return out


def wait_caught_up(stack, shards: dict, prefix: str, proc: IngestProcess, timeout_s: float = 120) -> dict:
    targets = {name: sql(info, "SELECT @@gtid_binlog_pos", fetch=True)[0][0] for name, info in shards.items()}
    deadline = time.monotonic() + timeout_s
    vector = None
    while time.monotonic() < deadline:
        assert proc.alive(), proc.log_text()[-3000:]
        vector = offsets_record(stack, prefix)
        entries = (vector or {}).get("shards", {})
        if all(
            name in entries and entries[name]["trx_gtid"] is None and entries[name]["gtid_state"] == target
            for name, target in targets.items()
        ):
            return vector
        time.sleep(0.5)
    raise AssertionError(f"ingest did not catch up with {targets}: {vector}\n{proc.log_text()[-3000:]}")


def read_topic(stack, topic: str) -> list:
    """Every committed record of the topic: (partition, key, value, position header)."""
    consumer = Consumer(
        {
            "bootstrap.servers": stack.kafka.bootstrap,
            "group.id": "t",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out, quiet = [], time.monotonic()
        while time.monotonic() - quiet < 3:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                continue
            quiet = time.monotonic()
            headers = dict(msg.headers() or [])
            out.append((msg.partition(), msg.key(), msg.value(), headers.get("cdc.position", b"").decode()))
        return out
    finally:
        consumer.close()


def position_key(header: str) -> tuple:
    """(shard, epoch, file number, pos, row, part) of a position header (parsed here, not by
    the code under test): file:pos:row[:part[:epoch]][@shard]."""
    text, _, shard = header.partition("@")
    file, *numbers = text.split(":")
    pos, row, part, epoch = ([int(n) for n in numbers] + [0, 0, 0])[:4]
    return shard, epoch, int(file.rsplit(".", 1)[1]), pos, row, part


def apply(records: list, per_shard: bool) -> dict[tuple, str]:
    """What a consumer holds after the records: a record whose position is not above the
    highest taken from its partition (of its shard, when ``per_shard``) is a replay; a
    tombstone follows its delete at the same position."""
    highest: dict = {}
    rows: dict = {}
    for partition, key, value, header in records:
        pos = position_key(header)
        slot = (partition, pos[0]) if per_shard else partition
        prev = highest.get(slot)
        compare = pos if per_shard else pos[1:]
        if prev is not None and (compare < prev[0] or (compare == prev[0] and (value is not None or prev[1]))):
            continue
        highest[slot] = (compare, value is None)
        k = json.loads(key)
        ident = (k["__cdc_origin"], k["id"])
        if value is None:
            rows.pop(ident, None)
            continue
        event = json.loads(value)
        if event["op"] == "d":
            rows.pop(ident, None)
        else:
            rows[ident] = event["after"]["v"]
    return rows


def test_two_shards_into_one_logical_topic_exactly_once_across_kill9(tmp_path, stack, shards, unique_name):
    db = f"sh_{unique_name}"
    prefix = f"sh{unique_name}"
    create_tables(shards, db)
    for info in shards.values():
        for table in TABLES:
            sql(info, f"INSERT INTO {db}.{table} (v) VALUES ('before-ingest')")  # not in the topic: no snapshot
    config = ingest_config(tmp_path / "ingest.yaml", stack, shards, prefix, db, commit_every_ms=100)
    proc = IngestProcess(config, tmp_path / "ingest.log").start()
    writers = Writers(shards, db)
    try:
        wait_caught_up(stack, shards, prefix, proc)
        before = source_values(shards, db)
        writers.start()
        for _ in range(2):
            time.sleep(4)
            proc.kill9()
            time.sleep(1)
            proc = IngestProcess(config, tmp_path / "ingest.log").start()
        time.sleep(3)
    finally:
        writers.finish()
    try:
        assert not writers.errors, writers.errors
        vector = wait_caught_up(stack, shards, prefix, proc)
        assert sorted(vector["shards"]) == sorted(shards)
        records = read_topic(stack, f"{prefix}.{db}.orders")
        expected = {k: v for k, v in source_values(shards, db).items() if k not in before}
        got = apply(records, per_shard=True)
        # rows that were there before ingest started are not in the topic (no snapshot here);
        # their later updates are, so compare the rows ingest saw born
        got = {k: v for k, v in got.items() if k not in before}
        assert len(expected) > 50
        assert got == expected
        ids = {k[1] for k in expected}
        assert len(ids) < len(expected), "keys collide across shards and tables, told apart by the origin"
        # the same records through the rule before shards (one highest position per partition)
        assert apply(records, per_shard=False) != apply(records, per_shard=True)
    finally:
        proc.stop()


def test_a_lease_renewal_cut_by_kill9_does_not_stop_the_restart(tmp_path, stack, shards, unique_name):
    """kill -9 while a shard's lease is renewed leaves that one-record transaction open on the
    offsets partition, where it hides every committed position (CI, the move test's kill at
    the switch): the restart fences the lease producers and goes on, rather than stop after
    15 s with "a transaction of another producer stayed open"."""
    db = f"shl_{unique_name}"
    prefix = f"shl{unique_name}"
    create_tables(shards, db)
    config = ingest_config(tmp_path / "ingest.yaml", stack, shards, prefix, db, commit_every_ms=100)
    proc = IngestProcess(config, tmp_path / "ingest.log").start()
    try:
        sql(shards["shard1"], f"INSERT INTO {db}.{TABLES[0]} (v) VALUES ('before')")
        wait_caught_up(stack, shards, prefix, proc)
        proc.kill9()
        # what the killed instance left: shard2's lease renewal begun, never committed
        # (the transactional.id spelled here as the lease's contract: cdc-lease-<prefix>/<shard>)
        killed = Producer(
            {"bootstrap.servers": stack.kafka.bootstrap, "transactional.id": f"cdc-lease-{prefix}/shard2"}
        )
        killed.init_transactions(30)
        killed.begin_transaction()
        killed.produce(f"{prefix}.offsets", key=b'{"lease":"%s/shard2"}' % prefix.encode(), value=b"{}")
        killed.flush(30)
        assert offsets_record(stack, prefix) is None, "the open transaction hides the committed position"
        started = time.monotonic()
        proc = IngestProcess(config, tmp_path / "ingest.log").start()
        sql(shards["shard2"], f"INSERT INTO {db}.{TABLES[0]} (v) VALUES ('after')")
        wait_caught_up(stack, shards, prefix, proc, timeout_s=60)
        assert time.monotonic() - started < 15, "the restart waited out the open transaction"
        assert "fencing the lease producer" in proc.log_text()
    finally:
        proc.stop()


def entry_gtid(stack, prefix: str, shard: str) -> str | None:
    entry = ((offsets_record(stack, prefix) or {}).get("shards") or {}).get(shard)
    return entry["gtid_state"] if entry and entry["trx_gtid"] is None else None


def seq_of(gtid: str | None) -> int:
    return int(gtid.split("-")[2]) if gtid else -1


@pytest.mark.timeout(600)
def test_a_shard_down_and_the_broker_frozen_lose_and_double_nothing(tmp_path, stack, shards, shard_dir, unique_name):
    db = f"sho_{unique_name}"
    prefix = f"sho{unique_name}"
    create_tables(shards, db)
    config = ingest_config(
        tmp_path / "ingest.yaml",
        stack,
        shards,
        prefix,
        db,
        commit_every_ms=100,
        **{"kafka.request_timeout_s": KAFKA_TIMEOUT_S},
    )
    proc = IngestProcess(config, tmp_path / "ingest.log").start()
    writers = Writers(shards, db, outages=True)
    try:
        wait_caught_up(stack, shards, prefix, proc)
        writers.start()
        time.sleep(3)
        # shard2's server goes away: shard1's changes keep reaching the topic meanwhile
        assert local_stack.stop(shards["shard2"], "mariadb")
        target = seq_of(sql(shards["shard1"], "SELECT @@gtid_binlog_pos", fetch=True)[0][0]) + 20
        deadline = time.monotonic() + 60
        while seq_of(entry_gtid(stack, prefix, "shard1")) < target:
            assert time.monotonic() < deadline, "shard1 did not go on while shard2 was down"
            assert proc.alive(), proc.log_text()[-3000:]
            time.sleep(0.5)
        stack_shards.up(shard_dir, 2, replicas=False)
        time.sleep(4)
        # the broker freezes under both shards' writes: the open transaction is lost for all
        pid = local_stack.running_pid(Path(stack.state_dir), "kafka", f"tcp://127.0.0.1:{stack.kafka.port}")
        assert pid, "the broker is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(5)
    finally:
        writers.finish()
    try:
        assert not writers.errors, writers.errors
        wait_caught_up(stack, shards, prefix, proc, timeout_s=180)
        records = read_topic(stack, f"{prefix}.{db}.orders")
        expected = source_values(shards, db)
        assert len(expected) > 50
        assert apply(records, per_shard=True) == expected
        log = proc.log_text()
        assert "shard shard2: source connection lost" in log, log[-3000:]
        assert "broker error" in log and "broker reachable again" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
    finally:
        proc.stop()


class FollowerProcess(IngestProcess):
    """`cdc ingest --shard NAME`: one shard followed by a process of its own."""

    def __init__(self, config_path: Path, log_path: Path, shard: str):
        super().__init__(config_path, log_path)
        self.shard = shard

    def start(self) -> "FollowerProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli", "ingest", "-c", str(self.config_path), "--shard", self.shard],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            cwd=ROOT,
        )
        return self


@pytest.mark.timeout(300)
def test_each_shard_followed_by_a_process_of_its_own(tmp_path, stack, shards, unique_name):
    """`--shard`: a process per shard, each with its own position record and lease; the
    same shard's process started again takes over and the one before stops with the
    reason, the other shard's process untouched; an unknown shard is one line."""
    db = f"shs_{unique_name}"
    prefix = f"shs{unique_name}"
    create_tables(shards, db)
    config = ingest_config(tmp_path / "ingest.yaml", stack, shards, prefix, db, commit_every_ms=100)
    unknown = run_cli("ingest", "-c", str(config), "--shard", "shard9", timeout=60)
    assert unknown.returncode != 0 and "no such shard" in unknown.stderr, unknown.stderr
    assert "Traceback" not in unknown.stderr
    procs = {name: FollowerProcess(config, tmp_path / f"{name}.log", name).start() for name in shards}
    try:
        for name, info in shards.items():
            for table in TABLES:
                sql(info, f"INSERT INTO {db}.{table} (v) VALUES ('{name}')")
        for name, info in shards.items():
            target = sql(info, "SELECT @@gtid_binlog_pos", fetch=True)[0][0]
            deadline = time.monotonic() + 60
            while True:
                assert procs[name].alive(), procs[name].log_text()[-3000:]
                entry = offsets_record(stack, prefix, name, committed=False)
                if entry and list(entry["shards"]) == [name] and entry["shards"][name]["gtid_state"] == target:
                    break
                assert time.monotonic() < deadline, f"{name}: {entry}"
                time.sleep(0.5)
        # the same shard's process started again (same config): it takes over, as a restart
        # does, and the one before stops with the reason (operations/faults.md, "A second ingest")
        second = FollowerProcess(config, tmp_path / "second.log", "shard1").start()
        assert procs["shard1"].wait_exit(90), (
            f"the first process for shard1 kept running:\n{procs['shard1'].log_text()[-2000:]}\n"
            f"the second:\n{second.log_text()[-2000:]}"
        )
        first = procs["shard1"].log_text()
        assert f"took over shard shard1 of topic_prefix {prefix}" in first and "Traceback" not in first, first[-3000:]
        sql(shards["shard1"], f"INSERT INTO {db}.{TABLES[0]} (v) VALUES ('after')")
        target = sql(shards["shard1"], "SELECT @@gtid_binlog_pos", fetch=True)[0][0]
        deadline = time.monotonic() + 60
        while (offsets_record(stack, prefix, "shard1", committed=False) or {}).get("shards", {}).get("shard1", {}).get(
            "gtid_state"
        ) != target:
            assert second.alive(), second.log_text()[-3000:]
            assert time.monotonic() < deadline, "the second process for shard1 did not go on"
            time.sleep(0.5)
        assert procs["shard2"].alive()
    finally:
        for p in [*procs.values(), *([second] if "second" in locals() else [])]:
            p.stop()
