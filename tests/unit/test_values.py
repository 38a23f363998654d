"""How values are stored in the sinks (docs/values.md), pure parts: BIT(n>1) as big-endian
bytes from both paths into the sinks (streamed Debezium JSON, snapshot SELECT), Debezium's
little-endian form kept on the Kafka changelog, and the NUL rule of the PostgreSQL sink."""

from __future__ import annotations

import base64
import decimal
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc.config import ConfigError, MergerConfig, load_model
from cdc.tablespec import ColumnSpec, TableSpec
from ingest.columncodec import column_codec
from merger.schema.canonical import SourceModes, arrow_schema, from_snapshot, json_converters, rows_to_arrow
from merger.sinks import types as T
from merger.sinks.base import UnstorableValue
from merger.sinks.nul import apply_nul_policy, clean, nul_mask

# --------------------------------------------------------------------------- BIT(n>1)

# (width, the bits as MySQL's b'...' literal): 0, all ones, and a few in between
BITS = [(n, v) for n in (2, 8, 12, 17, 63, 64) for v in ("0", "1" * n, "1" + "0" * (n - 1), "10" * (n // 2))] + [
    (12, "110001100001"),
    (10, "1000000001"),
    (64, "0" * 63 + "1"),
    (64, "0000000100000010" + "0" * 48),
]


def _spec(n: int) -> TableSpec:
    return TableSpec(
        "db",
        "t",
        (
            ColumnSpec("id", "int", 1, nullable=False),
            ColumnSpec("b", "bit", 2, length=n),
            ColumnSpec("flag", "bit", 3, length=1),
        ),
        ("id",),
    )


def _big_endian(n: int, bits: str) -> bytes:
    return int(bits, 2).to_bytes((n + 7) // 8, "big")  # what MySQL returns for SELECT b


@pytest.mark.parametrize("n,bits", BITS)
def test_streamed_bits_become_big_endian(n, bits):
    spec = _spec(n)
    debezium = column_codec(spec.columns[1]).to_value(bits)  # what ingest writes (little-endian)
    assert base64.b64decode(debezium) == int(bits, 2).to_bytes((n + 7) // 8, "little")
    schema = arrow_schema(spec)
    table = rows_to_arrow(
        spec,
        schema,
        json_converters(spec, SourceModes()),
        [{"id": 1, "b": debezium, "flag": True}, {"id": 2, "b": None, "flag": False}],
    )
    assert table.column("b").to_pylist() == [_big_endian(n, bits), None]
    assert table.column("flag").to_pylist() == [True, False]  # BIT(1) stays a boolean
    assert T.bit_width(table.schema.field("b")) == n and T.bit_width(table.schema.field("flag")) is None


@pytest.mark.parametrize("n,bits", BITS)
@pytest.mark.parametrize("reader", ["connectorx", "jdbc", "integer"])
def test_snapshot_bits_become_big_endian(n, bits, reader):
    """The snapshot SELECT gives BIT as an unsigned number: text (ConnectorX reads it CAST
    AS CHAR), DECIMAL(20,0) (Spark JDBC), or an integer."""
    spec = _spec(n)
    value = int(bits, 2)
    column = {
        "connectorx": pa.array([str(value), None]),
        "jdbc": pa.array([decimal.Decimal(value), None], pa.decimal128(20, 0)),
        "integer": pa.array([value, None], pa.uint64()),
    }[reader]
    staged = pa.table({"id": pa.array([1, 2], pa.int32()), "b": column, "flag": pa.array([1, 0], pa.int64())})
    table = from_snapshot(spec, arrow_schema(spec), staged)
    assert table.column("b").to_pylist() == [_big_endian(n, bits), None]
    assert table.column("flag").to_pylist() == [True, False]
    assert T.bit_width(table.schema.field("b")) == n


def test_a_bit_value_wider_than_its_column_is_an_error():
    spec = _spec(12)
    staged = pa.table({"id": pa.array([1], pa.int32()), "b": pa.array(["4096"]), "flag": pa.array([0])})
    with pytest.raises(ValueError, match="more than 12 bits"):
        from_snapshot(spec, arrow_schema(spec), staged)
    with pytest.raises(ValueError, match="more than 12 bits"):
        json_converters(spec, SourceModes())["b"](base64.b64encode((4096).to_bytes(2, "little")).decode())


@pytest.mark.parametrize("n,bits", BITS)
def test_kafka_changelog_writes_debeziums_little_endian_bits(n, bits):
    from merger.sinks.kafka_changelog import KafkaChangelogSink

    sink = KafkaChangelogSink("127.0.0.1:1", "p")  # connects only when used
    stored = pa.chunked_array([pa.array([_big_endian(n, bits), None], pa.binary())])
    encoded = sink.codec.encoded_column(stored, pa.binary(), n)
    assert encoded == [column_codec(_spec(n).columns[1]).to_value(bits), None]  # as ingest / Debezium
    assert sink.codec.decoded_column(encoded, pa.binary(), n).to_pylist() == [_big_endian(n, bits), None]
    # plain binary columns stay as they are
    assert sink.codec.encoded_column(stored, pa.binary()) == [base64.b64encode(_big_endian(n, bits)).decode(), None]


def test_kafka_changelog_keeps_bit_widths_in_its_control_record():
    from merger.sinks.kafka_changelog.state import TableState

    st = TableState(("db", "t"), "p.db.t", ["id"], {"id": pa.int32(), "b": pa.binary()}, bits={"b": 12})
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(json.loads(st.control_value())["schema"])))
    assert {f.name: T.bit_width(f) for f in schema} == {"id": None, "b": 12}


# --------------------------------------------------------------------------- NUL characters


def _changes(values, ops=None, key=None, json_values=None):
    n = len(values)
    cols = {"id": key or list(range(1, n + 1)), "v": values}
    if json_values is not None:
        cols["j"] = json_values
    cols["_cdc_op"] = ops or ["c"] * n
    cols["_cdc_seq"] = list(range(10, 10 + n))
    return pa.table(cols)


@pytest.mark.parametrize(
    "policy,expected", [("strip", ["ab", "ok", None, ""]), ("replace", ["a\ufffdb", "ok", None, "\ufffd\ufffd"])]
)
def test_nul_policy_strips_or_replaces_text(policy, expected):
    out, changed = apply_nul_policy("db.t", _changes(["a\x00b", "ok", None, "\x00\x00"]), ["id"], ["v"], [], policy)
    assert out.column("v").to_pylist() == expected
    assert changed == {"v": 2}
    assert out.column("id").to_pylist() == [1, 2, 3, 4]


def test_text_without_nul_is_handed_on_untouched():
    changes = _changes(["a", "b", None])
    out, changed = apply_nul_policy("db.t", changes, ["id"], ["v"], [], "pause")
    assert out is changes and changed == {}


@pytest.mark.parametrize(
    "text,stripped,replaced",
    [
        ('{"a":"x\\u0000y"}', '{"a":"xy"}', '{"a":"x\ufffdy"}'),
        ('{"a":"\\\\u0000"}', '{"a":"\\\\u0000"}', '{"a":"\\\\u0000"}'),  # an escaped backslash, then "u0000"
        ('{"a":"\\\\\\u0000"}', '{"a":"\\\\"}', '{"a":"\\\\\ufffd"}'),  # an escaped backslash, then U+0000
        ('["\\u0000\\u0000\\u0000"]', '[""]', '["\ufffd\ufffd\ufffd"]'),
        ('{"\\u0000k":1}', '{"k":1}', '{"\ufffdk":1}'),
        ('"raw \x00 nul"', '"raw  nul"', '"raw \ufffd nul"'),
    ],
)
def test_nul_policy_on_json_text_also_handles_the_escape(text, stripped, replaced):
    col = pa.array([text])
    assert clean(col, "strip", json=True).to_pylist() == [stripped]
    assert clean(col, "replace", json=True).to_pylist() == [replaced]
    has = text != stripped
    assert nul_mask(col, json=True).to_pylist() == [has]
    if has:
        json.loads(stripped), json.loads(replaced)  # still JSON


def test_nul_policy_pause_names_table_key_and_column():
    with pytest.raises(UnstorableValue) as e:
        apply_nul_policy("db.t", _changes(["ok", "a\x00b"]), ["id"], ["v"], [], "pause")
    msg = str(e.value)
    assert "db.t" in msg and "{'id': 2}" in msg and "'v'" in msg and "U+0000" in msg
    assert "nul_policy" in msg and "cdc resume db.t" in msg and "cdc snapshot db.t" in msg


def test_nul_policy_pause_ignores_the_values_of_deletes():
    """A delete's non-key values are not stored: stripped, never a reason to pause."""
    out, changed = apply_nul_policy("db.t", _changes(["ok", "a\x00b"], ops=["c", "d"]), ["id"], ["v"], [], "pause")
    assert out.column("v").to_pylist() == ["ok", "ab"]
    assert changed == {}  # nothing stored was changed


_TEXT = st.one_of(st.none(), st.text(alphabet=st.sampled_from(["a", "\x00", "é", "\\", "u", "0"]), max_size=8))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(_TEXT, _TEXT, st.sampled_from(["c", "u", "r", "d"])), min_size=1, max_size=12),
    policy=st.sampled_from(["strip", "replace"]),
)
def test_nul_policy_counts_each_stored_value_it_changed(rows, policy):
    """The count per column is the number of upserted values that came out different (a
    delete's values are not stored: not counted), computed here value by value."""
    texts = [r[0] for r in rows]
    docs = [None if r[1] is None else json.dumps({"k": r[1]}) for r in rows]
    ops = [r[2] for r in rows]
    changes = _changes(texts, json_values=docs, ops=ops)
    for name in ("v", "j"):  # typed as the merger's batches are (an all-None list has no type)
        changes = changes.set_column(changes.schema.get_field_index(name), name, changes[name].cast(pa.string()))
    out, changed = apply_nul_policy("db.t", changes, ["id"], ["v"], ["j"], policy)
    want = {}
    for name in ("v", "j"):
        before, after = changes.column(name).to_pylist(), out.column(name).to_pylist()
        n = sum(1 for a, b, op in zip(before, after, ops) if a != b and op != "d")
        if n:
            want[name] = n
    assert changed == want


@pytest.mark.parametrize("policy", ["strip", "replace", "pause"])
def test_a_nul_in_a_key_always_pauses(policy):
    changes = _changes(["x", "y"], key=["k\x00", "k"])
    with pytest.raises(UnstorableValue, match="key column 'id'.*never stripped"):
        apply_nul_policy("db.t", changes, ["id"], ["id", "v"], [], policy)


def test_nul_policy_config():
    assert MergerConfig().model_validate({"sinks": {"postgres": {}}}).sinks.postgres.nul_policy == "strip"
    cfg = load_model(MergerConfig, None, {"sinks.postgres.nul_policy": "pause"})
    assert cfg.sinks.postgres.nul_policy == "pause"
    with pytest.raises(ConfigError) as e:
        load_model(MergerConfig, None, {"sinks.postgres.nul_policy": "drop"})
    assert str(e.value) == ("configuration: sinks.postgres.nul_policy: must be one of 'strip', 'replace' or 'pause'")


def test_postgres_sink_refuses_an_unknown_nul_policy():
    from merger.sinks import SinkError
    from merger.sinks.postgres import PostgresSink

    with pytest.raises(SinkError, match="nul_policy must be one of strip, replace, pause"):
        PostgresSink({"host": "127.0.0.1"}, nul_policy="drop")
