"""An SCD type 2 history in PostgreSQL or Delta read as the latest table it stands for: its
current versions (``__end_seq`` NULL) are the source's rows, its bookkeeping columns are
not the source's. Verify compares them with the source exactly as a latest table (digests,
rows, narrowing, verify windows) through ``CurrentVersions``, a reader with the interface
of the sink's own reader (``merger.verify.sinks.PostgresReader`` over the same connection,
or ``DeltaReader``) that adds the sink's fixed row filter (``only`` / ``only_null``) to
every read; and checks the history's shape (``merger.verify.history_shape``, run by
PostgreSQL or by DataFusion), which a latest table does not have.

The position of a key's last change (a verify window's test) is the greatest end or last
change of its versions: a delete closes the current version at the delete's sequence, any
other change that alters the history opens a version or updates the current one there.
"""

from __future__ import annotations

from merger.verify.history_shape import (
    CURRENT_ROWS,
    END_SEQ,
    HISTORY_COLUMNS,
    LAST_SEQ,
    ShapeFault,
    faults_of,
    shape_query,
)
from merger.verify.keys import postgres_param
from merger.verify.sinks import LOOKUP_BATCH, DeltaReader, PostgresReader
from merger.verify.sql_digest import fixed_predicate


class CurrentVersions:
    """The current versions of SCD type 2 tables, read with ``reader`` (the caller closes it)."""

    def __init__(self, reader: PostgresReader | DeltaReader):
        self.reader = reader
        self.rules = reader.rules
        self.name = reader.name  # what a sink side asks its reader for (key_canons: Delta)
        self.delta = isinstance(reader, DeltaReader)
        # the sink's fixed row filter: the current versions
        self.only = {"only_null": END_SEQ} if self.delta else {"only": CURRENT_ROWS}

    def where(self) -> str:
        return self.reader.where()

    def close(self) -> None:
        pass  # the reader is shared with the sink's other tables

    def columns(self, db: str, table: str) -> dict[str, str] | None:
        cols = self.reader.columns(db, table)
        return None if cols is None else {n: t for n, t in cols.items() if n not in HISTORY_COLUMNS}

    def rows_in_range(self, *args, **kwargs) -> list[tuple]:
        return self.reader.rows_in_range(*args, **kwargs, **self.only)

    def digest_in_range(self, *args, **kwargs):
        return self.reader.digest_in_range(*args, **kwargs, **self.only)

    def rows_with_keys(self, *args, **kwargs) -> list[tuple]:
        return self.reader.rows_with_keys(*args, **kwargs, **self.only)

    def digests_in_parts(self, db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql: str, **kwargs) -> list:
        """The digests of [lo, hi) cut at ``cuts``: one query in PostgreSQL, one per part
        over one load of the table in Delta."""
        return self.reader.digests_in_parts(
            db, table, sink_cols, keys, kinds, lo, hi, cuts, row_sql, **kwargs, **self.only
        )

    def positions_with_keys(self, db, table, sink_cols, keys, kinds, canon_keys, key_canons=()) -> list[tuple]:
        """``(key values..., sequence)`` per key with versions: the last change the history
        applied of it (read in one statement, one snapshot; Delta: one version of the table)."""
        if self.delta:
            cols = {**sink_cols, END_SEQ: "int64", LAST_SEQ: "int64"}
            names = [*keys, END_SEQ, LAST_SEQ]
            rows = self.reader.rows_with_keys(db, table, names, cols, keys, kinds, canon_keys, key_canons=key_canons)
            last: dict[tuple, int] = {}
            for *key, end, last_seq in rows:
                at = end if end is not None else last_seq
                if at is not None:
                    last[tuple(key)] = max(last.get(tuple(key), at), at)
            return [(*k, v) for k, v in last.items()]
        from psycopg import sql

        key = sql.SQL(", ").join(map(sql.Identifier, keys))
        one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(keys)))
        out: list[tuple] = []
        for i in range(0, len(canon_keys), LOOKUP_BATCH):
            batch = canon_keys[i : i + LOOKUP_BATCH]
            q = sql.SQL("SELECT {k}, max(coalesce({es}, {ls})) FROM {t} WHERE ({k}) IN ({listed}) GROUP BY {k}").format(
                k=key,
                es=sql.Identifier(END_SEQ),
                ls=sql.Identifier(LAST_SEQ),
                t=sql.Identifier(*self.reader.target(db, table)),
                listed=sql.SQL(", ").join([one] * len(batch)),
            )
            params = [postgres_param(k, v, sink_cols.get(c)) for kv in batch for c, k, v in zip(keys, kinds, kv)]
            out += self.reader.query(q, params)
        return out

    def value_counts(self, db: str, table: str, column: str) -> dict:
        """How many current versions hold each value of ``column`` (a sharded source's origins)."""
        if self.delta:
            return self.reader.value_counts(db, table, column, **self.only)
        from psycopg import sql

        q = sql.SQL("SELECT {0}, count(*) FROM {1} WHERE {2} GROUP BY {0}").format(
            sql.Identifier(column), sql.Identifier(*self.reader.target(db, table)), sql.SQL(CURRENT_ROWS)
        )
        return dict(self.reader.query(q))

    def shape_faults(self, db: str, table: str, keys, fixed: tuple[str, str] | None = None) -> list[ShapeFault]:
        """What is wrong with the history's shape (``fixed``: of one origin's rows)."""
        if self.delta:
            where = None if fixed is None else fixed_predicate("datafusion", *fixed)
            q = shape_query('"t"', list(keys), where, dialect="datafusion")
            return faults_of(self.reader.query(db, table, q), keyed=len(keys))
        from psycopg import sql

        target = ".".join('"' + n.replace('"', '""') + '"' for n in self.reader.target(db, table))
        where = None if fixed is None else fixed_predicate("postgres", *fixed)
        return faults_of(self.reader.query(sql.SQL(shape_query(target, list(keys), where))))


def reader_for_mode(reader, mode: str):
    """What verify compares a sink table in ``mode`` (``sinks.<sink>.tables``) through: the
    sink's reader for a latest table, its current versions for an SCD type 2 table (in
    PostgreSQL or Delta); None for a table with no latest state to compare (a change log)."""
    if mode == "latest":
        return reader
    if mode == "scd2" and isinstance(reader, (PostgresReader, DeltaReader)):
        return CurrentVersions(reader)
    return None
