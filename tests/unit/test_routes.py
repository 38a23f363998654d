"""cdc.routes (physical tables into logical ones, the origin column) and the shard/route
parts of cdc.config, against simple models: the first matching route wins, unmatched
tables keep their names, key mode origin appends ``__cdc_origin`` to the columns and the
primary key."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cdc.config import IngestConfig, MergerConfig, RouteConfig, ShardConfig, routes_of
from cdc.routes import ORIGIN_COLUMN, ORIGIN_LENGTH, Route, Routes, origin_of
from cdc.tablespec import ColumnSpec, TableSpec

NAMES = st.sampled_from(["a", "b", "shop", "orders", "orders_00", "orders_01", "x_1"])
QUALIFIED = st.tuples(NAMES, NAMES)


# --------------------------------------------------------------------------- which logical table


@given(st.lists(st.tuples(QUALIFIED, QUALIFIED), max_size=8), st.lists(QUALIFIED, min_size=1, max_size=8))
def test_the_first_matching_route_wins_and_unmatched_tables_keep_their_names(pairs, tables):
    routes = Routes([Route(re.escape(f"{a}.{b}"), f"{c}.{d}") for (a, b), (c, d) in pairs])
    model: dict[tuple[str, str], tuple[str, str]] = {}
    for src, dst in pairs:
        model.setdefault(src, dst)  # the first route of a name wins
    for db, table in tables:
        assert routes.logical(db, table) == model.get((db, table), (db, table))
        assert routes.routed(db, table) == ((db, table) in model)
        assert routes.logical(db, table) == model.get((db, table), (db, table))  # cached: same answer


def test_an_earlier_wide_route_shadows_a_later_narrow_one():
    routes = Routes([Route(r"shop\..*", "all.tables"), Route(r"shop\.orders_\d+", "shop.orders")])
    assert routes.logical("shop", "orders_07") == ("all", "tables")
    narrow_first = Routes([Route(r"shop\.orders_\d+", "shop.orders"), Route(r"shop\..*", "all.tables")])
    assert narrow_first.logical("shop", "orders_07") == ("shop", "orders")
    assert narrow_first.logical("shop", "users") == ("all", "tables")
    assert narrow_first.logical("crm", "orders_07") == ("crm", "orders_07")  # full match: no route


def test_a_route_matches_the_whole_name_only():
    routes = Routes([Route(r"shop\.orders", "shop.all_orders")])
    assert routes.logical("shop", "orders_00") == ("shop", "orders_00")
    assert routes.logical("myshop", "orders") == ("myshop", "orders")
    assert routes.logical("shop", "orders") == ("shop", "all_orders")


@given(
    st.from_regex(r"[a-z]{1,8}", fullmatch=True),
    st.from_regex(r"[a-z]{1,8}", fullmatch=True),
    st.integers(0, 999),
    st.integers(0, 999),
)
def test_back_references_expand(db, table, n, m):
    routes = Routes([Route(r"([a-z]+)_\d+\.([a-z]+)_\d+", r"\1.\2"), Route(r"(\w+)\.(\w+)", r"\2.\1")])
    assert routes.logical(f"{db}_{n}", f"{table}_{m:02d}") == (db, table)
    assert routes.logical(db, table) == (table, db)  # the second route: swapped
    assert routes.routed(db, table)


@pytest.mark.parametrize(
    "route",
    [
        Route(r"(.*)", r"x.\1"),  # x.shop.t: two dots
        Route(r"shop\.(\w+)", r"\1"),  # no dot
        Route(r"shop\.(\w+)", r".\1"),  # empty db
        Route(r"shop\.(\w+)", r"\1."),  # empty table
    ],
)
def test_a_route_that_makes_no_db_table_raises(route):
    routes = Routes([route])
    for _ in range(2):  # not cached as a success
        with pytest.raises(ValueError, match="not db.table"):
            routes.logical("shop", "t")


def test_key_mode_is_checked():
    with pytest.raises(ValueError, match="key_mode"):
        Routes([], key_mode="shard")


def test_origin_of():
    assert origin_of("s1", "shop", "orders_00") == "s1/shop.orders_00"
    assert origin_of(None, "shop", "orders_00") == "shop.orders_00"
    assert origin_of("", "shop", "orders_00") == "shop.orders_00"


# --------------------------------------------------------------------------- the logical spec

COLUMN_NAMES = st.lists(st.sampled_from(["id", "k", "v", "w", "name", "ts"]), min_size=1, max_size=5, unique=True)


@st.composite
def specs(draw):
    names = draw(COLUMN_NAMES)
    columns = tuple(ColumnSpec(n, "int", i + 1, nullable=False) for i, n in enumerate(names))
    pk = tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))))
    db = draw(st.sampled_from(["shop", "s"]))
    return TableSpec(db, draw(st.sampled_from(["orders_00", "orders_01", "t"])), columns, pk)


ROUTE_SETS = st.sampled_from(
    [
        (),
        (Route(r"shop\.orders_\d+", "shop.orders"),),
        (Route(r"(\w+)\.t", r"\1.t"),),  # routed to its own name
        (Route(r"s\.(\w+)", r"logical.\1"),),
    ]
)


@given(specs(), ROUTE_SETS, st.sampled_from(["origin", "unique"]), st.booleans())
def test_logical_spec_against_a_model(spec, routes_tuple, key_mode, sharded):
    routes = Routes(routes_tuple, key_mode, sharded)
    matched = next(
        (r for r in routes_tuple if re.fullmatch(r.match, f"{spec.db}.{spec.table}")),
        None,
    )
    ldb, ltable = (
        tuple(re.fullmatch(matched.match, f"{spec.db}.{spec.table}").expand(matched.to).split("."))
        if matched
        else (spec.db, spec.table)
    )
    several_origins = sharded or matched is not None
    out = routes.logical_spec(spec)
    assert (out.db, out.table) == (ldb, ltable)
    if several_origins:
        assert out.columns[:-1] == spec.columns
        origin = out.columns[-1]
        assert origin.name == ORIGIN_COLUMN
        assert origin.type_name == "varchar"
        assert origin.nullable is False
        assert origin.length == ORIGIN_LENGTH
        assert origin.position == len(spec.columns) + 1
        if key_mode == "origin":
            assert out.primary_key == ((*spec.primary_key, ORIGIN_COLUMN) if spec.primary_key else ())
        else:
            assert out.primary_key == spec.primary_key
    else:
        assert out.columns == spec.columns
        assert out.primary_key == spec.primary_key
        if (ldb, ltable) == (spec.db, spec.table):
            assert out is spec  # unchanged: the very same object
    assert routes.adds_origin(spec.db, spec.table) == several_origins


def _spec(*names, pk=("id",), db="shop", table="orders_00"):
    return TableSpec(db, table, tuple(ColumnSpec(n, "int", i + 1) for i, n in enumerate(names)), pk)


def test_origin_mode_on_a_routed_table():
    spec = _spec("id", "v")
    out = Routes([Route(r"shop\.orders_\d+", "shop.orders")]).logical_spec(spec)
    assert (out.db, out.table) == ("shop", "orders")
    assert out.column_names == ("id", "v", ORIGIN_COLUMN)
    assert out.primary_key == ("id", ORIGIN_COLUMN)
    keyless = Routes([Route(r"shop\.orders_\d+", "shop.orders")]).logical_spec(_spec("id", "v", pk=()))
    assert keyless.column_names == ("id", "v", ORIGIN_COLUMN)
    assert keyless.primary_key == ()  # no key: none made up


def test_unrouted_tables_of_one_server_are_unchanged():
    spec = _spec("id", "v")
    assert Routes().logical_spec(spec) is spec
    assert Routes([Route(r"crm\..*", "crm.all")]).logical_spec(spec) is spec


def test_unique_mode_adds_the_origin_as_a_plain_column():
    spec = _spec("id", "v")
    for routes in (Routes([Route(r"shop\.orders_\d+", "shop.orders")], "unique"), Routes([], "unique", sharded=True)):
        out = routes.logical_spec(spec)
        assert [c.name for c in out.columns] == ["id", "v", ORIGIN_COLUMN]
        assert out.primary_key == spec.primary_key  # the key stays the source's


def test_sharded_tables_get_the_origin_column_unrouted():
    spec = _spec("id", "v")
    out = Routes([], sharded=True).logical_spec(spec)
    assert (out.db, out.table) == ("shop", "orders_00")
    assert out.primary_key == ("id", ORIGIN_COLUMN)


def test_a_column_named_like_the_origin_column_is_refused():
    spec = _spec("id", ORIGIN_COLUMN)
    for mode in ("origin", "unique"):
        with pytest.raises(ValueError, match="rename it") as info:
            Routes([], mode, sharded=True).logical_spec(spec)
        assert ORIGIN_COLUMN in str(info.value) and "shop.orders_00" in str(info.value)
    assert Routes([]).logical_spec(spec) is spec  # one origin: nothing added


# --------------------------------------------------------------------------- config


def _shard(name):
    return {"name": name, "mysql": {"host": f"{name}.example", "port": 3306}}


@pytest.mark.parametrize("config", [IngestConfig])
def test_duplicate_shard_names_are_refused(config):
    with pytest.raises(ValidationError, match="s2 more than once"):
        config(shards=[_shard("s1"), _shard("s2"), _shard("s2")])
    with pytest.raises(ValidationError, match="a, b more than once"):
        config(shards=[_shard("b"), _shard("a"), _shard("a"), _shard("b"), _shard("c")])
    ok = config(shards=[_shard("s1"), _shard("s2")])
    assert [s.name for s in ok.shards] == ["s1", "s2"]


@pytest.mark.parametrize("name", ["", "a b", "a/b", "a.b", "a@b", "x" * 65, "shärd"])
def test_bad_shard_names_are_refused(name):
    with pytest.raises(ValidationError, match="letters, digits"):
        ShardConfig(**_shard(name))


@given(st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True))
def test_good_shard_names_pass(name):
    assert ShardConfig(**_shard(name)).name == name


@pytest.mark.parametrize("to", ["orders", "a.b.c", "", "shop.orders.x"])
def test_a_route_to_without_one_dot_is_refused(to):
    with pytest.raises(ValidationError, match="<database>.<table>"):
        RouteConfig(match=r"shop\..*", to=to)


@pytest.mark.parametrize("match", ["(", "shop\\.[", "*x"])
def test_a_bad_route_regex_is_refused(match):
    with pytest.raises(ValidationError, match="invalid regex"):
        RouteConfig(match=match, to="shop.orders")


def test_routes_of_a_config():
    cfg = IngestConfig(
        shards=[_shard("s1"), _shard("s2")],
        routes=[{"match": r"shop\.orders_(\d+)", "to": "shop.orders"}],
    )
    routes = routes_of(cfg)
    assert routes.sharded and routes.key_mode == "origin"
    assert routes.logical("shop", "orders_01") == ("shop", "orders")
    plain = routes_of(IngestConfig())
    assert not plain.sharded and plain.key_mode == "origin" and plain.routes == ()
    with pytest.raises(ValidationError):
        IngestConfig(key_mode="shard")


@pytest.mark.parametrize("model", [IngestConfig, MergerConfig])
def test_key_mode_unique_is_accepted(model):
    sinks = {"sinks": {"delta": {"path": "/tmp/d"}}} if model is MergerConfig else {}
    assert model(shards=[_shard("s1"), _shard("s2")], key_mode="unique", **sinks).key_mode == "unique"


def test_key_mode_unique_needs_a_sink_that_keeps_rows():
    """The merger checks each key's origin against a sink's row: the Kafka changelog alone
    cannot be read back by key."""
    with pytest.raises(ValidationError, match="needs a sink that keeps rows"):
        MergerConfig(shards=[_shard("s1")], key_mode="unique", sinks={"kafka_changelog": {"topic_prefix": "c"}})
    MergerConfig(shards=[_shard("s1")], sinks={"kafka_changelog": {"topic_prefix": "c"}})  # key mode origin
