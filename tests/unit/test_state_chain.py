"""The batch state chain (merger.state.chain, merger.state.store.StateStore.save_batch /
load_before): any sequence of batch states read back exactly, from any batch, after a
restart too, with the chain bounded and old files pruned (issue 23: per-batch state of
every table)."""

from __future__ import annotations

import json

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from merger.errors import MergerError
from merger.state import chain as state_chain
from merger.state.store import StateStore

table_state = st.fixed_dictionaries(
    {
        # definitions are most of a table's state (so deltas are mostly smaller than full states)
        "spec": st.sampled_from([{"columns": ["a column"] * 30}, {"columns": ["a column", "b column"] * 15}]),
        "phase": st.sampled_from(["snapshotting", "streaming", "paused"]),
        "rows_applied": st.integers(0, 3),
        "last_offsets": st.dictionaries(st.sampled_from(["0", "1"]), st.integers(0, 5), max_size=2),
    }
)
replay_entry = st.tuples(st.sampled_from(["t1", "t2"]), st.integers(0, 2), st.sampled_from(["p1", "p2"]), st.booleans())
batch_state = st.fixed_dictionaries(
    {
        "replay": st.lists(replay_entry, max_size=6, unique_by=lambda e: (e[0], e[1])).map(
            lambda es: [list(e) for e in es]
        ),
        "bad_records": st.integers(0, 3),
        "tables": st.dictionaries(st.sampled_from(["db.a", "db.b", "db.c", "db.d"]), table_state, max_size=4),
    }
)


def canonical(state: dict) -> dict:
    return {
        "replay": sorted(map(tuple, state["replay"])),
        "bad_records": state["bad_records"],
        "tables": json.loads(json.dumps(state["tables"], sort_keys=True)),
    }


@settings(max_examples=150)
@given(st.lists(batch_state, min_size=1, max_size=70))
def test_a_chain_of_deltas_gives_back_every_state(states):
    """The model: the list of states itself. Each state is encoded on the chain before it;
    the full state and the deltas after it, applied in order, equal it."""
    base, records, deltas = None, [], 0
    spec_texts: dict = {}
    for i, s in enumerate(states):
        record, base, full = state_chain.encode(i, s, base, spec_texts)
        records.append(json.loads(json.dumps(record)))  # as written and read back
        assert full == ("prev" not in record)
        deltas += not full
        assert base.length <= state_chain.FULL_EVERY
        start = max(j for j in range(i + 1) if "prev" not in records[j])
        assert all(records[j]["prev"] == j - 1 for j in range(start + 1, i + 1))
        assert canonical(state_chain.apply(records[start], records[start + 1 : i + 1])) == canonical(s)
    event(f"deltas: {min(deltas, 5)}+")  # `pytest --hypothesis-show-statistics`: most examples have some


def test_a_batch_where_one_table_of_500_changed_writes_that_table_only():
    tables = {f"db.t{i}": {"spec": {"columns": ["x" * 40] * 20}, "rows_applied": 0} for i in range(500)}
    first = {"replay": [["t", 0, "p0", False]], "bad_records": 0, "tables": tables}
    _, base, full = state_chain.encode(0, first, None)
    assert full
    second = {**first, "tables": {**tables, "db.t7": {**tables["db.t7"], "rows_applied": 1}}}
    delta, base, full = state_chain.encode(1, second, base)
    assert not full and list(delta["tables"]) == ["db.t7"] and delta["replay"] == []
    assert len(json.dumps(delta)) < len(json.dumps(first)) / 100


SPEC = {"columns": ["a column's definition"] * 30}
SPEC_TABLE = {"spec": SPEC}


def test_the_store_reads_back_after_a_restart_and_prunes(tmp_path):
    states = [
        {"replay": [["t", 0, f"p{i}", False]], "bad_records": i % 2, "tables": {"db.a": {"n": i}, "db.b": SPEC_TABLE}}
        for i in range(130)
    ]
    store = StateStore(tmp_path)
    assert store.load_before(0) is None
    for i, s in enumerate(states[:120]):
        store.save_batch(i, s)
        if i >= 3:
            # the newest three states can always be read (a re-run starts from one of them)
            for j in (i - 2, i - 1, i):
                assert canonical(StateStore(tmp_path).load_before(j + 1)) == canonical(states[j])
    files = list(store.batches.glob("state-*.json"))
    assert len(files) <= 2 * state_chain.FULL_EVERY + 3
    # a restart re-runs batch 120: it starts from 119's state, then goes on with deltas on it
    again = StateStore(tmp_path)
    assert canonical(again.load_before(120)) == canonical(states[119])
    for i in range(120, 130):
        again.save_batch(i, states[i])
    assert canonical(StateStore(tmp_path).load_before(130)) == canonical(states[129])
    assert canonical(StateStore(tmp_path).load_before(128)) == canonical(states[127])


def test_a_missing_link_of_the_chain_stops_with_a_clear_error(tmp_path):
    store = StateStore(tmp_path)
    for i in range(5):
        store.save_batch(i, {"replay": [], "bad_records": 0, "tables": {"db.a": {"n": i}, "db.b": {"spec": SPEC}}})
    (store.batches / "state-000000000002.json").unlink()
    with pytest.raises(MergerError, match="state-000000000002.json.*is missing.*new state_dir"):
        StateStore(tmp_path).load_before(5)


def test_a_state_written_by_an_older_merger_is_read(tmp_path):
    """Older mergers wrote a full state with every batch: read like a chain of one."""
    store = StateStore(tmp_path)
    old = {"replay": [["t", 1, "p", True]], "bad_records": 2, "tables": {"db.a": {"n": 1}, "db.b": {"spec": SPEC}}}
    (store.batches / "state-000000000007.json").write_text(json.dumps(old))
    assert canonical(store.load_before(8)) == canonical(old)
    store.save_batch(8, {**old, "tables": {"db.a": {"n": 2}, "db.b": {"spec": SPEC}}})
    assert json.loads((store.batches / "state-000000000008.json").read_text())["prev"] == 7
    assert StateStore(tmp_path).load_before(9)["tables"] == {"db.a": {"n": 2}, "db.b": {"spec": SPEC}}
