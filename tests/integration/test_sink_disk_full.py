"""A full PostgreSQL disk stops the merger with one line naming the sink, the table and what
to do (issue 22 item 14: SQLSTATE 53100 was retried forever while the docs said it stops).
Real MariaDB, ingest, broker, merger process and PostgreSQL.

The full disk is real where the test may mount a filesystem (root, the local stack): the
sink table is moved to a tablespace on a 1 MB tmpfs and the source then writes more than
that. Elsewhere (no root, PostgreSQL in a container) a trigger on the sink table makes the
server itself raise ``disk_full``, so the merger meets the same server error. After space
is freed, a restarted merger writes the batch again: the sink equals the source."""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import tempfile

import psycopg
import pymysql
import pytest
from psycopg import sql

from cdc import stack as local_stack
from tests.cli_util import wait_for
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, write_merger_config

pytestmark = pytest.mark.integration

ROWS_BEFORE = 50
ROWS_AFTER = 6000  # ~1.5 MB of padding: more than the tablespace holds
TABLESPACE_SIZE = "1m"


def _pg(stack):
    p = stack.postgres
    return psycopg.connect(
        host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database, autocommit=True
    )


def _count(pg, schema: str, table: str) -> int:
    try:
        return pg.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return -1


@contextlib.contextmanager
def _tiny_tablespace(stack, pg, name: str):
    """A tablespace on a TABLESPACE_SIZE tmpfs; None when no filesystem can be mounted."""
    if os.geteuid() != 0 or not stack.postgres.os_user:
        yield None
        return
    mount = tempfile.mkdtemp(prefix="cdc-tiny-pg-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TABLESPACE_SIZE}", "tmpfs", mount]).returncode:
        os.rmdir(mount)
        yield None
        return
    try:
        owner = pwd.getpwnam(stack.postgres.os_user)
        os.chown(mount, owner.pw_uid, owner.pw_gid)
        os.chmod(mount, 0o700)
        pg.execute(sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(sql.Identifier(name), sql.Literal(mount)))
        try:
            yield name
        finally:
            pg.execute(sql.SQL("DROP TABLESPACE IF EXISTS {}").format(sql.Identifier(name)))
    finally:
        subprocess.run(["umount", mount])
        os.rmdir(mount)


def _fill_up(pg, schema: str, table: str, tablespace: str | None) -> None:
    """From now on, a write to the sink table fails with SQLSTATE 53100."""
    target = sql.Identifier(schema, table)
    if tablespace is not None:
        pg.execute(sql.SQL("ALTER TABLE {} SET TABLESPACE {}").format(target, sql.Identifier(tablespace)))
        return
    pg.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$"
        ).format(sql.Identifier(schema, "disk_full"))
    )
    pg.execute(
        sql.SQL("CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
            target, sql.Identifier(schema, "disk_full")
        )
    )


def _free_space(pg, schema: str, table: str, tablespace: str | None) -> None:
    target = sql.Identifier(schema, table)
    if tablespace is not None:
        pg.execute(sql.SQL("ALTER TABLE {} SET TABLESPACE pg_default").format(target))
    else:
        pg.execute(sql.SQL("DROP TRIGGER disk_full ON {}").format(target))


@pytest.mark.timeout(300)
def test_postgres_disk_full_stops_the_merger_with_one_line_and_loses_nothing(stack, tmp_path, unique_name):
    db, schema, table = unique_name, f"{unique_name}_pg", "orders"
    src = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    with src.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.{table} (id INT PRIMARY KEY, pad VARCHAR(255))")
        cur.executemany(f"INSERT INTO {db}.{table} VALUES (%s, REPEAT('x', 200))", [(i,) for i in range(ROWS_BEFORE)])
    ingest = IngestProcess(write_config(stack, tmp_path / "ingest.yaml", unique_name, [db]), tmp_path / "ingest.log")
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        sinks={
            "postgres": {
                "host": stack.postgres.host,
                "port": stack.postgres.port,
                "user": stack.postgres.user,
                "dbname": stack.postgres.database,
                "password_file": str(local_stack.secret_file(stack, "postgres_password")),
                "schema": schema,
            }
        },
    )
    pg = _pg(stack)
    merger = None
    try:
        ingest.start()
        merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
        wait_for(lambda: _count(pg, schema, table) == ROWS_BEFORE, "the snapshot in PostgreSQL", 180, every_s=0.5)
        with _tiny_tablespace(stack, pg, f"tiny_{unique_name}") as tablespace:
            _fill_up(pg, schema, table, tablespace)
            try:
                with src.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {db}.{table} VALUES (%s, REPEAT('y', 250))",
                        [(i,) for i in range(ROWS_BEFORE, ROWS_BEFORE + ROWS_AFTER)],
                    )
                # before the fix: retried forever (`blocked on sink ... retrying in 30s`)
                assert merger.wait_exit(90), "the merger still runs on a full disk:\n" + merger.log_text()[-3000:]
                out = merger.log_text()
                last = out.strip().splitlines()[-1]
                assert merger.proc.returncode != 0
                assert "disk full" in last and f"table {db}.{table}" in last and "PostgresSink" in last, last
                assert "free space" in last and "nothing is lost" in last, last
                assert "Traceback" not in out and "retrying" not in out, out[-3000:]
                print(f"the merger's last line: {last}")
                # batches before the disk filled are in; the one that met the full disk is not
                assert ROWS_BEFORE <= _count(pg, schema, table) < ROWS_BEFORE + ROWS_AFTER
            finally:
                merger.stop()  # before the table leaves the tablespace
                _free_space(pg, schema, table, tablespace)
        merger = MergerProcess(mcfg, tmp_path / "merger2.log").start()
        wait_for(
            lambda: _count(pg, schema, table) == ROWS_BEFORE + ROWS_AFTER, "the batch written again", 180, every_s=0.5
        )
        print(f"disk full by {'a tablespace on a 1 MB tmpfs' if tablespace else 'a trigger raising disk_full'}")
    finally:
        if merger is not None:
            merger.stop()
        ingest.stop()
        pg.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        pg.close()
        with src.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        src.close()
