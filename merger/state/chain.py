"""The merger's per-batch state as a chain: a full state now and then, and in between
deltas that hold only what a batch changed (pure: no files here, ``merger.state.store`` writes
them).

A batch's state is ``{"replay": [[topic, partition, position, tombstone], ...],
"bad_records": n, "tables": {name: table state}}``. With 500 tables and one of them
changing, writing every table's state (757 KB, most of it the tables' definitions) with
every batch was 11 % of the merger's time (issue 23). A delta names the batch it follows
(``prev``) and holds the tables and replay entries that differ from that batch's state,
whole, and the ones gone; applying the deltas in order to the full state they start from
gives the batch's state exactly. A full state is written again when the chain reaches
``FULL_EVERY`` batches or its deltas outweigh the full state, so a restart reads a bounded
chain.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FULL_EVERY = 50  # batches in a chain at most (one full state, then deltas)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def replay_key(entry: Sequence[Any]) -> str:
    """A replay entry's partition (``topic``, ``partition``) as one text."""
    return f"{entry[0]}\x00{entry[1]}"


@dataclass
class ChainBase:
    """What the last written (or loaded) state of the chain holds, as texts to compare with:
    each table's state and each replay entry."""

    batch_id: int
    full_id: int  # the batch of the full state the chain starts from
    length: int  # states in the chain so far (1: just the full one)
    delta_bytes: int  # bytes of the chain's deltas so far
    full_bytes: int
    tables: dict[str, str] = field(default_factory=dict)
    replay: dict[str, str] = field(default_factory=dict)


def texts(
    state: Mapping[str, Any],
    spec_texts: dict[str, tuple[Any, str]] | None = None,
    entry_texts: dict[str, tuple[Any, str]] | None = None,
) -> tuple[dict, dict]:
    """(table name -> its state's text, replay partition -> its entry's text). ``spec_texts``
    (name -> (spec dict, its text)) keeps the text of a table's definition while the
    definition is the same object (the tables keep it so): the definition is most of a
    table's state and rarely changes. ``entry_texts`` does the same for replay entries
    (the processor builds an entry again only when it changed)."""
    tables = {}
    for name, t in state.get("tables", {}).items():
        spec = t.get("spec")
        cached = spec_texts.get(name) if spec_texts is not None else None
        if cached is None or cached[0] is not spec:
            cached = (spec, dumps(spec))
            if spec_texts is not None:
                spec_texts[name] = cached
        tables[name] = cached[1] + dumps({k: v for k, v in t.items() if k != "spec"})
    replay = {}
    for e in state.get("replay", []):
        key = replay_key(e)
        cached = entry_texts.get(key) if entry_texts is not None else None
        if cached is None or cached[0] is not e:
            cached = (e, dumps(e))
            if entry_texts is not None:
                entry_texts[key] = cached
        replay[key] = cached[1]
    return tables, replay


def encode(
    batch_id: int,
    state: Mapping[str, Any],
    base: ChainBase | None,
    spec_texts: dict | None = None,
    entry_texts: dict | None = None,
) -> tuple[dict, ChainBase, bool]:
    """What to write for ``batch_id``: a delta on ``base`` (the state of the batch before),
    or the full state; the new base; and whether it is full."""
    tables, replay = texts(state, spec_texts, entry_texts)
    if base is not None and base.length < FULL_EVERY and base.delta_bytes < base.full_bytes:
        delta = {
            "prev": base.batch_id,
            "bad_records": state.get("bad_records", 0),
            "tables": {n: state["tables"][n] for n, text in tables.items() if base.tables.get(n) != text},
            "tables_gone": sorted(n for n in base.tables if n not in tables),
            "replay": [e for e in state.get("replay", []) if base.replay.get(replay_key(e)) != replay[replay_key(e)]],
            "replay_gone": sorted(k for k in base.replay if k not in replay),
        }
        size = len(dumps(delta))
        if base.delta_bytes + size < base.full_bytes:
            new = ChainBase(batch_id, base.full_id, base.length + 1, base.delta_bytes + size, base.full_bytes)
            new.tables, new.replay = tables, replay
            return delta, new, False
    full = dict(state)
    new = ChainBase(batch_id, batch_id, 1, 0, len(dumps(full)))
    new.tables, new.replay = tables, replay
    return full, new, True


def apply(full: Mapping[str, Any], deltas: Sequence[Mapping[str, Any]]) -> dict:
    """The state after ``deltas`` (in batch order) on ``full``."""
    tables = dict(full.get("tables", {}))
    replay = {replay_key(e): list(e) for e in full.get("replay", [])}
    bad_records = full.get("bad_records", 0)
    for d in deltas:
        for name in d.get("tables_gone", []):
            tables.pop(name, None)
        tables.update(d.get("tables", {}))
        for key in d.get("replay_gone", []):
            replay.pop(key, None)
        for e in d.get("replay", []):
            replay[replay_key(e)] = list(e)
        bad_records = d.get("bad_records", bad_records)
    return {"replay": list(replay.values()), "bad_records": bad_records, "tables": tables}


def loaded_base(batch_id: int, full_id: int, length: int, state: Mapping[str, Any]) -> ChainBase:
    """The base for the next delta after reading a chain of ``length`` states up to
    ``batch_id`` (its deltas' sizes are not kept: the length bounds it)."""
    tables, replay = texts(state)
    full_bytes = len(dumps(state))
    base = ChainBase(batch_id, full_id, length, 0, full_bytes)
    base.tables, base.replay = tables, replay
    return base
