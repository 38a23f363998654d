"""The Docker deployment, checked statically (no Docker engine on the development machines):
docker-compose.yml, the configs and scripts it mounts, the image it builds, and Debezium's
connector config in connect-configs/. Every config is loaded with the project's own
models, with its secrets read from the files compose would mount.

The compose file offers two paths, and each must work on its own and beside the other:

* default (no profile): MySQL 8.4 -> Debezium's MySQL connector in Kafka Connect
  (``connect``, registered by ``connect-register``) -> Kafka -> ``merger``
  (source_connector: debezium) -> Delta / PostgreSQL;
* profile ``mariadb``: MariaDB 11.4 -> ``ingest`` -> Kafka -> ``merger-ingest`` -> Delta /
  PostgreSQL. ingest reads MariaDB only (ingest/checks.py stops against MySQL).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cdc.config import IngestConfig, MergerConfig
from merger.snapshot.runner import watermark_ddl
from tests.unit.test_deployment import (
    INGEST,
    MERGER_DEBEZIUM,
    MERGER_INGEST,
    ROOT,
    SECRET_DIR,
    _created_users,
    _grants,
)

# --------------------------------------------------------------------------- against a real MariaDB


def _run_users_script(stack, tmp_path: Path, names: dict[str, str], password: str) -> None:
    """deploy/mariadb-users.sh as the entrypoint runs it, against the stack's MariaDB: its
    secrets read from ``tmp_path``, the users renamed to ``names`` (deployed -> test name)."""
    script = (ROOT / "deploy" / "mariadb-users.sh").read_text().replace(SECRET_DIR, f"{tmp_path}/")
    for deployed, name in names.items():
        assert f"'{deployed}'@'%'" in script
        script = script.replace(f"'{deployed}'@'%'", f"'{name}'@'%'")
    for secret in _created_users("mariadb-users.sh").values():
        (tmp_path / secret).write_text(password)  # no final newline, like the deployed files
    (tmp_path / "users.sh").write_text(script)
    env = {
        "PATH": "/usr/bin:/bin",
        "SOCKET": stack.mariadb.socket,
        "MARIADB_ROOT_PASSWORD": stack.mariadb.root_password,
    }
    proc = subprocess.run(["bash", str(tmp_path / "users.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mariadb") is None, reason="no mariadb client here")
def test_deployed_users_and_grants_suffice_on_mariadb(stack, mysql_root, unique_name, tmp_path):
    """deploy/mariadb-users.sh and the GRANTs of deploy/mariadb-init.sql, run for fresh users
    on the stack's MariaDB (a password with a quote and a backslash): ingest's start checks
    pass and the merger finds and writes the watermark table (no CREATE privilege needed
    once it exists). The merger's GRANTs of deploy/mysql-init.sql let it write Debezium's
    signal table (same SQL on MySQL)."""
    from cdc.config import MySQLConfig
    from ingest.checks import check_source
    from merger.mysql import checks as merger_checks
    from merger.snapshot.runner import SnapshotRunner
    from merger.sources.debezium_topics import SignalWriter, signal_ddl

    users = {INGEST.mysql.user: f"{unique_name}_i", MERGER_INGEST.mysql.user: f"{unique_name}_m"}
    debezium_merger = f"{unique_name}_d"
    password = f"{unique_name}'q\\b"
    with mysql_root.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS cdc")
        cur.execute(watermark_ddl(MERGER_INGEST.watermark_table))
        cur.execute(signal_ddl(MERGER_DEBEZIUM.signal_table).replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    try:
        _run_users_script(stack, tmp_path, users, password)
        with mysql_root.cursor() as cur:
            cur.execute(f"CREATE USER '{debezium_merger}'@'%%' IDENTIFIED BY %s", (password,))
            plan = [(users[u], g) for u, g in _grants("mariadb-init.sql").items()]
            plan.append((debezium_merger, _grants("mysql-init.sql")[MERGER_DEBEZIUM.mysql.user]))
            for user, grants in plan:
                for privs, obj in grants:
                    target = ".".join(p if p == "*" else f"`{p}`" for p in obj.split("."))
                    cur.execute(f"GRANT {', '.join(sorted(privs))} ON {target} TO '{user}'@'%'")
        secret = tmp_path / "password"
        secret.write_text(password)

        def source(user: str) -> dict:
            return {"host": stack.mariadb.host, "port": stack.mariadb.port, "user": user, "password_file": str(secret)}

        facts = check_source(IngestConfig(mysql=source(users[INGEST.mysql.user])))
        assert facts["flavor"] == "mariadb"
        captured = lambda name: any(re.fullmatch(p, name) for p in MERGER_INGEST.table_include)  # noqa: E731
        merger = MergerConfig(
            mysql=source(users[MERGER_INGEST.mysql.user]),
            watermark_table=MERGER_INGEST.watermark_table,
            min_batch_gap_ms=0,  # no state store here for the runner to prompt the Kafka source through
        )
        merger_checks.check_source(merger, captured)
        runner = SnapshotRunner(merger, None, None, None)
        runner._ensure_watermark_table()  # exists: no CREATE attempted
        window = f"{unique_name}.none"  # a table nobody captures: ingest ignores the marker
        conn = runner._connect()
        try:
            with conn.cursor() as cur:
                for kind in ("LOW", "HIGH"):  # insert, then the ON DUPLICATE KEY UPDATE path
                    cur.execute(runner.watermarks.sql, (window, "w1", kind))
                db, name = MERGER_INGEST.watermark_table.split(".")
                cur.execute(f"DELETE FROM `{db}`.`{name}` WHERE table_name = %s", (window,))
        finally:
            conn.close()
        debezium = MergerConfig(
            mysql=source(debezium_merger), source_connector="debezium", signal_table=MERGER_DEBEZIUM.signal_table
        )
        merger_checks.check_source(debezium, captured)
        SignalWriter(MySQLConfig(**source(debezium_merger)), MERGER_DEBEZIUM.signal_table, None).check()
    finally:
        with mysql_root.cursor() as cur:
            for user in (*users.values(), debezium_merger):
                cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


@pytest.mark.integration
def test_demo_schema_loads_on_mariadb(mysql_root, unique_name):
    """deploy/shop-demo.sql (the same file for MySQL and MariaDB), in a database of its own
    on the stack's MariaDB."""
    sql = (ROOT / "deploy" / "shop-demo.sql").read_text()
    sql = "\n".join(line for line in sql.splitlines() if not line.startswith("--")).replace(
        "`shop`", f"`{unique_name}`"
    )
    statements = [s.strip() for s in sql.split(";\n") if s.strip()]
    with mysql_root.cursor() as cur:
        try:
            for statement in statements:
                cur.execute(statement.rstrip(";"))
            counts = []
            for table in ("customers", "orders"):
                cur.execute(f"SELECT COUNT(*) FROM `{unique_name}`.`{table}`")
                counts.append(cur.fetchone()[0])
            assert counts == [3, 4]
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
