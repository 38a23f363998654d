"""Security: secrets never leak, TLS/SASL settings reach every client, the merger checks
its source privileges at start, and ingest says what to do when the binlog is gone.

The integration tests run ingest and the merger as real processes with least-privileged
users (the GRANTs of docs/security.md) and distinctive passwords, then look for those
passwords everywhere a user or a log collector could see them.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pymysql
import pytest
import yaml

from cdc import stack as local_stack
from tests.conftest import IS_CI
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import MergerProcess, write_merger_config
from tests.unit.test_security import _cli, _error_line, _secret


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the merger's start-up checks


def _mysql_user(root, user: str, password: str, *grants: str) -> None:
    with root.cursor() as cur:
        cur.execute(f"CREATE OR REPLACE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
        for g in grants:
            cur.execute(g.format(user=f"'{user}'@'%'"))


def _watermark_table(root) -> None:
    from merger.snapshot.runner import watermark_ddl

    with root.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS cdc")
        cur.execute(watermark_ddl("cdc.cdc_watermarks"))


@pytest.mark.integration
def test_merger_checks_credentials_and_privileges_at_start(stack, mysql_root, tmp_path, unique_name):
    db = f"prv_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    _watermark_table(mysql_root)
    users = {"nosel": f"ns_{unique_name}", "nowm": f"nw_{unique_name}", "tbl": f"nt_{unique_name}"}
    _mysql_user(mysql_root, users["nosel"], "pw-1", "GRANT INSERT, UPDATE, DELETE ON cdc.cdc_watermarks TO {user}")
    _mysql_user(mysql_root, users["nowm"], "pw-2", f"GRANT SELECT ON {db}.* TO {{user}}")
    _mysql_user(
        mysql_root,
        users["tbl"],
        "pw-3",
        f"GRANT INSERT ON {db}.t TO {{user}}",
        "GRANT SELECT ON mysql.db TO {user}",
        "GRANT INSERT, UPDATE, DELETE ON cdc.cdc_watermarks TO {user}",
    )
    base = write_merger_config(stack, tmp_path / "m.yaml", unique_name, [db], tmp_path)

    def run(name: str, user: str, password: str) -> str:
        cfg = yaml.safe_load(base.read_text())
        cfg["mysql"].update(user=user, password_file=_secret(tmp_path / f"{name}.pw", password))
        cfg["sinks"] = {"delta": {"path": str(tmp_path / "delta")}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        res = _cli("merge", "-c", str(path))  # a hang fails by _cli's timeout
        return _error_line(res)

    try:
        line = run("badpw", "root", "not-the-password")
        assert "wrong credentials" in line and "mysql.password_env" in line, line
        line = run("nosel", users["nosel"], "pw-1")
        assert "lacks SELECT" in line and "GRANT SELECT ON" in line and users["nosel"] in line, line
        line = run("nowm", users["nowm"], "pw-2")
        assert f"GRANT INSERT, UPDATE, DELETE ON `cdc`.`cdc_watermarks` TO '{users['nowm']}'@'%'" in line, line
        line = run("tbl", users["tbl"], "pw-3")
        assert f"lacks SELECT on `{db}`.`t`" in line and f"GRANT SELECT ON `{db}`.*" in line, line
    finally:
        with mysql_root.cursor() as cur:
            for u in users.values():
                cur.execute(f"DROP USER IF EXISTS '{u}'@'%'")
            cur.execute(f"DROP DATABASE IF EXISTS {db}")


# ------------------------------------------------------------------ binlog purged


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_binlog_purged_past_ingest_position_says_what_to_do(stack, tmp_path, unique_name):
    """On a private MariaDB: purging binlogs on the shared one would break other tests."""
    info = local_stack.StackInfo(state_dir=str(tmp_path / "private"))
    local_stack.start_mariadb(info, report_mysql8_version=False)
    info.kafka = stack.kafka
    try:
        root = pymysql.connect(
            ssl_disabled=True,
            host=info.mariadb.host,
            port=info.mariadb.port,
            user="root",
            password=info.mariadb.root_password,
            autocommit=True,
        )
        with root.cursor() as cur:
            cur.execute("CREATE DATABASE pg_gone")
            cur.execute("CREATE TABLE pg_gone.t (id INT PRIMARY KEY)")
            cur.execute("INSERT INTO pg_gone.t VALUES (1), (2)")
        cfg = write_config(info, tmp_path / "ingest.yaml", unique_name, ["pg_gone"])
        ingest = IngestProcess(cfg, tmp_path / "ingest.log").start()
        try:
            wait_caught_up(info, unique_name, proc=ingest)
        finally:
            ingest.stop()
        with root.cursor() as cur:  # while ingest is stopped: new binlogs, the old ones purged
            for i in range(3, 6):
                cur.execute(f"INSERT INTO pg_gone.t VALUES ({i})")
                cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW BINARY LOGS")
            last = cur.fetchall()[-1][0]
            deadline = time.monotonic() + 60
            while True:  # MariaDB keeps a binlog until InnoDB checkpointed its commits
                cur.execute(f"PURGE BINARY LOGS TO '{last}'")
                cur.execute("SHOW BINARY LOGS")
                if len(cur.fetchall()) == 1:
                    break
                assert time.monotonic() < deadline, "the old binlogs were not purged"
                time.sleep(0.5)
        root.close()
        res = _cli("ingest", "-c", str(cfg), timeout=180)
        line = _error_line(res)
        assert "no longer has the binlog" in line, line
        assert "start.mode: current" in line and "re-snapshot" in line and f"{unique_name}.offsets" in line, line
    finally:
        local_stack.stop(info, "mariadb")


# ------------------------------------------------------------------ no secret leaks


def _scan(needles: dict[str, str], where: str, text: str) -> list[str]:
    return [f"{name} password in {where}" for name, value in needles.items() if value in text]


def _scan_tree(needles: dict[str, str], root: Path, skip: set[Path]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path not in skip:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for name, value in needles.items():
                if value.encode() in data:
                    found.append(f"{name} password in {path}")
    return found


@pytest.mark.integration
@pytest.mark.timeout(900)
@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_no_secret_in_logs_status_metrics_state_or_spark_events(stack, mysql_root, tmp_path, unique_name, reader):
    import psycopg

    tag = unique_name
    passwords = {
        "ingest-mysql": f"IngPw-{tag}-Xq7",
        "merger-mysql": f"MrgPw-{tag}-Kz3",
        "postgres": f"PgPw-{tag}-Wv5",
        "kafka-sasl": f"SaslPw-{tag}-Jm2",
    }
    secrets = tmp_path / "secrets"
    files = {name: _secret(secrets / name, pw) for name, pw in passwords.items()}
    db = f"sec_{tag}"
    rows = 500 if IS_CI else 5000
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM {db}.seq_1_to_{rows}")
    _watermark_table(mysql_root)
    # the least privileges of docs/security.md
    ing_user, mrg_user, pg_user = f"ing_{tag}", f"mrg_{tag}", f"sink_{tag}"
    _mysql_user(
        mysql_root,
        ing_user,
        passwords["ingest-mysql"],
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO {user}",
    )
    _mysql_user(
        mysql_root,
        mrg_user,
        passwords["merger-mysql"],
        f"GRANT SELECT ON {db}.* TO {{user}}",
        "GRANT INSERT, UPDATE, DELETE ON cdc.cdc_watermarks TO {user}",
    )
    pg_db = f"sec_{tag}"
    with psycopg.connect(
        host=stack.postgres.host,
        port=stack.postgres.port,
        user=stack.postgres.user,
        password=stack.postgres.password,
        dbname=stack.postgres.database,
        autocommit=True,
    ) as pg:
        pg.execute(f"CREATE ROLE {pg_user} LOGIN PASSWORD '{passwords['postgres']}'")
        pg.execute(f"CREATE DATABASE {pg_db} OWNER {pg_user}")
    sasl = {"kafka.sasl_password_file": files["kafka-sasl"], "kafka.extra": {"sasl.username": "cdc"}}
    ingest_port, merger_port = _free_port(), _free_port()
    icfg = write_config(
        stack,
        tmp_path / "ingest.yaml",
        tag,
        [db, "cdc"],
        metrics_port=ingest_port,
        **{"mysql.user": ing_user, "mysql.password_file": files["ingest-mysql"]},
        **sasl,
    )
    events = tmp_path / "spark-events"
    events.mkdir()
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        tag,
        [db],
        tmp_path,
        metrics_port=merger_port,
        **{
            "mysql.user": mrg_user,
            "mysql.password_file": files["merger-mysql"],
            "sinks.postgres.user": pg_user,
            "sinks.postgres.dbname": pg_db,
            "sinks.postgres.password_file": files["postgres"],
            # several chunks: read by Spark tasks (one small chunk is read
            # in the driver), so the reader's password is in play: inside
            # ConnectorX tasks' functions, or JDBC's properties
            "snapshot.chunk_size": 200,
            "snapshot.reader": reader,
            "spark_conf": {
                "spark.driver.memory": "1g",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.compress": "false",
                "spark.eventLog.dir": events.as_uri(),
            },
        },
        **sasl,
    )
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    try:
        from merger.verify.sinks.delta import DeltaReader
        from merger.verify.sinks.postgres import PostgresReader
        from merger.verify.source import SourceReader
        from merger.verify.table import compare_table

        with mysql_root.cursor() as cur:
            cur.execute(f"UPDATE {db}.t SET v = 'changed' WHERE id % 10 = 0")
            cur.execute(f"DELETE FROM {db}.t WHERE id % 25 = 0")

        def equal() -> bool:
            source = SourceReader(
                lambda: pymysql.connect(
                    ssl_disabled=True,
                    host=stack.mariadb.host,
                    port=stack.mariadb.port,
                    user="root",
                    password=stack.mariadb.root_password,
                )
            )
            readers = [
                DeltaReader(str(tmp_path / "delta")),
                PostgresReader(
                    {
                        "host": stack.postgres.host,
                        "port": stack.postgres.port,
                        "user": pg_user,
                        "password": passwords["postgres"],
                        "dbname": pg_db,
                    }
                ),
            ]
            try:
                return all(compare_table(source, r, db, "t", ["id"]).ok for r in readers)
            except Exception:
                return False
            finally:
                source.close()
                for r in readers:
                    r.close()

        deadline = time.monotonic() + 400
        while not equal():
            assert merger.alive(), merger.log_text()[-4000:]
            assert ingest.alive(), ingest.log_text()[-4000:]
            assert time.monotonic() < deadline, "sinks did not converge:\n" + merger.log_text()[-3000:]
            time.sleep(3)

        found: list[str] = []
        for args in (
            ("status", "-c", str(mcfg)),
            ("status", "--json", "-c", str(mcfg)),
            ("stack", "status", "--state-dir", str(stack.state_dir)),
        ):
            res = _cli(*args)
            assert res.returncode == 0, res.stderr
            found += _scan(passwords, "cdc " + " ".join(args[:2]), res.stdout + res.stderr)
        for port, what in ((ingest_port, "ingest"), (merger_port, "merger")):
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            assert "cdc_" in text
            found += _scan(passwords, f"{what} metrics", text)
    finally:
        merger.stop()
        ingest.stop()
    found += _scan(passwords, "ingest log", ingest.log_text())
    found += _scan(passwords, "merger log (with Spark's)", merger.log_text())
    event_text = "".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    # the snapshot's Spark jobs are in the event log (JDBC: its query too)
    assert f"snapshot {db}." in event_text, "the Spark event log has no snapshot job to look at"
    if reader == "jdbc":
        assert "cdc_snapshot" in event_text, "the Spark event log has no snapshot (JDBC) query to look at"
    found += _scan_tree(passwords, events, set())
    found += _scan_tree(passwords, tmp_path / "state", set())
    found += _scan_tree(passwords, tmp_path / "delta", set())
    assert not found, found

    with mysql_root.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{ing_user}'@'%'")
        cur.execute(f"DROP USER IF EXISTS '{mrg_user}'@'%'")
        cur.execute(f"DROP DATABASE IF EXISTS {db}")


SPARK_SECRET_PROBE = """
import json, os
from cdc.config import MergerConfig
from merger.app import make_spark, stop_spark

secret = os.environ["CDC_TEST_SPARK_SECRET"]
spark = make_spark(MergerConfig(spark_auth_secret_env="CDC_TEST_SPARK_SECRET", spark_master="local[1]"), False)
conf = spark.sparkContext.getConf()
out = {k: conf.get(k, None) for k in ("spark.authenticate", "spark.network.crypto.enabled")}
out["secret in the SparkConf"] = conf.get("spark.authenticate.secret", None) == secret
out["rows"] = spark.sparkContext.parallelize(range(10), 2).count()
out["command lines with it"] = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if secret.encode() in f.read():
                out["command lines with it"].append(pid)
    except OSError:
        pass
print("RESULT " + json.dumps(out), flush=True)
stop_spark(spark)
"""


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_spark_secret_reaches_the_sparkconf_and_no_command_line(tmp_path):
    """pyspark puts a session's settings on spark-submit's command line when it starts the
    JVM; the cluster secret must reach the driver's SparkConf only (any local user may read
    a process's command line)."""
    import json
    import os
    import secrets
    import subprocess
    import sys

    secret = "cdc-spark-" + secrets.token_hex(16)
    env = dict(os.environ, CDC_TEST_SPARK_SECRET=secret)
    res = subprocess.run(
        [sys.executable, "-c", SPARK_SECRET_PROBE],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        timeout=240,
    )
    [line] = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")] or [res.stderr[-3000:]]
    out = json.loads(line.removeprefix("RESULT "))
    assert out == {
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        "secret in the SparkConf": True,
        "rows": 10,
        "command lines with it": [],
    }
    assert secret not in res.stdout + res.stderr
