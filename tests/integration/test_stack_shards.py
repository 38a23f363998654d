"""`cdc stack up --shards N`: N more MariaDB servers, each with its own server_id and GTID
domain and a GTID replica of it; `up` again is harmless; `status` lists them; `down` stops
them. Checked as a user would, through the CLI and plain SQL on each server."""

from __future__ import annotations

import json

import pymysql
import pytest

from cdc import stack as local_stack
from tests.cli_util import run_cli

pytestmark = pytest.mark.integration


def query(info: dict, sql: str, args=None, db: str | None = None):
    conn = pymysql.connect(
        ssl_disabled=True,
        host="127.0.0.1",
        port=info["port"],
        user="root",
        password=info["root_password"],
        database=db,
        autocommit=True,
        connect_timeout=5,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def replica_status(info: dict) -> dict:
    conn = pymysql.connect(
        ssl_disabled=True,
        host="127.0.0.1",
        port=info["port"],
        user="root",
        password=info["root_password"],
        connect_timeout=5,
    )
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW SLAVE STATUS")
            return cur.fetchone()
    finally:
        conn.close()


def servers(state) -> dict[str, dict]:
    """name -> the server's stack file's mariadb part, from shards.json (as a user reads it)."""
    out = {}
    for shard in json.loads((state / "shards.json").read_text()):
        for role in ("primary", "replica"):
            info = json.loads((state / "shards" / shard["name"] / role / "stack.json").read_text())["mariadb"]
            assert shard[role] == str((state / "shards" / shard["name"] / role).resolve())
            out[shard["name"] if role == "primary" else f"{shard['name']} replica"] = info
    return out


def test_shards_up_status_and_down(tmp_path):
    state = tmp_path / "st"
    try:
        res = run_cli("stack", "up", "--only", "mariadb", "--shards", "2", "--state-dir", str(state), timeout=600)
        assert res.returncode == 0, res.stderr
        for name in ("shard1 (server_id 100, domain 1)", "shard1 replica (server_id 101, domain 1)", "shard2 "):
            assert name in res.stdout
        got = servers(state)
        assert sorted(got) == ["shard1", "shard1 replica", "shard2", "shard2 replica"]
        for i in (1, 2):
            primary, replica = got[f"shard{i}"], got[f"shard{i} replica"]
            assert query(primary, "SELECT @@server_id, @@gtid_domain_id, @@log_bin, @@binlog_format") == (
                (100 * i, i, 1, "ROW"),
            )
            assert query(replica, "SELECT @@server_id, @@gtid_domain_id") == ((100 * i + 1, i),)
            # a GTID replica: it connects with its GTID position, not a binlog file and offset
            # (a primary reporting a version below 10 makes MariaDB's replica fall back to
            # Using_Gtid=No, so ingest's failover would be tried on what no user runs)
            assert replica_status(replica)["Using_Gtid"] == "Slave_Pos"
        # a write on shard 1: a GTID of its domain, on its replica, not on shard 2
        s1, r1, s2 = got["shard1"], got["shard1 replica"], got["shard2"]
        query(s1, "CREATE DATABASE app")
        query(s1, "CREATE TABLE app.orders (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        query(s1, "INSERT INTO app.orders (v) VALUES (7), (8)")
        pos = query(s1, "SELECT @@gtid_binlog_pos")[0][0]
        assert pos.startswith("1-100-"), pos
        assert query(r1, "SELECT MASTER_GTID_WAIT(%s, 30)", (pos,)) == ((0,),)
        assert query(r1, "SELECT id, v FROM app.orders ORDER BY id") == ((1, 7), (2, 8))
        assert query(s2, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'app'") == ((0,),)
        # the stack's own user works on every shard server (what ingest connects with)
        conn = pymysql.connect(
            ssl_disabled=True, host="127.0.0.1", port=s2["port"], user=s2["user"], password=s2["password"]
        )
        conn.close()

        # up again: nothing restarted, the same ports
        uptime = "SELECT VARIABLE_VALUE + 0 FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"
        before = {n: query(i, uptime)[0][0] for n, i in got.items()}
        res = run_cli("stack", "up", "--only", "mariadb", "--shards", "2", "--state-dir", str(state), timeout=600)
        assert res.returncode == 0, res.stderr
        assert {n: i["port"] for n, i in servers(state).items()} == {n: i["port"] for n, i in got.items()}
        assert all(query(i, uptime)[0][0] >= before[n] for n, i in got.items())  # none restarted
        assert query(r1, "SELECT COUNT(*) FROM app.orders") == ((2,),)  # the replica still replicates

        # a replica's set-up cut short (its marker missing): the next `up` does it again
        (state / "shards" / "shard1" / "replica" / "replication-set-up").unlink()
        res = run_cli("stack", "up", "--only", "mariadb", "--shards", "2", "--state-dir", str(state), timeout=600)
        assert res.returncode == 0, res.stderr
        query(s1, "INSERT INTO app.orders (v) VALUES (9)")
        pos = query(s1, "SELECT @@gtid_binlog_pos")[0][0]
        assert query(r1, "SELECT MASTER_GTID_WAIT(%s, 30)", (pos,)) == ((0,),)
        assert query(r1, "SELECT COUNT(*) FROM app.orders") == ((3,),)
        assert replica_status(r1)["Using_Gtid"] == "Slave_Pos"

        res = run_cli("stack", "up", "--only", "mariadb", "--shards", "99", "--state-dir", str(state))
        assert res.returncode == 2 and "--shards must be between 1 and" in res.stderr
        assert "Traceback" not in res.stderr

        res = run_cli("stack", "down", "--state-dir", str(state))
        assert res.returncode == 0, res.stderr
        for name in ("shard1 primary", "shard1 replica", "shard2 primary", "shard2 replica", "mariadb"):
            assert name in res.stdout + res.stderr
        assert not any(local_stack.port_open(i["port"]) for i in got.values())
    finally:
        run_cli("stack", "down", "--state-dir", str(state))
