"""Kafka merged-changelog sink: every change the merger applies, as a Debezium-format JSON
record on ``<topic_prefix>.<db>.<table>``.

Records
-------
* key: the key columns as a JSON object (``{"id":1}``, compact, key-column order);
  partition = Kafka's default murmur2 partitioner over those bytes
  (``cdc.wire.partitioner.partition_for``), so a Java producer would agree.
* value: ``{"before", "after", "source", "op", "ts_ms", "transaction"}`` (Debezium's JSON
  converter with ``schemas.enable=false``). ``op`` is the change's ``_cdc_op`` (snapshot rows
  stay ``r``). c/u/r carry ``after`` (``before`` is null: the merger only has after
  images); d carries ``before`` = the delete's row (key columns, others as given). If the
  batch has a ``_cdc_source`` column (JSON text, embedded as is), it is the ``source``; otherwise a
  ``source`` block naming the merger is synthesized. ``_cdc_ts_ms`` (int64) sets ``ts_ms``.
* a delete is followed by a tombstone (same key, null value) unless ``tombstones=False``.
* headers: ``cdc.seq`` (the change's sequence) and ``cdc.version`` (the batch version).
* values use Debezium's default encodings: decimal = base64 of the unscaled big-endian
  two's-complement bytes (``decimal_handling="precise"``; or ``"string"``, ``"double"``),
  binary = base64, BIT(n>1) = base64 of the little-endian bytes (``io.debezium.data.Bits``;
  the other sinks hold them big-endian, see ``types.BIT_WIDTH``), date = days since epoch,
  timestamp (no tz) = microseconds since epoch (MicroTimestamp), timestamp with tz =
  ISO-8601 UTC string (ZonedTimestamp), time and duration = microseconds (MicroTime),
  JSON = the JSON text, floats NaN/Infinity as strings (Jackson's default).
* table and database names are made topic-safe like Debezium does (characters outside
  ``[A-Za-z0-9._-]`` become ``_``); two tables mapping to the same topic are refused.

Exactly once
------------
All records of one ``apply`` plus a record ``(table) -> {"version": v, ...}`` on the
compacted control topic ``<topic_prefix>._cdc.changelog_versions`` are written in one
Kafka transaction (the control record last, after every change was acknowledged, so no
broker, not even one showing aborted records, shows a version ahead of its changes). On
start the sink reads the control topic back (versions, key columns, schemas) and, per
table on first use, the changelog topic itself to rebuild the per-key sequences (the
"what the sink holds" of the sequence guard; deleted keys included). A version at or
below the recorded one is skipped.

Truncate writes, for every key it holds, a delete (live keys) and a tombstone, all with
header ``cdc.truncate``, so a consumer materializing the topic ends up empty and so the
sequences are forgotten on rebuild too. (A Debezium ``t`` event would need a null key,
which compacted topics refuse.) ``delete_origin`` (``cdc shard remove``) writes the same
delete and tombstone for each live key whose origin key column names the shard.

Limits: the sequence state is a dict in memory (one entry per key ever seen, also after
delete); rebuilding it reads the whole topic. With compaction, tombstones disappear after
``delete.retention.ms``, and with them the memory of a delete after a restart.
A sink instance serializes its ``apply`` calls (one transactional producer).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from cdc.wire.partitioner import partition_for
from cdc.wire.topics import INVALID_TOPIC_CHARS, changelog_topic_safe
from merger.sinks import types as T
from merger.sinks.base import (
    DELETE_OP,
    Changes,
    IncompatibleSchemaChange,
    Sink,
    SinkError,
    SinkUnavailable,
    TableId,
    as_table_id,
    check_keys,
    latest_per_key,
    user_fields,
)
from merger.sinks.kafka_changelog.codec import _DUMPS, SEQ_HEADER, VERSION_HEADER, ChangelogCodec

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError as _exc:  # pragma: no cover
    raise ImportError("the Kafka changelog sink needs confluent-kafka") from _exc

log = logging.getLogger(__name__)

TRUNCATE_HEADER = "cdc.truncate"


def _err_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


@dataclass
class _State:
    table: TableId
    topic: str
    keys: list[str]
    columns: dict[str, pa.DataType]  # user column -> storage type
    version: int = -1
    partitions: int = 0
    seqs: dict[bytes, int] | None = None  # key bytes -> sequence held (deleted keys included)
    live: set[bytes] = field(default_factory=set)
    bits: dict[str, int] = field(default_factory=dict)  # BIT(n>1) column -> n

    def control_value(self) -> bytes:
        schema = pa.schema(
            [
                pa.field(c, t, metadata={T.BIT_WIDTH: str(self.bits[c]).encode()} if c in self.bits else None)
                for c, t in self.columns.items()
            ]
        )
        return json.dumps(
            {
                "version": self.version,
                "keys": self.keys,
                "topic": self.topic,
                "schema": base64.b64encode(schema.serialize().to_pybytes()).decode(),
            }
        ).encode()


class KafkaChangelogSink(ChangelogCodec, Sink):
    def __init__(
        self,
        bootstrap: "str | Mapping[str, Any]",
        topic_prefix: str,
        *,
        transactional_id: str | None = None,
        partitions: int = 1,
        tombstones: bool = True,
        compact: bool = True,
        decimal_handling: str = "precise",
        timeout_s: float = 30.0,
    ):
        self.client = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else dict(bootstrap)
        if not topic_prefix or INVALID_TOPIC_CHARS.search(topic_prefix):
            raise SinkError(f"invalid topic prefix {topic_prefix!r} (allowed: letters, digits, '.', '_', '-')")
        if decimal_handling not in ("precise", "string", "double"):
            raise SinkError(f"decimal_handling must be precise, string or double, not {decimal_handling!r}")
        self.prefix = topic_prefix
        self.control_topic = f"{topic_prefix}._cdc.changelog_versions"
        self.transactional_id = transactional_id or f"cdc-changelog-{topic_prefix}"
        self.partitions = partitions
        self.tombstones = tombstones
        self.compact = compact
        self.decimal_handling = decimal_handling
        self.timeout = timeout_s
        self._lock = threading.RLock()
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._states: dict[TableId, _State] | None = None
        self._errors: list[str] = []

    # ------------------------------------------------------------------ plumbing

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(dict(self.client))
            try:
                self._admin.list_topics(timeout=min(self.timeout, 10))
            except KafkaException as exc:
                self._admin = None
                raise SinkUnavailable(
                    f"Kafka broker {self.client.get('bootstrap.servers')} is unreachable: {_err_text(exc)}"
                ) from None
        return self._admin

    def _topic_partitions(self, topic: str, create: int, compact: bool) -> int:
        admin = self._admin_client()
        try:
            # never ask the broker about one topic by name: that auto-creates it (Tansu; Kafka
            # with auto.create.topics.enable) with the broker's default partition count
            meta = admin.list_topics(timeout=self.timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                config = {"cleanup.policy": "compact"} if compact else {}
                fut = admin.create_topics(
                    [NewTopic(topic, num_partitions=create, replication_factor=1, config=config)],
                    operation_timeout=self.timeout,
                )
                try:
                    fut[topic].result(self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                deadline = time.monotonic() + self.timeout
                while True:
                    meta = admin.list_topics(timeout=self.timeout).topics.get(topic)
                    if meta is not None and meta.error is None and meta.partitions:
                        break
                    if time.monotonic() > deadline:
                        raise SinkUnavailable(f"topic {topic} did not appear after creation")
                    time.sleep(0.1)
            return len(meta.partitions)
        except KafkaException as exc:
            raise SinkUnavailable(f"Kafka: cannot use topic {topic}: {_err_text(exc)}") from None

    def _get_producer(self) -> Producer:
        if self._producer is None:
            conf = dict(self.client)
            conf.update(
                {
                    "transactional.id": self.transactional_id,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "batch.num.messages": 10000,
                    "queue.buffering.max.messages": 1000000,
                    "queue.buffering.max.kbytes": 1048576,
                    "transaction.timeout.ms": 120000,
                }
            )
            p = Producer(conf)
            try:
                p.init_transactions(self.timeout)  # fences an earlier instance with the same id
            except KafkaException as exc:
                raise SinkUnavailable(f"Kafka: cannot initialise transactions: {_err_text(exc)}") from None
            self._producer = p
        return self._producer

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self._errors.append(err.str())

    def _read_topic(self, topic: str, handle: Callable[[Any], None], quiet_s: float = 0.5) -> None:
        """Every committed record of ``topic`` in partition order. The end is where every
        partition reached its high watermark and nothing more arrived for ``quiet_s`` (the
        local broker may under-report the high watermark)."""
        conf = dict(self.client)
        conf.update(
            {
                "group.id": f"cdc-changelog-reader-{self.prefix}",
                "enable.auto.commit": False,
                "allow.auto.create.topics": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
            }
        )
        consumer = Consumer(conf)
        try:
            meta = consumer.list_topics(timeout=self.timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return
            ends = {}
            for p in meta.partitions:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout)
                if hi > lo:
                    ends[p] = hi
            if not ends:
                return
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            quiet = None
            deadline = time.monotonic() + max(self.timeout, 60)
            while True:
                msgs = consumer.consume(10000, 0.2)
                if not msgs:
                    positions = consumer.position([TopicPartition(topic, p) for p in ends])
                    if all(tp.offset >= ends[tp.partition] for tp in positions):
                        quiet = quiet or time.monotonic()
                        if time.monotonic() - quiet >= quiet_s:
                            return
                    if time.monotonic() > deadline:
                        raise SinkUnavailable(f"Kafka: reading {topic} timed out")
                    continue
                quiet = None
                for msg in msgs:
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        raise SinkUnavailable(f"Kafka: cannot read {topic}: {msg.error().str()}")
                    handle(msg)
        except KafkaException as exc:
            raise SinkUnavailable(f"Kafka: cannot read {topic}: {_err_text(exc)}") from None
        finally:
            consumer.close()

    # ------------------------------------------------------------------ state

    def _all_states(self) -> dict[TableId, _State]:
        if self._states is None:
            self._topic_partitions(self.control_topic, 1, compact=True)
            latest: dict[bytes, bytes | None] = {}
            self._read_topic(self.control_topic, lambda m: latest.__setitem__(m.key(), m.value()))
            states = {}
            for k, v in latest.items():
                if not k or not v:
                    continue
                db, name = json.loads(k)
                d = json.loads(v)
                schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
                tid = TableId(db, name)
                states[tid] = _State(
                    tid,
                    d["topic"],
                    d["keys"],
                    {f.name: f.type for f in schema},
                    version=d["version"],
                    bits={f.name: T.bit_width(f) for f in schema if T.bit_width(f)},
                )
            self._states = states
        return self._states

    def _state(self, table: TableId) -> _State:
        st = self._all_states().get(table)
        if st is None:
            raise SinkError(f"table {table}: no changelog for it yet; call ensure_table first")
        if st.seqs is None:
            self._load_seqs(st)
        return st

    def _load_seqs(self, st: _State) -> None:
        st.partitions = self._topic_partitions(st.topic, self.partitions, self.compact)
        seqs: dict[bytes, int] = {}
        live: set[bytes] = set()

        def handle(msg):
            headers = dict(msg.headers() or [])
            key = msg.key()
            if TRUNCATE_HEADER in headers:
                seqs.pop(key, None)
                live.discard(key)
                return
            if SEQ_HEADER not in headers:
                return
            seqs[key] = int(headers[SEQ_HEADER])
            value = msg.value()
            if value is None or json.loads(value).get("op") == DELETE_OP:
                live.discard(key)
            else:
                live.add(key)

        self._read_topic(st.topic, handle)
        st.seqs, st.live = seqs, live

    def _table_key(self, table: TableId) -> bytes:
        return json.dumps([table.database, table.table], ensure_ascii=False).encode()

    # ------------------------------------------------------------------ transactions

    def _transaction(self, produce: Callable[[Producer], None], states: list[_State]) -> None:
        """Run produce() and the control records of ``states`` in one Kafka transaction."""
        p = self._get_producer()
        self._errors = []
        try:
            p.begin_transaction()
            produce(p)
            remaining = p.flush(self.timeout)
            if remaining or self._errors:
                raise SinkUnavailable(f"Kafka: changes not acknowledged: {self._errors[:1] or remaining}")
            for st in states:
                self._send(p, self.control_topic, self._table_key(st.table), st.control_value(), 0)
            p.commit_transaction(self.timeout)
            if self._errors:
                raise SinkUnavailable(f"Kafka: control record not acknowledged: {self._errors[0]}")
        except (KafkaException, SinkError) as exc:
            fatal = isinstance(exc, KafkaException) and exc.args and exc.args[0].fatal()
            try:
                if not fatal:
                    p.abort_transaction(self.timeout)
            except KafkaException:
                fatal = True
            if fatal:
                self._producer = None  # a fenced or broken producer is not reusable
            if isinstance(exc, SinkError):
                raise
            if fatal:
                raise SinkError(
                    f"Kafka transactional producer failed (fenced by another instance "
                    f"with transactional.id {self.transactional_id!r}?): {_err_text(exc)}"
                ) from None
            raise SinkUnavailable(f"Kafka transaction failed: {_err_text(exc)}") from None

    def _send(
        self,
        p: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        headers: list | None = None,
    ) -> None:
        while True:
            try:
                p.produce(
                    topic, value=value, key=key, partition=partition, headers=headers, on_delivery=self._on_delivery
                )
                return
            except BufferError:
                p.poll(0.05)

    # ------------------------------------------------------------------ ensure_table

    def ensure_table(self, table, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        table = as_table_id(table)
        keys = check_keys(table, arrow_schema, key_columns)
        if table.database == "_cdc":
            raise SinkError("database name '_cdc' is reserved by the changelog sink")
        wanted = {}
        for f in user_fields(arrow_schema):
            try:
                wanted[f.name] = T.kafka_storage_type(f.type)
            except T.UnsupportedType as exc:
                raise SinkError(f"table {table}, column {f.name!r}: {exc}") from None
        bits = {f.name: T.bit_width(f) for f in user_fields(arrow_schema) if T.bit_width(f)}
        with self._lock:
            states = self._all_states()
            st = states.get(table)
            done: list[str] = []
            if st is None:
                topic = f"{self.prefix}.{changelog_topic_safe(table.database)}.{changelog_topic_safe(table.table)}"
                clash = [s.table for s in states.values() if s.topic == topic]
                if clash:
                    raise SinkError(f"table {table}: topic {topic} is already used by table {clash[0]}")
                st = _State(table, topic, keys, dict(wanted), bits=bits)
                done.append("created")
            else:
                if set(st.keys) != set(keys):
                    raise IncompatibleSchemaChange(
                        f"incompatible schema change for {table}: key columns change from {st.keys} to {keys}"
                    )
                columns = dict(st.columns)
                for c, new in wanted.items():
                    if c not in columns:
                        columns[c] = new
                        done.append(f"added column {c} {new}")
                        continue
                    verdict = T.compare(columns[c], new)
                    if (
                        verdict == T.WIDEN
                        and self.decimal_handling == "precise"
                        and pa.types.is_decimal(new)
                        and (not pa.types.is_decimal(columns[c]) or columns[c].scale != new.scale)
                    ):
                        raise IncompatibleSchemaChange(
                            f"incompatible schema change for {table}: column {c!r} cannot change from "
                            f"{columns[c]} to {new} (decimal_handling='precise' records carry no scale; "
                            f"use decimal_handling='string' to follow scale changes)"
                        )
                    if verdict is None:
                        raise IncompatibleSchemaChange(
                            f"incompatible schema change for {table}: column {c!r} cannot change from "
                            f"{columns[c]} to {new}"
                        )
                    if verdict == T.WIDEN:
                        done.append(f"widened {c} {columns[c]} -> {new}")
                        columns[c] = new
                # BIT widths as the schema says now (columns no longer in it keep theirs)
                bits = {**{c: n for c, n in st.bits.items() if c not in wanted}, **bits}
                if not done and bits == st.bits:
                    if st.seqs is None:
                        self._load_seqs(st)
                    return []
                st = _State(table, st.topic, st.keys, columns, st.version, st.partitions, st.seqs, st.live, bits)
            st.partitions = self._topic_partitions(st.topic, self.partitions, self.compact)
            self._transaction(lambda p: None, [st])
            states[table] = st
            if st.seqs is None:
                self._load_seqs(st)
            return done

    # ------------------------------------------------------------------ apply / truncate

    def applied_version(self, table) -> int | None:
        table = as_table_id(table)
        with self._lock:
            st = self._all_states().get(table)
            return None if st is None or st.version < 0 else st.version

    def apply(self, table, version: int, changes: Changes) -> bool:
        table, version = as_table_id(table), int(version)
        with self._lock:
            st = self._unapplied(table, version)
            if st is None:
                return False
            src = latest_per_key(table, changes, st.keys)
            unknown = [c for c in src.column_names if not c.startswith("_cdc_") and c not in st.columns]
            if unknown:
                raise SinkError(
                    f"table {table}: column(s) {unknown} not in the changelog schema; "
                    f"call ensure_table with the new schema first"
                )
            records = self._records(st, src, version)
            new_state = _State(table, st.topic, st.keys, st.columns, version, st.partitions, bits=st.bits)

            def produce(p):
                for topic_key, value, part, headers, is_delete in records:
                    self._send(p, st.topic, topic_key, value, part, headers)
                    if is_delete and self.tombstones:
                        self._send(p, st.topic, topic_key, None, part, headers)

            self._transaction(produce, [new_state])
            for topic_key, value, _, headers, is_delete in records:
                st.seqs[topic_key] = int(headers[0][1])
                if is_delete:
                    st.live.discard(topic_key)
                else:
                    st.live.add(topic_key)
            st.version = version
            return True

    def _unapplied(self, table: TableId, version: int) -> _State | None:
        """The table's state for a write of ``version``; None if that version was applied."""
        st = self._state(table)
        return None if version <= st.version else st

    def truncate(self, table, version: int) -> bool:
        table, version = as_table_id(table), int(version)
        with self._lock:
            st = self._unapplied(table, version)
            if st is None:
                return False
            vbytes = str(version).encode()
            now = int(time.time() * 1000)
            held = list(st.seqs.items())
            live = set(st.live)
            new_state = _State(table, st.topic, st.keys, st.columns, version, st.partitions, bits=st.bits)

            def produce(p):
                self._send_deletes(p, st, held, live, now, [(VERSION_HEADER, vbytes), (TRUNCATE_HEADER, b"1")])

            self._transaction(produce, [new_state])
            st.seqs, st.live, st.version = {}, set(), version
            return True

    def truncate_origin(self, table, version: int, column: str, origin: str) -> bool:
        """As ``truncate``, for the keys whose key column ``column`` equals ``origin``
        (all of them, deleted ones too, so a rebuild forgets their sequences)."""
        table, version = as_table_id(table), int(version)
        with self._lock:
            st = self._unapplied(table, version)
            if st is None:
                return False
            if column not in st.keys:
                raise SinkError(f"table {table}: {column!r} is not a key column of its changelog")
            held = [(k, seq) for k, seq in st.seqs.items() if json.loads(k).get(column) == origin]
            live = {k for k, _ in held if k in st.live}
            vbytes = str(version).encode()
            now = int(time.time() * 1000)
            new_state = _State(table, st.topic, st.keys, st.columns, version, st.partitions, bits=st.bits)
            headers = [(VERSION_HEADER, vbytes), (TRUNCATE_HEADER, b"1")]
            self._transaction(lambda p: self._send_deletes(p, st, held, live, now, headers), [new_state])
            for key, _ in held:
                st.seqs.pop(key, None)
            st.live.difference_update(live)
            st.version = version
            return True

    def drop_table(self, table) -> None:
        """Deletes (and tombstones) for every key the changelog holds, then forget the
        table's control record: ``ensure_table`` starts it anew with its current schema."""
        table = as_table_id(table)
        with self._lock:
            states = self._all_states()
            st = states.get(table)
            if st is None:
                return
            if st.seqs is None:
                self._load_seqs(st)
            now = int(time.time() * 1000)
            held, live = list(st.seqs.items()), set(st.live)

            def produce(p):
                self._send_deletes(p, st, held, live, now, [(TRUNCATE_HEADER, b"1")])
                self._send(p, self.control_topic, self._table_key(table), None, 0)

            self._transaction(produce, [])
            del states[table]

    def _send_deletes(
        self, p: Producer, st: _State, held: list[tuple[bytes, int]], live: set[bytes], now: int, headers: list
    ) -> None:
        """For each held key: a delete if it is live, then a tombstone, each with the
        key's sequence and ``headers``."""
        for key, seq in held:
            part = partition_for(key, st.partitions)
            key_headers = [(SEQ_HEADER, str(seq).encode()), *headers]
            if key in live:
                value = {
                    "before": json.loads(key),
                    "after": None,
                    "source": self._source(st.table, "d", now),
                    "op": DELETE_OP,
                    "ts_ms": now,
                    "transaction": None,
                }
                self._send(p, st.topic, key, _DUMPS(value).encode(), part, key_headers)
            self._send(p, st.topic, key, None, part, key_headers)

    # ------------------------------------------------------------------ rows of one origin

    def _origin_keys(self, table: TableId, column: str, prefix: str) -> tuple[_State, list[bytes]] | None:
        """The table's state and its live keys whose key column ``column`` starts with
        ``prefix``; None: no changelog of the table, or ``column`` is none of its keys."""
        st = self._all_states().get(table)
        if st is None or column not in st.keys:
            return None
        if st.seqs is None:
            self._load_seqs(st)
        found = []
        for key in st.live:
            value = json.loads(key).get(column)
            if isinstance(value, str) and value.startswith(prefix):
                found.append(key)
        return st, sorted(found)

    def count_origin(self, table, column: str, prefix: str) -> int | None:
        with self._lock:
            held = self._origin_keys(as_table_id(table), column, prefix)
            return None if held is None else len(held[1])

    def delete_origin(self, table, column: str, prefix: str) -> int | None:
        """A delete and a tombstone for each live key of the origin, in one Kafka
        transaction, so a consumer materializing the topic loses exactly those rows. The
        table's version stays: this runs with the merger stopped (`cdc shard remove`)."""
        with self._lock:
            held = self._origin_keys(as_table_id(table), column, prefix)
            if held is None:
                return None
            st, keys = held
            if keys:
                now = int(time.time() * 1000)
                self._transaction(
                    lambda p: self._send_deletes(p, st, [(k, st.seqs[k]) for k in keys], set(keys), now, []), []
                )
                st.live.difference_update(keys)
            return len(keys)

    # ------------------------------------------------------------------ read back

    def count(self, table) -> int:
        return self.rows(table).num_rows

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(5)
                self._producer = None
