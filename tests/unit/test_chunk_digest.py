"""Unit tests of merger.verify.digest (the pure core of `cdc verify`) and of the pure
helpers of the command (durations, table selection, exit codes)."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merger.verify.digest import Digest, diff, digest, encode_row, encode_value, row_hash, table_rows

COLUMNS = ["id", "name", "qty"]
KEYS = ["id"]

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.floats(allow_nan=True),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.dates(),
    st.datetimes(),
    st.timedeltas(),
)


def rows_strategy():
    # distinct integer keys, arbitrary other values
    return st.dictionaries(st.integers(-1000, 1000), st.tuples(st.text(max_size=5), values), max_size=30).map(
        lambda d: [(k, a, b) for k, (a, b) in d.items()]
    )


def test_hash_is_stable_across_processes():
    # a fixed value: the encoding must never change silently (digests are compared across
    # processes and versions)
    assert row_hash((1, "a", None)) == row_hash((1, "a", None))
    assert f"{row_hash((1, 'a', None)):016x}" == "%016x" % int.from_bytes(
        __import__("hashlib").blake2b(encode_row((1, "a", None)), digest_size=8).digest(), "big"
    )
    assert encode_row((1, "a", None)) == b"\x00\x00\x00\x02i1\x00\x00\x00\x02sa\x00\x00\x00\x01N"


def test_encoding_distinguishes_types_and_boundaries():
    assert encode_value(1) != encode_value("1") != encode_value(b"1")
    assert encode_value(True) != encode_value(1)
    assert encode_value(None) != encode_value("") != encode_value(b"")
    assert encode_row(("ab", "c")) != encode_row(("a", "bc"))
    assert encode_value(dt.date(2020, 1, 2)) != encode_value(dt.datetime(2020, 1, 2))
    # value semantics where the canonical values are equal numbers or instants
    assert encode_value(Decimal("1.0")) == encode_value(Decimal("1.00"))
    assert encode_value(Decimal("0.00")) == encode_value(Decimal("0"))
    utc = dt.datetime(2020, 1, 1, 12, tzinfo=dt.timezone.utc)
    plus2 = utc.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert encode_value(utc) == encode_value(plus2)
    assert encode_value(dt.datetime(2020, 1, 1, 12)) != encode_value(utc)  # naive is not an instant
    assert encode_value(float("nan")) == encode_value(float("nan"))


def test_digest_counts_and_duplicates():
    assert digest([]) == Digest(0, 0)
    one = digest([(1, "a", 2)])
    assert one.count == 1
    two = digest([(1, "a", 2), (1, "a", 2)])
    assert two.count == 2 and two.hash != 0  # a sum: duplicates do not cancel
    assert digest([(1, "a", 2)]) + digest([(2, "b", 3)]) == digest([(2, "b", 3), (1, "a", 2)])


@given(rows_strategy(), st.randoms())
def test_digest_is_order_independent(rows, rnd):
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert digest(rows) == digest(shuffled)


@given(rows_strategy(), st.data())
def test_digest_and_diff_find_every_change(rows, data):
    """Delete some rows, change some, add some: the digest differs, and the diff names
    exactly those keys (and the changed columns)."""
    by_key = {r[0]: r for r in rows}
    keys = sorted(by_key)
    deleted = set(data.draw(st.lists(st.sampled_from(keys), unique=True), label="deleted") if keys else [])
    left = [k for k in keys if k not in deleted]
    changed = set(data.draw(st.lists(st.sampled_from(left), unique=True), label="changed") if left else [])
    added = set(data.draw(st.lists(st.integers(2000, 3000), unique=True, max_size=5), label="added"))
    sink = []
    for k in left:
        r = by_key[k]
        if k in changed:
            r = (k, r[1] + "x", r[2])  # the name column always changes
        sink.append(r)
    sink += [(k, "new", None) for k in added]
    random.Random(1).shuffle(sink)
    d = diff(COLUMNS, KEYS, rows, sink)
    assert {k for (k,) in d.missing} == deleted
    assert {k for (k,) in d.extra} == added
    assert {k for (k,), _ in d.different} == changed
    assert all(cols == ("name",) for _, cols in d.different)
    assert (digest(rows) == digest(sink)) == d.empty
    assert d.keys() == {(k,) for k in deleted | added | changed}


@given(rows_strategy())
@settings(max_examples=50)
def test_equal_chunks_have_equal_digests_and_an_empty_diff(rows):
    copy = [tuple(r) for r in reversed(rows)]
    assert digest(rows) == digest(copy)
    assert diff(COLUMNS, KEYS, rows, copy).empty


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=8),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=8),
)
def test_a_digest_mismatch_always_shows_in_the_diff(src, dst):
    """Even with repeated keys (a chunk key that is not unique)."""
    d = diff(["k", "v"], ["k"], src, dst)
    if sorted(src) == sorted(dst):
        assert digest(src) == digest(dst) and d.empty
    else:
        assert digest(src) != digest(dst) and not d.empty


def test_diff_composite_keys_and_duplicates():
    cols = ["a", "b", "v"]
    src = [(1, "x", 1), (1, "y", 2), (2, "x", 3)]
    dst = [(1, "x", 1), (1, "y", 20), (2, "x", 3), (2, "x", 3), (3, "z", 0)]
    d = diff(cols, ["a", "b"], src, dst)
    assert d.missing == []
    assert d.different == [((1, "y"), ("v",))]
    assert sorted(d.extra) == [(2, "x"), (3, "z")]  # (2, 'x') is held twice by the sink
    d = diff(cols, ["a", "b"], dst[:3] + dst[2:3], dst[:3])  # a non-unique chunk key in the source
    assert d.missing == [(2, "x")] and d.extra == [] and d.different == []


def test_diff_rejects_unknown_key_columns():
    with pytest.raises(ValueError, match="key columns"):
        diff(["a"], ["b"], [], [])


def test_table_rows():
    t = pa.table({"a": [1, 2], "b": ["x", None]})
    assert table_rows(t) == [(1, "x"), (2, None)]
    assert table_rows(t, ["b", "a"]) == [("x", 1), (None, 2)]
    assert table_rows(t.slice(0, 0)) == []


# ------------------------------------------------------------------ command helpers


def test_parse_duration():
    from cdc.cli.verify import parse_duration
    from cdc.config import ConfigError

    assert parse_duration("2s") == 2.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1m") == 60.0
    assert parse_duration("1.5") == 1.5
    with pytest.raises(ConfigError, match="--retry-wait"):
        parse_duration("soon")


def test_merger_tables_follow_include_exclude_and_skip_watermarks():
    from merger.verify.chunked import merger_tables

    tables = ["shop.orders", "shop.items", "cdc.cdc_watermarks", "hr.people", "shop.tmp_x"]
    assert merger_tables(tables, [], [], "cdc.cdc_watermarks") == [
        "hr.people",
        "shop.items",
        "shop.orders",
        "shop.tmp_x",
    ]
    assert merger_tables(tables, [r"shop\..*"], [r".*\.tmp_.*"], "cdc.cdc_watermarks") == ["shop.items", "shop.orders"]


def test_exit_code():
    from cdc.cli.verify import exit_code
    from merger.verify.chunked import TableResult

    equal = TableResult("a.b", "delta")
    different = TableResult("a.b", "postgres", mismatched_chunks=1)
    error = TableResult("a.c", "delta", error="no primary key")
    skipped = TableResult("a.b", "kafka_changelog", skipped=True, note="not verified")
    assert exit_code([equal, skipped]) == 3  # a sink only skipped is not a success
    assert exit_code([equal, different, error]) == 1
    assert exit_code([equal, error]) == 2
    assert TableResult("a.b", "delta", note="the sink has no table a.b").verdict == "different"
