"""merger.verify.sql_digest: which columns get SQL texts, and the digest arithmetic the
Delta side does in Python (checked against a plain hashlib model). The SQL itself runs
against the real servers in tests/integration/test_verify_digest.py."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from merger.verify.canonical import Column
from merger.verify.sinks.delta import DELTA_RULES
from merger.verify.sinks.postgres import postgres_rules
from merger.verify.sql_digest import (
    MASK,
    Digest,
    NoSqlText,
    column_texts,
    datafusion_literal,
    datafusion_query,
    mariadb_query,
    plan,
    postgres_query,
    quote,
    range_predicate,
    words_digest,
)

PG = postgres_rules()
DELTA = DELTA_RULES


def col(name: str, data_type: str, column_type: str | None = None, **kw) -> Column:
    return Column(name, data_type, column_type or data_type, **kw)


def model_digest(texts: list[bytes]) -> Digest:
    total = sum(int.from_bytes(hashlib.sha256(t).digest()[:8], "big") for t in texts)
    return Digest(len(texts), total % (1 << 64))


@given(st.lists(st.binary(max_size=40), max_size=300))
def test_words_digest_is_the_model(texts):
    packed = b"".join(hashlib.sha256(t).digest() for t in texts)
    assert words_digest(len(texts), packed) == model_digest(texts)


@given(st.lists(st.binary(max_size=10), min_size=1, max_size=50), st.data())
def test_a_row_held_twice_does_not_cancel_out(texts, data):
    twice = data.draw(st.sampled_from(texts))
    assert model_digest(texts) != model_digest([*texts, twice, twice])
    packed = b"".join(hashlib.sha256(t).digest() for t in [*texts, twice, twice])
    assert words_digest(len(texts) + 2, packed) != model_digest(texts)


def test_digest_of_takes_signed_and_large_sums_mod_2_64():
    assert Digest.of(3, -1) == Digest(3, MASK)
    assert Digest.of(1, (1 << 64) + 5) == Digest(1, 5)
    assert Digest.of("2", "7") == Digest(2, 7)


def test_words_digest_rejects_a_short_buffer():
    with pytest.raises(ValueError):
        words_digest(2, b"\x00" * 17)


@pytest.mark.parametrize(
    "column,sink_type",
    [
        (col("x", "double"), "double precision"),
        (col("x", "float"), "real"),
        (col("x", "longtext", is_json=True), "jsonb"),
        (col("x", "bit", "bit(3)"), "bytea"),
        (col("x", "point"), "bytea"),
        (col("x", "int"), "text"),  # not the documented sink type
        (col("x", "decimal", "decimal(10,2)", numeric_scale=2), "numeric(10,3)"),
        (col("x", "varchar", character_set="sjis"), "text"),
        (col("x", "datetime"), "timestamp with time zone"),
        (col("x", "int"), None),  # the sink has no such column
        (col("x", "mediumint", "mediumint(8)"), "boolean"),
    ],
)
def test_columns_without_a_sql_text(column, sink_type):
    with pytest.raises(NoSqlText):
        column_texts(column, PG, sink_type)
    p = plan([col("id", "int"), column], PG, {"id": "integer", "x": sink_type} if sink_type else {"id": "integer"})
    assert not p.usable and "'x'" in p.reason and p.source_row is None


def test_a_string_text_is_the_same_for_every_sink_and_nul_policy():
    """NUL characters stay in the source's text: a PostgreSQL sink cannot hold them, so a
    chunk holding one differs there and is compared row by row under the sink's rule."""
    s = col("s", "varchar", "varchar(10)", character_set="utf8mb4")
    texts = {column_texts(s, postgres_rules(policy), "text")[0] for policy in ("strip", "replace", "pause")}
    texts.add(column_texts(s, DELTA, "string")[0])
    assert texts == {"CONCAT(LENGTH(`s`), ':', `s`)"}


def test_the_digest_queries_hash_with_sha256():
    assert "SHA2(x, 256)" in mariadb_query("x", "`db`.`t`", None)
    assert "sha256(convert_to(x, 'UTF8'))" in postgres_query("x", "t", None)
    assert "digest(x, 'sha256')" in datafusion_query("x", "t", None)


def test_a_usable_plan_writes_every_column_once_in_order():
    cols = [col("id", "int"), col("na`me", "varchar", character_set="latin1"), col("d", "date")]
    p = plan(cols, DELTA, {"id": "int32", "na`me": "string", "d": "date32[day]"})
    assert p.usable
    assert p.source_row.index("`id`") < p.source_row.index("`na``me`") < p.source_row.index("`d`")
    assert "CONVERT(`na``me` USING utf8mb4)" in p.source_row
    assert p.sink_row.startswith("concat_ws(',', coalesce(CAST(\"id\" AS VARCHAR), 'N')")


def test_quote_escapes_each_dialect():
    assert quote("mariadb", "a`b") == "`a``b`"
    assert quote("postgresql", 'a"b') == '"a""b"'
    assert quote("datafusion", "A") == '"A"'


def test_range_predicate_spells_out_row_comparisons():
    assert range_predicate("datafusion", ["a"], ["1"], ["9"]) == '(("a" >= 1)) AND (("a" < 9))'
    two = range_predicate("datafusion", ["a", "b"], ["1", "2"], None)
    assert two == '(("a" > 1) OR ("a" = 1 AND "b" >= 2))'
    assert range_predicate("datafusion", ["a"], None, None) is None


def test_datafusion_literals_only_for_integers_and_dates():
    assert datafusion_literal("int", "-12") == "-12"
    assert datafusion_literal("date", "2024-02-29") == "DATE '2024-02-29'"
    for kind, value in (("int", "1; DROP"), ("string", "a"), ("date", "2024-2-9"), ("decimal", "1.5")):
        with pytest.raises(NoSqlText):
            datafusion_literal(kind, value)
