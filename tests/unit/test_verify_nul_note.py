"""cdc verify and the PostgreSQL sink's NUL rule: which source values the rule changed
(counted from the source values, merger.verify.canonical / column_canon / side), and the
note of the result (merger.verify.chunked.TableResult, cdc/cli/verify.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from cdc.cli.verify import EXIT_EQUAL, exit_code, render
from merger.verify.canonical import Column
from merger.verify.chunked import TableResult
from merger.verify.column_canon import row_canons
from merger.verify.side import SinkSide
from merger.verify.sinks.delta import DELTA_RULES
from merger.verify.sinks.postgres import postgres_rules
from merger.verify.source import SourceTable

COLUMNS = (
    Column("id", "int", "int(11)"),
    Column("v", "varchar", "varchar(20)"),
    Column("t", "text", "text"),
    Column("c", "char", "char(5)"),
    Column("j", "longtext", "longtext", is_json=True),
    Column("b", "varbinary", "varbinary(5)"),
)
RULES = [postgres_rules("strip"), postgres_rules("replace")]
UNCHANGED = [postgres_rules("pause"), DELTA_RULES]


def _side(rules) -> SinkSide:
    """A SinkSide over COLUMNS (no reader is read: nul_changes only looks at the rows)."""
    reader = SimpleNamespace(rules=rules, digest_key_kinds=())
    return SinkSide(reader, SourceTable("db", "t", COLUMNS, ("id",)), ["id"], {"j": "jsonb"})


_TEXT = st.one_of(st.none(), st.text(alphabet=st.sampled_from(["a", "\x00", "é", " "]), max_size=6))


@given(rows=st.lists(st.tuples(_TEXT, _TEXT, _TEXT, _TEXT), max_size=10), rules=st.sampled_from(RULES + UNCHANGED))
def test_the_count_is_of_the_values_whose_canonical_form_the_rule_changed(rows, rules):
    raw = [
        (i, v, None if t is None else t.encode(), c, None if j is None else json.dumps({"k": j}), b"\x00")
        for i, (v, t, c, j) in enumerate(rows)
    ]
    canons = row_canons(COLUMNS, rules, {"j": "jsonb"})
    plain = row_canons(COLUMNS, DELTA_RULES, {"j": "jsonb"})  # the same values without any NUL rule
    want = sum(
        1
        for r in raw
        for a, b, v in zip(canons, plain, r)
        if v is not None and a.kind != "binary" and a.source(v) != b.source(v)
    )
    got = _side(rules).nul_changes(raw)
    assert got == want
    if rules in UNCHANGED:
        assert got == 0


def test_nul_values_in_text_and_json_strings_are_counted_once_each():
    raw = [
        (1, "a\x00b", b"\x00\x00", "x\x00 ", '{"k": "a\\u0000"}', b"\x00"),
        (2, "ok", None, None, '{"\\u0000": 1}', None),
        (3, None, b"fine", "x", '{"k": "\\\\u0000"}', b"\x00"),  # an escaped backslash, then "u0000": no NUL
    ]
    assert _side(postgres_rules("strip")).nul_changes(raw) == 5
    assert _side(postgres_rules("pause")).nul_changes(raw) == 0
    assert _side(DELTA_RULES).nul_changes(raw) == 0


def test_json_in_a_text_column_keeps_its_escape_so_nothing_is_changed():
    """MariaDB's JSON is text in PostgreSQL unless declared JSON: the escape \\u0000 stays."""
    reader = SimpleNamespace(rules=postgres_rules("strip"), digest_key_kinds=())
    side = SinkSide(reader, SourceTable("db", "t", COLUMNS, ("id",)), ["id"], {"j": "text"})
    doc = '{"k": "a\\u0000"}'
    assert side.nul_changes([(1, None, None, None, doc, None)]) == 0
    assert side.canons[4].source(doc) == side.canons[4].sink(doc)


@pytest.mark.parametrize("policy", ["strip", "replace"])
def test_an_equal_table_with_nul_values_says_so_and_stays_equal(policy):
    r = TableResult("db.t", "postgres", chunks=1, source_rows=3, sink_rows=3, nul_policy=policy, nul_values_changed=4)
    assert r.verdict == "equal" and exit_code([r]) == EXIT_EQUAL
    note = f"equal except 4 values changed by the NUL policy (nul_policy: {policy}"
    assert r.nul_note.startswith(note)
    out = r.to_json()
    assert out["verdict"] == "equal" and out["nul_values_changed"] == 4 and out["nul_policy"] == policy
    assert out["nul_note"] == r.nul_note and out["note"] is None
    console = Console(width=200, record=True)
    render([r], console)
    assert note in console.export_text()


def test_no_nul_value_no_note():
    r = TableResult("db.t", "postgres", nul_policy="strip")
    assert r.nul_note is None and r.to_json()["nul_values_changed"] == 0
    different = TableResult("db.t", "postgres", mismatched_chunks=1, nul_policy="strip", nul_values_changed=2)
    assert different.verdict == "different" and "equal except" not in different.nul_note
