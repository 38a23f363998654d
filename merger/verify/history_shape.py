"""The shape of an SCD type 2 history in PostgreSQL or Delta (pure: the query's text, in
PostgreSQL's or DataFusion's dialect, and what its rows mean;
``merger.verify.current_versions`` runs it).

Written from the history's documented rules (docs/history.md), not from the code that
writes it (``merger.history.scd2``): per key, the versions in ``__start_seq`` order

* at most one is current (``__end_seq`` NULL), and only the last: a current version
  followed by another overlaps it;
* a closed one ends at or before the next one starts, in sequence and in time: a version
  a change of values closed ends where the next starts (same sequence, same time), one a
  delete or truncate closed leaves a gap until the key comes back. The two cannot be
  told apart in the table, so a gap is allowed; the same sequence at another time is not;
* each ends after it starts (``__end_seq > __start_seq``, ``__end_at >= __start_at``),
  with both ends or neither, and holds its last change inside it:
  ``__start_seq <= __last_seq``, and ``__last_seq < __end_seq`` when closed (the change
  that closes a version comes after every change written into it).

One query over the table (window functions over each key's versions), whatever its size:
per kind of fault, how many and the first few keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from merger.verify.canonical import DATAFUSION, POSTGRESQL

START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ, CURRENT = (
    "__start_at",
    "__end_at",
    "__start_seq",
    "__end_seq",
    "__last_seq",
    "__current",
)
# what an SCD type 2 table holds besides the source's columns
HISTORY_COLUMNS = frozenset({START_AT, END_AT, START_SEQ, END_SEQ, LAST_SEQ, CURRENT})
CURRENT_ROWS = f'"{END_SEQ}" IS NULL'  # the versions that stand for the source's rows

EXAMPLES = 5  # keys shown per kind of fault

# kind -> what is counted (the count's unit first)
FAULT_KINDS = {
    "several_current": "keys with more than one current version",
    "overlapping": "versions that overlap the next version of their key",
    "torn": "versions that end at the next version's sequence but not at its time",
    "reversed": "versions that end before they start, or have only one of __end_seq and __end_at",
    "last_seq_outside": "versions whose __last_seq is not inside them",
}


@dataclass(frozen=True)
class ShapeFault:
    kind: str
    count: int
    examples: tuple = ()  # keys, as tuples of their values

    @property
    def what(self) -> str:
        return FAULT_KINDS[self.kind]

    def line(self) -> str:
        shown = ", ".join(_key_text(k) for k in self.examples)
        more = ", ..." if self.count > len(self.examples) else ""
        return f"history: {self.count} {self.what} (keys {shown}{more})"

    def to_json(self) -> dict:
        return {"kind": self.kind, "what": self.what, "count": self.count, "examples": [list(k) for k in self.examples]}


def _key_text(key: tuple) -> str:
    return str(key[0]) if len(key) == 1 else "(" + ", ".join(str(v) for v in key) + ")"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# per kind of fault but several_current, the condition on a version ``v`` of a key: its
# sequences and times (ss, es, sa, ea, ls) and the next version's start (next_ss, next_sa)
VERSION_FAULTS = (
    ("overlapping", "v.next_ss IS NOT NULL AND (v.es IS NULL OR v.next_ss < v.es OR v.next_sa < v.ea)"),
    ("torn", "v.next_ss = v.es AND v.next_sa IS DISTINCT FROM v.ea"),
    ("reversed", "(v.es IS NULL) <> (v.ea IS NULL) OR v.es <= v.ss OR v.ea < v.sa"),
    ("last_seq_outside", "v.ls IS NULL OR v.ls < v.ss OR v.ls >= v.es"),
)


def shape_query(
    table: str, keys: Sequence[str], where: str | None = None, examples: int = EXAMPLES, dialect: str = POSTGRESQL
) -> str:
    """The query: one row per kind of fault found, ``(kind, count, examples)``, the
    examples a JSON array of keys (each a JSON array of the key's values), the smallest
    first. ``table``: quoted already; ``where``: SQL that limits the rows looked at (one
    origin's), or None.

    ``dialect`` ``DATAFUSION`` (a Delta table): the same faults, but one row per example key,
    ``(kind, count, key values...)`` (DataFusion has no JSON arrays): read them with
    ``faults_of(rows, keyed=len(keys))``."""
    if not keys:
        raise ValueError("an SCD type 2 history's shape needs its key columns")
    if dialect not in (POSTGRESQL, DATAFUSION):
        raise ValueError(f"no shape query in the {dialect} dialect")
    df = dialect == DATAFUSION
    k = ", ".join(_ident(c) for c in keys)
    ss, es, sa, ea, ls = (_ident(c) for c in (START_SEQ, END_SEQ, START_AT, END_AT, LAST_SEQ))
    w = f" WHERE {where}" if where else ""
    if df:  # the key's columns, named k0, k1, ...
        kc = ", ".join(f"k{i}" for i in range(len(keys)))
        own_key = ", ".join(f"{_ident(c)} AS k{i}" for i, c in enumerate(keys))
        v_key = ", ".join(f"v.{_ident(c)} AS k{i}" for i, c in enumerate(keys))
    else:  # the key as one JSON array
        own_key = f"jsonb_build_array({k}) AS key"
        v_key = "jsonb_build_array(" + ", ".join(f"v.{_ident(c)}" for c in keys) + ")"
    over = "w" if not df else f"(PARTITION BY {k} ORDER BY {ss})"  # DataFusion: no WINDOW clause
    window = "" if df else f" WINDOW w AS (PARTITION BY {k} ORDER BY {ss})"
    faults = (
        f"SELECT 'several_current' AS kind, {own_key} FROM {table}"
        f"{w}{' AND' if where else ' WHERE'} {es} IS NULL GROUP BY {k} HAVING count(*) > 1"
    ) + "".join(f" UNION ALL SELECT '{kind}', {v_key} FROM v WHERE {cond}" for kind, cond in VERSION_FAULTS)
    head = (
        f"WITH v AS (SELECT {k}, {ss} AS ss, {es} AS es, {sa} AS sa, {ea} AS ea, {ls} AS ls, "
        f"lead({ss}) OVER {over} AS next_ss, lead({sa}) OVER {over} AS next_sa "
        f"FROM {table}{w}{window}), faults AS ({faults}), "
    )
    if df:
        return head + (
            f"numbered AS (SELECT kind, {kc}, row_number() OVER (PARTITION BY kind ORDER BY {kc}) AS n, "
            "count(*) OVER (PARTITION BY kind) AS total FROM faults) "
            f"SELECT kind, total, {kc} FROM numbered WHERE n <= {int(examples)} ORDER BY kind, n"
        )
    return head + (
        "numbered AS (SELECT kind, key, row_number() OVER (PARTITION BY kind ORDER BY key) AS n FROM faults) "
        f"SELECT kind, count(*), coalesce(jsonb_agg(key ORDER BY key) FILTER (WHERE n <= {int(examples)}), "
        "'[]'::jsonb) FROM numbered GROUP BY kind ORDER BY kind"
    )


def faults_of(rows: Sequence[tuple], keyed: int = 0) -> list[ShapeFault]:
    """The shape query's rows as faults, in ``FAULT_KINDS`` order (none: the history is
    sound). ``keyed``: the rows are the DataFusion dialect's, with this many key columns."""
    order = list(FAULT_KINDS)
    if keyed:
        counts: dict[str, int] = {}
        examples: dict[str, list] = {}
        for kind, n, *key in rows:
            counts[kind] = int(n)
            examples.setdefault(kind, []).append(tuple(key[:keyed]))
        rows = [(kind, n, examples[kind]) for kind, n in counts.items()]
    found = [ShapeFault(kind, int(n), tuple(tuple(k) for k in keys or ())) for kind, n, keys in rows if n]
    return sorted(found, key=lambda f: order.index(f.kind))
