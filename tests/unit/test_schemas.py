"""The JSON Schemas in schemas/ describe what the code writes."""

import base64
import json
import types
from pathlib import Path

import jsonschema
import pyarrow as pa

from cdc.config import IngestConfig, MergerConfig
from cdc.table_changes import table_change_json
from cdc.tablespec import ColumnSpec, TableSpec
from cdc.wire.headers import POSITION_HEADER
from cdc.wire.position import EventPosition
from cdc.wire.resume_point import ResumePoint
from ingest.control_records import context_headers, heartbeat_record
from ingest.envelope import EnvelopeConfig, SourceInfo, TableEncoder, source_json
from ingest.schema_change_records import schema_change_record
from ingest.transaction_records import TransactionTracker

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _schema(name):
    return json.loads((SCHEMAS / name).read_text())


def test_resume_point_records_match_schema():
    for point in (
        ResumePoint("0-1-5", "binlog.000001", 1234, None, 0, 1),
        ResumePoint("", None, None, "0-1-6", 17, 2),
        ResumePoint("0-1-5,1-2-3", "binlog.000002", 4, None, 0, 3),
    ):
        jsonschema.validate(json.loads(point.to_json()), _schema("resume-point.schema.json"))


def test_change_events_match_schema():
    spec = TableSpec(
        "shop",
        "orders",
        (ColumnSpec("id", "int", 1, nullable=False), ColumnSpec("v", "varchar", 2, length=10)),
        ("id",),
    )
    enc = TableEncoder(spec, EnvelopeConfig("p"))
    src = SourceInfo("shop", "orders", 1000, 1, "binlog.000001", 4, 0, "0-1-9")
    schema = _schema("change-event-value.schema.json")
    records = (
        enc.change("c", None, {"id": 1, "v": "a"}, src)
        + enc.change("u", {"id": 1, "v": "a"}, {"id": 2, "v": "b"}, src)
        + enc.change("d", {"id": 2, "v": "b"}, None, src)
        + [enc.truncate(src)]
    )
    for rec in records:
        if rec.value is not None:
            jsonschema.validate(json.loads(rec.value), schema)


def test_watermark_marker_payload_matches_schema():
    payload = json.dumps({"table": "shop.orders", "window": "abc123", "kind": "LOW"})
    jsonschema.validate(json.loads(payload), _schema("watermark-marker.schema.json"))


# --------------------------------------------------------------------------- every other record
# Each test builds records with the functions the processes use and validates them; headers
# are checked as {name: UTF-8 text}. A tombstone (same key, null value) has no value schema:
# see schemas/README.md.

ORDERS = TableSpec(
    "shop",
    "orders",
    (
        ColumnSpec("id", "int", 1, nullable=False, auto_increment=True),
        ColumnSpec("region", "char", 2, length=2, nullable=False, charset="utf8mb4"),
        ColumnSpec("amount", "decimal", 3, length=10, scale=2),
        ColumnSpec("status", "enum", 4, enum_values=("new", "paid"), default="new"),
        ColumnSpec("created", "datetime", 5, fsp=6),
    ),
    ("id", "region"),
    default_charset="utf8mb4",
)
SRC = SourceInfo("shop", "orders", 1_700_000_000_000, 1, "binlog.000003", 4711, 0, "0-1-42")


def _headers(pairs) -> dict[str, str]:
    out = {}
    for name, value in pairs:
        assert name not in out, f"header {name} twice"
        out[name] = value.decode() if isinstance(value, bytes) else value
    return out


def _json(text):
    return None if text is None else json.loads(text)


def test_change_event_keys_and_tombstones_match_schema():
    enc = TableEncoder(ORDERS, EnvelopeConfig("p"))
    key_schema, value_schema = _schema("change-event-key.schema.json"), _schema("change-event-value.schema.json")
    before = {"id": 1, "region": "eu", "amount": None, "status": "new", "created": None}
    after = dict(before, id=2)  # a primary-key change: delete + tombstone + create
    records = (
        enc.change("c", None, before, SRC) + enc.change("u", before, after, SRC) + enc.change("d", after, None, SRC)
    )
    assert [(_json(r.value) or {}).get("op") for r in records] == ["c", "d", None, "c", "d", None]
    for rec in records:
        jsonschema.validate(_json(rec.key), key_schema)
        if rec.value is None:  # tombstone: same key as the delete before it
            continue
        jsonschema.validate(_json(rec.value), value_schema)
    assert _json(records[1].key) == {"id": 1, "region": "eu"} == _json(records[2].key)
    keyless = TableEncoder(TableSpec("shop", "log", (ColumnSpec("msg", "text", 1),)), EnvelopeConfig("p"))
    assert all(r.key is None for r in keyless.change("d", {"msg": "x"}, None, SRC))  # documented: null key


def test_ingest_headers_match_schema():
    schema = _schema("ingest-headers.schema.json")
    env = EnvelopeConfig("p")
    context = context_headers(env)
    enc = TableEncoder(ORDERS, env)
    before = {"id": 1, "region": "eu", "amount": None, "status": "new", "created": None}
    pk_change = enc.change("u", before, dict(before, id=2), SRC)
    positions = [
        EventPosition("binlog.000003", 4711, 0),
        EventPosition("binlog.000003", 4711, 0, 1),
        EventPosition("mysql-bin.000012", 4, 17),
    ]
    for rec, pos in zip(pk_change, positions):
        # ingest/writer.py: position first, then the record's own headers, then the context headers
        jsonschema.validate(_headers([(POSITION_HEADER, pos.encode())] + rec.headers + context), schema)
    assert {name for name, _ in pk_change[0].headers} == {"__debezium.newkey"}
    assert {name for name, _ in pk_change[2].headers} == {"__debezium.oldkey"}
    for pos in positions:
        assert EventPosition.decode(pos.encode()) == pos


class _RecordingProducer:
    def __init__(self):
        self.sent = []

    def send(self, topic, key, value, partition, headers):
        self.sent.append((topic, key, value, partition, headers))


def test_watermark_markers_written_by_ingest_match_schemas():
    """The marker records of ingest/writer.py (``RecordWriter.write_watermark_markers``, fed one
    watermark-table row the way the binlog reader delivers it): one per partition, key, value, header."""
    from ingest.writer import RecordWriter

    writer = RecordWriter(IngestConfig(topic_prefix="p"))
    writer.producer = _RecordingProducer()
    writer.topics = types.SimpleNamespace(partitions=lambda topic, n: 3, prepare=lambda wanted: None)
    event = types.SimpleNamespace(
        rows=[{"values": {"table_name": "shop.orders", "window_id": "w-1", "kind": "LOW"}}],
        packet=types.SimpleNamespace(server_id=1),
    )
    trx = types.SimpleNamespace(ts_ms=1_700_000_000_000, gtid="0-1-42")
    written = writer.write_watermark_markers(event, trx, EventPosition("binlog.000003", 4711))
    assert written == 3 and [s[3] for s in writer.producer.sent] == [0, 1, 2]
    for topic, key, value, _, headers in writer.producer.sent:
        assert topic == "p.shop.orders"
        jsonschema.validate(json.loads(key), _schema("watermark-message-key.schema.json"))
        payload = json.loads(value)
        jsonschema.validate(payload, _schema("watermark-message-value.schema.json"))
        h = _headers(headers)
        jsonschema.validate(h, _schema("ingest-headers.schema.json"))
        marker = json.loads(h["cdc.watermark"])
        jsonschema.validate(marker, _schema("watermark-marker.schema.json"))
        assert json.loads(base64.b64decode(payload["message"]["content"])) == marker
        assert marker == {"table": "shop.orders", "window": "w-1", "kind": "LOW"}


def test_schema_change_events_match_schema():
    env = EnvelopeConfig("p")
    src = SourceInfo(
        "shop",
        "orders",
        1_700_000_000_000,
        1,
        "binlog.000003",
        900,
        0,
        "0-1-7",
        12,
        "ALTER TABLE orders ADD COLUMN note TEXT",
    )
    records = [
        schema_change_record(env, src, "CREATE TABLE orders (...)", [table_change_json("CREATE", ORDERS)]),
        schema_change_record(env, src, "ALTER TABLE orders ADD COLUMN note TEXT", [table_change_json("ALTER", ORDERS)]),
        schema_change_record(
            env, src, "DROP TABLE `shop`.`orders`", [table_change_json("DROP", None, "shop", "orders")]
        ),
        schema_change_record(
            env, SourceInfo("shop", None, 1, 1, "binlog.000003", 4), "CREATE DATABASE shop", database="shop"
        ),
    ]
    for rec in records:
        assert rec.topic == "p"
        jsonschema.validate(_json(rec.key), _schema("schema-change-key.schema.json"))
        jsonschema.validate(_json(rec.value), _schema("schema-change-value.schema.json"))
    assert _json(records[2].value)["tableChanges"][0]["table"] is None


def test_heartbeat_matches_schema():
    rec = heartbeat_record(EnvelopeConfig("p"))
    assert rec.topic == "__debezium-heartbeat.p"
    jsonschema.validate(_json(rec.key), _schema("heartbeat-key.schema.json"))
    jsonschema.validate(_json(rec.value), _schema("heartbeat-value.schema.json"))


def test_transaction_metadata_matches_schema():
    env = EnvelopeConfig("p")
    tracker = TransactionTracker(env)
    begin = tracker.begin("0-1-42", 1_700_000_000_000)
    blocks = [tracker.event("shop.orders"), tracker.event("shop.orders"), tracker.event("shop.customers")]
    end = tracker.end(1_700_000_000_000)
    for rec in (begin, end):
        assert rec.topic == "p.transaction"
        jsonschema.validate(_json(rec.key), _schema("transaction-key.schema.json"))
        jsonschema.validate(_json(rec.value), _schema("transaction-value.schema.json"))
    assert _json(end.value)["event_count"] == 3
    # the transaction block inside change events
    enc = TableEncoder(ORDERS, env)
    row = {"id": 1, "region": "eu", "amount": None, "status": "new", "created": None}
    for block in blocks:
        for rec in enc.change("c", None, row, SRC, transaction=block):
            jsonschema.validate(_json(rec.value), _schema("change-event-value.schema.json"))
            assert _json(rec.value)["transaction"]["id"] == "0-1-42"


def test_resume_point_key_matches_schema():
    from ingest.app import Ingest

    jsonschema.validate(
        json.loads(Ingest(IngestConfig(topic_prefix="p")).source_key), _schema("resume-point-key.schema.json")
    )


def test_source_blocks_are_the_same_in_every_schema():
    source = _schema("change-event-value.schema.json")["properties"]["source"]
    for name in ("watermark-message-value.schema.json", "schema-change-value.schema.json"):
        assert _schema(name)["properties"]["source"] == source, name
    jsonschema.validate(json.loads(source_json(EnvelopeConfig("p"), SRC)), source)


def test_dead_letter_records_match_schema(monkeypatch):
    """``Merger._dead_letter_writer`` (merger/app.py) with the producer recorded."""
    import confluent_kafka

    from merger.app import Merger

    produced = []

    class Producer:
        def __init__(self, conf):
            pass

        def produce(self, topic, key=None, value=None, headers=None, on_delivery=None):
            produced.append((topic, key, value, headers))
            on_delivery(None, None)  # acknowledged

        def flush(self, timeout=None):
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    write = Merger(MergerConfig(topic_prefix="p"))._dead_letter_writer({})
    record = {
        "topic": "p.shop.orders",
        "partition": 2,
        "offset": 1234,
        "key": b'{"id":1}',
        "value": b"not json",
        "headers": [{"key": "cdc.position", "value": b"binlog.000003:4711:0"}],
    }
    write(record, "value is not JSON: Expecting value")
    topic, key, value, headers = produced[0]
    assert (topic, key, value) == ("p.dlq", record["key"], record["value"])
    h = _headers(headers)
    jsonschema.validate(h, _schema("dead-letter-headers.schema.json"))
    assert h["cdc.position"] == "binlog.000003:4711:0" and h["cdc.dlq.offset"] == "1234"


def _changelog_sink():
    from merger.sinks.base import TableId
    from merger.sinks.kafka_changelog import KafkaChangelogSink
    from merger.sinks.kafka_changelog.state import TableState

    sink = KafkaChangelogSink("127.0.0.1:1", "merged")  # never connects in these tests
    table = TableId("shop", "orders")
    columns = {"id": pa.int64(), "amount": pa.decimal128(10, 2), "created": pa.timestamp("us"), "name": pa.string()}
    state = TableState(table, "merged.shop.orders", ["id"], columns, version=3, partitions=3, seqs={}, live=set())
    return sink, table, state


def test_kafka_changelog_records_match_schema():
    import decimal

    from merger.sinks.kafka_changelog.state import control_key

    sink, table, state = _changelog_sink()
    source = source_json(EnvelopeConfig("p"), SRC)
    changes = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "amount": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.00"), None], pa.decimal128(10, 2)),
            "created": pa.array([0, 1, None, None], pa.timestamp("us")),
            "name": pa.array(["a", "b", None, None]),
            "_cdc_seq": pa.array([10, 11, 12, 13], pa.int64()),
            "_cdc_op": pa.array(["c", "u", "r", "d"]),
            "_cdc_source": pa.array([source, source, None, None]),
        }
    )
    records = sink.codec.records(state, changes, 4)
    assert [json.loads(v)["op"] for _, v, *_ in records] == ["c", "u", "r", "d"]
    for key, value, partition, headers, is_delete in records:
        jsonschema.validate(json.loads(key), _schema("changelog-key.schema.json"))
        jsonschema.validate(json.loads(value), _schema("changelog-value.schema.json"))
        jsonschema.validate(_headers(headers), _schema("changelog-headers.schema.json"))
        assert 0 <= partition < 3 and is_delete == (json.loads(value)["op"] == "d")
    control = json.loads(state.control_value())
    jsonschema.validate(control, _schema("changelog-control-value.schema.json"))
    assert json.loads(control_key(table)) == ["shop", "orders"]


def test_kafka_changelog_truncate_records_match_schema():
    """``truncate`` writes a delete (live keys) and a tombstone per key it holds, all marked."""
    sink, table, state = _changelog_sink()
    state.seqs = {b'{"id":1}': 10, b'{"id":2}': 11}
    state.live = {b'{"id":1}'}
    sink._states = {table: state}
    sent = []

    class Recorder:
        def produce(self, topic, value=None, key=None, partition=None, headers=None, on_delivery=None):
            sent.append((topic, key, value, headers))

    sink.transport.transaction = lambda produce, states: produce(Recorder())
    assert sink.truncate(table, 5)
    assert [(k, v is None) for _, k, v, _ in sent] == [(b'{"id":1}', False), (b'{"id":1}', True), (b'{"id":2}', True)]
    for topic, key, value, headers in sent:
        assert topic == "merged.shop.orders"
        jsonschema.validate(json.loads(key), _schema("changelog-key.schema.json"))
        h = _headers(headers)
        jsonschema.validate(h, _schema("changelog-headers.schema.json"))
        assert h["cdc.truncate"] == "1"
        if value is not None:
            jsonschema.validate(json.loads(value), _schema("changelog-value.schema.json"))


def test_every_schema_is_valid_and_documented():
    readme = (SCHEMAS / "README.md").read_text()
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert path.name in readme, f"{path.name} is not listed in schemas/README.md"
