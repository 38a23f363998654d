"""Security: secrets never leak, TLS/SASL settings reach every client, the merger checks
its source privileges at start, and ingest says what to do when the binlog is gone.

The integration tests run ingest and the merger as real processes with least-privileged
users (the GRANTs of docs/security.md) and distinctive passwords, then look for those
passwords everywhere a user or a log collector could see them.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pymysql
import pytest
import yaml

from cdc import stack as local_stack
from cdc.config import ConfigError, IngestConfig, KafkaConfig, MergerConfig, MySQLConfig, load_model
from tests.conftest import IS_CI
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import MergerProcess, write_merger_config

ROOT = Path(__file__).resolve().parents[1]
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

TLS_SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "cdc-user",
    "ssl.ca.location": "/etc/kafka/ca.pem",
    "ssl.certificate.location": "/etc/kafka/client.pem",
    "ssl.key.location": "/etc/kafka/client.key",
    "ssl.endpoint.identification.algorithm": "https",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _secret(path: Path, value: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _error_line(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), res.stderr[-3000:]
    return lines[-1]


# ------------------------------------------------------------------ pass-through (unit)


@pytest.fixture
def kafka_tls(tmp_path, monkeypatch) -> KafkaConfig:
    monkeypatch.setenv("CDC_TEST_SASL", "sasl-secret-1")
    return KafkaConfig(
        bootstrap_servers="broker:9093",
        extra=dict(TLS_SASL),
        sasl_password_env="CDC_TEST_SASL",
        ssl_key_password_file=_secret(tmp_path / "keypw", "key-secret-2"),
    )


def _expected(conf: dict) -> None:
    for k, v in TLS_SASL.items():
        assert conf.get(k) == v, (k, conf.get(k))
    assert conf["sasl.password"] == "sasl-secret-1" and conf["ssl.key.password"] == "key-secret-2"
    assert conf["bootstrap.servers"] == "broker:9093"


def test_kafka_settings_reach_every_client(kafka_tls, monkeypatch, tmp_path):
    import confluent_kafka
    import confluent_kafka.admin

    built: list[tuple[str, dict]] = []

    class Fake:
        def __init__(self, conf):
            built.append((type(self).__name__, dict(conf)))

        def init_transactions(self, *a):
            pass

        def list_topics(self, *a, **k):
            raise confluent_kafka.KafkaException(confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT))

        def get_watermark_offsets(self, *a, **k):
            return 0, 0

        def close(self):
            pass

    class FakeProducer(Fake):
        pass

    class FakeConsumer(Fake):
        pass

    class FakeAdmin(Fake):
        pass

    import ingest.producer as ip
    import merger.app as ma
    from merger.kafka import SourceOptions
    from merger.sinks.kafka_changelog import KafkaChangelogSink

    monkeypatch.setattr(ip, "Producer", FakeProducer)
    monkeypatch.setattr(ip, "AdminClient", FakeAdmin)
    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)

    # ingest: admin (topics), the transactional producer, the offsets reader
    icfg = IngestConfig(kafka=kafka_tls)
    ip.Topics(icfg.kafka.client_config())
    ip.TransactionalProducer(icfg.kafka.client_config(), "t")
    ip.read_resume_point(icfg.kafka.client_config(), "p.offsets", b"k", timeout_s=0.1)
    # merger: the dead-letter producer and the changelog sink
    mcfg = MergerConfig(kafka=kafka_tls, sinks={"kafka_changelog": {"topic_prefix": "merged"}})
    ma.Merger(mcfg)._dead_letter_writer(mcfg.kafka.client_config())
    assert {name for name, _ in built} == {"FakeAdmin", "FakeProducer", "FakeConsumer"}
    for name, conf in built:
        _expected(conf)
    (sink,) = ma.build_sinks(mcfg)
    assert isinstance(sink, KafkaChangelogSink)
    _expected(sink.client)

    # the Spark data source: every setting, the secrets by reference only
    opts = ma.source_options(mcfg)
    assert "sasl-secret-1" not in json.dumps(opts) and "key-secret-2" not in json.dumps(opts)
    assert opts["kafkaSecretEnv.sasl.password"] == "CDC_TEST_SASL"
    conf = SourceOptions.parse(opts).kafka_conf  # what driver and workers build their clients from
    _expected(conf)
    assert "sasl-secret-1" not in repr(SourceOptions.parse(opts))


def test_mysql_tls_reaches_pymysql_binlog_reader_and_jdbc(tmp_path, monkeypatch):
    key_pw = _secret(tmp_path / "mysql-key-pw", "mysql-key-secret")
    m = MySQLConfig(
        host="db",
        port=3307,
        user="u",
        ssl_mode="verify_identity",
        ssl_ca=CA_BUNDLE,
        ssl_cert="/tls/client.pem",
        ssl_key="/tls/client.key",
        ssl_key_password_file=key_pw,
        ssl_keystore="/tls/client.p12",
        ssl_keystore_password_file=key_pw,
    )
    kw = m.connect_kwargs()
    assert kw["ssl"] == {
        "ca": CA_BUNDLE,
        "cert": "/tls/client.pem",
        "key": "/tls/client.key",
        "password": "mysql-key-secret",
        "verify_mode": True,
        "check_hostname": True,
    }

    # every pymysql connection of ingest and the merger is built from connect_kwargs
    seen = []

    def fake_connect(**kwargs):
        seen.append(kwargs)
        raise pymysql.err.OperationalError(2003, "no server here")

    monkeypatch.setattr(pymysql, "connect", fake_connect)
    from ingest.checks import SourceError
    from ingest.checks import connect as ingest_connect
    from merger.catalog import SourceCatalog
    from merger.checks import check_source
    from merger.errors import MergerError
    from merger.source import connect as merger_connect

    with pytest.raises(SourceError):
        ingest_connect(IngestConfig(mysql=m))
    for call in (
        lambda: merger_connect(m),
        lambda: SourceCatalog(m).connect(),
        lambda: check_source(MergerConfig(mysql=m), lambda name: True),
    ):
        with pytest.raises(MergerError):
            call()
    assert len(seen) == 4 and all(s["ssl"] == kw["ssl"] for s in seen)

    # the binlog reader's connections (stream and control) get the same TLS settings
    from ingest.binlog import open_reader

    reader = open_reader(kw, 1234, "0-1-1", blocking=False)
    settings = reader._BinLogStreamReader__connection_settings
    assert settings["ssl"] == kw["ssl"] and settings["passwd"] == kw["password"]

    # pymysql turns them into a verifying TLS context (no connection made)
    conn = pymysql.connections.Connection(
        defer_connect=True,
        host="db",
        user="u",
        ssl={k: v for k, v in kw["ssl"].items() if k in ("ca", "verify_mode", "check_hostname")},
    )
    assert conn.ctx.verify_mode == ssl.CERT_REQUIRED and conn.ctx.check_hostname

    # Spark JDBC: TLS in the URL, the secrets only in the (redacted) properties
    from merger.snapshot import SnapshotRunner

    runner = SnapshotRunner.__new__(SnapshotRunner)
    runner.config = MergerConfig(mysql=m)
    url = runner.jdbc_url()
    assert f"useSsl=true&serverSslCert={CA_BUNDLE}" in url and "keyStore=/tls/client.p12" in url
    assert "disableSslHostnameVerification" not in url and "mysql-key-secret" not in url
    props = m.jdbc_secret_properties()
    assert props["keyStorePassword"] == "mysql-key-secret" and props["user"] == "u"

    # the modes
    assert MySQLConfig(ssl_mode="disabled").connect_kwargs()["ssl_disabled"] is True
    assert MySQLConfig(ssl_mode="disabled").jdbc_ssl_params() == ""
    assert MySQLConfig(ssl_mode="required").ssl() == {"verify_mode": False, "check_hostname": False}
    assert "trustServerCertificate=true" in MySQLConfig(ssl_mode="required").jdbc_ssl_params()
    assert MySQLConfig(ssl_ca="/ca.pem").effective_ssl_mode() == "verify_ca"
    assert "disableSslHostnameVerification=true" in MySQLConfig(ssl_ca="/ca.pem").jdbc_ssl_params()


def test_secrets_are_refused_in_the_config_file(tmp_path):
    for key, allowed in (
        ("sasl.password", "kafka.sasl_password_env or kafka.sasl_password_file"),
        ("ssl.key.password", "kafka.ssl_key_password_env"),
        ("ssl.keystore.password", "kafka.ssl_keystore_password_env"),
    ):
        with pytest.raises(ConfigError) as err:
            load_model(MergerConfig, None, {"kafka.extra": {key: "in-the-file-secret"}})
        text = str(err.value)
        assert "kafka.extra" in text and key in text and allowed in text and "in-the-file-secret" not in text
        assert "\n" not in text
    # through the CLI: one line, exit code 2
    cfg = tmp_path / "m.yaml"
    cfg.write_text(yaml.safe_dump({"kafka": {"extra": {"sasl.password": "in-the-file-secret"}}}))
    line = _error_line(_cli("merge", "-c", str(cfg)))
    assert "sasl_password_env" in line and "in-the-file-secret" not in line


# ------------------------------------------------------------------ the merger's start-up checks


def _mysql_user(root, user: str, password: str, *grants: str) -> None:
    with root.cursor() as cur:
        cur.execute(f"CREATE OR REPLACE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
        for g in grants:
            cur.execute(g.format(user=f"'{user}'@'%'"))


def _watermark_table(root) -> None:
    from merger.snapshot import watermark_ddl

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
        from merger.verify.sinks import DeltaReader, PostgresReader
        from merger.verify.source import SourceReader
        from merger.verify.table import compare_table

        with mysql_root.cursor() as cur:
            cur.execute(f"UPDATE {db}.t SET v = 'changed' WHERE id % 10 = 0")
            cur.execute(f"DELETE FROM {db}.t WHERE id % 25 = 0")

        def equal() -> bool:
            source = SourceReader(
                lambda: pymysql.connect(
                    host=stack.mariadb.host, port=stack.mariadb.port, user="root", password=stack.mariadb.root_password
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
