"""merger.batch.records.kafka_rows against the simple model: the records as dicts of their
columns, the timestamp left out, sorted by topic, partition and offset with Python's sort."""

from __future__ import annotations

import datetime

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from merger.batch.records import header_pairs, kafka_rows

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

records = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.none() | st.binary(max_size=6),
            "value": st.none() | st.binary(max_size=10),
            "topic": st.sampled_from(["p.d.a", "p.d.b", "p.d.a.b"]),
            "partition": st.integers(0, 3),
            "offset": st.integers(0, 2**40),
            "timestamp": st.datetimes(min_value=datetime.datetime(2000, 1, 1)),
            "timestampType": st.sampled_from([0, 1]),
            "headers": st.none()
            | st.lists(st.fixed_dictionaries({"key": st.text(max_size=4), "value": st.binary(max_size=4)}), max_size=3),
        }
    ),
    max_size=40,
    unique_by=lambda r: (r["topic"], r["partition"], r["offset"]),
)

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us")),
        ("timestampType", pa.int32()),
        ("headers", HEADERS),
    ]
)


@given(records)
def test_kafka_rows_are_the_records_sorted_without_their_timestamp(rows):
    got = kafka_rows(pa.Table.from_pylist(rows, schema=SCHEMA))
    want = sorted(
        ({k: v for k, v in r.items() if k not in ("timestamp", "timestampType")} for r in rows),
        key=lambda r: (r["topic"], r["partition"], r["offset"]),
    )
    for r in want:  # headers as a dict, or as given when a name repeats
        h = r["headers"]
        if h is not None and len({x["key"] for x in h}) == len(h):
            r["headers"] = {x["key"]: x["value"] for x in h}
    assert got == want
    # whichever form: the same pairs for the dead-letter topic and the kept files
    for g, r in zip(got, sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))):
        assert header_pairs(g["headers"]) == [(x["key"], x["value"]) for x in r["headers"] or []]


@given(records, st.integers(0, 40), st.integers(0, 40))
def test_kafka_rows_of_a_slice_of_several_chunks(rows, start, length):
    """A batch whose headers column is a slice of several chunks (offsets not from 0)."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    table = pa.concat_tables([table, table.slice(len(rows) // 2)]).slice(start, length)
    want = kafka_rows(pa.Table.from_pylist(table.to_pylist(), schema=SCHEMA))
    assert kafka_rows(table) == want


def test_a_table_without_some_columns_gives_the_ones_it_has():
    table = pa.table({"topic": ["t", "t"], "partition": [0, 0], "offset": [5, 2], "value": [b"b", b"a"]})
    assert kafka_rows(table) == [
        {"value": b"a", "topic": "t", "partition": 0, "offset": 2},
        {"value": b"b", "topic": "t", "partition": 0, "offset": 5},
    ]
    assert kafka_rows(table.slice(0, 0)) == []


def test_the_source_columns_less_the_unread_ones_are_the_record_columns_in_order():
    """What the merger drops before the batch goes to Python leaves exactly the columns it
    reads, in the source's order."""
    from merger.batch.records import RECORD_COLUMNS, UNREAD_COLUMNS
    from merger.kafka.reader import SCHEMA

    kept = tuple(name for name in SCHEMA.fieldNames() if name not in UNREAD_COLUMNS)
    assert kept == RECORD_COLUMNS
    assert set(UNREAD_COLUMNS) <= set(SCHEMA.fieldNames())


class Message:
    """What confluent_kafka's Message answers (the methods the readers call)."""

    def __init__(self, r: dict):
        self.r = r

    def key(self):
        return self.r["key"]

    def value(self):
        return self.r["value"]

    def topic(self):
        return self.r["topic"]

    def partition(self):
        return self.r["partition"]

    def offset(self):
        return self.r["offset"]

    def timestamp(self):
        return (1, int(self.r["timestamp"].timestamp() * 1000)) if self.r["timestampType"] else (0, -1)

    def headers(self):
        h = self.r["headers"]
        return None if h is None else [(x["key"], x["value"]) for x in h]


@given(records)
def test_the_driver_reads_messages_into_the_rows_kafka_rows_makes_of_their_arrow(rows):
    """The driver's read (messages straight to rows) against the Arrow batch the Spark read
    makes of the same messages, then ``kafka_rows``: the same rows, once sorted."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from merger.kafka.reader import SCHEMA as SOURCE_SCHEMA
    from merger.kafka.reader import messages_to_batch, messages_to_rows

    messages = [Message(r) for r in rows]
    arrow = pa.Table.from_batches([messages_to_batch(messages, to_arrow_schema(SOURCE_SCHEMA, timezone="UTC"))])
    got = sorted(messages_to_rows(messages), key=lambda r: (r["topic"], r["partition"], r["offset"]))
    assert got == kafka_rows(arrow.drop(["timestamp", "timestampType"]))
