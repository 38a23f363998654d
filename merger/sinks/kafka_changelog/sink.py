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

import json
import threading
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pyarrow as pa

from cdc.wire.partitioner import partition_for
from cdc.wire.topics import INVALID_TOPIC_CHARS, changelog_control_topic, changelog_topic
from merger.sinks import types as T
from merger.sinks.base import (
    DELETE_OP,
    Changes,
    IncompatibleSchemaChange,
    Sink,
    SinkError,
    TableId,
    as_table_id,
    check_keys,
    latest_per_key,
    user_fields,
)
from merger.sinks.kafka_changelog.codec import SEQ_HEADER, TRUNCATE_HEADER, VERSION_HEADER, ChangelogCodec, dumps
from merger.sinks.kafka_changelog.reads import ChangelogReads
from merger.sinks.kafka_changelog.state import TableState, control_key
from merger.sinks.kafka_changelog.transport import Transport

if TYPE_CHECKING:
    from confluent_kafka import Producer


class KafkaChangelogSink(Sink):
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
        self.partitions = partitions
        self.tombstones = tombstones
        self.compact = compact
        self.decimal_handling = decimal_handling
        self.transport = Transport(
            self.client,
            topic_prefix,
            changelog_control_topic(topic_prefix),
            transactional_id or f"cdc-changelog-{topic_prefix}",
            timeout_s,
        )
        self.codec = ChangelogCodec(topic_prefix, decimal_handling)
        self._lock = threading.RLock()
        self.readback = ChangelogReads(self.transport, self.codec, self._state, self._lock)  # read back (tests)
        self._states: dict[TableId, TableState] | None = None

    # ------------------------------------------------------------------ state

    def _all_states(self) -> dict[TableId, TableState]:
        if self._states is None:
            self.transport.topic_partitions(self.transport.control_topic, 1, compact=True)
            self._states = self.readback.states()
        return self._states

    def _state(self, table: TableId) -> TableState:
        st = self._all_states().get(table)
        if st is None:
            raise SinkError(f"table {table}: no changelog for it yet; call ensure_table first")
        if st.seqs is None:
            self._load_seqs(st)
        return st

    def _load_seqs(self, st: TableState) -> None:
        st.partitions = self.transport.topic_partitions(st.topic, self.partitions, self.compact)
        st.seqs, st.live = self.readback.sequences(st.topic)

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
                topic = changelog_topic(self.prefix, table.database, table.table)
                clash = [s.table for s in states.values() if s.topic == topic]
                if clash:
                    raise SinkError(f"table {table}: topic {topic} is already used by table {clash[0]}")
                st = TableState(table, topic, keys, dict(wanted), bits=bits)
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
                st = TableState(table, st.topic, st.keys, columns, st.version, st.partitions, st.seqs, st.live, bits)
            st.partitions = self.transport.topic_partitions(st.topic, self.partitions, self.compact)
            self.transport.transaction(lambda p: None, [st])
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
            records = self.codec.records(st, src, version)
            new_state = TableState(table, st.topic, st.keys, st.columns, version, st.partitions, bits=st.bits)

            def produce(p):
                for topic_key, value, part, headers, is_delete in records:
                    self.transport.send(p, st.topic, topic_key, value, part, headers)
                    if is_delete and self.tombstones:
                        self.transport.send(p, st.topic, topic_key, None, part, headers)

            self.transport.transaction(produce, [new_state])
            for topic_key, value, _, headers, is_delete in records:
                st.seqs[topic_key] = int(headers[0][1])
                if is_delete:
                    st.live.discard(topic_key)
                else:
                    st.live.add(topic_key)
            st.version = version
            return True

    def _unapplied(self, table: TableId, version: int) -> TableState | None:
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
            new_state = TableState(table, st.topic, st.keys, st.columns, version, st.partitions, bits=st.bits)

            def produce(p):
                self._send_deletes(p, st, held, live, now, [(VERSION_HEADER, vbytes), (TRUNCATE_HEADER, b"1")])

            self.transport.transaction(produce, [new_state])
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
            new_state = TableState(table, st.topic, st.keys, st.columns, version, st.partitions, bits=st.bits)
            headers = [(VERSION_HEADER, vbytes), (TRUNCATE_HEADER, b"1")]
            self.transport.transaction(lambda p: self._send_deletes(p, st, held, live, now, headers), [new_state])
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
                self.transport.send(p, self.transport.control_topic, control_key(table), None, 0)

            self.transport.transaction(produce, [])
            del states[table]

    def _send_deletes(
        self, p: Producer, st: TableState, held: list[tuple[bytes, int]], live: set[bytes], now: int, headers: list
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
                    "source": self.codec.source(st.table, "d", now),
                    "op": DELETE_OP,
                    "ts_ms": now,
                    "transaction": None,
                }
                self.transport.send(p, st.topic, key, dumps(value).encode(), part, key_headers)
            self.transport.send(p, st.topic, key, None, part, key_headers)

    # ------------------------------------------------------------------ rows of one origin

    def _origin_keys(self, table: TableId, column: str, prefix: str) -> tuple[TableState, list[bytes]] | None:
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
                self.transport.transaction(
                    lambda p: self._send_deletes(p, st, [(k, st.seqs[k]) for k in keys], set(keys), now, []), []
                )
                st.live.difference_update(keys)
            return len(keys)

    def close(self) -> None:
        with self._lock:
            self.transport.close()
