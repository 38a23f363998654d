"""Hostile identifiers end to end: a database, tables and columns named with quotes,
backticks, spaces, reserved words, dots, ``%`` and non-ASCII letters go through ingest,
the broker and the merger into Delta and PostgreSQL, snapshot and streaming alike, and
the sink tables equal the source row for row.

Topic names are made legal the way Debezium does it (``cdc.wire.topics``); the merger routes
records by their ``source`` block, so the lossy topic names do not matter to it.
"""

from __future__ import annotations

from cdc.wire.topics import table_topic, topic_safe
from tests.support import readback


def test_topic_names_are_sanitized_like_debezium():
    assert topic_safe("cdc.shop.Straße 表") == "cdc.shop.Stra_e__"
    assert topic_safe("a😀b") == "a__b"  # outside the BMP: two UTF-16 units, two '_'
    assert topic_safe("..") == "__" and topic_safe(".") == "_"
    assert len(topic_safe("x" * 300)) == 249
    assert table_topic("cdc", 'we"ird', "sel`ect") == "cdc.we_ird.sel_ect"


def test_every_topic_derived_from_the_prefix():
    """The names are the contract (ingest writes them, the merger, Debezium's consumers and
    the commands read them): one module builds them all."""
    import re

    from cdc.wire import topics

    assert topics.schema_topic("cdc") == "cdc"
    assert topics.offsets_topic("cdc") == "cdc.offsets"
    assert topics.transaction_topic("cdc") == "cdc.transaction"
    assert topics.heartbeat_topic("cdc") == "__debezium-heartbeat.cdc"
    assert topics.dead_letter_topic("cdc") == "cdc.dlq"
    assert topics.topic_table_part("cdc.x", "cdc.x.shop.Stra_e") == "shop.Stra_e"
    assert topics.changelog_topic("out", "shop", "Straße") == "out.shop.Stra_e"
    assert topics.changelog_control_topic("out") == "out._cdc.changelog_versions"
    read = re.compile(topics.source_topics_pattern("cdc", "cdc.merged"))
    assert read.match("cdc") and read.match("cdc.shop.orders") and read.match("cdc.shop.a.b")
    for other in ("cdc.offsets", "cdc.transaction", "cdc.dlq", "cdcx.shop.t", "cdc.merged.shop.t"):
        assert not read.match(other), other
    assert re.match(topics.source_topics_pattern("cdc"), "cdc.merged.shop.t")


def _records(rows: list[dict]):
    import pyarrow as pa

    return pa.Table.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ]
        ),
    )


def test_tables_sharing_a_topic_are_merged_apart(tmp_path):
    """``Straße`` and ``Stra_e`` share the topic ``p.shop.Stra_e``: the merger routes each
    record by its source block (no servers: the processor with a local Delta sink)."""
    import json

    from cdc.tablespec import ColumnSpec, TableSpec
    from merger.batch.processor import BatchProcessor
    from merger.sinks.delta import DeltaSink
    from merger.state.store import StateStore

    sink = DeltaSink(str(tmp_path / "delta"))
    proc = BatchProcessor("p", StateStore(tmp_path / "state"), [sink], None, lambda topic: 1)
    cols = (ColumnSpec("id", "int", 1, nullable=False), ColumnSpec("v", "varchar", 2, length=10))
    for t in ("Straße", "Stra_e"):
        proc.table(f"shop.{t}", TableSpec("shop", t, cols, ("id",)))
    topic = table_topic("p", "shop", "Straße")
    assert topic == table_topic("p", "shop", "Stra_e") == "p.shop.Stra_e"
    rows = []
    for i, (table, op, key, v) in enumerate(
        [
            ("Straße", "c", 1, "ß1"),
            ("Stra_e", "c", 1, "_1"),
            ("Straße", "c", 2, "ß2"),
            ("Stra_e", "u", 1, "_1b"),
            ("Straße", "d", 1, None),
        ]
    ):
        image = {"id": key, "v": v}
        value = {
            "before": image if op == "d" else None,
            "after": None if op == "d" else image,
            "op": op,
            "source": {"db": "shop", "table": table, "ts_ms": 1},
            "ts_ms": 1,
        }
        rows.append(
            {
                "key": json.dumps({"id": key}).encode(),
                "value": json.dumps(value).encode(),
                "topic": topic,
                "partition": 0,
                "offset": i,
                "headers": [{"key": "cdc.position", "value": f"binlog.000001:{100 + i}:0".encode()}],
            }
        )
    proc.process(0, _records(rows))
    assert proc.bad_records == 0
    assert readback.rows(sink, ("shop", "Straße")).to_pylist() == [{"id": 2, "v": "ß2"}]
    assert readback.rows(sink, ("shop", "Stra_e")).to_pylist() == [{"id": 1, "v": "_1b"}]
