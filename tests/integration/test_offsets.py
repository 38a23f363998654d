"""Ingest's committed position on ``<prefix>.offsets``: when positions are there but none is
readable (a transaction of another producer open on the partition), ingest stops with one
clear error instead of starting from ``start.mode`` and losing the changes since its last
commit; once the transaction is gone it resumes there. Real MariaDB and broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_foreign_open_transaction_on_offsets_stops_ingest_then_it_resumes(stack, mysql_root, unique_name, tmp_path):
    db = f"off_{unique_name}"
    prefix = unique_name
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    cfg = write_config(stack, tmp_path / "ingest.yaml", prefix, [db])
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    foreign = None
    try:
        wait_caught_up(stack, prefix, proc=proc)
        with mysql_root.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.t VALUES (1, 1), (2, 2)")
        wait_caught_up(stack, prefix, proc=proc)
        proc.stop()
        # changes while ingest is down: only its committed position can bring them
        with mysql_root.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.t VALUES (3, 3), (4, 4)")
        # another producer opens a transaction on the offsets partition and leaves it open
        foreign = Producer({"bootstrap.servers": stack.kafka.bootstrap, "transactional.id": f"foreign-{prefix}"})
        foreign.init_transactions(10)
        foreign.begin_transaction()
        foreign.produce(f"{prefix}.offsets", b"{}", b'{"foreign":1}', partition=0)
        assert foreign.flush(10) == 0

        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        assert proc.wait_exit(90), "ingest started although its committed position was unreadable"
        log = proc.log_text()
        errors = [line for line in log.splitlines() if line.startswith("error: ")]
        assert errors, log[-3000:]
        assert f"{prefix}.offsets" in errors[0] and "transaction" in errors[0] and "start.mode" in errors[0], errors
        assert "Traceback" not in log and proc.proc.returncode == 2, log[-3000:]
        topic = f"{prefix}.{db}.t"
        assert set(rebuild(read_records(stack.kafka.bootstrap, [topic])[0], ["id"])) == {(1,), (2,)}

        # the transaction gone: ingest resumes at its committed position, nothing lost
        foreign.abort_transaction(10)
        foreign = None
        proc = IngestProcess(cfg, tmp_path / "ingest3.log").start()
        wait_caught_up(stack, prefix, proc=proc)
        rows = rebuild(read_records(stack.kafka.bootstrap, [topic])[0], ["id"])
        assert set(rows) == {(1,), (2,), (3,), (4,)}, rows
    finally:
        if foreign is not None:
            foreign.abort_transaction(10)
        proc.stop()


@pytest.mark.timeout(120)
def test_offsets_read_tells_never_committed_from_unreadable(stack, unique_name):
    """``read_offsets`` on the real broker: another key only is "never committed"; our
    position behind an open transaction is ``OffsetsBlocked`` after the wait, never None;
    once it is gone the newest position is read, also one committed while it was open."""
    from cdc.offsets_topic import OffsetsBlocked, read_offsets
    from cdc.wire.resume_point import ResumePoint
    from ingest.producer import Topics

    conf = {"bootstrap.servers": stack.kafka.bootstrap}
    topic, key = f"{unique_name}.offsets", b'{"server":"x"}'
    Topics(conf).partitions(topic, 1)

    def committed(producer: Producer, k: bytes, value: bytes) -> None:
        producer.begin_transaction()
        producer.produce(topic, value, k, partition=0)
        producer.commit_transaction(10)

    ours = Producer(dict(conf, **{"transactional.id": f"ours-{unique_name}"}))
    ours.init_transactions(10)
    committed(ours, b'{"server":"other"}', ResumePoint("0-1-1").to_json())
    assert read_offsets(conf, topic, key).point is None
    committed(ours, key, ResumePoint("0-1-2").to_json())
    assert read_offsets(conf, topic, key).point == ResumePoint("0-1-2")

    foreign = Producer(dict(conf, **{"transactional.id": f"foreign-{unique_name}"}))
    foreign.init_transactions(10)
    foreign.begin_transaction()
    foreign.produce(topic, b"{}", b"foreign", partition=0)
    assert foreign.flush(10) == 0
    committed(ours, key, ResumePoint("0-1-3").to_json())
    with pytest.raises(OffsetsBlocked):
        read_offsets(conf, topic, key, timeout_s=3, wait_s=2)
    foreign.abort_transaction(10)
    assert read_offsets(conf, topic, key).point == ResumePoint("0-1-3")


@pytest.mark.timeout(120)
def test_positional_windows_see_ingests_committed_position_and_each_partitions_whole_end(stack, unique_name):
    """What a positional window's read-through is made of, on the real broker: ingest's
    committed position as a sequence; each partition's end once ingest committed through
    HIGH, never below what is committed while ingest's next transaction is open there (a
    target below it would let a window be emitted before records under its HIGH are read);
    a topic not created yet, nothing to read; and a bounded wait while the offsets topic is
    blocked or ingest has not got to HIGH."""
    import threading

    from cdc.wire.resume_point import ResumePoint
    from ingest.producer import Topics
    from merger.batch.tables import TableRegistry
    from merger.mysql.positions import BinlogPoint
    from merger.snapshot.positional import PositionalWatermarks, PositionsUnavailable

    conf = {"bootstrap.servers": stack.kafka.bootstrap}
    data = f"{unique_name}.db.t"
    Topics(conf).partitions(f"{unique_name}.offsets", 1)
    Topics(conf).partitions(data, 2)
    positions = PositionalWatermarks(
        conf, unique_name, threading.Event(), 3.0, TableRegistry(), lambda: None, lambda t: t, lambda: None
    )
    assert positions.committed() is None  # nothing committed yet
    ingest = Producer(dict(conf, **{"transactional.id": f"ingest-{unique_name}"}))
    ingest.init_transactions(10)
    ingest.begin_transaction()
    for i in range(5):
        ingest.produce(data, b"{}", b"k", partition=i % 2)
    ingest.produce(
        f"{unique_name}.offsets",
        ResumePoint("0-1-9", "binlog.000003", 4000, server_id=1, epoch=0).to_json(),
        b'{"server":"%s"}' % unique_name.encode(),
        partition=0,
    )
    ingest.commit_transaction(10)
    high = BinlogPoint(1, "binlog.000003", 4000).sequence(0)
    assert positions.committed().sequence == high
    ends = positions.partition_ends(data, 2)
    assert sorted(ends) == [0, 1] and ends[0] >= 3 and ends[1] >= 2
    ingest.begin_transaction()  # ingest's next transaction, open on both partitions and the offsets
    for i in range(4):
        ingest.produce(data, b"{}", b"k", partition=i % 2)
    ingest.produce(f"{unique_name}.offsets", ResumePoint("0-1-10").to_json(), b"other", partition=0)
    assert ingest.flush(10) == 0
    try:
        now = positions.partition_ends(data, 2)
        # never below what is committed (the local broker tells a read_committed client 0
        # here, and under-counts the open transaction's records: those lie above HIGH)
        assert now[0] >= ends[0] and now[1] >= ends[1], (ends, now)
        assert positions.partition_ends(f"{unique_name}.db.absent", 1) == {0: 0}  # no topic: nothing to read
        assert positions.committed() is None  # the offsets blocked by it: no position, not an old one
        positions.last_committed = None  # (none read moments ago to reuse)
        with pytest.raises(PositionsUnavailable, match="first committed position"):
            positions.read(None)  # LOW and HIGH wait for one, bounded
    finally:
        ingest.abort_transaction(10)
