"""Tests of merger.snapshot.chunking: plans cover the key space exactly once, boundary planning
bounds chunk sizes, and the SQL predicates select exactly the keys of a range (checked
by running them in SQLite, which reads backtick identifiers and OR/AND the same way)."""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import re
import sqlite3
from decimal import Decimal
from typing import Sequence

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from merger.snapshot.chunking import (
    Chunk,
    KeyRange,
    as_key,
    boundary_sql,
    chunk_id,
    make_chunks,
    no_chunk_key_error,
    plan_by_boundaries,
    quote_ident,
    quote_table,
    ranges_from_boundaries,
    remaining,
    resolve_chunk_key,
    sql_literal,
    sql_predicate,
    sql_predicate_literal,
)
from tests.support.chunk_plans import plan_numeric

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def validate_plan(ranges: Sequence[KeyRange]) -> None:
    """The oracle of the planners: raise ValueError unless the ranges are contiguous and
    cover every key (the first ``lo`` and the last ``hi`` None, each ``hi`` the next ``lo``)."""
    if not ranges:
        raise ValueError("a plan needs at least one range")
    if ranges[0].lo is not None or ranges[-1].hi is not None:
        raise ValueError("a plan must start and end unbounded (first lo and last hi None)")
    for i, (a, b) in enumerate(zip(ranges, ranges[1:])):
        if a.hi is None or a.hi != b.lo:
            raise ValueError(f"ranges {i} and {i + 1} are not contiguous: hi {a.hi!r}, lo {b.lo!r}")


def owners(ranges, key):
    return [i for i, r in enumerate(ranges) if r.contains(key)]


def boundary_source(sorted_keys, chunk_size):
    """A fake of boundary_sql's query over an in-memory sorted key list."""
    calls = []

    def next_boundary(lo, hi):
        calls.append((lo, hi))
        start = 0 if lo is None else bisect.bisect_left(sorted_keys, lo)
        index = start + chunk_size
        if index < len(sorted_keys) and (hi is None or sorted_keys[index] < hi):
            return sorted_keys[index]
        return None

    return next_boundary, calls


# -- plan_numeric -------------------------------------------------------------------------


@FAST
@given(
    st.integers(-(10**6), 10**6),
    st.integers(0, 1000),
    st.integers(0, 100_000),
    st.integers(1, 2000),
    st.lists(st.integers(-3, 3), max_size=20),
)
def test_plan_numeric_covers_each_key_once(lo, width, estimate, size, offsets):
    hi = lo + width
    ranges = plan_numeric(lo, hi, estimate, size)
    validate_plan(ranges)
    assert len(ranges) <= max(1, -(-estimate // size))
    assert len(ranges) <= width + 1
    bounds = [r.lo[0] for r in ranges[1:]]
    assert all(lo < b <= hi for b in bounds)
    widths = [b - a for a, b in zip([lo] + bounds, bounds + [hi + 1])]
    assert len(set(widths[:-1])) <= 1 and 1 <= widths[-1] <= widths[0]  # even widths
    probes = [lo - 1, lo, hi, hi + 1, *bounds, *(b - 1 for b in bounds)]
    probes += [lo + (o * width) // 3 for o in offsets]
    for key in probes:
        assert len(owners(ranges, key)) == 1


def test_plan_numeric_edges():
    assert plan_numeric(None, None, 0, 10) == [KeyRange(None, None)]
    assert plan_numeric(5, 5, 1000, 1) == [KeyRange(None, None)]
    assert plan_numeric((1,), (100,), 100, 50) == [KeyRange(None, (51,)), KeyRange((51,), None)]
    assert plan_numeric(0, 9, 10, 3) == ranges_from_boundaries([3, 6, 9])
    assert len(plan_numeric(0, 2**64 - 1, 10**12, 10**9)) == 1000
    for args, msg in [
        ((1, 0, 1, 1), "above"),
        ((0, 1, 1, 0), "chunk_size"),
        ((0, 1, -1, 1), "row_estimate"),
        (("a", "z", 1, 1), "int"),
        ((True, 5, 1, 1), "int"),
        (((1, 2), (3, 4), 1, 1), "one column"),
        ((0, 1, 1, True), "chunk_size"),
    ]:
        with pytest.raises(ValueError, match=msg):
            plan_numeric(*args)


def test_numeric_prefix_plan_on_composite_keys():
    ranges = plan_numeric(0, 9, 100, 25)
    for key in [(0, "a"), (2, "zz"), (3, ""), (9, "x"), (10, "")]:
        assert len(owners(ranges, key)) == 1
    assert KeyRange((3,), (5,)).contains((3, "")) and not KeyRange((3,), (5,)).contains((5, ""))
    assert KeyRange((3,), (5,)).contains((4, "\uffff", 9))


# -- plan_by_boundaries ---------------------------------------------------------------------

KEY_SETS = st.one_of(
    st.sets(st.integers(-1000, 1000), max_size=80).map(lambda s: sorted((k,) for k in s)),
    st.sets(st.text(max_size=4), max_size=80).map(lambda s: sorted((k,) for k in s)),
    st.sets(st.binary(max_size=3), max_size=60).map(lambda s: sorted((k,) for k in s)),
    st.sets(st.tuples(st.integers(0, 5), st.text("ab\u00e9", max_size=3)), max_size=80).map(sorted),
    st.sets(st.tuples(st.sampled_from(["x", "y"]), st.integers(-2, 2), st.binary(max_size=2)), max_size=60).map(sorted),
)


@FAST
@given(KEY_SETS, st.integers(1, 12), st.data())
def test_boundary_plan_covers_and_bounds_size(keys, size, data):
    next_boundary, calls = boundary_source(keys, size)
    ranges = list(plan_by_boundaries(next_boundary))
    validate_plan(ranges)
    assert len(calls) == len(ranges)  # one query per range
    counts = [sum(r.contains(k) for k in keys) for r in ranges]
    assert all(c == size for c in counts[:-1]) and counts[-1] <= size
    for key in keys:
        assert len(owners(ranges, key)) == 1
    if keys:  # keys that were not there at planning time (inserted later) too
        template = keys[data.draw(st.integers(0, len(keys) - 1))]
        probe = data.draw(
            KEY_SETS.filter(lambda ks: ks and type(ks[0][0]) is type(template[0]) and len(ks[0]) == len(template))
        )
        for key in probe:
            assert len(owners(ranges, key)) == 1
    # resuming after the first k finished ranges gives the same remaining plan
    k = data.draw(st.integers(0, len(ranges) - 1))
    if ranges[k].lo is not None:
        resumed = list(plan_by_boundaries(boundary_source(keys, size)[0], start=ranges[k].lo))
        assert resumed == ranges[k:]


def test_boundary_plan_accepts_scalars_and_guards_progress():
    keys = [1, 3, 5, 7, 9]
    ranges = list(plan_by_boundaries(lambda lo, hi: {None: 5, (5,): 9, (9,): None}[lo]))
    assert ranges == [KeyRange(None, (5,)), KeyRange((5,), (9,)), KeyRange((9,), None)]
    assert [len(owners(ranges, k)) for k in keys] == [1] * 5
    with pytest.raises(ValueError, match="not strictly inside"):
        list(plan_by_boundaries(lambda lo, hi: 3 if lo is None else lo))
    assert list(plan_by_boundaries(lambda lo, hi: None)) == [KeyRange(None, None)]
    plan = plan_by_boundaries(lambda lo, hi: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # lazy: the first query runs on iteration
        next(plan)


@FAST
@given(st.sets(st.text("aAbB\u00e9\u00c9 ", max_size=3), max_size=40), st.integers(1, 5))
def test_boundary_plan_follows_the_database_order(words, size):
    """A case-insensitive collation orders keys unlike Python; the plan must still be
    contiguous, and the database's own range membership must respect the size bound."""
    order = lambda k: (k[0].casefold(), k[0])  # noqa: E731  (a stand-in for a *_ci collation)
    keys = sorted(((w,) for w in words), key=order)

    def next_boundary(lo, hi):
        rest = [k for k in keys if (lo is None or order(k) >= order(lo)) and (hi is None or order(k) < order(hi))]
        return rest[size] if len(rest) > size else None

    ranges = list(plan_by_boundaries(next_boundary))
    validate_plan(ranges)
    for key in keys:
        inside = [
            r
            for r in ranges
            if (r.lo is None or order(key) >= order(r.lo)) and (r.hi is None or order(key) < order(r.hi))
        ]
        assert len(inside) == 1
    for r in ranges:
        assert (
            sum((r.lo is None or order(k) >= order(r.lo)) and (r.hi is None or order(k) < order(r.hi)) for k in keys)
            <= size
        )


# -- ranges, ids, plans ------------------------------------------------------------------------


def test_key_range_validation_and_normalisation():
    assert KeyRange(1, 2) == KeyRange((1,), (2,))
    assert KeyRange([1, "a"], None).lo == (1, "a")
    assert as_key("x") == ("x",) and as_key([1]) == (1,)
    for lo, hi, msg in [((2,), (2,), "empty range"), ((), None, "empty tuple"), (None, (), "empty tuple")]:
        with pytest.raises(ValueError, match=msg):
            KeyRange(lo, hi)
    assert KeyRange(None, None).contains(("anything", 1))


def test_validate_plan_rejects_gaps_and_open_ends():
    validate_plan([KeyRange(None, None)])
    for bad in ([], [KeyRange((1,), None)], [KeyRange(None, (1,))], [KeyRange(None, (1,)), KeyRange((2,), None)]):
        with pytest.raises(ValueError):
            validate_plan(bad)


def test_chunk_ids_are_stable_and_distinct():
    ranges = plan_numeric(0, 1000, 1000, 100)
    a, b = make_chunks("db.t", ranges), make_chunks("db.t", plan_numeric(0, 1000, 1000, 100))
    assert [c.id for c in a] == [c.id for c in b]
    assert len({c.id for c in a}) == len(a)
    assert all(c.id.startswith("db.t:") and len(c.id) == len("db.t:") + 16 for c in a)
    assert [c.index for c in a] == list(range(len(a)))
    assert chunk_id("db.t", KeyRange((1,), (2,))) != chunk_id("db.t", KeyRange((1.0,), (2,)))
    assert chunk_id("db.t", KeyRange((1,), (2,))) != chunk_id("db.u", KeyRange((1,), (2,)))
    assert chunk_id("x", KeyRange(("1",), None)) != chunk_id("x", KeyRange((1,), None))
    assert chunk_id("db.t", KeyRange(None, (10,))) == chunk_id("db.t", KeyRange(None, 10))
    done = {a[0].id, a[2].id}
    assert remaining(a, done) == [c for c in a if c.id not in done]
    assert isinstance(a[0], Chunk) and a[0].range == ranges[0]


def test_chunk_id_golden():
    """Ids must not change between releases: progress is stored under them."""
    assert (
        chunk_id("db.t", KeyRange(None, None)) == "db.t:" + hashlib.sha256(b'[["n",null],["n",null]]').hexdigest()[:16]
    )
    assert (
        chunk_id("db.t", KeyRange((1, "a"), None))
        == "db.t:" + hashlib.sha256(b'[["t",[["i","1"],["s","a"]]],["n",null]]').hexdigest()[:16]
    )


# -- SQL text ---------------------------------------------------------------------------------


def test_identifier_quoting():
    assert quote_ident("id") == "`id`"
    assert quote_ident("we`ird col") == "`we``ird col`"
    assert quote_ident("``") == "``````"
    assert quote_table(("my db", "t`1")) == "`my db`.`t``1`"
    assert quote_table("a.b") == "`a.b`"
    for bad in ("", None, "a\x00b", 3):
        with pytest.raises(ValueError):
            quote_ident(bad)
    with pytest.raises(ValueError):
        quote_table(("a", "b", "c"))


def test_predicate_text_composite():
    sql, params = sql_predicate(["a", "b"], (1, "x"), (5, "y"))
    assert sql == (
        "(`a` >= %s AND (`a` > %s OR (`a` = %s AND `b` >= %s))) AND "
        "(`a` <= %s AND (`a` < %s OR (`a` = %s AND `b` < %s)))"
    )
    assert params == [1, 1, 1, "x", 5, 5, 5, "y"]
    assert sql_predicate("id", 10, None) == ("`id` >= %s", [10])
    assert sql_predicate(["id"], None, (10,)) == ("`id` < %s", [10])
    assert sql_predicate(["a", "b"], None, None) == ("1=1", [])
    assert sql_predicate(["a", "b", "c"], (7,), None) == ("`a` >= %s", [7])  # prefix bound
    sql, params = sql_predicate(["we`ird col", "100%"], (1, 2), None)
    assert sql == ("(`we``ird col` >= %s AND (`we``ird col` > %s OR (`we``ird col` = %s AND `100%%` >= %s)))")
    assert sql % tuple(str(p) for p in params) == (
        "(`we``ird col` >= 1 AND (`we``ird col` > 1 OR (`we``ird col` = 1 AND `100%` >= 2)))"
    )
    sql, _ = sql_predicate(["a"], 1, None, quote=lambda n: f'"{n}"')
    assert sql == '"a" >= %s'


def test_predicate_literal_text():
    assert (
        sql_predicate_literal(["a", "b"], (1, "it's"), None)
        == "(`a` >= 1 AND (`a` > 1 OR (`a` = 1 AND `b` >= _utf8mb4 X'69742773')))"
    )
    assert (
        sql_predicate_literal(["a", "b"], None, (b"\x00\xff", Decimal("1E+3")))
        == "(`a` <= X'00FF' AND (`a` < X'00FF' OR (`a` = X'00FF' AND `b` < 1000)))"
    )
    assert sql_predicate_literal(["100%"], 5, None) == "`100%` >= 5"  # no %-doubling here


def test_sql_literals():
    assert sql_literal(-12) == "-12"
    assert sql_literal(2**64 - 1) == "18446744073709551615"
    assert sql_literal(True) == "1"
    assert sql_literal(Decimal("-0.0010")) == "-0.0010"
    assert sql_literal(Decimal("1.5E+3")) == "1500"
    assert sql_literal(0.1) == "0.1" and sql_literal(1e-20) == "1e-20"
    # strings as hex with a character set introducer: no quote or backslash to escape
    assert sql_literal("a'b\\c\"d\x00e\nf\rg\x1ah") == "_utf8mb4 X'6127625C63226400650A660D671A68'"
    assert sql_literal("O'Brien") == "_utf8mb4 X'4F27427269656E'"
    assert sql_literal("é😀") == "_utf8mb4 X'C3A9F09F9880'"
    assert sql_literal("") == "_utf8mb4 X''"
    assert sql_literal(b"") == "X''"
    assert sql_literal(bytearray(b"\x01")) == "X'01'"
    assert sql_literal(dt.datetime(2024, 1, 2, 3, 4, 5, 6)) == "'2024-01-02 03:04:05.000006'"
    assert sql_literal(dt.date(2024, 1, 2)) == "'2024-01-02'"
    assert sql_literal(dt.time(3, 4, 5)) == "'03:04:05'"
    for bad, msg in [
        (None, "NULL"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (Decimal("NaN"), "finite"),
        (Decimal("-Infinity"), "finite"),
        (dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), "naive"),
        (object(), "unsupported"),
        ("\ud800", "valid Unicode"),
        ([1], "unsupported"),
    ]:
        with pytest.raises(ValueError, match=msg):
            sql_literal(bad)


def mariadb_strings(sql: str, no_backslash_escapes: bool) -> list[str]:
    """The string literals of SQL text as MariaDB's lexer reads them in the default sql_mode
    or under NO_BACKSLASH_ESCAPES (a model: quotes, backticks, the backslash escapes, and a
    hex literal's bytes as UTF-8 after an introducer). ValueError: not SQL (a string left open)."""
    escapes = {"0": "\x00", "n": "\n", "r": "\r", "Z": "\x1a", "t": "\t", "b": "\b"}
    out, i = [], 0
    while i < len(sql):
        ch = sql[i]
        if ch == "`":
            end = sql.index("`", i + 1)
            while sql.startswith("``", end):
                end = sql.index("`", end + 2)
            i = end + 1
        elif ch == "'" and sql[i - 1 : i] == "X" and sql[max(0, i - 10) : i - 1].endswith("_utf8mb4 "):
            end = sql.index("'", i + 1)
            out.append(bytes.fromhex(sql[i + 1 : end]).decode("utf-8"))
            i = end + 1
        elif ch in "'\"":
            text, i = [], i + 1
            while True:
                if i >= len(sql):
                    raise ValueError(f"a string left open in {sql!r}")
                c = sql[i]
                if c == "\\" and not no_backslash_escapes:
                    text.append(escapes.get(sql[i + 1], sql[i + 1]))
                    i += 2
                elif c == ch and sql.startswith(ch * 2, i):
                    text.append(ch)
                    i += 2
                elif c == ch:
                    i += 1
                    break
                else:
                    text.append(c)
                    i += 1
            out.append("".join(text))
        else:
            i += 1
    return out


# most pairs are out of order (``high``'s alphabet is low in the code points), so the
# ``assume`` rejects many: this failed once in a unit run (session 40) and passed again on
# its saved examples and 5 seeds, as a filter_too_much health check would
@settings(FAST, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=8), st.text("\\'\"ab%", max_size=6))
def test_a_text_bound_means_the_same_under_every_sql_mode(low, high):
    """The literal predicate's strings read the same with and without NO_BACKSLASH_ESCAPES,
    and they are the bounds (a value cannot end its literal early: no quote, no backslash)."""
    assume(low < high)
    text = sql_predicate_literal(["k", "n"], (low, 1), (high,))
    assert re.fullmatch(r"[^'\\\"]*", re.sub(r"_utf8mb4 X'[0-9A-F]*'", "", text))
    default, nbe = mariadb_strings(text, False), mariadb_strings(text, True)
    assert default == nbe == [low, low, low, high]


def test_the_model_lexer_reads_the_backslash_form_differently_per_mode():
    """The form chunk predicates and repair lists had: ``'a\\\\b'`` is a\\b by default and a\\\\b
    under NO_BACKSLASH_ESCAPES; ``'O\\'Brien'`` is no SQL there (error 1064)."""
    assert mariadb_strings("`k` IN ('a\\\\b')", False) == ["a\\b"]
    assert mariadb_strings("`k` IN ('a\\\\b')", True) == ["a\\\\b"]
    assert mariadb_strings("`k` = 'O\\'Brien'", False) == ["O'Brien"]
    with pytest.raises(ValueError, match="left open"):
        mariadb_strings("`k` = 'O\\'Brien'", True)


def test_predicate_input_errors():
    with pytest.raises(ValueError, match="at least one column"):
        sql_predicate([], 1, None)
    with pytest.raises(ValueError, match="duplicates"):
        sql_predicate(["a", "a"], 1, None)
    with pytest.raises(ValueError, match="more values"):
        sql_predicate(["a"], (1, 2), None)
    with pytest.raises(ValueError, match="at least one value"):
        sql_predicate(["a"], (), None)
    with pytest.raises(ValueError, match="NULL"):
        sql_predicate(["a", "b"], (1, None), None)
    with pytest.raises(ValueError, match="NULL"):
        sql_predicate_literal(["a"], None, (None,))


def test_boundary_sql():
    sql, params = boundary_sql(("db", "t%"), ["a", "b`"], None, 1000)
    assert sql == ("SELECT `a`, `b``` FROM `db`.`t%%` WHERE 1=1 ORDER BY `a`, `b``` LIMIT 1 OFFSET 1000")
    assert params == []
    sql, params = boundary_sql("t", ["a", "b"], (3, "x"), 10)
    assert sql.startswith("SELECT `a`, `b` FROM `t` WHERE (`a` >= %s AND ")
    assert sql.endswith(" ORDER BY `a`, `b` LIMIT 1 OFFSET 10") and params == [3, 3, 3, "x"]
    sql, params = boundary_sql("t", ["a"], 1, 5, hi=9)
    assert sql == "SELECT `a` FROM `t` WHERE `a` >= %s AND `a` < %s ORDER BY `a` LIMIT 1 OFFSET 5"
    assert params == [1, 9]
    with pytest.raises(ValueError):
        boundary_sql("t", ["a"], None, 0)


def test_chunk_key_resolution():
    msg = no_chunk_key_error("shop.orders")
    assert "shop.orders" in msg and "no primary key" in msg and "snapshot.chunk_keys['shop.orders']" in msg
    with pytest.raises(ValueError) as err:
        resolve_chunk_key("shop.orders", [], None)
    assert str(err.value) == msg
    with pytest.raises(ValueError, match="shop.orders"):
        resolve_chunk_key("shop.orders", None)
    assert resolve_chunk_key("t", ["id"]) == ("id",)
    # the primary key wins: it is the sink's row identity too (chunk_keys is for tables without one)
    assert resolve_chunk_key("t", ["id"], ["a", "b"]) == ("id",)
    assert resolve_chunk_key("t", None, "code") == ("code",)
    with pytest.raises(ValueError, match="twice"):
        resolve_chunk_key("t", None, ["a", "a"])
    with pytest.raises(ValueError, match="non-empty"):
        resolve_chunk_key("t", None, ["a", ""])


# -- predicates checked by running them ---------------------------------------------------------

NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=6)
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=3)
COLUMN_TYPES = {"int": st.integers(-5, 5), "text": TEXT, "blob": st.binary(max_size=2)}


def _sqlite_text(sql: str) -> str:
    """MariaDB's ``_utf8mb4 X'..'`` as SQLite's text of those UTF-8 bytes."""
    return re.sub(r"_utf8mb4 X'([0-9A-F]*)'", r"CAST(X'\1' AS TEXT)", sql)


@st.composite
def table_case(draw):
    types = draw(st.lists(st.sampled_from(sorted(COLUMN_TYPES)), min_size=1, max_size=3))
    names = draw(
        st.lists(NAMES, min_size=len(types), max_size=len(types), unique_by=str.lower)
    )  # SQLite names are case-insensitive
    key = st.tuples(*(COLUMN_TYPES[t] for t in types))
    rows = draw(st.sets(key, max_size=30))
    bound = st.none() | st.integers(1, len(types)).flatmap(lambda n: st.tuples(*(COLUMN_TYPES[t] for t in types[:n])))
    lo, hi = draw(bound), draw(bound)
    if lo is not None and hi is not None:
        assume(lo < hi)
    return types, names, sorted(rows), lo, hi


def _sqlite_table(types, names, rows):
    db = sqlite3.connect(":memory:")
    cols = ", ".join(f"{quote_ident(n)} {t.upper()}" for n, t in zip(names, types))
    db.execute(f"CREATE TABLE `t` ({cols})")
    db.executemany(f"INSERT INTO `t` VALUES ({', '.join('?' * len(names))})", rows)
    return db


@FAST
@given(table_case())
def test_predicates_select_exactly_the_range(case):
    types, names, rows, lo, hi = case
    db = _sqlite_table(types, names, rows)
    rng = KeyRange(lo, hi)
    expected = sorted(r for r in rows if rng.contains(r))
    select = "SELECT * FROM `t` WHERE "
    sql, params = sql_predicate(names, lo, hi)
    # pymysql fills %s by %-formatting: do the same, with SQLite's own placeholder
    got = sorted(db.execute(select + sql % (("?",) * len(params)), params).fetchall())
    assert got == expected
    literal = sql_predicate_literal(names, lo, hi)
    assert sorted(db.execute(select + _sqlite_text(literal)).fetchall()) == expected


@FAST
@given(
    st.sampled_from(sorted(COLUMN_TYPES)).flatmap(
        lambda t: st.sets(COLUMN_TYPES[t], min_size=1, max_size=60).map(sorted)
    ),
    st.integers(1, 10),
)
def test_boundary_sql_and_plan_against_sqlite(values, size):
    kind = {int: "int", str: "text", bytes: "blob"}[type(values[0])]
    db = _sqlite_table([kind], ["k`ey"], [(v,) for v in values])

    def next_boundary(lo, hi):
        sql, params = boundary_sql("t", ["k`ey"], lo, size, hi=hi)
        row = db.execute(sql % (("?",) * len(params)), params).fetchone()
        return None if row is None else tuple(row)

    ranges = list(plan_by_boundaries(next_boundary))
    validate_plan(ranges)
    sizes = []
    for r in ranges:
        sql, params = sql_predicate(["k`ey"], r.lo, r.hi)
        sizes.append(db.execute("SELECT COUNT(*) FROM t WHERE " + sql % (("?",) * len(params)), params).fetchone()[0])
    assert sum(sizes) == len(values)
    assert all(s == size for s in sizes[:-1]) and sizes[-1] <= size


def test_rows_per_chunk_cuts_chunks_of_wide_rows_to_chunk_mb():
    from merger.snapshot.chunking import MIN_CHUNK_ROWS, rows_per_chunk

    assert rows_per_chunk(50_000, 128, None) == 50_000  # no statistics: the row count alone
    assert rows_per_chunk(50_000, 128, 0) == 50_000
    assert rows_per_chunk(50_000, 128, 91) == 50_000  # narrow rows: 128 MB is 1.4M of them
    assert rows_per_chunk(50_000, 128, 117_931) == 128 * 1024 * 1024 // 117_931 == 1_138
    assert rows_per_chunk(50_000, 1, 50 * 1024 * 1024) == MIN_CHUNK_ROWS  # never below
    assert rows_per_chunk(5, 1, 50 * 1024 * 1024) == 5  # the floor is never above chunk_size
