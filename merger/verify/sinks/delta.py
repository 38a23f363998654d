"""Verify's reader of the Delta Lake sink: deltalake -> pyarrow -> ``to_pylist``, values in
Arrow's Python types; where the sink keeps a table comes from ``merger.sinks.delta.paths``.

Keys are compared in their canonical form (``key_canons``) where the stored type does not
order like the key; files are skipped by the Delta log's statistics only where those are
exact; the digests are computed by DataFusion (``merger.verify.sql_digest``, in its
dialect), for integer and date keys. ``only_null``: a column that every row read must hold
NULL in (the current versions of an SCD type 2 history: ``__end_seq``), applied in Arrow
for reads and in DataFusion for digests.
"""

from __future__ import annotations

import datetime as _dt
import time
from decimal import Decimal
from typing import Any, Sequence

from cdc.object_store import one_line
from merger.verify.canonical import DATAFUSION, SinkRules
from merger.verify.column_canon import ColumnCanon
from merger.verify.history_shape import END_SEQ, LAST_SEQ, ShapeFault, faults_of, shape_query
from merger.verify.keys import order_key, python_value
from merger.verify.sinks.base import SEQ, SEQ_COLUMN, SinkReader, SinkReadError, first_line
from merger.verify.sql_digest import (
    Digest,
    datafusion_literal,
    datafusion_query,
    fixed_predicate,
    range_predicate,
    words_digest,
)

TOMBSTONE_WAIT_S = 30.0  # how long a confirmation read waits for the Delta tombstones to catch up
DELTA_RULES = SinkRules(DATAFUSION)  # Delta keeps NUL characters as they are
DIGEST_KEY_KINDS = ("int", "date")  # the keys a DataFusion literal is written for (sql_digest)


def delta_value(kind: str, canon: str, arrow_type) -> Any:
    """A canonical key value as the Delta column stores it, or None if the stored type does
    not order like the key (the reader then filters in Python)."""
    import pyarrow as pa

    v = python_value(kind, canon)
    if kind == "time":
        return v // _dt.timedelta(microseconds=1) if pa.types.is_integer(arrow_type) else v
    if kind == "decimal" and not pa.types.is_decimal(arrow_type):
        return None  # DECIMAL(p > 38) is stored as text: text order is not numeric order
    if kind == "bit" and pa.types.is_boolean(arrow_type):
        return int.from_bytes(v, "big") != 0
    return v


class DeltaReader(SinkReader):
    name = "delta"
    rules = DELTA_RULES
    digest_key_kinds = DIGEST_KEY_KINDS
    current_filter = {"only_null": END_SEQ}

    def __init__(self, base: str, storage_options: dict | None = None):
        self.base = str(base).rstrip("/")
        self.storage_options = storage_options

    @classmethod
    def from_config(cls, section: Any) -> "DeltaReader":
        """``section``: ``sinks.delta`` (``cdc.config``)."""
        return cls(section.path, storage_options=section.storage_options())

    def digest_refusal(self, keys: Sequence[str], sink_cols: dict[str, str]) -> str | None:
        """DataFusion skips files by the Delta log's statistics of the key: keys stored in a
        type whose statistics are inexact cannot bound a digest query."""
        inexact = [k for k in keys if not delta_statistics_exact(sink_cols.get(k))]
        if not inexact:
            return None
        return (
            f"key column(s) {inexact} are stored as "
            f"{', '.join(str(sink_cols.get(k)) for k in inexact)}, whose Delta log "
            "statistics are inexact: a digest query would skip files holding rows"
        )

    def where(self) -> str:
        return f"Delta Lake at {self.base}"

    def close(self) -> None:
        pass

    def path(self, db: str, table: str) -> str:
        # where the sink keeps a table (its path rule only needs ``base``; no values)
        from merger.sinks.delta.paths import table_path

        return table_path(self.base, (db, table))

    def _open(self, db: str, table: str):
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        path = self.path(db, table)
        try:
            return DeltaTable(path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except (OSError, DeltaError) as exc:
            # an object store's error is a tree of causes over several lines
            raise SinkReadError(f"Delta table {path}: {one_line(str(exc))}") from None

    def columns(self, db: str, table: str) -> dict[str, str] | None:
        import pyarrow as pa

        dt = self._open(db, table)
        if dt is None:
            return None
        return {f.name: str(_plain_type(f.type)) for f in pa.schema(dt.schema().to_arrow()) if f.name != SEQ}

    def _scan(self, db, table, names, sink_cols, keep, prune=None, fixed=None, dt=None, only_null=None) -> list[tuple]:
        """Rows of the table's files (``dt``: as loaded; else its latest version; pruned by
        ``prune`` where delta-rs can), filtered per batch by ``fixed`` (column, value),
        ``only_null`` (a column that must be NULL) and ``keep(arrow table) -> arrow table``."""
        import pyarrow as pa
        import pyarrow.dataset as ds
        from deltalake.exceptions import DeltaError

        dt = dt or self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        present = [n for n in names if n in sink_cols]
        read = present if fixed is None or fixed[0] in present else [*present, fixed[0]]
        if only_null is not None and only_null not in read:
            read = [*read, only_null]
        try:
            try:
                dataset = dt.to_pyarrow_dataset(file_pruning_predicate=prune or None)
            except (DeltaError, ValueError, TypeError):
                dataset = dt.to_pyarrow_dataset()
            rows: list[tuple] = []
            for batch in dataset.to_batches(columns=read):
                t = _plain(pa.Table.from_batches([batch]))
                if fixed is not None:
                    t = t.filter(ds.field(fixed[0]) == fixed[1])
                if only_null is not None:
                    t = t.filter(ds.field(only_null).is_null())
                t = keep(t)
                if t.num_rows:
                    rows += zip(*(t.column(n).to_pylist() for n in present))
        except (OSError, DeltaError) as exc:
            raise SinkReadError(f"Delta table {self.path(db, table)}: {first_line(exc)}") from None
        if len(present) == len(names):
            return rows
        pos = {n: i for i, n in enumerate(present)}
        return [tuple(r[pos[n]] if n in pos else None for n in names) for r in rows]

    def rows(self, db, table, names, sink_cols) -> list[tuple]:
        return self._scan(db, table, names, sink_cols, lambda t: t)

    def rows_in_range(
        self,
        db,
        table,
        names,
        sink_cols,
        keys,
        kinds,
        lo,
        hi,
        key_canons: Sequence[ColumnCanon] = (),
        fixed=None,
        only_null=None,
    ) -> list[tuple]:
        import pyarrow as pa

        types = {k: _arrow_type(sink_cols[k]) for k in keys if k in sink_cols}
        if len(types) < len(keys):
            raise SinkReadError(f"the Delta table has no key column(s) {[k for k in keys if k not in types]}")
        bounds = [(b, lower) for b, lower in ((lo, True), (hi, False)) if b is not None]
        stored = [[delta_value(kind, v, types[k]) for k, kind, v in zip(keys, kinds, b)] for b, _ in bounds]
        exact = all(v is not None for s in stored for v in s)
        prune = []
        for (b, lower), s in zip(bounds, stored):
            if exact and delta_statistics_exact(sink_cols[keys[0]]) and _prunable(s[0]):
                prune.append((keys[0], ">=" if lower else "<=", s[0]))
        if exact:
            expr = None
            for (b, lower), s in zip(bounds, stored):
                scalars = [_scalar(v).cast(types[k]) for k, v in zip(keys, s)]
                e = _bound_filter(keys, scalars, lower)
                expr = e if expr is None else expr & e

            def keep(t):
                return t if expr is None else t.filter(expr)
        else:  # compare canonical keys in Python
            lo_k = order_key(kinds, lo) if lo is not None else None
            hi_k = order_key(kinds, hi) if hi is not None else None

            def keep(t):
                cols = [c.sinks(t.column(k).to_pylist()) for c, k in zip(key_canons, keys)]
                mask = []
                for key in zip(*cols):
                    try:
                        o = order_key(kinds, key)
                    except (ValueError, TypeError):
                        mask.append(lo is None)  # a key with no canonical form: the first chunk
                        continue
                    mask.append((lo_k is None or o >= lo_k) and (hi_k is None or o < hi_k))
                return t.filter(pa.array(mask, pa.bool_())) if mask else t

        return self._scan(db, table, names, sink_cols, keep, prune, fixed, only_null=only_null)

    def digest_in_range(
        self, db, table, sink_cols, keys, kinds, lo, hi, row_sql: str, fixed=None, only_null=None, dt=None
    ) -> Digest:
        """The chunk's digest: DataFusion (delta-rs's ``QueryBuilder``) hashes each row's
        text; the hashes are summed here. Integer and date keys only (raises NoSqlText).
        ``dt``: the table as loaded; else its latest version."""
        import pyarrow as pa
        from deltalake import QueryBuilder
        from deltalake.exceptions import DeltaError

        if dt is None:
            dt = self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        bounds = [None if b is None else [datafusion_literal(k, v) for k, v in zip(kinds, b)] for b in (lo, hi)]
        where = range_predicate(self.rules.dialect, keys, *bounds)
        if fixed is not None:
            equal = fixed_predicate(self.rules.dialect, *fixed)
            where = equal if where is None else f"{equal} AND {where}"
        if only_null is not None:
            null = '"' + only_null.replace('"', '""') + '" IS NULL'
            where = null if where is None else f"{null} AND {where}"
        try:
            result = QueryBuilder().register("chunk_table", dt).execute(datafusion_query(row_sql, "chunk_table", where))
            hashes = pa.table(result.read_all()).column(0)
        except (OSError, DeltaError) as exc:
            raise SinkReadError(f"Delta table {self.path(db, table)}: {first_line(exc)}") from None
        except Exception as exc:  # DataFusion's own errors have no Python class of their own
            where_ = self.path(db, table)
            raise SinkReadError(f"Delta table {where_}: digest query failed: {first_line(exc)}") from None
        packed = b"".join(_binary_values(c) for c in hashes.chunks)
        return words_digest(len(hashes), packed)

    def digests_in_parts(
        self, db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql: str, fixed=None, only_null=None
    ) -> list[Digest]:
        """The digests of the parts of [lo, hi) cut at ``cuts`` (canonical keys, in order):
        one query per part, all over one load of the table's latest version (the parts of
        one version, and the log read once, not once per part)."""
        dt = self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        edges = [lo, *cuts, hi]
        return [
            self.digest_in_range(db, table, sink_cols, keys, kinds, a, b, row_sql, fixed, only_null, dt=dt)
            for a, b in zip(edges, edges[1:])
        ]

    def rows_with_keys(
        self,
        db,
        table,
        names,
        sink_cols,
        keys,
        kinds,
        canon_keys,
        key_canons: Sequence[ColumnCanon] = (),
        fixed=None,
        only_null=None,
    ) -> list[tuple]:
        """Rows whose canonical key is one of ``canon_keys`` (compared in Python)."""

        wanted = set(map(tuple, canon_keys))
        if not wanted:
            return []
        keep = _with_keys(wanted, keys, key_canons)
        return self._scan(db, table, names, sink_cols, keep, fixed=fixed, only_null=only_null)

    def query(self, db, table, sql_text: str) -> list[tuple]:
        """The rows of one DataFusion statement over the table, registered as ``t`` (a read
        of the verifier's own)."""
        import pyarrow as pa
        from deltalake import QueryBuilder
        from deltalake.exceptions import DeltaError

        dt = self._open(db, table)
        if dt is None:
            raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
        try:
            t = _plain(pa.table(QueryBuilder().register("t", dt).execute(sql_text).read_all()))
        except (OSError, DeltaError) as exc:
            raise SinkReadError(f"Delta table {self.path(db, table)}: {first_line(exc)}") from None
        except Exception as exc:  # DataFusion's own errors have no Python class of their own
            raise SinkReadError(f"Delta table {self.path(db, table)}: query failed: {first_line(exc)}") from None
        return list(zip(*(c.to_pylist() for c in t.columns)))

    def positions_with_keys(
        self, db, table, sink_cols, keys, kinds, canon_keys, key_canons: Sequence[ColumnCanon] = ()
    ) -> list[tuple]:
        """``(key values..., sequence)`` of the sink's rows and tombstones of these keys: the
        position of its last change of each (deleted keys are in the table the Delta sink
        keeps its tombstones in, docs/architecture.md). Both are read at one batch of the
        merger (``_one_batch``): read apart, a key deleted and written again in between
        would show neither."""
        from deltalake.exceptions import DeltaError

        wanted = set(map(tuple, canon_keys))
        if not wanted:
            return []
        main, tomb = self._one_batch(db, table)
        keep = _with_keys(wanted, keys, key_canons)
        out = self._scan(db, table, [*keys, SEQ_COLUMN], {**sink_cols, SEQ_COLUMN: "bigint"}, keep, dt=main)
        if tomb is not None:
            try:
                t = _plain(tomb.to_pyarrow_table(columns=[*keys, SEQ_COLUMN]))
            except (OSError, DeltaError) as exc:
                raise SinkReadError(f"Delta tombstones of {self.path(db, table)}: {first_line(exc)}") from None
            t = keep(t)
            out += zip(*(t.column(n).to_pylist() for n in [*keys, SEQ_COLUMN]))
        return out

    def _one_batch(self, db, table):
        """The sink table and its tombstone table (None: none) as one batch of the merger
        left them. The sink commits a batch's rows, then its tombstones; so the two are
        loaded again until the tombstones' step is the table's (``steps_done``), waiting
        while a batch is between its two commits."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        from merger.sinks.delta.meta import steps_done
        from merger.sinks.delta.paths import tombstone_path

        path = tombstone_path(self.base, (db, table))
        deadline = time.monotonic() + TOMBSTONE_WAIT_S
        while True:
            main = self._open(db, table)
            if main is None:
                raise SinkReadError(f"Delta table {self.path(db, table)} does not exist")
            try:
                tomb = DeltaTable(path, storage_options=self.storage_options)
            except TableNotFoundError:
                return main, None
            except (OSError, DeltaError) as exc:
                raise SinkReadError(f"Delta tombstones {path}: {first_line(exc)}") from None
            table_done, tombs_done = steps_done(main, tomb)
            if tombs_done == table_done:
                return main, tomb
            if time.monotonic() > deadline:
                raise SinkReadError(
                    f"Delta tombstones {path}: at version {tombs_done} while the table is at {table_done} after "
                    f"{TOMBSTONE_WAIT_S:.0f}s (a merger stopped between a batch's two commits finishes it when it "
                    "starts again): start the merger, then verify again"
                )
            time.sleep(0.02)  # a batch between its two commits, or one committed between the two loads

    def keys_where(self, db, table, keys, condition: str) -> list[tuple]:
        """The keys of the sink rows that meet ``condition`` (SQL in DataFusion's dialect,
        as the operator wrote it for `cdc repair --where`)."""
        import pyarrow as pa
        from deltalake import QueryBuilder
        from deltalake.exceptions import DeltaError

        dt = self._open(db, table)
        if dt is None:
            return []
        cols = ", ".join('"' + k.replace('"', '""') + '"' for k in keys)
        try:
            t = pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {cols} FROM t WHERE {condition}").read_all())
        except (OSError, DeltaError, Exception) as exc:  # noqa: BLE001 - DataFusion's parse errors too
            raise SinkReadError(
                f"Delta table {self.path(db, table)}: --where {condition!r}: {first_line(exc)}"
            ) from None
        t = _plain(t)
        return list(zip(*(t.column(k).to_pylist() for k in keys)))

    def value_counts(self, db, table, column, only_null=None) -> dict:
        """How many rows hold each value of ``column``."""
        from collections import Counter

        rows = self._scan(db, table, [column], {column: ""}, lambda t: t, only_null=only_null)
        return dict(Counter(r[0] for r in rows))

    # ------------------------------------------------ an SCD type 2 history (current_versions)

    def history_positions(
        self, db, table, sink_cols, keys, kinds, canon_keys, key_canons: Sequence[ColumnCanon] = ()
    ) -> list[tuple]:
        """``(key values..., sequence)`` per key with versions in an SCD type 2 history: the
        last change the history applied of it (one version of the table)."""
        cols = {**sink_cols, END_SEQ: "int64", LAST_SEQ: "int64"}
        names = [*keys, END_SEQ, LAST_SEQ]
        rows = self.rows_with_keys(db, table, names, cols, keys, kinds, canon_keys, key_canons=key_canons)
        last: dict[tuple, int] = {}
        for *key, end, last_seq in rows:
            at = end if end is not None else last_seq
            if at is not None:
                last[tuple(key)] = max(last.get(tuple(key), at), at)
        return [(*k, v) for k, v in last.items()]

    def shape_faults(self, db: str, table: str, keys, fixed: tuple[str, str] | None = None) -> list[ShapeFault]:
        """What is wrong with an SCD type 2 history's shape (``fixed``: of one origin's rows),
        found by DataFusion."""
        where = None if fixed is None else fixed_predicate(self.rules.dialect, *fixed)
        q = shape_query('"t"', list(keys), where, dialect=self.rules.dialect)
        return faults_of(self.query(db, table, q), keyed=len(keys))


def _binary_values(chunk) -> bytes:
    """The values of a binary array without nulls, back to back."""
    import array

    import pyarrow as pa

    if chunk.null_count:
        raise SinkReadError("the Delta digest query returned NULL hashes")
    chunk = chunk.cast(pa.binary())
    offsets = array.array("i")
    offsets.frombytes(chunk.buffers()[1])
    start, end = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
    return chunk.buffers()[2].to_pybytes()[start:end] if len(chunk) else b""


def _plain_type(typ):
    import pyarrow as pa

    if pa.types.is_string_view(typ) or pa.types.is_large_string(typ):
        return pa.string()
    if pa.types.is_binary_view(typ) or pa.types.is_large_binary(typ):
        return pa.binary()
    return typ


def _with_keys(wanted: set, keys: Sequence[str], key_canons: Sequence[ColumnCanon]):
    """A filter of Arrow tables: the rows whose canonical key is in ``wanted``."""
    import pyarrow as pa

    def keep(t):
        cols = [c.sinks(t.column(k).to_pylist()) for c, k in zip(key_canons, keys)]
        mask = [key in wanted for key in zip(*cols)]
        return t.filter(pa.array(mask, pa.bool_())) if mask else t

    return keep


def _plain(t):
    """View/large types as their plain equivalents (what delta-rs returns varies);
    the values are the same."""
    import pyarrow as pa

    schema = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t.schema])
    return t if schema == t.schema else t.cast(schema)


_ARROW_NAMES = {}


def _arrow_type(name: str):
    """An Arrow type from its ``str()`` (the types Delta tables hold)."""
    import re

    import pyarrow as pa

    if not _ARROW_NAMES:
        for t in (
            pa.bool_(),
            pa.int8(),
            pa.int16(),
            pa.int32(),
            pa.int64(),
            pa.float32(),
            pa.float64(),
            pa.string(),
            pa.binary(),
            pa.date32(),
            pa.timestamp("us"),
            pa.timestamp("us", tz="UTC"),
        ):
            _ARROW_NAMES[str(t)] = t
    if name in _ARROW_NAMES:
        return _ARROW_NAMES[name]
    m = re.fullmatch(r"decimal(128|256)\((\d+), (\d+)\)", name)
    if m:
        ctor = pa.decimal128 if m.group(1) == "128" else pa.decimal256
        return ctor(int(m.group(2)), int(m.group(3)))
    raise SinkReadError(f"Delta column type {name} cannot be a verify key")


def _prunable(v: Any) -> bool:
    """Values delta-rs file pruning parses reliably."""
    return isinstance(v, (int, str)) and not isinstance(v, bool)


def delta_statistics_exact(type_name: str | None) -> bool:
    """Whether the Delta log's min/max of a column of this type (its Arrow name) are exact,
    so that a read or a digest query may skip files by them. delta-rs writes integers and
    dates exactly, but a decimal(20, 0) max of 18446744073709551614 (a BIGINT UNSIGNED key)
    as 9223372036854775807 and timestamps cut to milliseconds: a query pruned by them
    misses rows, and then misses an extra row in the sink too."""
    import re

    return bool(type_name) and (re.fullmatch(r"u?int(8|16|32|64)", type_name) or type_name.startswith("date32"))


def _scalar(v: Any):
    """An Arrow scalar of ``v``; an integer beyond int64 (BIGINT UNSIGNED) as a decimal."""
    import pyarrow as pa

    if isinstance(v, pa.Scalar):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
        return pa.scalar(Decimal(v))
    return pa.scalar(v)


def _bound_filter(cols: list[str], values: list, lower: bool):
    """``key >= bound`` (lower) or ``key < bound``, lexicographic over the columns."""
    import pyarrow.dataset as ds

    last = len(values) - 1

    def level(i: int):
        f, v = ds.field(cols[i]), values[i]
        if i == last:
            return f >= v if lower else f < v
        return (f > v if lower else f < v) | ((f == v) & level(i + 1))

    return level(0)
