"""Start-up checks: each user mistake ends in one line naming the problem and exit code 2."""

from __future__ import annotations

import socket
import subprocess
import urllib.request

import pytest
import yaml

from tests.ingest_harness import write_config
from tests.unit.test_ingest_checks import _assert_one_line_error, _run_ingest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_source_and_broker_problems_are_one_line_errors(stack, mysql_root, tmp_path, unique_name):
    base = write_config(stack, tmp_path / "ok.yaml", unique_name, ["nothing"])

    def variant(name, **changes):
        c = yaml.safe_load(base.read_text())
        for dotted, v in changes.items():
            node = c
            *parents, last = dotted.split(".")
            for p in parents:
                node = node[p]
            node[last] = v
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(c))
        return path

    # server unreachable, broker unreachable, wrong credentials
    _assert_one_line_error(_run_ingest(variant("noserver", **{"mysql.port": _free_port()})), "unreachable")
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password")
    _assert_one_line_error(_run_ingest(variant("badpw", **{"mysql.password_file": str(wrong)})), "wrong credentials")
    _assert_one_line_error(
        _run_ingest(
            variant(
                "nobroker",
                **{
                    "kafka.bootstrap_servers": f"127.0.0.1:{_free_port()}",
                    "kafka.extra": {"socket.connection.setup.timeout.ms": 3000},
                },
            )
        ),
        "broker",
    )

    # missing privileges
    user = f"np_{unique_name}"
    secret = tmp_path / "np-password"
    secret.write_text("np-secret-1")
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'np-secret-1'")
        cur.execute(f"GRANT SELECT ON *.* TO '{user}'@'%'")
    try:
        _assert_one_line_error(
            _run_ingest(variant("noprivs", **{"mysql.user": user, "mysql.password_file": str(secret)})),
            "REPLICATION SLAVE",
        )
    finally:
        with mysql_root.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'%'")

    # binlog settings (dynamic ones: changed for a moment, then restored)
    for variable, bad, needle in (
        ("binlog_format", "STATEMENT", "binlog_format is STATEMENT"),
        ("binlog_row_image", "MINIMAL", "binlog_row_image is MINIMAL"),
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata is MINIMAL"),
    ):
        with mysql_root.cursor() as cur:
            cur.execute(f"SELECT @@GLOBAL.{variable}")
            original = cur.fetchone()[0]
            cur.execute(f"SET GLOBAL {variable} = '{bad}'")
        try:
            _assert_one_line_error(_run_ingest(base), needle)
        finally:
            with mysql_root.cursor() as cur:
                cur.execute(f"SET GLOBAL {variable} = '{original}'")


@pytest.mark.integration
def test_binlog_off_is_reported(tmp_path):
    """A second, private MariaDB without --log-bin."""
    import time

    import pymysql

    datadir = tmp_path / "nobinlog"
    subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={datadir}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    sock = str(tmp_path / "nb.sock")
    proc = subprocess.Popen(
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={datadir}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={sock}",
            "--user=root",
            f"--log-error={tmp_path / 'nb.err'}",
            "--skip-log-bin",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = pymysql.connect(ssl_disabled=True, unix_socket=sock, user="root", autocommit=True)
                break
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        with conn.cursor() as cur:
            cur.execute("CREATE USER 'u'@'%' IDENTIFIED BY 'pw'")
            cur.execute("GRANT ALL ON *.* TO 'u'@'%'")
        conn.close()
        secret = tmp_path / "pw"
        secret.write_text("pw")
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            yaml.safe_dump({"mysql": {"host": "127.0.0.1", "port": port, "user": "u", "password_file": str(secret)}})
        )
        _assert_one_line_error(_run_ingest(cfg), "log_bin is OFF")
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.integration
def test_metrics_endpoint_reports_events(stack, mysql_root, tmp_path, unique_name):
    from tests.ingest_harness import IngestProcess, wait_caught_up

    db = f"met_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    port = _free_port()
    cfg = write_config(stack, tmp_path / "i.yaml", unique_name, [db], metrics_port=port)
    proc = IngestProcess(cfg, tmp_path / "i.log").start()
    try:
        wait_caught_up(stack, unique_name, proc=proc)
        with mysql_root.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.t VALUES (1), (2), (3)")
            cur.execute(f"DELETE FROM {db}.t WHERE id = 1")
        wait_caught_up(stack, unique_name, proc=proc)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert f'cdc_ingest_events_total{{op="c",table="{db}.t"}} 3.0' in text
        assert f'cdc_ingest_events_total{{op="d",table="{db}.t"}} 1.0' in text
        assert "cdc_ingest_MilliSecondsBehindSource" in text
        assert "cdc_ingest_kafka_transactions_total" in text
        assert stack.mariadb.password not in text
    finally:
        proc.stop()
