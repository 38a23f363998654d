"""The PostgreSQL sink's control table ``<control schema>._cdc_applied``: the last applied
version per target table, written in the transaction of the data it versions. Its row
lock serializes the writes of one table."""

from __future__ import annotations

from psycopg import sql

APPLIED_TABLE = "_cdc_applied"


class Control:
    def __init__(self, schema: str):
        self.schema = schema
        self.applied = sql.Identifier(schema, APPLIED_TABLE)

    def create(self, conn) -> None:
        cs = sql.Identifier(self.schema)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('cdc-sink-control'))")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(cs))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.{} (table_name text PRIMARY KEY, version bigint NOT NULL,"
                " updated_at timestamptz NOT NULL DEFAULT now())"
            ).format(cs, sql.Identifier(APPLIED_TABLE))
        )

    def claim(self, conn, qualified: str, version: int) -> bool:
        """Lock the table's control row; True if ``version`` is new."""
        conn.execute(
            sql.SQL("INSERT INTO {} (table_name, version) VALUES (%s, -1) ON CONFLICT DO NOTHING").format(self.applied),
            (qualified,),
        )
        held = conn.execute(
            sql.SQL("SELECT version FROM {} WHERE table_name = %s FOR UPDATE").format(self.applied), (qualified,)
        ).fetchone()[0]
        return version > held

    def record(self, conn, qualified: str, version: int) -> None:
        conn.execute(
            sql.SQL("UPDATE {} SET version = %s, updated_at = now() WHERE table_name = %s").format(self.applied),
            (version, qualified),
        )

    def version(self, conn, qualified: str) -> int | None:
        row = conn.execute(
            sql.SQL("SELECT version FROM {} WHERE table_name = %s").format(self.applied), (qualified,)
        ).fetchone()
        return None if row is None or row[0] < 0 else row[0]

    def forget(self, conn, qualified: str) -> None:
        conn.execute(sql.SQL("DELETE FROM {} WHERE table_name = %s").format(self.applied), (qualified,))
