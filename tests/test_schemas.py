"""The JSON Schemas in schemas/ describe what the code writes."""

import json
from pathlib import Path

import jsonschema

from ingest.envelope import EnvelopeConfig, SourceInfo, TableEncoder
from ingest.position import ResumePoint
from ingest.types import ColumnSpec, TableSpec

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


def _schema(name):
    return json.loads((SCHEMAS / name).read_text())


def test_resume_point_records_match_schema():
    for point in (ResumePoint("0-1-5", "binlog.000001", 1234, None, 0, 1), ResumePoint("", None, None, "0-1-6", 17, 2),
                  ResumePoint("0-1-5,1-2-3", "binlog.000002", 4, None, 0, 3)):
        jsonschema.validate(json.loads(point.to_json()), _schema("resume-point.schema.json"))


def test_change_events_match_schema():
    spec = TableSpec("shop", "orders", (ColumnSpec("id", "int", 1, nullable=False), ColumnSpec("v", "varchar", 2, length=10)),
                     ("id",))
    enc = TableEncoder(spec, EnvelopeConfig("p"))
    src = SourceInfo("shop", "orders", 1000, 1, "binlog.000001", 4, 0, "0-1-9")
    schema = _schema("change-event-value.schema.json")
    records = (enc.change("c", None, {"id": 1, "v": "a"}, src) + enc.change("u", {"id": 1, "v": "a"}, {"id": 2, "v": "b"}, src)
               + enc.change("d", {"id": 2, "v": "b"}, None, src) + [enc.truncate(src)])
    for rec in records:
        if rec.value is not None:
            jsonschema.validate(json.loads(rec.value), schema)


def test_watermark_marker_payload_matches_schema():
    payload = json.dumps({"table": "shop.orders", "window": "abc123", "kind": "LOW"})
    jsonschema.validate(json.loads(payload), _schema("watermark-marker.schema.json"))
