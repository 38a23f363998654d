"""The PostgreSQL sink's tables in mode ``changelog`` (``merger.history.modes``): one row
appended per change, never updated.

Layout of ``"<schema>"."<table>"``: the user columns (all nullable: a delete keeps only
its key, a truncate none), then

* ``__op`` (text): ``c`` insert, ``u`` update, ``d`` delete, ``r`` a row read by a
  snapshot, ``t`` truncate (every key column NULL; of one origin: its origin column set);
* ``__seq`` (bigint): the change's sequence, the order of a key's changes (the binlog
  position; a snapshot row's is its window's HIGH watermark);
* ``__at`` (timestamptz): the source commit time (whole seconds in MariaDB's binlog; a
  snapshot row's is its HIGH watermark's);
* ``__version`` (bigint): the merger's write that appended it (batches in order).

With image ``before_after``, each user column ``<column>`` has a twin ``__before_<column>``
of its type, after the user columns: the row before the change (an update's old row, the
row a delete removed; NULL for an insert, a snapshot row, a truncate).

A unique index on ``(key columns, __seq) NULLS NOT DISTINCT`` (PostgreSQL 15 or later)
names each change. The table's comment marks its mode, so a table configured in another
mode is refused, never silently rewritten.

Exactly once: a write is one transaction with the version claim of ``Control`` (a batch
replayed after a crash is skipped whole). The rule of ``merger.history.changelog``, in
SQL over the staged batch: a change at or below the last sequence the log holds for its
key is a replay and is not appended; a change whose (key, sequence) is there already is
skipped by the unique index (``ON CONFLICT DO NOTHING``), also within a batch.

A table dropped at the source, or rebuilt by the merger (an incompatible schema change,
``cdc snapshot`` of a paused table), keeps its history: the log is renamed aside
(``<table>__until_<UTC time>``) and a new one starts.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from merger.history.changelog import (
    AFTER,
    BEFORE_AFTER,
    BEFORE_PREFIX,
    LOG_AT,
    LOG_COLUMNS,
    LOG_OP,
    LOG_SEQ,
    LOG_VERSION,
)
from merger.history.modes import COMMIT_US
from merger.sinks.base import (
    DELETE_OP,
    OP,
    SEQ,
    Changes,
    SinkError,
    TableCut,
    TableId,
    before_as_log_columns,
    checked_changes,
)
from merger.sinks.postgres.catalog import Catalog
from merger.sinks.postgres.copy import Copier
from merger.sinks.postgres.history_schema import HistoryLayout, HistorySchema, commit_time_sql, cut_sql
from merger.sinks.postgres.meta import TableMeta, fit_batch

log = logging.getLogger(__name__)

CHANGELOG = HistoryLayout(
    mode="changelog",
    what="a change log",
    columns=(
        (LOG_OP, "text NOT NULL"),
        (LOG_SEQ, "bigint NOT NULL"),
        (LOG_AT, "timestamptz"),
        (LOG_VERSION, "bigint NOT NULL"),
    ),
    key_order=LOG_SEQ,
    keys_not_null=False,  # a truncate's row has no key
)
# image before_after: each user column has its twin ``__before_<column>``; the mark
# names the image, so a log never changes image silently
CHANGELOG_BEFORE_AFTER = HistoryLayout(
    mode="changelog",
    what="a change log with image before_after",
    columns=CHANGELOG.columns,
    key_order=LOG_SEQ,
    keys_not_null=False,
    variant=BEFORE_AFTER,
    before_prefix=BEFORE_PREFIX,
)


class ChangelogTables:
    def __init__(self, catalog: Catalog, copier: Copier, nul_policy: str, json_as_jsonb: bool, image: str = AFTER):
        self.image = image
        self.schema = HistorySchema(
            catalog, json_as_jsonb, CHANGELOG_BEFORE_AFTER if image == BEFORE_AFTER else CHANGELOG
        )
        self.copier = copier
        self.nul_policy = nul_policy

    # ------------------------------------------------------------------ writes

    def write(self, conn, table: TableId, m: TableMeta, version: int, changes: Changes, mode=None) -> dict[str, int]:
        """Append the batch's changes in the caller's transaction; the values the NUL rule changed."""
        src = checked_changes(table, changes, m.keys)
        if not src.num_rows:
            return {}
        if COMMIT_US not in src.column_names:
            raise SinkError(f"table {table}: a change log batch without {COMMIT_US} (the merger adds it)")
        if self.image == BEFORE_AFTER:
            src = before_as_log_columns(table, src)
        src, cols, nul_changed = fit_batch(table, src, m, self.nul_policy)
        target = sql.Identifier(m.schema, m.name)
        ident = {c: sql.Identifier(c) for c in [*cols, COMMIT_US, SEQ, OP, *LOG_COLUMNS]}
        conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp._cdc_log_stage"))
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE _cdc_log_stage ON COMMIT DROP AS SELECT {}, NULL::bigint AS {}, "
                "NULL::bigint AS {}, NULL::text AS {} FROM {} WITH NO DATA"
            ).format(sql.SQL(", ").join(ident[c] for c in cols), ident[COMMIT_US], ident[SEQ], ident[OP], target)
        )
        self.copier.copy_table(
            conn,
            sql.Identifier("_cdc_log_stage"),
            src,
            {**{c: m.columns[c] for c in cols}, COMMIT_US: pa.int64(), SEQ: pa.int64(), OP: pa.string()},
        )
        key_match = sql.SQL(" AND ").join(sql.SQL("l.{k} = s.{k}").format(k=ident[k]) for k in m.keys)
        values = [
            ident[c]
            if c in m.keys or (self.image == BEFORE_AFTER and c.startswith(BEFORE_PREFIX))
            else sql.SQL("CASE WHEN s.{} = {} THEN NULL ELSE s.{} END").format(
                ident[OP], sql.Literal(DELETE_OP), ident[c]
            )
            for c in cols
        ]
        conn.execute(
            sql.SQL(
                "INSERT INTO {target} ({cols}, {op}, {seq}, {at}, {version}) "
                "SELECT {values}, s.{sop}, s.{sseq}, {time}, %s FROM _cdc_log_stage s "
                "WHERE s.{sseq} > COALESCE((SELECT max(l.{seq}) FROM {target} l WHERE {key_match}), -1) "
                "ORDER BY s.{sseq} ON CONFLICT DO NOTHING"
            ).format(
                target=target,
                cols=sql.SQL(", ").join(ident[c] for c in cols),
                op=ident[LOG_OP],
                seq=ident[LOG_SEQ],
                at=ident[LOG_AT],
                version=ident[LOG_VERSION],
                values=sql.SQL(", ").join(
                    sql.SQL("s.{}").format(v) if isinstance(v, sql.Identifier) else v for v in values
                ),
                sop=ident[OP],
                sseq=ident[SEQ],
                time=commit_time_sql(sql.SQL("s.{}").format(ident[COMMIT_US])),
                key_match=key_match,
            ),
            (version,),
        )
        conn.execute("DROP TABLE pg_temp._cdc_log_stage")
        if pc.any(pc.is_null(src[COMMIT_US])).as_py():
            log.warning("table %s: changes without a commit time appended with __at NULL", table)
        return nul_changed

    def truncate(self, conn, m: TableMeta, version: int, cut: TableCut | None, origin: tuple[str, str] | None) -> None:
        """A ``t`` row: every key column NULL (of one origin: its origin column set). Without
        the truncate's own sequence (a DDL's reset), it follows every change of the log."""
        target = sql.Identifier(m.schema, m.name)
        cols, vals = [], []
        if origin is not None:
            cols, vals = [sql.Identifier(origin[0])], [sql.Literal(origin[1])]
        seq, at = cut_sql(cut, target, LOG_SEQ)
        conn.execute(
            sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
                target,
                sql.SQL(", ").join([*cols, *(sql.Identifier(c) for c in LOG_COLUMNS)]),
                sql.SQL(", ").join([*vals, sql.Literal("t"), seq, at, sql.Literal(int(version))]),
            )
        )
