"""merger.batch.shard_ddl: DDL that reaches one shard first, against a simple model.

The model: every origin starts with the base table; additive changes (a nullable column
added, an integer widened) arrive one marker at a time, each origin's in its own order,
the origins interleaved in any way. Whatever the interleaving, the logical table holds
every column some origin has (nullable), each with the widest type any origin gave it;
and a change the origins disagree on is reported naming both shards."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc.routes import ORIGIN_COLUMN, ORIGIN_LENGTH
from cdc.tablespec import ColumnSpec, TableSpec
from merger.batch.shard_ddl import APPLY, CONFLICT, NOTHING, ShardDdl, Verdict, decide, join
from merger.batch.tables import spec_from_dict, spec_to_dict

ORIGINS = ("s1/db.t_0", "s1/db.t_1", "s2/db.t_0", "s3/db.t_0")
POOL = ("a", "b", "c", "d")  # columns the shards may add, each with one type of its own
INTS = ("tinyint", "smallint", "int", "bigint")


def col(name: str, type_name: str, **kw) -> ColumnSpec:
    return ColumnSpec(name, type_name, **kw)


def table(*extra: ColumnSpec, n_type: str = "int") -> TableSpec:
    cols = (
        col("id", "int", nullable=False),
        col("n", n_type),
        col("v", "varchar", length=40, charset="utf8mb4"),
        *extra,
        col(ORIGIN_COLUMN, "varchar", length=ORIGIN_LENGTH, charset="utf8mb4", nullable=False),
    )
    cols = tuple(dataclasses.replace(c, position=i) for i, c in enumerate(cols, 1))
    return TableSpec("db", "t", cols, ("id", ORIGIN_COLUMN))


def added(name: str) -> ColumnSpec:
    return col(name, "varchar", length=10 + POOL.index(name), charset="utf8mb4")


BASE = table()


def retyped(c: ColumnSpec) -> ColumnSpec:
    return dataclasses.replace(c, type_name="int", length=None, charset=None)


def run(rule, steps: list[tuple[str, TableSpec]]) -> tuple[TableSpec, dict]:
    """Each marker through the rule, as the merger does; AssertionError on a conflict."""
    logical, specs = BASE, dict.fromkeys(ORIGINS, BASE)
    for origin, new in steps:
        verdict = rule(logical, specs, origin, new)
        assert verdict.action != CONFLICT, verdict.reason
        if verdict.action == APPLY:
            assert verdict.spec != logical
            logical = verdict.spec
        specs[origin] = new
        # at every step the logical table holds what every origin has
        for s in specs.values():
            for c in s.columns:
                assert c.name in logical.column_names, (c.name, logical.column_names)
                held = logical.column(c.name)
                joined = join(held, c)
                assert joined is not None and dataclasses.replace(joined, nullable=held.nullable) == held, (c, held)
    return logical, specs


@st.composite
def interleavings(draw):
    """Per origin: the columns it adds (in its order) and how far it widens ``n``; then
    one interleaving of all origins' markers (each marker: the origin's whole definition)."""
    per_origin = {}
    for o in ORIGINS:
        cols = draw(st.lists(st.sampled_from(POOL), unique=True, max_size=len(POOL)))
        widen = draw(st.integers(0, len(INTS) - 1))
        current: list[ColumnSpec] = []
        n_type = "int" if widen <= INTS.index("int") else INTS[widen]
        markers = []
        for name in cols:
            current.append(added(name))
            markers.append(table(*current))
        if n_type != "int":
            markers.append(table(*current, n_type=n_type))
        per_origin[o] = markers
    order = draw(st.permutations([o for o, ms in per_origin.items() for _ in ms]))
    at = dict.fromkeys(ORIGINS, 0)
    steps = []
    for o in order:
        steps.append((o, per_origin[o][at[o]]))
        at[o] += 1
    return per_origin, steps


def check_converges(rule, per_origin, steps) -> None:
    logical, _ = run(rule, steps)
    union = {c for ms in per_origin.values() if ms for c in ms[-1].column_names}
    assert set(logical.column_names) == union | set(BASE.column_names)
    for name in union - set(BASE.column_names):
        assert logical.column(name) == dataclasses.replace(added(name), position=logical.column(name).position)
    widest = max([INTS.index(ms[-1].column("n").type_name) for ms in per_origin.values() if ms] + [INTS.index("int")])
    assert logical.column("n").type_name == INTS[widest]
    assert logical.column_names[-1] == ORIGIN_COLUMN and logical.primary_key == BASE.primary_key


@settings(max_examples=200, deadline=None)
@given(interleavings())
def test_additive_changes_in_any_order_converge_to_the_union(case):
    check_converges(decide, *case)


@settings(max_examples=100, deadline=None)
@given(interleavings())
def test_the_order_does_not_change_the_result(case):
    per_origin, steps = case
    forward, _ = run(decide, steps)
    backward, _ = run(decide, sorted(steps, key=lambda s: ORIGINS.index(s[0]), reverse=True))
    assert {c.name: dataclasses.replace(c, position=0) for c in forward.columns} == {
        c.name: dataclasses.replace(c, position=0) for c in backward.columns
    }


def test_a_marker_equal_to_the_logical_table_changes_nothing():
    assert decide(BASE, dict.fromkeys(ORIGINS, BASE), ORIGINS[0], BASE) == Verdict(NOTHING)
    one = table(added("a"))
    logical, specs = run(decide, [(ORIGINS[0], one)])
    assert decide(logical, specs, ORIGINS[2], one).action == NOTHING  # the second shard catches up


@st.composite
def conflicts(draw):
    """Additive steps, then one origin makes a change that another origin disagrees with."""
    per_origin, steps = draw(interleavings())
    logical, specs = run(decide, steps)
    origin = draw(st.sampled_from(ORIGINS))
    other_shard = [o for o in ORIGINS if o.split("/")[0] != origin.split("/")[0]]
    mine = specs[origin]
    kind = draw(st.sampled_from(["drop", "rename", "retype"]))
    if kind == "drop":  # v is in every origin's table
        new = dataclasses.replace(mine, columns=tuple(c for c in mine.columns if c.name != "v"))
    elif kind == "rename":
        new = dataclasses.replace(
            mine, columns=tuple(dataclasses.replace(c, name="w") if c.name == "v" else c for c in mine.columns)
        )
    else:
        new = dataclasses.replace(
            mine,
            columns=tuple(
                dataclasses.replace(c, type_name="int", length=None) if c.name == "v" else c for c in mine.columns
            ),
        )
    return logical, specs, origin, new, other_shard


@settings(max_examples=200, deadline=None)
@given(conflicts())
def test_a_change_the_shards_disagree_on_is_reported_naming_the_shards(case):
    check_conflict(decide, *case)


def check_conflict(rule, logical, specs, origin, new, other_shard) -> None:
    verdict = rule(logical, specs, origin, new)
    assert verdict.action == CONFLICT
    assert verdict.shards[0] == origin.split("/")[0] and len(verdict.shards) >= 2
    for shard in verdict.shards:
        assert shard in verdict.reason
    assert "db.t" in verdict.reason and "column v" in verdict.reason
    assert "cdc resume db.t" in verdict.reason and "cdc snapshot db.t" in verdict.reason


def test_resume_takes_the_conflicting_change_as_it_is():
    specs = dict.fromkeys(ORIGINS, BASE)
    changed = dataclasses.replace(
        BASE,
        columns=tuple(
            dataclasses.replace(c, type_name="int", length=None) if c.name == "v" else c for c in BASE.columns
        ),
    )
    assert decide(BASE, specs, ORIGINS[0], changed).action == CONFLICT
    forced = decide(BASE, specs, ORIGINS[0], changed, force=True)
    assert forced.action == APPLY and forced.spec.column("v").type_name == "int"
    dropped = dataclasses.replace(BASE, columns=tuple(c for c in BASE.columns if c.name != "v"))
    kept = decide(BASE, specs, ORIGINS[0], dropped, force=True)
    assert kept.action == NOTHING  # the others still have v: the sink keeps it


def test_a_column_dropped_on_every_origin_is_dropped():
    dropped = dataclasses.replace(BASE, columns=tuple(c for c in BASE.columns if c.name != "v"))
    logical, specs = BASE, dict.fromkeys(ORIGINS[:2], BASE)
    first = decide(logical, specs, ORIGINS[0], dropped)
    assert first.action == CONFLICT and first.shards == ("s1",)
    one = {ORIGINS[0]: BASE}
    assert decide(BASE, one, ORIGINS[0], dropped).spec.column_names == dropped.column_names


def one_server_rule(logical, specs, origin, new, force=False):
    """The one-server rule (the marker's definition is the table's): what the merger did
    for a sharded source before; must fail the properties."""
    return Verdict(NOTHING) if new == logical else Verdict(APPLY, new)


def never_conflicts(logical, specs, origin, new, force=False):
    return decide(logical, specs, origin, new, force=True)


def test_broken_copies_of_the_rule_fail():
    a, b = table(added("a")), table(added("b"))
    with pytest.raises(AssertionError):  # b's marker loses a's column
        check_converges(one_server_rule, {ORIGINS[0]: [a], ORIGINS[2]: [b]}, [(ORIGINS[0], a), (ORIGINS[2], b)])
    dropped = dataclasses.replace(BASE, columns=tuple(c for c in BASE.columns if c.name != "v"))
    with pytest.raises(AssertionError):
        check_conflict(never_conflicts, BASE, dict.fromkeys(ORIGINS, BASE), ORIGINS[0], dropped, ORIGINS[2:])
    with pytest.raises(AssertionError):
        check_conflict(one_server_rule, BASE, dict.fromkeys(ORIGINS, BASE), ORIGINS[0], dropped, ORIGINS[2:])


def test_join_widens_and_refuses():
    assert join(col("n", "int"), col("n", "bigint")).type_name == "bigint"
    assert join(col("n", "int"), col("n", "int", unsigned=True)) is None
    assert join(col("s", "varchar", length=10), col("s", "varchar", length=40)).length == 40
    assert join(col("s", "varchar", length=10), col("s", "int")) is None
    d = join(col("d", "decimal", length=10, scale=0), col("d", "decimal", length=6, scale=4))
    assert (d.length, d.scale) == (14, 4)


def test_saved_state_round_trip():
    state = ShardDdl({ORIGINS[0]: table(added("a"))}, {"s1": 123}, ["s1", 123], None)
    again = ShardDdl.from_dict(state.to_dict(spec_to_dict), spec_from_dict)
    assert again == state
    assert ShardDdl.from_dict(None, spec_from_dict) == ShardDdl()


def test_a_table_runtime_keeps_it_and_older_states_load():
    from merger.batch.tables import TableRuntime
    from merger.dblog import Reconciler
    from merger.schema.canonical import SourceModes

    rt = TableRuntime("db.t", BASE, ["id", ORIGIN_COLUMN], 1, Reconciler(1))
    saved = rt.to_dict()
    assert "shard_ddl" not in saved  # one server's (and an untouched table's) state is as before
    assert TableRuntime.from_dict("db.t", saved, SourceModes()).shard_ddl == ShardDdl()
    rt.shard_ddl = ShardDdl({ORIGINS[0]: table(added("a"))}, {"s1": 7}, ["s1", 7], None)
    assert TableRuntime.from_dict("db.t", rt.to_dict(), SourceModes()).shard_ddl == rt.shard_ddl
