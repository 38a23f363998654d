"""Debezium MySQL connector records, built as JSON text (pure, no I/O).

For a ``TableSpec`` a ``TableEncoder`` precomputes everything that does not change per
row (schemas as JSON text, the fixed parts of the ``source`` block, one generated
function per table that writes a row as JSON from per-column closures), so encoding a
row is a handful of string concatenations. The output is byte-for-byte what Debezium
3.6's MySQL connector + Kafka's JsonConverter produce (verified against captures of the
real connector in tests/golden/), apart from the timing fields and the points where we
are deliberately right instead (see below).

Record layout (all verified):

* value: ``{"before","after","source","transaction","op","ts_ms","ts_us","ts_ns"}`` in this
  order; envelope schema ``<prefix>.<db>.<table>.Envelope`` version 2; row struct
  ``<prefix>.<db>.<table>.Value`` and key ``<prefix>.<db>.<table>.Key`` carry no version.
* source: ``version, connector, name, ts_ms, snapshot, db, sequence, ts_us, ts_ns, table,
  server_id, gtid, file, pos, row, thread, query``; ``ts_ms`` is the binlog event header
  time (whole seconds * 1000) and ts_us/ts_ns the same instant; ``snapshot`` "false";
  ``sequence`` null; ``pos`` the start offset of the ROWS event (the QUERY event for DDL
  and TRUNCATE), ``row`` the row index inside that event.
* top-level ts_ms/ts_us/ts_ns: the time the connector processed the event (wall clock).
* delete -> op "d" record then a tombstone (same key, null value); an update that changes
  the key -> "d" for the old key (header ``__debezium.newkey``), tombstone (same header),
  "c" for the new key (header ``__debezium.oldkey``); keyless tables: key null, and the
  delete tombstone also has a null key.
* TRUNCATE -> op "t", key null, before/after null (Debezium skips it unless
  ``skipped.operations`` excludes "t"; its default is to skip).
* every record also carries ``__debezium.context.*`` headers (connectorLogicalName,
  taskId, connectorName, runId) in Debezium 3.x (see ``context_headers``).
* JsonConverter output is compact (no spaces), raw UTF-8.

Where Debezium is wrong on MariaDB and we are right instead:

* ``source.gtid`` is null in Debezium's MySQL connector on MariaDB (it only understands
  MySQL GTID events); we put the MariaDB GTID ``domain-server-seq`` of the transaction.
* ``source.thread`` is null on MariaDB (MariaDB has no BEGIN query event, the GTID event
  opens the transaction); we put the connection id when known (the QUERY event's
  thread id, e.g. of a DDL, or of a BEGIN where there is one).
* ``source.query`` stays null even with ``include.query=true`` (MariaDB sends
  ANNOTATE_ROWS, not ROWS_QUERY); we fill it from the annotate event when asked.
* ``transaction`` is always null and no BEGIN/END records are written on MariaDB with
  ``provide.transaction.metadata=true``; we write them, with the GTID as the id.
* After a restart inside a transaction Debezium can skip the first row(s) of it on
  MariaDB (its skip logic hangs on BEGIN); our positions are exact, so we do not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from cdc.tablespec import TableSpec
from cdc.wire import topics
from cdc.wire.topics import table_topic
from ingest.columncodec import EMPTY_SET, ColumnCodec, column_codec
from ingest.converter_config import ConverterConfig
from ingest.jsontext import dumps, json_str

DEBEZIUM_VERSION = "3.6.3.Final"
CONNECTOR = "mysql"
ENVELOPE_SCHEMA_VERSION = 2
NEWKEY_HEADER = "__debezium.newkey"
OLDKEY_HEADER = "__debezium.oldkey"


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class EnvelopeConfig:
    """What Debezium's connector/converter configuration decides about the records.

    ``schemas_enable``: JsonConverter ``schemas.enable`` for values (and keys unless
    ``key_schemas_enable`` says otherwise). ``key_header_format``: how the
    ``__debezium.newkey/oldkey`` headers are written: "json" (JsonConverter without
    schema, as Debezium Server/embedded with header.converter.schemas.enable=false:
    ``{"id":100}``), "json-schema" (with the schema) or "simple" (Kafka Connect's default
    SimpleHeaderConverter: ``Struct{id=100}``)."""

    topic_prefix: str
    schemas_enable: bool = False
    key_schemas_enable: bool | None = None
    converter: ConverterConfig = field(default_factory=ConverterConfig)
    version: str = DEBEZIUM_VERSION
    connector: str = CONNECTOR
    tombstones_on_delete: bool = True
    include_query: bool = False
    provide_transaction_metadata: bool = True
    transaction_topic: str | None = None
    heartbeat_topic: str | None = None
    key_header_format: str = "json"
    #: Debezium's ``skipped.operations`` (default "t": truncates are not emitted); the
    #: caller checks ``emits(op)``
    skipped_operations: frozenset = frozenset({"t"})

    def emits(self, op: str) -> bool:
        return op not in self.skipped_operations

    @property
    def key_schemas(self) -> bool:
        return self.schemas_enable if self.key_schemas_enable is None else self.key_schemas_enable

    @property
    def tx_topic(self) -> str:
        return self.transaction_topic or topics.transaction_topic(self.topic_prefix)

    @property
    def hb_topic(self) -> str:
        return self.heartbeat_topic or topics.heartbeat_topic(self.topic_prefix)


# --------------------------------------------------------------------------- schemas


def named_field(schema: Mapping, name: str) -> dict:
    """A Kafka Connect schema as the field ``name`` of a struct."""
    d = dict(schema)
    d["field"] = name
    return d


def primitive_schema(type_: str, optional: bool) -> dict:
    """A Kafka Connect schema of a primitive type (int64, string, ...)."""
    return {"type": type_, "optional": optional}


SNAPSHOT_ENUM = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"


def source_schema(connector: str = CONNECTOR, sharded: bool = False) -> dict:
    """``io.debezium.connector.mysql.Source`` (version 1); a sharded source's has ``shard``
    last (as the Vitess connector's ``source.shard``)."""
    schema = {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", False), "version"),
            named_field(primitive_schema("string", False), "connector"),
            named_field(primitive_schema("string", False), "name"),
            named_field(primitive_schema("int64", False), "ts_ms"),
            {
                "type": "string",
                "optional": True,
                "name": "io.debezium.data.Enum",
                "version": 1,
                "parameters": {"allowed": SNAPSHOT_ENUM},
                "default": "false",
                "field": "snapshot",
            },
            named_field(primitive_schema("string", False), "db"),
            named_field(primitive_schema("string", True), "sequence"),
            named_field(primitive_schema("int64", True), "ts_us"),
            named_field(primitive_schema("int64", True), "ts_ns"),
            named_field(primitive_schema("string", True), "table"),
            named_field(primitive_schema("int64", False), "server_id"),
            named_field(primitive_schema("string", True), "gtid"),
            named_field(primitive_schema("string", False), "file"),
            named_field(primitive_schema("int64", False), "pos"),
            named_field(primitive_schema("int32", False), "row"),
            named_field(primitive_schema("int64", True), "thread"),
            named_field(primitive_schema("string", True), "query"),
        ],
        "optional": False,
        "name": f"io.debezium.connector.{connector}.Source",
        "version": 1,
    }
    if sharded:
        schema["fields"].append(named_field(primitive_schema("string", True), "shard"))
    return schema


def transaction_block_schema() -> dict:
    return {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", False), "id"),
            named_field(primitive_schema("int64", False), "total_order"),
            named_field(primitive_schema("int64", False), "data_collection_order"),
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
    }


def row_schema(
    spec: TableSpec, prefix: str, config: ConverterConfig | None = None, codecs: Sequence[ColumnCodec] | None = None
) -> dict:
    codecs = codecs or [column_codec(c, config) for c in spec.columns]
    return {
        "type": "struct",
        "fields": [named_field(c.schema, c.name) for c in codecs],
        "optional": True,
        "name": f"{prefix}.{spec.db}.{spec.table}.Value",
    }


def key_schema(spec: TableSpec, prefix: str, config: ConverterConfig | None = None) -> dict | None:
    if not spec.primary_key:
        return None
    fields = [named_field(column_codec(c, config).schema, c.name) for c in spec.pk_columns]
    return {"type": "struct", "fields": fields, "optional": False, "name": f"{prefix}.{spec.db}.{spec.table}.Key"}


def envelope_schema(
    spec: TableSpec,
    prefix: str,
    config: ConverterConfig | None = None,
    connector: str = CONNECTOR,
    codecs: Sequence[ColumnCodec] | None = None,
    sharded: bool = False,
) -> dict:
    row = row_schema(spec, prefix, config, codecs)
    return {
        "type": "struct",
        "fields": [
            named_field(row, "before"),
            named_field(row, "after"),
            named_field(source_schema(connector, sharded), "source"),
            named_field(transaction_block_schema(), "transaction"),
            named_field(primitive_schema("string", False), "op"),
            named_field(primitive_schema("int64", True), "ts_ms"),
            named_field(primitive_schema("int64", True), "ts_us"),
            named_field(primitive_schema("int64", True), "ts_ns"),
        ],
        "optional": False,
        "name": f"{prefix}.{spec.db}.{spec.table}.Envelope",
        "version": ENVELOPE_SCHEMA_VERSION,
    }


def with_schema(schema_json: str, payload_json: str) -> str:
    """JsonConverter with schemas.enable=true: ``{"schema":...,"payload":...}``."""
    return '{"schema":' + schema_json + ',"payload":' + payload_json + "}"


# --------------------------------------------------------------------------- source block


@dataclass
class SourceInfo:
    """Where a change comes from. ``ts_ms``: binlog event header timestamp * 1000.
    ``pos``: start offset of the rows event (``log_pos - event_size`` of the packet).
    ``gtid``: MariaDB ``domain-server-seq`` (or MySQL ``uuid:n``) of the transaction."""

    db: str
    table: str | None
    ts_ms: int
    server_id: int
    file: str
    pos: int
    row: int = 0
    gtid: str | None = None
    thread: int | None = None
    query: str | None = None
    snapshot: str = "false"
    shard: str | None = None  # a sharded source's shard


@dataclass(frozen=True)
class PhysicalTable:
    """The table a change was read from, when its table spec is a logical table's (routes,
    shards): the source block names it, and the shard."""

    shard: str | None
    db: str
    table: str


def _jnull(v: Any) -> str:
    return "null" if v is None else json_str(v)


def _inull(v: Any) -> str:
    return "null" if v is None else str(int(v))


def source_json(cfg: EnvelopeConfig, s: SourceInfo) -> str:
    """The ``source`` struct as JSON text."""
    ts_ms = int(s.ts_ms)
    return (
        '{"version":'
        + json_str(cfg.version)
        + ',"connector":'
        + json_str(cfg.connector)
        + ',"name":'
        + json_str(cfg.topic_prefix)
        + ',"ts_ms":'
        + str(ts_ms)
        + ',"snapshot":'
        + json_str(s.snapshot)
        + ',"db":'
        + json_str(s.db or "")
        + ',"sequence":null,"ts_us":'
        + str(ts_ms * 1000)
        + ',"ts_ns":'
        + str(ts_ms * 1_000_000)
        + ',"table":'
        + _jnull(s.table)
        + ',"server_id":'
        + str(int(s.server_id))
        + ',"gtid":'
        + _jnull(s.gtid)
        + ',"file":'
        + json_str(s.file)
        + ',"pos":'
        + str(int(s.pos))
        + ',"row":'
        + str(int(s.row))
        + ',"thread":'
        + _inull(s.thread)
        + ',"query":'
        + (_jnull(s.query) if cfg.include_query else "null")
        + (',"shard":' + json_str(s.shard) if s.shard is not None else "")
        + "}"
    )


# --------------------------------------------------------------------------- records


@dataclass
class Record:
    """A Kafka record: key/value as JSON text (None = null), headers as (name, text)."""

    topic: str
    key: str | None
    value: str | None
    headers: list[tuple[str, str]] = field(default_factory=list)


def _gen_struct_encoder(codecs: Sequence[ColumnCodec], fname: str) -> Callable:
    """Generate ``enc(row, ns=None) -> str`` writing the struct of ``codecs`` as JSON."""
    env: dict[str, Any] = {"EMPTY_SET": EMPTY_SET}
    parts = []
    for i, c in enumerate(codecs):
        key = repr(c.name)
        env[f"F{i}"] = c.frag
        env[f"T{i}"] = c.to_json
        env[f"N{i}"] = c.null_json
        lead = ("{" if i == 0 else ",") + json_str(c.name) + ":"
        env[f"P{i}"] = lead
        if c.empty_set_json is not None:
            env[f"E{i}"] = c.empty_set_json
            expr = f"((E{i} if (ns and ns.get({key}) == EMPTY_SET) else N{i}) if (v := g({key})) is None else F{i}(v))"
        elif c.frag_may_return_none:
            expr = f"T{i}(g({key}))"
        else:
            expr = f"(N{i} if (v := g({key})) is None else F{i}(v))"
        parts.append(f"P{i}, {expr}")
    if not codecs:
        body = "    return '{}'"
    else:
        body = "    g = row.get\n    return ''.join((" + ", ".join(parts) + ", '}'))"
    src = f"def {fname}(row, ns=None):\n{body}\n"
    exec(compile(src, f"<ingest.envelope:{fname}>", "exec"), env)
    return env[fname]


class TableEncoder:
    """Encodes the change events of one table version (rebuild it after a schema change).

    Hot path for the binlog reader::

        enc = TableEncoder(spec, cfg)
        src = SourceInfo(db, table, ts_ms, server_id, file, pos, row=i, gtid=gtid)
        records = enc.change("c", None, row_values, src)         # insert
        records = enc.change("u", before, after, src)            # update (splits on key change)
        records = enc.change("d", before, None, src)             # delete (+ tombstone)

    or the lower level ``key_json``/``row_json``/``value_json`` to assemble yourself.
    """

    def __init__(self, spec: TableSpec, cfg: EnvelopeConfig, physical: PhysicalTable | None = None) -> None:
        self.spec = spec
        self.cfg = cfg
        self.topic = table_topic(cfg.topic_prefix, spec.db, spec.table)
        self.data_collection = f"{spec.db}.{spec.table}"
        self.codecs = [column_codec(c, cfg.converter) for c in spec.columns]
        by_name = {c.name: c for c in self.codecs}
        self.key_codecs = [by_name[n] for n in spec.primary_key]
        self.has_key = bool(self.key_codecs)
        self.row_json = _gen_struct_encoder(self.codecs, "row_json")
        self._key_payload = _gen_struct_encoder(self.key_codecs, "key_json") if self.has_key else None
        sharded = physical is not None and physical.shard is not None
        self.value_schema = envelope_schema(
            spec, cfg.topic_prefix, cfg.converter, cfg.connector, self.codecs, sharded=sharded
        )
        self.key_schema = key_schema(spec, cfg.topic_prefix, cfg.converter)
        self.value_schema_json = dumps(self.value_schema)
        self.key_schema_json = dumps(self.key_schema) if self.key_schema else None
        self._value_head = ('{"schema":' + self.value_schema_json + ',"payload":') if cfg.schemas_enable else ""
        self._value_tail = "}" if cfg.schemas_enable else ""
        self._key_head = (
            ('{"schema":' + self.key_schema_json + ',"payload":') if (cfg.key_schemas and self.key_schema_json) else ""
        )
        self._key_tail = "}" if self._key_head else ""
        # fixed parts of the source block
        self._src_head = (
            '{"version":'
            + json_str(cfg.version)
            + ',"connector":'
            + json_str(cfg.connector)
            + ',"name":'
            + json_str(cfg.topic_prefix)
            + ',"ts_ms":'
        )
        src_db, src_table = (physical.db, physical.table) if physical is not None else (spec.db, spec.table)
        self._src_mid = ',"snapshot":"false","db":' + json_str(src_db) + ',"sequence":null,"ts_us":'
        self._src_table = ',"table":' + json_str(src_table) + ',"server_id":'
        self._src_end = (',"shard":' + json_str(physical.shard) + "}") if sharded else "}"

    # ---- pieces

    def key_payload(self, row: Mapping[str, Any]) -> str | None:
        """The key struct as JSON (no schema), None for a table without primary key."""
        return self._key_payload(row) if self._key_payload else None

    def key_json(self, row: Mapping[str, Any]) -> str | None:
        """The record key text (with the schema when key schemas are enabled)."""
        if not self._key_payload:
            return None
        return self._key_head + self._key_payload(row) + self._key_tail

    def source_json(
        self,
        ts_ms: int,
        server_id: int,
        file: str,
        pos: int,
        row: int = 0,
        gtid: str | None = None,
        thread: int | None = None,
        query: str | None = None,
        snapshot: str = "false",
    ) -> str:
        head, tail = self.source_split(ts_ms, server_id, file, pos, gtid, thread, query, snapshot)
        return f"{head}{row}{tail}"

    def source_split(
        self,
        ts_ms: int,
        server_id: int,
        file: str,
        pos: int,
        gtid: str | None = None,
        thread: int | None = None,
        query: str | None = None,
        snapshot: str = "false",
    ) -> tuple[str, str]:
        """The source block's text before and after the row number, which alone differs
        between the rows of one binlog event: ``f"{head}{row}{tail}"``."""
        ts_ms = int(ts_ms)
        mid = (
            self._src_mid
            if snapshot == "false"
            else self._src_mid.replace('"snapshot":"false"', '"snapshot":' + json_str(snapshot))
        )
        # f-strings: one allocation each, where a chain of + copies the text at every step
        gtid_json = "null" if gtid is None else json_str(gtid)
        thread_json = "null" if thread is None else thread
        query_json = "null" if query is None or not self.cfg.include_query else json_str(query)
        head = (
            f"{self._src_head}{ts_ms}{mid}{ts_ms * 1000}"
            f',"ts_ns":{ts_ms * 1_000_000}{self._src_table}{server_id}'
            f',"gtid":{gtid_json},"file":{json_str(file)},"pos":{pos},"row":'
        )
        return head, f',"thread":{thread_json},"query":{query_json}{self._src_end}'

    def source_of(self, s: SourceInfo) -> str:
        return self.source_json(s.ts_ms, s.server_id, s.file, s.pos, s.row, s.gtid, s.thread, s.query, s.snapshot)

    def value_json(
        self,
        op: str,
        before_json: str,
        after_json: str,
        source: str,
        transaction: str = "null",
        ts_ns: int | None = None,
    ) -> str:
        """The value text from already-encoded parts (``before_json``/``after_json`` are
        row JSON or "null")."""
        if ts_ns is None:
            ts_ns = time.time_ns()
        return (
            f'{self._value_head}{{"before":{before_json},"after":{after_json},"source":{source}'
            f',"transaction":{transaction},"op":"{op}","ts_ms":{ts_ns // 1_000_000}'
            f',"ts_us":{ts_ns // 1_000},"ts_ns":{ts_ns}}}{self._value_tail}'
        )

    # ---- whole events

    def change(
        self,
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        source: SourceInfo | str,
        *,
        transaction: str = "null",
        ts_ns: int | None = None,
        before_none_sources: Mapping[str, str] | None = None,
        after_none_sources: Mapping[str, str] | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> list[Record]:
        """The records Debezium writes for one row change: "c", "u", "d" (+ tombstone), "r"
        (snapshot read), and for an update that changes the key: "d", tombstone, "c".
        ``transaction``: a ``transaction_block_json`` or "null"."""
        src = source if isinstance(source, str) else self.source_of(source)
        if ts_ns is None:
            ts_ns = time.time_ns()
        hdrs = list(headers)
        if op in ("c", "r"):
            after_j = self.row_json(after, after_none_sources)
            return [
                Record(
                    self.topic,
                    self.key_json(after),
                    self.value_json(op, "null", after_j, src, transaction, ts_ns),
                    hdrs,
                )
            ]
        if op == "d":
            before_j = self.row_json(before, before_none_sources)
            key = self.key_json(before)
            out = [Record(self.topic, key, self.value_json("d", before_j, "null", src, transaction, ts_ns), hdrs)]
            if self.cfg.tombstones_on_delete:
                out.append(Record(self.topic, key, None, list(hdrs)))
            return out
        if op == "u":
            before_j = self.row_json(before, before_none_sources)
            after_j = self.row_json(after, after_none_sources)
            if self._key_payload is not None:
                old_k = self._key_payload(before)
                new_k = self._key_payload(after)
                if old_k != new_k:
                    old_key = self._key_head + old_k + self._key_tail
                    new_key = self._key_head + new_k + self._key_tail
                    nk = [(NEWKEY_HEADER, self._key_header(new_k))] + hdrs
                    ok = [(OLDKEY_HEADER, self._key_header(old_k))] + hdrs
                    out = [
                        Record(self.topic, old_key, self.value_json("d", before_j, "null", src, transaction, ts_ns), nk)
                    ]
                    if self.cfg.tombstones_on_delete:
                        out.append(Record(self.topic, old_key, None, list(nk)))
                    out.append(
                        Record(self.topic, new_key, self.value_json("c", "null", after_j, src, transaction, ts_ns), ok)
                    )
                    return out
                key = self._key_head + new_k + self._key_tail
            else:
                key = None
            return [Record(self.topic, key, self.value_json("u", before_j, after_j, src, transaction, ts_ns), hdrs)]
        raise ValueError(f"unknown op {op!r}")

    def truncate(self, source: SourceInfo | str, *, transaction: str = "null", ts_ns: int | None = None) -> Record:
        """TRUNCATE TABLE: op "t", null key, before/after null (source = the QUERY event)."""
        src = source if isinstance(source, str) else self.source_of(source)
        return Record(self.topic, None, self.value_json("t", "null", "null", src, transaction, ts_ns))

    def tombstone(self, row: Mapping[str, Any]) -> Record:
        return Record(self.topic, self.key_json(row), None)

    def _key_header(self, key_payload: str) -> str:
        fmt = self.cfg.key_header_format
        if fmt == "json-schema" and self.key_schema_json:
            return with_schema(self.key_schema_json, key_payload)
        if fmt == "simple":
            return _simple_struct(self.key_codecs, key_payload)
        return key_payload

    # ---- JSON-model (for tests and tools; the hot path uses the text functions)

    def row_value(self, row: Mapping[str, Any] | None, none_sources: Mapping[str, str] | None = None) -> dict | None:
        if row is None:
            return None
        out = {}
        for c in self.codecs:
            v = row.get(c.name)
            if v is None and c.empty_set_json is not None and none_sources and none_sources.get(c.name) == EMPTY_SET:
                out[c.name] = ""
            else:
                out[c.name] = c.to_value(v)
        return out

    def key_value(self, row: Mapping[str, Any]) -> dict | None:
        if not self.has_key:
            return None
        return {c.name: c.to_value(row.get(c.name)) for c in self.key_codecs}


def _simple_struct(codecs: Sequence[ColumnCodec], key_payload: str) -> str:
    import json

    d = json.loads(key_payload)
    return "Struct{" + ",".join(f"{k}={v}" for k, v in d.items() if v is not None) + "}"


# --------------------------------------------------------------------------- transactions


# --------------------------------------------------------------------------- heartbeat / context


# --------------------------------------------------------------------------- watermark messages


# --------------------------------------------------------------------------- schema changes
