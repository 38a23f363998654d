"""The DDL marker records of ingest/writer.py (``RecordWriter.write_ddl_markers``), fed a parsed
statement the way ``write_ddl`` does: one per partition of each captured table the statement touched,
their key, value and headers as schemas/ describes them."""

from __future__ import annotations

import base64
import json
import types

import jsonschema

from cdc.config import IngestConfig
from cdc.ddl import parse_ddl, spec_from_marker
from cdc.wire.position import EventPosition
from tests.unit.test_schemas import _headers, _RecordingProducer, _schema

COLUMNS = [
    {
        "COLUMN_NAME": "id",
        "COLUMN_TYPE": "int(11)",
        "DATA_TYPE": "int",
        "IS_NULLABLE": "NO",
        "COLUMN_DEFAULT": None,
        "EXTRA": "",
        "CHARACTER_SET_NAME": None,
        "COLLATION_NAME": None,
    },
    {
        "COLUMN_NAME": "v",
        "COLUMN_TYPE": "varchar(20)",
        "DATA_TYPE": "varchar",
        "IS_NULLABLE": "YES",
        "COLUMN_DEFAULT": "'x'",
        "EXTRA": "",
        "CHARACTER_SET_NAME": "utf8mb4",
        "COLLATION_NAME": "utf8mb4_general_ci",
        "CHARACTER_MAXIMUM_LENGTH": 20,
    },
]


def _writer(include: list[str]):
    from ingest.writer import RecordWriter

    details = {"columns": COLUMNS, "create": "", "primary_key": ["id"], "charset": "utf8mb4"}
    gone = {"columns": [], "create": "", "primary_key": [], "charset": None}
    table_details = types.SimpleNamespace(get=lambda db, table: details if table != "gone" else gone)
    writer = RecordWriter(IngestConfig(topic_prefix="p", table_include=include), table_details=table_details)
    writer.producer = _RecordingProducer()
    writer.topics = types.SimpleNamespace(partitions=lambda topic, n: 3)
    return writer


def _markers(writer, sql: str):
    event = types.SimpleNamespace(packet=types.SimpleNamespace(server_id=1))
    trx = types.SimpleNamespace(ts_ms=1_700_000_000_000, gtid="0-1-42")
    written = writer.write_ddl_markers(parse_ddl(sql, "shop"), sql, trx, EventPosition("binlog.000003", 4711), event)
    assert written == len(writer.producer.sent)
    out = []
    for topic, key, value, partition, headers in writer.producer.sent:
        jsonschema.validate(json.loads(key), _schema("ddl-message-key.schema.json"))
        payload = json.loads(value)
        jsonschema.validate(payload, _schema("ddl-message-value.schema.json"))
        h = _headers(headers)
        jsonschema.validate(h, _schema("ingest-headers.schema.json"))
        marker = json.loads(h["cdc.ddl"])
        jsonschema.validate(marker, _schema("ddl-marker.schema.json"))
        assert json.loads(base64.b64decode(payload["message"]["content"])) == marker
        out.append((topic, partition, h["cdc.position"], marker))
    return out


def test_a_swap_writes_a_rename_marker_into_every_partition_of_both_tables():
    sql = "RENAME TABLE a TO tmp, b TO a, tmp TO b"
    got = _markers(_writer([r"shop\..*"]), sql)
    assert [(t, p) for t, p, *_ in got] == [
        ("p.shop.a", 0),
        ("p.shop.a", 1),
        ("p.shop.a", 2),
        ("p.shop.b", 0),
        ("p.shop.b", 1),
        ("p.shop.b", 2),
    ]
    # one position per table of the statement: tables sharing a topic keep theirs apart
    assert {pos for t, _, pos, _ in got if t == "p.shop.a"} == {"binlog.000003:4711:0"}
    assert {pos for t, _, pos, _ in got if t == "p.shop.b"} == {"binlog.000003:4711:1"}
    marker = got[0][3]
    assert marker["kind"] == "RENAME" and marker["table"] == "shop.a" and marker["ddl"] == sql
    spec = spec_from_marker(marker)
    assert spec.column_names == ("id", "v") and spec.primary_key == ("id",) and spec.column("v").default == "x"


def test_drop_markers_carry_no_definition_and_only_captured_tables_get_one():
    got = _markers(_writer([r"shop\.a"]), "DROP TABLE a, b")
    assert {t for t, *_ in got} == {"p.shop.a"} and len(got) == 3
    assert got[0][3]["kind"] == "DROP" and got[0][3]["definition"] is None
    got = _markers(_writer([r"shop\..*"]), "ALTER TABLE gone ADD COLUMN x INT")
    assert got[0][3]["kind"] == "ALTER" and got[0][3]["definition"] is None  # dropped again meanwhile
