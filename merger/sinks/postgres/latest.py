"""The PostgreSQL sink's write of a batch when the table holds the latest row per key: the
batch deduped, NUL characters handled, then the snapshot rows' direct COPY or the staging
table + MERGE with the sequence guard and the tombstones."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from merger.sinks.base import DELETE_OP, OP, SEQ, Changes, TableId, latest_per_key
from merger.sinks.postgres.catalog import Catalog
from merger.sinks.postgres.copy import Copier
from merger.sinks.postgres.meta import TableMeta, fit_batch


class LatestWriter:
    def __init__(self, catalog: Catalog, copier: Copier, nul_policy: str, work_mem: str | None, merge_join: str):
        self.catalog = catalog
        self.copier = copier
        self.nul_policy = nul_policy
        self.work_mem = work_mem
        self.merge_join = merge_join

    def write(self, conn, table: TableId, m: TableMeta, changes: Changes) -> dict[str, int]:
        """Write the batch in the caller's transaction; returns the values the NUL rule
        changed per column."""
        src = latest_per_key(table, changes, m.keys)
        target, tomb = self.catalog.idents(m)
        if not src.num_rows:
            return {}
        src, cols, nul_changed = fit_batch(table, src, m, self.nul_policy)
        if not self.copier.insert_snapshot_rows(conn, m, src, cols, target, tomb):
            self._merge(conn, m, src, cols, target, tomb)
        return nul_changed

    def _merge(self, conn, m: TableMeta, src: pa.Table, cols: list[str], target, tomb) -> None:
        if self.work_mem:
            conn.execute(sql.SQL("SET LOCAL work_mem = {}").format(sql.Literal(self.work_mem)))
        ident = {c: sql.Identifier(c) for c in cols + [SEQ, OP]}
        conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp._cdc_stage"))
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE _cdc_stage ON COMMIT DROP AS SELECT {}, NULL::text AS {} FROM {} WITH NO DATA"
            ).format(sql.SQL(", ").join(ident[c] for c in cols + [SEQ]), ident[OP], target)
        )
        self.copier.copy(conn, m, sql.Identifier("_cdc_stage"), src, cols, with_op=True)
        on = lambda a, b: sql.SQL(" AND ").join(  # noqa: E731
            sql.SQL("{}.{} = {}.{}").format(sql.Identifier(a), ident[k], sql.Identifier(b), ident[k]) for k in m.keys
        )
        had_tombs = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(tomb)).fetchone()[0]
        if had_tombs:
            conn.execute(
                sql.SQL("DELETE FROM _cdc_stage s USING {} d WHERE {} AND s.{} <= d.{}").format(
                    tomb, on("s", "d"), ident[SEQ], ident[SEQ]
                )
            )
        force_index = self.merge_join == "index"
        if force_index:
            conn.execute("SET LOCAL enable_hashjoin = off")
            conn.execute("SET LOCAL enable_mergejoin = off")
        nonkey = [c for c in cols if c not in m.keys] + [SEQ]
        merge = sql.SQL(
            "MERGE INTO {target} t USING _cdc_stage s ON {on}"
            " WHEN MATCHED AND s.{seq} > t.{seq} AND s.{op} = 'd' THEN DELETE"
            " WHEN MATCHED AND s.{seq} > t.{seq} THEN UPDATE SET {sets}"
            " WHEN NOT MATCHED AND s.{op} <> 'd' THEN INSERT ({icols}) VALUES ({ivals})"
        ).format(
            target=target,
            on=on("t", "s"),
            seq=ident[SEQ],
            op=ident[OP],
            sets=sql.SQL(", ").join(sql.SQL("{} = s.{}").format(ident[c], ident[c]) for c in nonkey),
            icols=sql.SQL(", ").join(ident[c] for c in cols + [SEQ]),
            ivals=sql.SQL(", ").join(sql.SQL("s.{}").format(ident[c]) for c in cols + [SEQ]),
        )
        conn.execute(merge)
        if force_index:
            conn.execute("SET LOCAL enable_hashjoin = on")
            conn.execute("SET LOCAL enable_mergejoin = on")
        keys = sql.SQL(", ").join(ident[k] for k in m.keys)
        if pc.any(pc.equal(src[OP], DELETE_OP)).as_py():
            # the key is absent now: either this delete removed it, or it was never there
            # (a delete overtaking an older snapshot row). Present = a newer row: no tombstone.
            conn.execute(
                sql.SQL(
                    "INSERT INTO {tomb} ({keys}, {seq}) SELECT {skeys}, s.{seq} FROM _cdc_stage s"
                    " WHERE s.{op} = 'd' AND NOT EXISTS (SELECT 1 FROM {target} t WHERE {on})"
                    " ON CONFLICT ({keys}) DO UPDATE SET {seq} = GREATEST({tomb}.{seq}, EXCLUDED.{seq})"
                ).format(
                    tomb=tomb,
                    keys=keys,
                    seq=ident[SEQ],
                    op=ident[OP],
                    target=target,
                    on=on("t", "s"),
                    skeys=sql.SQL(", ").join(sql.SQL("s.{}").format(ident[k]) for k in m.keys),
                )
            )
        if had_tombs:
            conn.execute(
                sql.SQL("DELETE FROM {} d USING _cdc_stage s WHERE {} AND s.{} <> 'd' AND s.{} > d.{}").format(
                    tomb, on("d", "s"), ident[OP], ident[SEQ], ident[SEQ]
                )
            )
        conn.execute("DROP TABLE pg_temp._cdc_stage")
