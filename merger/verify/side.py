"""One sink table as verify sees it: the sink's reader, the sink table's columns, and the
canonical functions of every column under that sink's rules (NUL policy, boolean and
jsonb columns). Both sides' raw rows become canonical rows here. What differs between
sinks is asked of the reader (``merger.verify.sinks``), never decided by its name."""

from __future__ import annotations

from typing import Sequence

from merger.verify.column_canon import ColumnCanon, row_canons
from merger.verify.digest import encode_row
from merger.verify.keys import ALIGNED_KINDS, key_kind, order_key
from merger.verify.source import SourceTable
from merger.verify.sql_digest import DigestPlan, plan


def canonical_rows(canons: Sequence[ColumnCanon], rows: Sequence[tuple], side: str) -> list[tuple]:
    """Raw rows of one side -> canonical rows (column by column)."""
    if not rows:
        return []
    cols = list(zip(*rows))
    if side == "source":
        out = [c.sources(col) for c, col in zip(canons, cols)]
    else:
        out = [c.sinks(col) for c, col in zip(canons, cols)]
    return list(zip(*out))


class SinkSide:
    """One sink table of one source table. ``target``: the sink table's (db, table) when it
    is not the source's name (a logical table of a sharded source); ``fixed``: a (column,
    value) every sink row read must hold (the origin column: one origin's rows)."""

    def __init__(
        self,
        reader,
        table: SourceTable,
        keys: Sequence[str],
        sink_cols: dict[str, str],
        target: tuple[str, str] | None = None,
        fixed: tuple[str, str] | None = None,
    ):
        self.reader = reader
        self.table = table
        self.target = target or (table.db, table.table)
        self.fixed = fixed
        self.names = table.column_names
        self.keys = list(keys)
        self.sink_cols = sink_cols
        self.canons = row_canons(table.columns, reader.rules, sink_cols)
        by_name = dict(zip(self.names, self.canons))
        self.key_canons = [by_name[k] for k in self.keys]
        self.kinds = [key_kind(c.kind) for c in self.key_canons]
        self.key_pos = [self.names.index(k) for k in self.keys]
        self.aligned = all(k in ALIGNED_KINDS for k in self.kinds)
        self.digest_plan = self._digest_plan()

    def _digest_plan(self) -> DigestPlan:
        """The SQL texts of the fast path, or why this table is compared row by row."""
        key_kinds = self.reader.digest_key_kinds
        odd = [k for k, kind in zip(self.keys, self.kinds) if kind not in key_kinds]
        if odd:
            return DigestPlan(reason=f"key column(s) {odd} cannot bound a digest query on this sink")
        refusal = self.reader.digest_refusal(self.keys, self.sink_cols)
        if refusal is not None:
            return DigestPlan(reason=refusal)
        return plan(self.table.columns, self.reader.rules, self.sink_cols)

    def digest_in_range(self, lo, hi):
        extra = {"fixed": self.fixed} if self.fixed is not None else {}
        return self.reader.digest_in_range(
            *self.target, self.sink_cols, self.keys, self.kinds, lo, hi, self.digest_plan.sink_row, **extra
        )

    def digests_in_parts(self, lo, hi, cuts) -> list:
        """The digests of [lo, hi) cut at ``cuts`` (canonical keys, in order): one query where
        the sink's reader has one, else one per part."""
        if not hasattr(self.reader, "digests_in_parts"):
            edges = [lo, *cuts, hi]
            return [self.digest_in_range(a, b) for a, b in zip(edges, edges[1:])]
        extra = {"fixed": self.fixed} if self.fixed is not None else {}
        return self.reader.digests_in_parts(
            *self.target, self.sink_cols, self.keys, self.kinds, lo, hi, list(cuts), self.digest_plan.sink_row, **extra
        )

    def source_rows(self, raw: Sequence[tuple]) -> list[tuple]:
        return canonical_rows(self.canons, raw, "source")

    def nul_changes(self, raw: Sequence[tuple]) -> int:
        """How many values of these source rows the sink's NUL rule changed."""
        n = 0
        for i, c in enumerate(self.canons):
            if c.nul_changed is not None:
                n += sum(1 for r in raw if r[i] is not None and c.nul_changed(r[i]))
        return n

    def canon_key(self, raw_key: tuple) -> tuple:
        return tuple(c.source(v) for c, v in zip(self.key_canons, raw_key))

    def _read_kwargs(self) -> dict:
        out: dict = {"key_canons": self.key_canons}  # for a reader that compares keys canonically
        if self.fixed is not None:
            out["fixed"] = self.fixed
        return out

    def rows_in_range(self, lo, hi) -> list[tuple]:
        return self.reader.rows_in_range(
            *self.target, self.names, self.sink_cols, self.keys, self.kinds, lo, hi, **self._read_kwargs()
        )

    def rows_with_keys(self, canon_keys) -> list[tuple]:
        return self.reader.rows_with_keys(
            *self.target, self.names, self.sink_cols, self.keys, self.kinds, list(canon_keys), **self._read_kwargs()
        )

    def sequences(self, canon_keys) -> dict[bytes, int]:
        """Per key (``encode_row`` of the canonical key), the position of the sink's last
        change of it: its row's ``_cdc_seq`` or its tombstone's (keys it has neither of are
        left out)."""
        keys = list(canon_keys)
        found = self.reader.positions_with_keys(
            *self.target, self.sink_cols, self.keys, self.kinds, keys, key_canons=self.key_canons
        )
        out: dict[bytes, int] = {}
        for r in found:
            if r[-1] is None:
                continue
            ek = encode_row(tuple(c.sink(v) for c, v in zip(self.key_canons, r[:-1])))
            out[ek] = max(out.get(ek, -1), int(r[-1]))
        return out

    def sink_rows(self, raw: Sequence[tuple]) -> list[tuple]:
        return canonical_rows(self.canons, raw, "sink")

    def ranges(self, raw_bounds: list[tuple]) -> list[tuple]:
        """(lo, hi) canonical bounds for the sink: the source's boundaries in the sink's
        order, so the ranges partition the sink whatever the collations."""
        bounds = [self.canon_key(b) for b in raw_bounds]
        if not self.aligned:
            bounds.sort(key=lambda b: order_key(self.kinds, b))
        edges = [None, *bounds, None]
        return list(zip(edges, edges[1:]))
