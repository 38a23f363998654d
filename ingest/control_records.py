"""Heartbeat and message records (Debezium's heartbeat topic, logical messages, which the
watermark and DDL markers are), and the __debezium.context.* headers every record
carries."""

from __future__ import annotations

import time
import uuid
from typing import Sequence

from ingest.envelope import (
    EnvelopeConfig,
    Record,
    named_field,
    primitive_schema,
    source_schema,
    transaction_block_schema,
    with_schema,
)
from ingest.jsontext import dumps, json_str


def heartbeat_record(cfg: EnvelopeConfig, ts_ms: int | None = None) -> Record:
    """Debezium's heartbeat: topic ``__debezium-heartbeat.<prefix>``, key {serverName},
    value {ts_ms} (wall clock)."""
    if ts_ms is None:
        ts_ms = time.time_ns() // 1_000_000
    key = '{"serverName":' + json_str(cfg.topic_prefix) + "}"
    value = '{"ts_ms":' + str(int(ts_ms)) + "}"
    if cfg.key_schemas:
        key = with_schema(
            '{"type":"struct","fields":[{"type":"string","optional":false,"field":"serverName"}],'
            '"optional":false,"name":"io.debezium.connector.common.ServerNameKey","version":1}',
            key,
        )
    if cfg.schemas_enable:
        value = with_schema(
            '{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],'
            '"optional":false,"name":"io.debezium.connector.common.Heartbeat","version":1}',
            value,
        )
    return Record(cfg.hb_topic, key, value)


def context_headers(
    cfg: EnvelopeConfig, run_id: str | None = None, task_id: str = "0", json_values: bool = False
) -> list[tuple[str, str]]:
    """The ``__debezium.context.*`` headers Debezium 3.x adds to every record. Values are
    plain strings with Kafka Connect's SimpleHeaderConverter (``json_values=False``) or
    JSON strings (``"p1"``) with a JsonConverter header converter."""
    run_id = run_id or str(uuid.uuid4())
    vals = [
        ("__debezium.context.connectorLogicalName", cfg.topic_prefix),
        ("__debezium.context.taskId", task_id),
        ("__debezium.context.connectorName", cfg.connector),
        ("__debezium.context.runId", run_id),
    ]
    if json_values:
        return [(k, json_str(v)) for k, v in vals]
    return vals


def message_record(
    cfg: EnvelopeConfig,
    topic: str,
    source: str,
    prefix: str,
    content: bytes | str,
    *,
    transaction: str = "null",
    ts_ms: int | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> Record:
    """An op "m" message record (Debezium's logical-decoding message format, as the
    Postgres connector writes it, with the MySQL source block): key {prefix}, value
    {op, ts_ms, source, transaction, message: {prefix, content(base64)}}. Used for the
    watermark markers written into table topics."""
    import base64

    if ts_ms is None:
        ts_ms = time.time_ns() // 1_000_000
    if isinstance(content, str):
        content = content.encode("utf-8")
    key = '{"prefix":' + json_str(prefix) + "}"
    value = (
        '{"op":"m","ts_ms":'
        + str(int(ts_ms))
        + ',"source":'
        + source
        + ',"transaction":'
        + transaction
        + ',"message":{"prefix":'
        + json_str(prefix)
        + ',"content":"'
        + base64.b64encode(content).decode("ascii")
        + '"}}'
    )
    if cfg.key_schemas:
        key = with_schema(
            '{"type":"struct","fields":[{"type":"string","optional":true,"field":"prefix"}],'
            f'"optional":false,"name":"io.debezium.connector.{cfg.connector}.MessageKey","version":1}}',
            key,
        )
    if cfg.schemas_enable:
        msg_schema = {
            "type": "struct",
            "fields": [
                named_field(primitive_schema("string", True), "prefix"),
                named_field(primitive_schema("bytes", True), "content"),
            ],
            "optional": False,
            "name": f"io.debezium.connector.{cfg.connector}.Message",
            "version": 1,
        }
        schema = {
            "type": "struct",
            "fields": [
                named_field(primitive_schema("string", False), "op"),
                named_field(primitive_schema("int64", True), "ts_ms"),
                named_field(source_schema(cfg.connector), "source"),
                named_field(transaction_block_schema(), "transaction"),
                named_field(msg_schema, "message"),
            ],
            "optional": False,
            "name": f"io.debezium.connector.{cfg.connector}.MessageValue",
            "version": 1,
        }
        value = with_schema(dumps(schema), value)
    return Record(topic, key, value, list(headers))
