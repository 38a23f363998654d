"""The merger as a Spark Structured Streaming application.

    cdc merge -c merger.yaml                 # local mode (spark_master in the config)
    spark-submit --py-files cdc.zip merger/app.py -c merger.yaml

One streaming query reads every table topic of the prefix (and the schema-change topic)
through the ``cdc_kafka`` Python data source and hands each micro-batch, as Arrow, to
``BatchProcessor``; a driver thread (``SnapshotRunner``) cuts snapshots into watermark
windows and reads them through Spark JDBC.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import threading
import time
from pathlib import Path

from cdc.config import MergerConfig, load_model, routes_of
from cdc.wire.topics import dead_letter_topic, offsets_topic, source_topics_pattern
from merger.batch.records import UNREAD_COLUMNS, header_pairs
from merger.collector import collect_less
from merger.errors import MergerError
from merger.sinks.fanout import SinkRetry
from merger.sinks.registry import build_sinks
from merger.sources import source_kind
from merger.spark import progress as spark_progress
from merger.spark.cluster_reach import check_state_dir_reached
from merger.spark.session import make_spark, quiet_stopping_tasks, stop_spark
from merger.state.store import PROMPT_FILE, RECORD_SIZES_FILE, TICK_FILE, TOPIC_IDS_FILE

log = logging.getLogger(__name__)

DEAD_LETTER_TIMEOUT_S = 30.0  # the broker's acknowledgement of a dead-letter record
PY4J_LOGGER = "py4j.clientserver"  # logs an exception raised in foreachBatch, with its traceback


class _ReportedElsewhere(logging.Filter):
    """Drops py4j's "exception while executing the Python Proxy" record (with its Python
    traceback) for an error the merger reports in one line itself (``processor.fatal``);
    any other exception keeps its record."""

    def __init__(self, reported):
        super().__init__()
        self.reported = reported

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or not (exc is self.reported() or isinstance(exc, BatchStopped))


class BatchStopped(RuntimeError):
    """A micro-batch given up because the merger stops (its Spark job was cancelled): not
    an error; the batch runs again at the next start."""


def stopped_batch_error(exc: BaseException) -> BatchStopped:
    """What foreachBatch raises for ``exc`` while the query stops: one short line per Java
    cause. Spark tells a stop from a failure by the error's text, with a regex
    (``StreamExecution.PROXY_ERROR``: ``((.|\\r\\n|\\r|\\n)*)`` after "Py4JJavaError: An error
    occurred while calling") whose matcher recurses once per character: the Python traceback
    of a cancelled job, which holds Java's stack trace, made the stream thread die with a
    StackOverflowError. The short text keeps what Spark looks for in a cancellation
    (``SparkException``, "cancelled", the query's job group) and no "Py4JJavaError"."""
    lines = []
    java = getattr(exc, "java_exception", None)
    try:
        while java is not None and len(lines) < 6:
            lines.append(str(java.toString()).strip().splitlines()[0][:400])
            java = java.getCause()
    except Exception:  # the JVM is going away: what was read is enough
        pass
    if not lines:
        text = str(exc).strip().splitlines()
        lines.append(f"{type(exc).__name__}: {text[0][:400] if text else ''}")
    return BatchStopped("micro-batch stopped: " + " <- ".join(lines).replace("Py4JJavaError", "Py4J error"))


def subscribe_pattern(config: MergerConfig) -> str:
    """The schema-change topic and every table topic ``<prefix>.<db>.<table>`` (dots are
    allowed in the table part, not in the database part: Debezium does not escape them, so
    ``<prefix>.a.b.c`` can only be read one way). Topics of the changelog sink are left
    out when its prefix lies inside ours (``cdc.wire.topics.source_topics_pattern``)."""
    changelog = config.sinks.kafka_changelog
    return source_topics_pattern(config.topic_prefix, changelog.topic_prefix if changelog else None)


def source_options(config: MergerConfig, read_slots: int = 1) -> dict[str, str]:
    """Options of the ``cdc_kafka`` data source: every Kafka client setting of the config
    (TLS/SASL included). Secrets are passed by reference (``kafkaSecretEnv.<property>`` /
    ``kafkaSecretFile.<property>``): the data source reads them itself, so no secret is in
    the options, the query plan or the checkpoint. ``read_slots``: the tasks a large batch
    is spread over at least (:func:`read_slots`)."""
    opts = {
        "kafka.bootstrap.servers": config.kafka.bootstrap_servers,
        "subscribePattern": subscribe_pattern(config),
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(config.max_records_per_trigger),
        "recordsPerTask": str(config.records_per_task),
        # a large batch (a backlog) is read by at least this many tasks, in parallel
        "minPartitions": str(max(1, read_slots)),
        "endProbe": config.end_probe,
        # the processor raises the number in this file when snapshot rows are left
        # to emit: the source then gives Spark a reason for another micro-batch
        "tickFile": str(Path(config.state_dir).resolve() / TICK_FILE),
        # each batch's records fit the memory budget by the record sizes the processor learns
        "batchMemoryBytes": str(config.batch_memory_mb * 1024 * 1024),
        "recordSizesFile": str(Path(config.state_dir).resolve() / RECORD_SIZES_FILE),
        # the ids of the topics read: a topic deleted and created again stops the source
        "topicIdsFile": str(Path(config.state_dir).resolve() / TOPIC_IDS_FILE),
        # an unreachable broker is waited for (no new batch, a line per attempt), this long at most
        "brokerOutageMaxS": str(config.kafka.outage_max_s),
    }
    if config.kafka.request_timeout_s:
        opts["probeTimeoutMs"] = str(int(config.kafka.request_timeout_s * 1000))
    if config.min_batch_gap_ms:
        opts["minBatchGapMs"] = str(config.min_batch_gap_ms)
        # the snapshot runner's watermarks are read at once, not held by the gap
        opts["promptFile"] = str(Path(config.state_dir).resolve() / PROMPT_FILE)
    if source_kind(config.source_connector).follows_moved_topics and config.end_check_all_ms:
        # ingest's position records name the topics each transaction wrote: between checks of
        # every partition's end, only those topics' ends are asked for (merger.kafka.end_check)
        opts["movedTopicsFrom"] = offsets_topic(config.topic_prefix)
        opts["endCheckAllMs"] = str(config.end_check_all_ms)
    for k, v in config.kafka.extra.items():
        opts[f"kafka.{k}"] = str(v).lower() if isinstance(v, bool) else str(v)
    for prop, (kind, ref) in config.kafka.secret_sources().items():
        opts[f"kafkaSecret{kind.capitalize()}.{prop}"] = ref
    return opts


class Merger:
    def __init__(self, config: MergerConfig):
        self.config = config
        self.stop_event = threading.Event()
        self.query = None
        self._reported_elsewhere = _ReportedElsewhere(lambda: None)  # on py4j's logger while a query runs

    def run(self, stop: threading.Event | None = None) -> None:
        """Runs until stopped; records why it ended in state_dir (``cdc status`` shows it)."""
        self.locked_store = None
        try:
            self._run(stop)
        except BaseException as exc:
            if self.locked_store is not None:
                self.locked_store.write_exit(_short(exc) if not isinstance(exc, KeyboardInterrupt) else "interrupted")
            raise
        if self.locked_store is not None:
            self.locked_store.write_exit(None)

    def _run(self, stop: threading.Event | None = None) -> None:
        from cdc.metrics_http import serve as serve_metrics
        from merger.kafka.datasource import CdcKafkaDataSource
        from merger.mysql.checks import check_source, source_servers
        from merger.mysql.source import SourceGuard
        from merger.snapshot.runner import SnapshotRunner
        from merger.verify.continuous import ContinuousVerifier

        cfg = self.config
        stop = stop or self.stop_event
        # every secret first: a variable that is not set or a file that cannot be read is a
        # one-line error before anything connects
        cfg.mysql.jdbc_secret_properties(), cfg.mysql.ssl()
        if cfg.sinks.postgres:
            cfg.sinks.postgres.settings()
        store = self._open_state()
        kafka_conf = cfg.kafka.client_config()
        partitions_of = _partition_counter(kafka_conf, cfg.kafka.bootstrap_servers)
        accepts = table_filter(cfg)
        # credentials and privileges, before Spark starts (a source that is down is waited for)
        for server, captured in source_servers(cfg, accepts):
            SourceGuard(stop, max_delay_s=cfg.retry_max_s).call(
                "checking the source user's privileges", check_source, server, captured
            )
        sinks = build_sinks(cfg)
        for sink in sinks:  # reaches each sink's storage: an unreachable one is a one-line error here
            sink.claim_writer(store.writer_id())
        # one guard for every source access (catalog, planning, watermarks, chunk reads):
        # retries with backoff while the source is down, shown in `cdc status`
        source_guard = SourceGuard(stop, max_delay_s=cfg.retry_max_s)
        processor = self._processor(store, sinks, kafka_conf, partitions_of, accepts, source_guard)
        source_guard.on_change = lambda: _publish_if_idle(processor)
        serve_metrics(cfg.metrics_port, cfg.metrics_address)
        spark = make_spark(cfg)
        try:
            check_state_dir_reached(spark, Path(cfg.state_dir))  # on a cluster: staged windows must be shared
            spark.dataSource.register(CdcKafkaDataSource)
            runner = SnapshotRunner(cfg, spark, store, processor, source_guard)
            runner.ensure_watermark_table()
            if cfg.snapshot.auto_new_tables:
                # existing tables are snapshotted at the first start, changed or not
                for name in processor.catalog.list_tables():
                    if accepts(name) and store.load_plan(name) is None:
                        store.request("snapshot", name, where=None, auto=True)
            progress = _BatchProgress(os.environ.get("CDC_MERGER_PROGRESS_LOG"))
            self.query = self._start_query(spark, processor, store, progress, stop)
            collect_less()
            runner.stream_ready = _stream_ready(self.query, processor)
            processor.reader_behind = _reader_behind(self.query)
            processor.reader_ends = _reader_ends(self.query)
            runner.start()
            verifier = None
            why_not = ContinuousVerifier.wanted(cfg)
            if why_not is None:
                verifier = ContinuousVerifier(cfg, store, processor.tables)
                processor.verify_passes = verifier.passes
                verifier.start()
                log.info("background verify: %g chunks a minute", cfg.verify.continuous.chunks_per_minute)
            elif why_not != "off":
                log.warning("verify.continuous is set but does not run: %s", why_not)
            log.info("merger running: topics %s, state in %s", subscribe_pattern(cfg), cfg.state_dir)
            try:
                self._watch(stop, processor, runner, progress)
            finally:
                stop.set()  # ends the source guard's retries too
                runner.stop_event.set()
                if verifier is not None:
                    verifier.stop_event.set()
                quiet_stopping_tasks(spark)
                try:
                    self.query.stop()
                except Exception:
                    pass
                runner.join(timeout=30)
                for sink in sinks:
                    try:
                        sink.close()
                    except Exception:
                        pass
        finally:
            # the JVM goes before the error is printed: its shutdown messages would follow
            # the one-line error on stderr
            stop_spark(spark)
            logging.getLogger(PY4J_LOGGER).removeFilter(self._reported_elsewhere)

    def _open_state(self):
        from merger.state.store import StateStore

        store = StateStore(self.config.state_dir)
        store.lock()
        self.locked_store = store
        for leftover in store.clear_interrupted_checkpoint_writes():
            log.info("removed %s from the checkpoint (a write interrupted by a crash)", leftover)
        return store

    def _processor(self, store, sinks, kafka_conf, partitions_of, accepts, source_guard):
        from merger.batch.processor import BatchProcessor
        from merger.schema.canonical import SourceModes
        from merger.schema.catalog import ShardedCatalog, SourceCatalog

        cfg = self.config

        def on_new_table(name: str) -> None:
            if cfg.snapshot.auto_new_tables and store.load_plan(name) is None:
                store.request("snapshot", name, where=None, auto=True)

        return BatchProcessor(
            cfg.topic_prefix,
            store,
            sinks,
            (
                ShardedCatalog({s.name: s.mysql for s in cfg.shards} or {None: cfg.mysql}, routes_of(cfg), source_guard)
                if cfg.shards or cfg.routes
                else SourceCatalog(cfg.mysql, source_guard)
            ),
            partitions_of,
            SourceModes(),
            accepts=accepts,
            chunk_keys=cfg.snapshot.chunk_keys,
            on_bad_record=cfg.on_bad_record,
            dead_letter=self._dead_letter_writer(kafka_conf),
            window_timeout_s=cfg.snapshot.window_timeout_s,
            on_new_table=on_new_table,
            emit_rows_per_batch=cfg.snapshot.emit_rows_per_batch,
            source_connector=cfg.source_connector,
            on_drop=cfg.on_drop,
            sharded=bool(cfg.shards),
            key_mode=cfg.key_mode,
            sink_retry=SinkRetry(cfg.retry_max_s, cfg.sink_outage_max_s),
        )

    def _start_query(self, spark, processor, store, progress: "_BatchProgress", stop: threading.Event):
        """The one streaming query: every table topic through cdc_kafka, each micro-batch
        handed to the processor as Arrow. ``stop``: set before the query is stopped."""
        from merger import metrics
        from merger.kafka.driver_read import planned_tasks, read_here, read_in_driver
        from merger.kafka.options import SourceOptions
        from merger.sinks.base import SinkStop

        cfg = self.config
        reader = spark.readStream.format("cdc_kafka")
        options = source_options(cfg, read_slots(spark))
        for k, v in options.items():
            reader = reader.option(k, v)
        driver_opts = SourceOptions.parse(options) if cfg.batch_reads != "spark" else None
        local = spark.sparkContext.master.startswith("local")  # not a cluster's executors
        # the batch's one-line fatal error (on_bad_record: stop) needs no Python traceback
        self._reported_elsewhere.reported = lambda: processor.fatal
        logging.getLogger(PY4J_LOGGER).addFilter(self._reported_elsewhere)

        def on_batch(batch_df, batch_id: int) -> None:
            t0 = time.monotonic()
            planned = planned_tasks(batch_df) if driver_opts is not None else None
            in_driver = planned is not None and read_in_driver(cfg.batch_reads, local, len(planned))
            try:
                if in_driver:
                    records = read_here(driver_opts, planned, stop.is_set)
                else:
                    records = batch_df.drop(*UNREAD_COLUMNS).toArrow()
            except Exception as exc:
                if stop.is_set():  # query.stop() cancelled the batch's job: no failure
                    log.info("micro-batch %d not finished: the merger stops", batch_id)
                    raise stopped_batch_error(exc) from None
                raise
            t1 = time.monotonic()
            tasks = 0 if in_driver else read_tasks(batch_df) if len(records) else 0
            if tasks > 1:
                log.info("micro-batch %d: %d records read by %d Spark tasks", batch_id, len(records), tasks)
            try:
                processor.process(batch_id, records)
            except SinkStop as exc:
                processor.fatal = exc  # the merger stops with this one line, not Spark's wrapping of it
                raise
            except Exception as exc:
                if stop.is_set():
                    log.info("micro-batch %d not finished: the merger stops", batch_id)
                    raise stopped_batch_error(exc) from None
                raise
            t2 = time.monotonic()
            metrics.observe(processor.status())
            if tasks:
                metrics.READ_TASKS.set(tasks)
            progress.record(
                batch_id, t0, t1, t2, {"readTasks": tasks, "records": len(records), **processor.last_timing}
            )

        writer = (
            reader.load()
            .writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", str(store.checkpoint))
            .queryName("cdc-merger")
        )
        if cfg.trigger_interval_ms:
            writer = writer.trigger(processingTime=f"{cfg.trigger_interval_ms} milliseconds")
        return writer.start()

    def _watch(self, stop: threading.Event, processor, runner, progress: "_BatchProgress") -> None:
        """Until stopped: fails on a stopped query or snapshot runner; status every second."""
        last_status, logged_batch = 0.0, -1
        while not stop.is_set():
            if not self.query.isActive:
                if processor.fatal is not None:
                    raise processor.fatal  # our own one-line reason, not Spark's wrapping
                exc = self.query.exception()
                # Spark's own log of it is off (merger.spark.session): its trace goes here
                log.error("streaming query stopped: %s", _with_trace(exc))
                raise MergerError(f"streaming query stopped: {_short(exc)}")
            if runner.error is not None:
                raise MergerError(f"snapshot failed: {_short(runner.error)}")
            if time.monotonic() - last_status > 1.0:
                with processor.tables.locked():
                    processor.publish_status()
                last_status = time.monotonic()
                logged_batch = _log_slow_batch(self.query, logged_batch)
                progress.append(self.query)
            stop.wait(0.2)

    def _dead_letter_writer(self, kafka_conf: dict):
        from confluent_kafka import Producer

        producer = Producer(kafka_conf)
        topic = dead_letter_topic(self.config.topic_prefix)

        def write(record: dict, reason: str) -> None:
            headers = header_pairs(record.get("headers"))
            headers += [
                ("cdc.dlq.reason", reason.encode()),
                ("cdc.dlq.topic", record["topic"].encode()),
                ("cdc.dlq.partition", str(record["partition"]).encode()),
                ("cdc.dlq.offset", str(record["offset"]).encode()),
            ]
            failed = []
            producer.produce(
                topic,
                key=record.get("key"),
                value=record.get("value"),
                headers=headers,
                on_delivery=lambda err, _msg: err is not None and failed.append(err),
            )
            # confirmed before the batch goes on: a record the broker did not take would be lost
            if producer.flush(DEAD_LETTER_TIMEOUT_S) or failed:
                why = failed[0] if failed else f"no acknowledgement within {DEAD_LETTER_TIMEOUT_S:.0f}s"
                raise MergerError(
                    f"cannot write the record at topic {record['topic']} partition {record['partition']} offset "
                    f"{record['offset']} to the dead-letter topic {topic}: {why}. The batch is not committed; "
                    f"the merger reads it again when restarted (check the broker and the topic)"
                )

        return write


def table_filter(config: MergerConfig):
    """Which source tables the merger takes: table_include / table_exclude, never the
    snapshot bookkeeping tables (ours and Debezium's)."""
    include = [re.compile(p) for p in config.table_include]
    exclude = [re.compile(p) for p in config.table_exclude]

    @functools.lru_cache(maxsize=4096)  # asked per record: the regexes were 9% of the driver's Python
    def accepts(name: str) -> bool:
        if name in (config.watermark_table, config.signal_table):
            return False
        if include and not any(p.fullmatch(name) for p in include):
            return False
        return not any(p.fullmatch(name) for p in exclude)

    return accepts


def _partition_counter(kafka_conf: dict, bootstrap: str):
    """A topic's partition count, asked of the broker once it exists (the broker is
    checked reachable first)."""
    from confluent_kafka.admin import AdminClient

    from cdc.kafka_topics import partition_count

    admin = AdminClient(kafka_conf)
    try:
        admin.list_topics(timeout=15)
    except Exception as exc:
        raise MergerError(f"Kafka broker unreachable at {bootstrap}: {exc}") from None
    partitions: dict[str, int] = {}

    def partitions_of(topic: str) -> int:
        if topic not in partitions:
            count = partition_count(admin, topic, 15)  # this topic alone, never creating it
            if count is None:
                return 1  # not created yet: asked again when its records arrive
            partitions[topic] = count
        return partitions[topic]

    return partitions_of


def _reader_behind(query):
    """The partitions, as (topic, partition), where the last micro-batch stopped short of
    the end its planning saw (the admission's cut): snapshot windows wait there rather than
    expire. One call per batch's expiry check: each reads Spark's progress over Py4J (~0.1 s
    with 1,500 partitions through pyspark's lastProgress; once per table it held batches for
    seconds at 500 tables: now only the two offsets cross, merger.spark.progress)."""
    from merger.kafka.offsets import lagging_partitions

    def behind() -> set[tuple[str, int]]:
        try:
            lagging = set()
            for end, latest in spark_progress.source_offsets(query):
                lagging |= lagging_partitions(end, latest)
        except Exception as exc:  # unknown: the window expires as it always did
            log.warning("which partitions the reader is behind in is unknown (%s): timed-out windows expire", exc)
            return set()
        return lagging

    return behind


def _reader_ends(query):
    """The next offset the reader reads in each (topic, partition): the last batch done's end
    (Spark's progress), for positional windows' read-through; unknown: none passed yet."""
    from merger.kafka.offsets import parse_offsets

    def ends() -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        try:
            for end, _latest in spark_progress.source_offsets(query):
                if end:
                    out.update(parse_offsets(json.loads(end) if isinstance(end, str) else end))
        except Exception as exc:  # asked again at the next batch
            log.warning("where the reader stands is unknown (%s): positional windows wait", exc)
            return {}
        return out

    return ends


def _stream_ready(query, processor):
    def ready() -> bool:
        if processor.last_batch is not None:
            return True
        status = query.status  # no data at all: no batch, but the trigger waits
        return not status["isTriggerActive"] and status["message"].startswith("Waiting")

    return ready


class _BatchProgress:
    """Diagnostics (CDC_MERGER_PROGRESS_LOG): every micro-batch's progress (Spark's time
    split, and ours of addBatch) as JSON lines."""

    def __init__(self, path: str | None):
        self.path = path
        self.batch_times: dict = {}  # batch id -> our own split of addBatch
        self.seen = -1

    def record(self, batch_id: int, t0: float, t1: float, t2: float, timing: dict) -> None:
        if not self.path:
            return
        self.batch_times[batch_id] = {
            "readMs": int(1000 * (t1 - t0)),
            "processMs": int(1000 * (t2 - t1)),
            "statusMs": int(1000 * (time.monotonic() - t2)),
            **timing,
        }
        self.batch_times.pop(batch_id - 200, None)

    def append(self, query) -> None:
        if self.path:
            self.seen = _append_progress(query, self.seen, self.path, self.batch_times)


def read_tasks(batch_df) -> int:
    """The number of Spark tasks that read a micro-batch's records from Kafka (the source's
    input partitions: ``merger.kafka.offsets.pack_ranges``), 0 if Spark does not tell.
    foreachBatch hands Python the batch as a scan of the batch's RDD, whose partitions are
    those tasks; asked after the read, so nothing is planned again (about 1 ms)."""
    try:
        leaves = batch_df._jdf.queryExecution().executedPlan().collectLeaves()
        return sum(leaves.apply(i).rdd().getNumPartitions() for i in range(leaves.size()))
    except Exception:  # another Spark's plan: the figure is diagnostics only
        return 0


def read_slots(spark) -> int:
    """The Kafka read tasks of a large micro-batch: Spark's task slots (its default
    parallelism), in local mode at most the machine's cores (the local master has two slots
    more than the snapshot reads, and a read task is a Python worker converting records on
    those cores: more tasks than cores only contend)."""
    from merger.snapshot.chunk_read import launched_locally

    slots = spark.sparkContext.defaultParallelism
    if launched_locally():
        slots = min(slots, os.cpu_count() or 1)
    return max(1, slots)


def _log_slow_batch(query, logged: int) -> int:
    """Spark's time split of the last micro-batch, when it was slow (> 2 s): where a
    batch's time goes outside our own processing (planning, reading Kafka, Arrow)."""
    try:
        if spark_progress.last_batch_id(query) in (None, logged):
            return logged
        last = spark_progress.last_batch(query)
    except Exception:
        return logged
    if last is None:
        return logged
    took = last.duration_ms
    if took.get("triggerExecution", 0) > 2000:
        log.info(
            "slow micro-batch %s: %s",
            last.batch_id,
            ", ".join(f"{k} {v} ms" for k, v in sorted(took.items(), key=lambda kv: -kv[1])),
        )
    return last.batch_id


def _append_progress(query, seen: int, path: str, ours: dict) -> int:
    try:
        recent = spark_progress.batches_after(query, seen)
    except Exception:
        return seen
    with open(path, "a") as f:
        for b in recent:
            f.write(
                json.dumps(
                    {
                        "batchId": b.batch_id,
                        "timestamp": b.timestamp,
                        # a batch the driver read ran no Spark job: Spark counts no rows
                        "numInputRows": (ours.get(b.batch_id) or {}).get("records", b.num_input_rows),
                        "durationMs": b.duration_ms,
                        "addBatchSplit": ours.get(b.batch_id),
                    }
                )
                + "\n"
            )
            seen = b.batch_id
    return seen


def _publish_if_idle(processor) -> None:
    """Status now, unless a batch holds the processor (it publishes its own retries)."""
    if processor.tables.try_lock():
        try:
            processor.publish_status()
        finally:
            processor.tables.unlock()


def _with_trace(exc) -> str:
    desc = getattr(exc, "_desc", None) or str(exc)
    trace = getattr(exc, "_stackTrace", None)
    return f"{desc}\n{trace}" if trace else desc


def _short(exc) -> str:
    text = str(exc) if exc is not None else "unknown error"
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if "Error:" in line or "Exception:" in line:
            return line.strip()[:500]
    return (lines[0] if lines else text)[:500]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="merger")
    ap.add_argument("-c", "--config", required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    Merger(load_model(MergerConfig, args.config)).run()


if __name__ == "__main__":
    main()
