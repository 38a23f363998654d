"""Tests of the ``cdc_kafka`` streaming source (merger/kafka/).

Unit tests cover the options and the reader's pickling (the pure offset planning is in
test_kafka_offsets.py). Integration tests run against the local stack's Tansu broker and a
real Spark in local mode. On this broker, records of aborted transactions are visible to
read_committed consumers (see DESIGN.md); these tests use committed, open and plain
records only: downstream consumers drop replays by source position, not this source.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable

from merger.kafka import probe
from merger.kafka.datasource import CdcKafkaDataSource, CdcKafkaStreamReader
from merger.kafka.offsets import OFFSET_EARLIEST, TICK_TP, KafkaRange, parse_offsets
from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.probe import Broker
from merger.kafka.reader import SCHEMA, read_ranges

WAIT = 90  # seconds: upper bound of every wait on a query in this file


@pytest.fixture(scope="module")
def bootstrap(stack) -> str:
    return stack.kafka.bootstrap


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    # the merger's own session settings (JDBC jar, the Python daemon, PYTHONPATH for the
    # workers): a later test module that asks for a session through getOrCreate gets one
    # it can use, whichever module ran first
    from pyspark.sql import SparkSession

    from cdc.config import MergerConfig
    from merger.spark.session import make_spark

    existing = SparkSession.getActiveSession()
    session = existing or make_spark(
        MergerConfig(
            state_dir=str(tmp_path_factory.mktemp("spark-state")),
            spark_conf={"spark.sql.streaming.stopTimeout": "30s", "spark.driver.memory": "1g"},
        )
    )
    session.dataSource.register(CdcKafkaDataSource)
    yield session
    if existing is None:
        session.stop()


def create_topics(bootstrap: str, names: list[str], partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        fut.result(timeout=15)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5).topics
        if all(n in md and len(md[n].partitions) == partitions for n in names):
            return
        time.sleep(0.1)
    raise AssertionError(f"topics {names} not visible after creation")


class Sent:
    """Records acknowledged by the broker: (topic, partition, offset) -> (key, value, headers)."""

    def __init__(self):
        self.records: dict[tuple, tuple] = {}

    def callback(self, headers):
        # delivery reports do not carry headers: remember what was sent
        def on_delivery(err, msg):
            assert err is None, err
            self.records[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers)

        return on_delivery


def producer(bootstrap: str, transactional: bool = False) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True}
    if transactional:
        conf["transactional.id"] = "test-ks-" + uuid.uuid4().hex[:8]
    p = Producer(conf)
    if transactional:
        p.init_transactions(15)
    return p


def produce(p: Producer, sent: Sent, topic: str, n: int, tag: str, partition: int | None = None):
    for i in range(n):
        key = f"{tag}-{i}".encode()
        value = None if i % 5 == 4 else f"value {tag} {i}".encode()  # every 5th a tombstone
        headers = None
        if i % 3 == 0:
            headers = [("h", f"{i}".encode()), ("h", b"again"), ("empty", None)]
        kwargs = {"partition": partition} if partition is not None else {}
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=sent.callback(headers), **kwargs)


def source_options(bootstrap: str, **extra) -> dict:
    return {"kafka.bootstrap.servers": bootstrap, "readTimeoutMs": "20000", "probeTimeoutMs": "10000", **extra}


def to_record(row) -> tuple:
    headers = (
        [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in row["headers"]]
        if row["headers"] is not None
        else None
    )
    return (
        (row["topic"], row["partition"], row["offset"]),
        (
            None if row["key"] is None else bytes(row["key"]),
            None if row["value"] is None else bytes(row["value"]),
            headers,
        ),
    )


class Collector:
    """A foreachBatch sink that keeps each batch's rows by batch id (a re-run batch after a
    restart replaces its earlier run, as an idempotent sink would)."""

    def __init__(self):
        self.batches: dict[int, list] = {}

    def __call__(self, df, batch_id):
        rows = df.collect()
        for r in rows:
            assert r["timestampType"] == 0 and r["timestamp"] is not None
        self.batches[batch_id] = [to_record(r) for r in rows]

    def records(self) -> list[tuple]:
        return [rec for b in sorted(self.batches) for rec in self.batches[b]]


def start_query(spark, options: dict, checkpoint: Path, sink: Collector, trigger: dict):
    reader = spark.readStream.format("cdc_kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def run_available_now(spark, options: dict, checkpoint: Path, sink: Collector):
    q = start_query(spark, options, checkpoint, sink, {"availableNow": True})
    try:
        finished = q.awaitTermination(WAIT)
    finally:
        if q.isActive:
            q.stop()
    assert finished, f"AvailableNow query did not finish within {WAIT}s"
    assert q.exception() is None, q.exception()
    return q


def assert_exactly(records: list[tuple], expected: dict) -> None:
    positions = [pos for pos, _ in records]
    dups = {p for p in positions if positions.count(p) > 1}
    assert not dups, f"delivered more than once: {sorted(dups)[:10]}"
    got = dict(records)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    assert not missing and not extra, f"missing {missing[:10]}, unexpected {extra[:10]}"
    for pos, rec in expected.items():
        assert got[pos] == rec, (pos, got[pos], rec)


def test_available_now_reads_every_committed_record_once(spark, bootstrap, unique_name, tmp_path):
    """Two table topics x 3 partitions, plain and transactional records, tombstones and
    headers; non-matching topics of the same prefix are left alone; an open transaction's
    records are hidden and do not stall the query; after its commit a restart from the
    checkpoint delivers exactly the rest."""
    pre = unique_name
    a, b = f"{pre}.db.a", f"{pre}.db.b"
    create_topics(bootstrap, [a, b])
    create_topics(bootstrap, [f"{pre}.offsets", f"{pre}.transaction", pre], partitions=1)
    sent, other = Sent(), Sent()
    plain, tx = producer(bootstrap), producer(bootstrap, transactional=True)
    produce(plain, sent, a, 30, "plain-a")
    produce(plain, sent, b, 20, "plain-b")
    produce(plain, other, f"{pre}.offsets", 3, "not-mine")
    produce(plain, other, pre, 3, "not-mine")
    plain.flush(15)
    for n in range(2):  # two committed transactions over both topics
        tx.begin_transaction()
        produce(tx, sent, a, 12, f"tx{n}-a")
        produce(tx, sent, b, 7, f"tx{n}-b")
        tx.commit_transaction(15)
    tx.begin_transaction()  # an open transaction: hidden from read_committed
    pending = Sent()
    produce(tx, pending, a, 6, "open-a")
    tx.flush(15)
    expected = dict(sent.records)
    assert len(expected) == 30 + 20 + 2 * 19

    options = source_options(bootstrap, subscribePattern=rf"^{pre}\.[^.]+\.[^.]+$")
    sink = Collector()
    run_available_now(spark, options, tmp_path / "ck", sink)
    assert_exactly(sink.records(), expected)
    assert all(rec[0][0] in (a, b) for rec in sink.records())
    assert any(rec[1][1] is None for rec in sink.records())  # tombstones arrive as null

    # commit the open transaction and add a little more: a restart from the checkpoint
    # reads exactly the new records
    tx.commit_transaction(15)
    produce(plain, pending, b, 4, "after")
    plain.flush(15)
    assert len(pending.records) == 10
    first_batches = set(sink.batches)
    run_available_now(spark, options, tmp_path / "ck", sink)
    new = [rec for bid in sorted(set(sink.batches) - first_batches) for rec in sink.batches[bid]]
    assert_exactly(new, pending.records)
    assert_exactly(sink.records(), {**expected, **pending.records})


class DriverReadCollector:
    """A foreachBatch sink that reads each batch twice, as the merger may: by the driver
    (``merger.kafka.driver_read``) and by Spark's job; keeps both and each batch's tasks."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self.by_driver: list[dict] = []
        self.by_spark: list[dict] = []
        self.tasks: list[int] = []

    def __call__(self, df, batch_id):
        from merger.batch.records import UNREAD_COLUMNS, kafka_rows
        from merger.kafka.driver_read import planned_tasks, read_here

        planned = planned_tasks(df)
        assert planned is not None, "the batch's read tasks are not found in Spark's plan"
        self.tasks.append(len(planned))
        self.by_driver += read_here(self.opts, planned)
        self.by_spark += kafka_rows(df.drop(*UNREAD_COLUMNS).toArrow())


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_the_driver_reads_a_batch_as_sparks_job_does(spark, bootstrap, unique_name, tmp_path):
    """A micro-batch read by the driver (merger.kafka.driver_read) holds exactly the records
    Spark's read job gives: keys, values, tombstones, headers, committed transactions, an
    open transaction's records hidden; batches of one task and of several."""
    pre = unique_name
    a, b = f"{pre}.db.a", f"{pre}.db.b"
    create_topics(bootstrap, [a, b])
    sent = Sent()
    plain, tx = producer(bootstrap), producer(bootstrap, transactional=True)
    produce(plain, sent, a, 40, "plain-a")
    produce(plain, sent, b, 25, "plain-b")
    plain.flush(15)
    tx.begin_transaction()
    produce(tx, sent, a, 12, "tx-a")
    tx.commit_transaction(15)
    tx.begin_transaction()  # open: hidden from both reads
    produce(tx, Sent(), b, 6, "open-b")
    tx.flush(15)

    def order(rows):
        return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))

    # at most 30 offsets a batch: every batch one read task, then (10 offsets a task) several
    tasks = []
    for run, per_task in (("one", "100000"), ("several", "10")):
        options = source_options(
            bootstrap,
            subscribePattern=rf"^{pre}\.[^.]+\.[^.]+$",
            maxOffsetsPerTrigger="30",
            recordsPerTask=per_task,
        )
        sink = DriverReadCollector(SourceOptions.parse(options))
        run_available_now(spark, options, tmp_path / f"ck-{run}", sink)
        assert len(sink.by_spark) == len(sent.records)
        assert order(sink.by_driver) == order(sink.by_spark)
        tasks.append(sink.tasks)
    tx.abort_transaction(15)
    assert set(tasks[0]) == {1} and max(tasks[1]) > 1, tasks


def wait_for(predicate, timeout: float, what: str, query=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_python_workers_import_the_installed_pyspark(spark):
    """Through the merger's daemon (merger.spark.daemon), a worker finds pyspark in its
    installed package, whose bytecode is cached, not in the bundled zip."""
    import pyspark

    def where(_):
        import pyspark as worker_pyspark

        return worker_pyspark.__file__

    files = set(spark.sparkContext.parallelize(range(2), 2).map(where).collect())
    assert files == {pyspark.__file__}


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_spark_planner_processes_import_the_installed_pyspark(spark):
    """Spark plans a Python data source's read in a process of its own daemon
    (``pyspark.daemon``, not the merger's): merger/spark/site's sitecustomize makes it
    import the installed pyspark too, not the zip it would compile on every start."""
    import pyspark
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class WhereReader(DataSourceReader):
        def partitions(self):
            import pyspark as planner_pyspark

            return [InputPartition(planner_pyspark.__file__)]

        def read(self, partition):
            import pyspark as worker_pyspark

            yield (partition.value, worker_pyspark.__file__)

    class WhereSource(DataSource):
        @classmethod
        def name(cls):
            return "cdc_test_where"

        def schema(self):
            return "planner STRING, worker STRING"

        def reader(self, schema):
            return WhereReader()

    spark.dataSource.register(WhereSource)
    rows = spark.read.format("cdc_test_where").load().collect()
    assert [(r.planner, r.worker) for r in rows] == [(pyspark.__file__, pyspark.__file__)]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_rate_limit_bounds_every_batch(spark, bootstrap, unique_name, tmp_path):
    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic])
    sent, p = Sent(), producer(bootstrap)
    produce(p, sent, topic, 40, "p0", partition=0)
    produce(p, sent, topic, 5, "p1", partition=1)
    produce(p, sent, topic, 12, "p2", partition=2)
    p.flush(15)
    sink = Collector()
    q = run_available_now(
        spark, source_options(bootstrap, subscribe=topic, maxOffsetsPerTrigger="9"), tmp_path / "ck", sink
    )
    sizes = [len(sink.batches[b]) for b in sorted(sink.batches)]
    assert all(0 < n <= 9 for n in sizes), sizes
    assert sum(sizes) == 57 and len(sizes) == 7  # ceil(57 / 9): the limit is used fully
    # spread fairly: the first batch takes from every partition that has data
    assert {pos[1] for pos, _ in sink.batches[min(sink.batches)]} == {0, 1, 2}
    assert_exactly(sink.records(), sent.records)
    assert [pr["numInputRows"] for pr in q.recentProgress if pr["numInputRows"]] == sizes


class TimedCollector(Collector):
    """A Collector that also keeps when each batch with records reached foreachBatch."""

    def __init__(self):
        super().__init__()
        self.arrived: list[float] = []

    def __call__(self, df, batch_id):
        super().__call__(df, batch_id)
        if self.batches[batch_id]:
            self.arrived.append(time.monotonic())


def batch_starts(q) -> tuple[list[float], list[float]]:
    """When each of the query's batches with records started (Spark's trigger time; the
    first batch's arrival also waits for a Python worker to start), and the gaps between."""
    starts = [
        datetime.fromisoformat(pr["timestamp"].replace("Z", "+00:00")).timestamp()
        for pr in q.recentProgress
        if pr["numInputRows"]
    ]
    return starts, [round(b - a, 3) for a, b in zip(starts, starts[1:])]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_batches_start_the_gap_apart_under_a_trickle_and_at_once_after_a_quiet_spell(
    spark, bootstrap, unique_name, tmp_path
):
    """minBatchGapMs (the merger's min_batch_gap_ms): a record every 0.1 s for 6 s, a trigger
    every 0.1 s, a gap of 1.5 s: batches with records come about 1.5 s apart (without the
    gap: one a trigger, ~60), every record once; then, after a quiet spell, one record is
    read at the next triggers, not held."""
    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic])
    sent, p = Sent(), producer(bootstrap)
    sink = TimedCollector()
    q = start_query(
        spark,
        source_options(bootstrap, subscribe=topic, minBatchGapMs="1500"),
        tmp_path / "ck",
        sink,
        {"processingTime": "100 milliseconds"},
    )

    def trickle(tag: str, n: int) -> None:
        """``n`` records 0.1 s apart, then until every record sent was read, each once."""
        for i in range(n):
            produce(p, sent, topic, 1, f"{tag}{i}")
            p.flush(15)
            time.sleep(0.1)
        deadline = time.monotonic() + WAIT
        while len(sink.records()) < len(sent.records) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert_exactly(sink.records(), sent.records)

    try:
        trickle("t", 60)
        starts, gaps = batch_starts(q)
        assert 3 <= len(starts) <= 7, gaps
        assert all(g >= 1.45 for g in gaps), gaps
        time.sleep(2.5)  # quiet: no batch for longer than the gap
        produce(p, sent, topic, 1, "alone")
        p.flush(15)
        written = time.monotonic()
        while len(sink.records()) < len(sent.records) and time.monotonic() < written + WAIT:
            time.sleep(0.02)
        assert_exactly(sink.records(), sent.records)
        assert sink.arrived[-1] - written < 1.2, sink.arrived[-1] - written
        # a watermark just written (the merger's prompt file): every trigger may start a batch
        (tmp_path / "prompt").write_text(repr(time.time() + 60))
        q.stop()
        q = start_query(
            spark,
            source_options(bootstrap, subscribe=topic, minBatchGapMs="1500", promptFile=str(tmp_path / "prompt")),
            tmp_path / "ck",
            sink,
            {"processingTime": "100 milliseconds"},
        )
        trickle("prompt", 30)
        # not one per 1.5 s: a batch starts as soon as the one before ends (measured by
        # Spark's trigger times, not by the count: on a loaded machine a batch takes up to ~1 s)
        starts, gaps = batch_starts(q)
        assert len(starts) >= 3 and sum(g < 1.45 for g in gaps) >= 2, gaps
    finally:
        q.stop()


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_progress_read_field_by_field_matches_pysparks_reports(spark, bootstrap, unique_name, tmp_path):
    """merger.spark.progress reads single fields of the JVM's progress reports (pyspark's
    lastProgress converts whole reports: ~0.1 s each with 1,500 partitions); pyspark's
    own conversion is the oracle."""
    from merger.kafka.offsets import lagging_partitions
    from merger.spark import progress as spark_progress

    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic])
    sent, p = Sent(), producer(bootstrap)
    for part in range(3):
        produce(p, sent, topic, 7, f"p{part}", partition=part)
    p.flush(15)
    q = run_available_now(
        spark, source_options(bootstrap, subscribe=topic, maxOffsetsPerTrigger="5"), tmp_path / "ck", Collector()
    )
    public = q.recentProgress
    assert len(public) >= 4  # ceil(21 / 5) batches with records
    ours = spark_progress.batches_after(q, -1)
    assert [b.batch_id for b in ours] == [pr["batchId"] for pr in public]
    assert [b.num_input_rows for b in ours] == [pr["numInputRows"] for pr in public]
    assert [b.duration_ms for b in ours] == [dict(pr["durationMs"]) for pr in public]
    assert [b.batch_id for b in spark_progress.batches_after(q, public[1]["batchId"])] == [
        pr["batchId"] for pr in public[2:]
    ]
    last = spark_progress.last_batch(q)
    assert last == ours[-1] and spark_progress.last_batch_id(q) == public[-1]["batchId"]
    offsets = spark_progress.source_offsets(q)
    assert len(offsets) == 1
    end, latest = offsets[0]
    assert parse_offsets(json.loads(end)) == parse_offsets(json.loads(public[-1]["sources"][0]["endOffset"]))
    assert lagging_partitions(end, latest) == set()  # the last batch read everything


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_topic_created_later_is_picked_up(spark, bootstrap, unique_name, tmp_path):
    pre = unique_name
    first, later = f"{pre}.db.first", f"{pre}.db.later"
    create_topics(bootstrap, [first])
    sent, p = Sent(), producer(bootstrap)
    produce(p, sent, first, 10, "first")
    p.flush(15)
    sink = Collector()
    q = start_query(
        spark,
        source_options(bootstrap, subscribePattern=rf"^{pre}\.[^.]+\.[^.]+$"),
        tmp_path / "ck",
        sink,
        {"processingTime": "500 milliseconds"},
    )
    try:
        wait_for(lambda: len(sink.records()) >= 10, WAIT, "the first topic's records", q)
        create_topics(bootstrap, [later])
        produce(p, sent, later, 15, "later")
        p.flush(15)
        wait_for(lambda: len(sink.records()) >= 25, WAIT, "the new topic's records", q)
        time.sleep(1.5)  # a few more triggers: nothing may arrive twice
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    assert_exactly(sink.records(), sent.records)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_ends_asked_only_for_the_topics_ingest_names_and_every_end_now_and_then(
    spark, bootstrap, unique_name, tmp_path
):
    """With movedTopicsFrom (merger.kafka.end_check): a record of an ingest transaction is
    read at the next trigger because its position record names its topic; a record of
    another producer, named nowhere, is read at the next check of every partition
    (endCheckAllMs), never not at all. endProbe watermark: the ends come only from the
    ListOffsets requests under test (the scan probe's consumer would find them too)."""
    from cdc.wire.resume_point import ResumePoint
    from ingest.producer import TransactionalProducer

    pre = unique_name
    a, b, offsets = f"{pre}.db.a", f"{pre}.db.b", f"{pre}.offsets"
    create_topics(bootstrap, [a, b])
    create_topics(bootstrap, [offsets], partitions=1)
    every_s = 8.0
    sink = Collector()
    seen_at: dict = {}

    def collect(df, batch_id):
        sink(df, batch_id)
        for _, (key, _, _) in sink.batches[batch_id]:
            seen_at.setdefault(key, time.monotonic())

    q = start_query(
        spark,
        source_options(
            bootstrap,
            subscribePattern=rf"^{pre}\.[^.]+\.[^.]+$",
            endProbe="watermark",
            movedTopicsFrom=offsets,
            endCheckAllMs=str(int(every_s * 1000)),
        ),
        tmp_path / "ck",
        collect,
        {"processingTime": "200 milliseconds"},
    )
    ingest = TransactionalProducer({"bootstrap.servers": bootstrap}, f"tx-{pre}", timeout_s=20)
    sent = []
    try:
        time.sleep(3.0)  # the feed finds its position (until then every partition is asked)
        lags = []
        for i in range(6):
            ingest.send(a, f"k{i}".encode(), f"v{i}".encode(), i % 3)
            ingest.commit(offsets, b"source", ResumePoint(f"0-1-{i + 1}"))
            committed = time.monotonic()
            key = f"k{i}".encode()
            sent.append((a, key, f"v{i}".encode()))
            wait_for(lambda: key in seen_at, WAIT, f"ingest's record {key}", q)
            lags.append(seen_at[key] - committed)
            time.sleep(0.4)
        assert max(lags) < 2.5, lags  # at the next triggers, not at the next check of every end (8 s)
        other = Producer({"bootstrap.servers": bootstrap})
        other.produce(b, key=b"x", value=b"foreign", partition=1)
        other.flush(15)
        sent.append((b, b"x", b"foreign"))
        wait_for(lambda: b"x" in seen_at, every_s + 10, "another producer's record", q)
        time.sleep(1.0)
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    # each record once (offsets: the transactions' commit markers take offsets too)
    assert sorted((pos[0], rec[0], rec[1]) for pos, rec in sink.records()) == sorted(sent)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_restart_from_checkpoint_mid_stream(spark, bootstrap, unique_name, tmp_path):
    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic])
    sent, p = Sent(), producer(bootstrap)
    produce(p, sent, topic, 60, "r")
    p.flush(15)
    options = source_options(bootstrap, subscribe=topic, maxOffsetsPerTrigger="8")
    sink = Collector()
    q = start_query(spark, options, tmp_path / "ck", sink, {"processingTime": "300 milliseconds"})
    try:
        wait_for(lambda: len(sink.batches) >= 2, WAIT, "two micro-batches", q)
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    taken = len(sink.records())
    assert 0 < taken < 60
    run_available_now(spark, options, tmp_path / "ck", sink)
    ids = sorted(sink.batches)
    assert ids == list(range(len(ids)))  # batch ids continue without a hole
    assert_exactly(sink.records(), sent.records)


# --------------------------------------------------------------- end probe and markers


def drain(reader: CdcKafkaStreamReader, start: dict) -> tuple[dict, list]:
    """One micro-batch planned and read by the source itself (no Spark)."""
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = []
    for r in reader.partitions(start, end):
        for batch in reader.read(r):
            rows.extend(batch.to_pylist())
    return end, rows


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rests", [False, True], ids=["fetching", "resting"])
def test_end_probe_stays_assigned_across_triggers(bootstrap, unique_name, monkeypatch, rests):
    """The scan keeps its partitions assigned between calls: each call finds what was
    committed since the last one, under an open transaction too, skips ahead when the
    start moves past what it read, and lets go of a partition no longer asked for.
    ``resting``: every partition rests (paused) between calls, as an idle one does after
    REST_AFTER_S, and is woken by the next call that wants it (a resume alone left the
    fetcher asleep ~0.8 s: this failed one call in three)."""
    monkeypatch.setattr(probe, "REST_AFTER_S", 0.0 if rests else 3600.0)
    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic], partitions=2)
    tx = producer(bootstrap, transactional=True)
    broker = Broker(SourceOptions.parse(source_options(bootstrap, subscribe=topic)))
    p0, p1 = (topic, 0), (topic, 1)
    try:
        assert broker.scan({p0: 0, p1: 0}, None) == {p0: 0, p1: 0}
        ends = {p0: 0, p1: 0}
        for round_ in range(3):
            tx.begin_transaction()
            produce(tx, Sent(), topic, 3, f"r{round_}", partition=0)
            produce(tx, Sent(), topic, 2, f"r{round_}", partition=1)
            tx.commit_transaction(15)  # 3 + marker on p0, 2 + marker on p1
            tx.begin_transaction()  # open while the probe looks
            produce(tx, Sent(), topic, 1, f"open{round_}", partition=0)
            tx.flush(15)
            ends = broker.scan(ends, None)
            assert ends == {p0: 4 + 6 * round_, p1: 3 * (round_ + 1)}, round_
            assert {tp for tp in (p0, p1) if tp in broker._resting} == ({p0, p1} if rests else set())
            tx.abort_transaction(15)  # 1 record + abort marker on p0: 6 offsets a round
        # the start moved past what the probe read: it skips ahead
        assert broker.scan({p0: ends[p0] + 2}, None)[p0] >= ends[p0] + 2
        assert set(broker._scan_next) == {p0}  # p1 given up
        assert {(tp.topic, tp.partition) for tp in broker.consumer.assignment()} == {p0}
    finally:
        broker.close()


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "probe",
    [
        "scan",
        pytest.param(
            "watermark",
            marks=pytest.mark.xfail(
                strict=True,
                reason="Tansu reports the end of a partition as base offset of the last "
                "record batch + 1: the tail of a batch stays invisible",
            ),
        ),
    ],
)
def test_end_probe_sees_the_tail_of_the_last_batch(bootstrap, unique_name, probe):
    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic], partitions=1)
    sent, p = Sent(), producer(bootstrap)
    produce(p, sent, topic, 4, "batch", partition=0)  # linger: one record batch
    p.flush(15)
    reader = CdcKafkaStreamReader(source_options(bootstrap, subscribe=topic, endProbe=probe), SCHEMA)
    try:
        start = reader.initialOffset()
        end, rows = drain(reader, start)
    finally:
        reader.stop()
    assert sorted(r["offset"] for r in rows) == [0, 1, 2, 3]
    assert parse_offsets(end) == {(topic, 0): 4}


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "probe",
    [
        "scan",
        pytest.param(
            "watermark",
            marks=pytest.mark.xfail(
                strict=True,
                reason="Tansu reports a partition's read_committed end as 0 while a transaction is open on it",
            ),
        ),
    ],
)
def test_end_probe_with_an_open_transaction(bootstrap, unique_name, probe):
    """Committed records before an open transaction are readable. The ingest process keeps
    a transaction open most of the time, so the watermark probe would stall on Tansu."""
    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic], partitions=1)
    sent, hidden = Sent(), Sent()
    tx = producer(bootstrap, transactional=True)
    tx.begin_transaction()
    produce(tx, sent, topic, 5, "committed", partition=0)
    tx.commit_transaction(15)  # records 0..4, commit marker at 5
    reader = CdcKafkaStreamReader(source_options(bootstrap, subscribe=topic, endProbe=probe), SCHEMA)
    try:
        start = reader.initialOffset()
        tx.begin_transaction()
        produce(tx, hidden, topic, 3, "open", partition=0)
        tx.flush(15)
        end, rows = drain(reader, start)
        assert sorted(r["offset"] for r in rows) == [0, 1, 2, 3, 4]
        assert parse_offsets(end) == {(topic, 0): 6}  # past the marker, before the open tx
        tx.commit_transaction(15)
        end2, rows2 = drain(reader, end)
        assert sorted(r["offset"] for r in rows2) == sorted(o for _, _, o in hidden.records)
    finally:
        reader.stop()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_transaction_markers_and_read_timeout(bootstrap, unique_name):
    """A committed transaction's marker occupies an offset that is never delivered: measured
    here, after a commit the broker's end offset is exact (the marker is a batch of its own),
    and a reader of a range that ends on the marker finishes at once. A range beyond what
    the broker serves fails after readTimeoutMs instead of waiting forever."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic], partitions=1)
    sent = Sent()
    tx = producer(bootstrap, transactional=True)
    tx.begin_transaction()
    produce(tx, sent, topic, 5, "tx", partition=0)  # one batch of 5
    tx.commit_transaction(15)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=10,
    )
    assert [f.result(10).offset for f in res.values()] == [6]  # 0..4 + marker at 5

    # a long timeout: a reader that waited for the marker's offset would take it whole
    patient = SourceOptions.parse(source_options(bootstrap, subscribe=topic, readTimeoutMs="60000"))
    t0 = time.monotonic()
    rows = [r for b in read_ranges(patient, [KafkaRange(topic, 0, 0, 6)]) for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4]
    assert time.monotonic() - t0 < 30, "the reader waited for the marker's offset"
    opts = SourceOptions.parse(source_options(bootstrap, subscribe=topic, readTimeoutMs="2000"))
    assert [r["offset"] for b in read_ranges(opts, [KafkaRange(topic, 0, 5, 6)]) for r in b.to_pylist()] == []
    earliest = [KafkaRange(topic, 0, OFFSET_EARLIEST, 3)]
    assert [r["offset"] for b in read_ranges(opts, earliest) for r in b.to_pylist()] == [0, 1, 2]

    with pytest.raises(KafkaSourceError, match="no progress"):
        for _ in read_ranges(opts, [KafkaRange(topic, 0, 0, 9)]):
            pass


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_one_consumer_reads_ranges_of_several_partitions(bootstrap, unique_name):
    """A packed task: ranges of three partitions of two topics (two plain ones, one new in the
    batch that ends on a transaction marker) read together, every record once, with its own
    topic and partition. A range past what the broker serves still fails after the timeout."""
    a, b = f"{unique_name}.db.a", f"{unique_name}.db.b"
    create_topics(bootstrap, [a], partitions=2)
    create_topics(bootstrap, [b], partitions=1)
    sent = Sent()
    p = producer(bootstrap)
    produce(p, sent, a, 30, "a0", partition=0)
    produce(p, sent, a, 7, "a1", partition=1)
    p.flush(15)
    tx = producer(bootstrap, transactional=True)
    tx.begin_transaction()
    produce(tx, sent, b, 12, "b", partition=0)
    tx.commit_transaction(15)  # offsets 0..11, the marker at 12
    # a long timeout: a reader that waited for the marker or a finished partition takes it whole
    patient = SourceOptions.parse(source_options(bootstrap, subscribe=f"{a},{b}", readTimeoutMs="60000"))
    opts = SourceOptions.parse(source_options(bootstrap, subscribe=f"{a},{b}", readTimeoutMs="5000"))
    ranges = [KafkaRange(a, 0, 10, 30), KafkaRange(a, 1, 2, 5), KafkaRange(b, 0, OFFSET_EARLIEST, 13)]
    t0 = time.monotonic()
    rows = [r for batch in read_ranges(patient, ranges) for r in batch.to_pylist()]
    took = time.monotonic() - t0
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    expected = sorted(
        [(a, 0, o) for o in range(10, 30)] + [(a, 1, o) for o in range(2, 5)] + [(b, 0, o) for o in range(12)]
    )
    assert got == expected
    for r in rows:
        key, value, _ = sent.records[(r["topic"], r["partition"], r["offset"])]
        assert (r["key"], r["value"]) == (key, value)
    assert took < 30, f"the reader waited {took:.1f}s (for the marker, or a finished partition)"
    assert list(read_ranges(opts, [KafkaRange(a, 1, 7, 7)])) == []
    with pytest.raises(KafkaSourceError, match="no progress"):
        for _ in read_ranges(opts, [KafkaRange(a, 1, 0, 7), KafkaRange(a, 0, 25, 40)]):
            pass


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_tick_file_brings_a_batch_without_records(bootstrap, unique_name, tmp_path):
    """A raised tick file moves the pseudo-partition's offset (Spark then runs a batch),
    which is never read from Kafka; the real partitions are unaffected."""
    from merger.state.store import StateStore

    topic = f"{unique_name}.db.t"
    create_topics(bootstrap, [topic], partitions=1)
    sent, p = Sent(), producer(bootstrap)
    produce(p, sent, topic, 3, "t", partition=0)
    p.flush(15)
    store = StateStore(tmp_path / "state")
    tick = str(store.tick_path)
    reader = CdcKafkaStreamReader(source_options(bootstrap, subscribe=topic, tickFile=tick), SCHEMA)
    try:
        start = reader.initialOffset()
        end, rows = drain(reader, start)
        assert parse_offsets(end) == {(topic, 0): 3} and len(rows) == 3  # no tick yet: no pseudo-partition
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new: no batch
        store.raise_tick(7)
        ticked = reader.latestOffset(end, ReadAllAvailable())
        assert parse_offsets(ticked) == {(topic, 0): 3, TICK_TP: 7}
        assert list(reader.partitions(end, ticked)) == []  # nothing to read
        assert reader.latestOffset(ticked, ReadAllAvailable()) == ticked  # not raised again: no batch
        produce(p, sent, topic, 2, "u", partition=0)
        p.flush(15)
        more, rows = drain(reader, ticked)
        assert parse_offsets(more) == {(topic, 0): 5, TICK_TP: 7} and len(rows) == 2
    finally:
        reader.stop()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_batch_admits_records_by_their_learned_size(bootstrap, unique_name, tmp_path):
    """batchMemoryBytes: a topic of wide records gets as many records as its share of the
    budget pays for, a narrow topic beside it is not held back, and a topic without a
    learned size starts with budget/64 per record. Then reading what was admitted learns
    the sizes, as the merger's processor does."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from merger.kafka.admission import UNKNOWN_SHARE, learn, observed_sizes, record_cost
    from merger.state.store import StateStore

    wide, narrow = f"{unique_name}.db.wide", f"{unique_name}.db.narrow"
    create_topics(bootstrap, [wide, narrow], partitions=1)
    p = producer(bootstrap)
    for i in range(40):
        p.produce(wide, key=f"w{i}".encode(), value=b"w" * 200_000)
    for i in range(200):
        p.produce(narrow, key=f"n{i}".encode(), value=b"n" * 100)
    p.flush(15)
    store = StateStore(tmp_path / "state")
    budget = 4 * 1024 * 1024
    opts = source_options(
        bootstrap,
        subscribePattern=rf"^{unique_name}\..*",
        batchMemoryBytes=str(budget),
        recordSizesFile=str(store.record_sizes_path),
    )
    reader = CdcKafkaStreamReader(opts, SCHEMA)
    try:
        start = reader.initialOffset()
        # nothing learned: budget/64 per record, shared by the two topics (32 records)
        first = parse_offsets(reader.latestOffset(start, ReadMaxRows(100_000)))
        assert first == {(wide, 0): UNKNOWN_SHARE // 2, (narrow, 0): UNKNOWN_SHARE // 2}
        store.save_record_sizes({wide: 200_004, narrow: 104})
        end = reader.latestOffset(start, ReadMaxRows(100_000))
        admitted = parse_offsets(end)
        # the narrow topic's 200 records (8.6 KB each) fit its half; the wide one gets the rest
        assert admitted[(narrow, 0)] == 200
        left = budget - 200 * record_cost(104, budget)
        assert admitted[(wide, 0)] == int(left // record_cost(200_004, budget)) < 40
        rows = []
        for r in reader.partitions(start, end):
            for batch in reader.read(r):
                rows.append(batch)
        import pyarrow as pa

        from merger.batch.records import kafka_rows

        seen = observed_sizes(kafka_rows(pa.Table.from_batches(rows)))
        k = admitted[(wide, 0)]
        narrow_bytes = sum(len(f"n{i}") + 100 for i in range(200))
        assert seen == {wide: (k, sum(len(f"w{i}") + 200_000 for i in range(k))), narrow: (200, narrow_bytes)}
        assert learn({}, seen)[narrow] == narrow_bytes / 200
        # max_rows first (5 each), then the budget: the wide topic gets what is left of it
        few = parse_offsets(reader.latestOffset(start, ReadMaxRows(10)))
        wide_few = int((budget - 5 * record_cost(104, budget)) // record_cost(200_004, budget))
        assert few == {(wide, 0): min(5, wide_few), (narrow, 0): 5}
    finally:
        reader.stop()
