"""Debezium mode of the merger (merger/sources/debezium_topics.py) without Spark or Kafka:
the replay rule on Debezium's positions, the signal rows, one micro-batch of Debezium records
through ``BatchProcessor`` into a real Delta table, and the signal writer against the
real MariaDB."""

from __future__ import annotations

import json
import uuid

import pytest

from merger.errors import MergerError
from merger.sources.debezium_topics import SignalWriter

# ---------------------------------------------------------------------- the signal writer


@pytest.mark.integration
def test_signal_writer_against_mariadb(stack, tmp_path, mysql_root, unique_name):
    from cdc import stack as local_stack
    from cdc.config import MySQLConfig
    from merger.state.store import StateStore

    db = f"sg_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(
            f"CREATE TABLE `{db}`.sig (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)"
        )
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    root = MySQLConfig(
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password_file=str(local_stack.secret_file(stack, "mysql_root_password")),
    )
    store = StateStore(tmp_path / "state")
    try:
        writer = SignalWriter(root, f"{db}.sig", store)
        writer.check()  # writes nothing
        writer.handle({"action": "snapshot", "table": f"{db}.t", "args": {"where": "id > 5", "auto": False}})
        writer.handle({"action": "snapshot", "table": f"{db}.t", "args": {"auto": True}})  # plan exists: no-op
        writer.handle({"action": "pause", "table": f"{db}.t", "args": {}})
        with mysql_root.cursor() as cur:
            cur.execute(f"SELECT id, type, data FROM `{db}`.sig ORDER BY type")
            rows = cur.fetchall()
        assert [r[1] for r in rows] == ["execute-snapshot", "pause-snapshot"]
        assert json.loads(rows[0][2])["additional-conditions"][0]["filter"] == "id > 5"
        assert store.load_plan(f"{db}.t")["debezium_signal"] == rows[0][0]

        with pytest.raises(MergerError, match="does not exist: create it with CREATE TABLE"):
            SignalWriter(root, f"{db}.nosuch", store).check()
        # a merger user without INSERT on the signal table gets told which GRANT is missing
        user, password = f"ro_{unique_name}", uuid.uuid4().hex
        with mysql_root.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
            cur.execute(f"GRANT SELECT ON `{db}`.* TO '{user}'@'%'")
        (tmp_path / "pw").write_text(password)
        ro = MySQLConfig(
            host=stack.mariadb.host, port=stack.mariadb.port, user=user, password_file=str(tmp_path / "pw")
        )
        with pytest.raises(MergerError, match=rf"cannot write Debezium's signal table {db}.sig: GRANT INSERT"):
            SignalWriter(ro, f"{db}.sig", store).check()
        with pytest.raises(MergerError, match="GRANT INSERT"):
            SignalWriter(ro, f"{db}.sig", store).send("snapshot", f"{db}.t")
    finally:
        with mysql_root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"DROP USER IF EXISTS 'ro_{unique_name}'@'%'")
