"""Security: secrets never leak, TLS/SASL settings reach every client, the merger checks
its source privileges at start, and ingest says what to do when the binlog is gone.

The integration tests run ingest and the merger as real processes with least-privileged
users (the GRANTs of docs/security.md) and distinctive passwords, then look for those
passwords everywhere a user or a log collector could see them.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest
import yaml

from cdc.config import ConfigError, IngestConfig, KafkaConfig, MergerConfig, MySQLConfig, load_model

ROOT = Path(__file__).resolve().parents[2]

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
    from cdc.offsets_topic import read_offsets
    from merger.kafka.options import SourceOptions
    from merger.sinks.kafka_changelog import KafkaChangelogSink
    from merger.sinks.registry import build_sinks

    monkeypatch.setattr(ip, "Producer", FakeProducer)
    monkeypatch.setattr(ip, "AdminClient", FakeAdmin)
    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)

    # ingest: admin (topics), the transactional producer, the offsets reader
    icfg = IngestConfig(kafka=kafka_tls)
    ip.Topics(icfg.kafka.client_config())
    ip.TransactionalProducer(icfg.kafka.client_config(), "t")
    read_offsets(icfg.kafka.client_config(), "p.offsets", b"k", timeout_s=0.1)
    # merger: the dead-letter producer and the changelog sink
    mcfg = MergerConfig(kafka=kafka_tls, sinks={"kafka_changelog": {"topic_prefix": "merged"}})
    ma.Merger(mcfg)._dead_letter_writer(mcfg.kafka.client_config())
    assert {name for name, _ in built} == {"FakeAdmin", "FakeProducer", "FakeConsumer"}
    for name, conf in built:
        _expected(conf)
    (sink,) = build_sinks(mcfg)
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
    from merger.errors import MergerError
    from merger.mysql.checks import check_source
    from merger.mysql.source import connect as merger_connect
    from merger.schema.catalog import SourceCatalog

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
    from merger.snapshot.runner import SnapshotRunner

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


# ------------------------------------------------------------------ a Spark cluster's secret


def test_the_spark_cluster_secret_turns_authentication_and_encryption_on(tmp_path, monkeypatch):
    from merger.spark.session import spark_auth_conf

    assert spark_auth_conf(MergerConfig()) == {}  # local mode, or a cluster that does not authenticate
    path = tmp_path / "spark_secret"
    path.write_text("s3cr3t-of-the-cluster\n")
    by_file = MergerConfig(spark_master="spark://m:7077", spark_auth_secret_file=str(path))
    assert by_file.spark_auth_secret().get_secret_value() == "s3cr3t-of-the-cluster"
    assert spark_auth_conf(by_file) == {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    assert "s3cr3t" not in repr(by_file) and "s3cr3t" not in json.dumps(spark_auth_conf(by_file))
    monkeypatch.setenv("CDC_TEST_SPARK_SECRET", "from-the-env")
    by_env = MergerConfig(spark_auth_secret_env="CDC_TEST_SPARK_SECRET")
    assert by_env.spark_auth_secret().get_secret_value() == "from-the-env"
    assert spark_auth_conf(by_env)["spark.authenticate"] == "true"
    # the secret itself is never read from the config file
    with pytest.raises(ConfigError) as err:
        load_model(MergerConfig, None, {"spark_conf": {"spark.authenticate.secret": "in-the-file-secret"}})
    text = str(err.value)
    assert "spark_auth_secret_file" in text and "in-the-file-secret" not in text and "\n" not in text
    # a secret that cannot be read is a one-line error
    with pytest.raises(ConfigError, match="spark_auth_secret: cannot read secret file"):
        MergerConfig(spark_auth_secret_file=str(tmp_path / "missing")).spark_auth_secret()


def test_the_stack_writes_secret_files_owner_only_from_their_creation(tmp_path, monkeypatch):
    """The PostgreSQL password file initdb reads (``pgpass.tmp``), and the Spark cluster's
    secret and properties: 0600 under a permissive umask, as initdb (or Spark) finds them."""
    import os
    import stat

    from cdc import stack as local_stack
    from cdc import stack_spark

    old = os.umask(0o022)
    try:
        seen = {}

        def fake_run(cmd, **kwargs):
            pwfile = Path(cmd[cmd.index("--pwfile") + 1])
            seen["mode"] = stat.S_IMODE(pwfile.stat().st_mode)
            seen["text"] = pwfile.read_text()
            return subprocess.CompletedProcess(cmd, 1, "", "stopped here by the test")

        monkeypatch.setattr(local_stack, "_need", lambda binary, package: binary)
        monkeypatch.setattr(local_stack, "_pg_os_user", lambda: None)
        monkeypatch.setattr(local_stack.subprocess, "run", fake_run)
        (tmp_path / "st").mkdir()
        info = local_stack.StackInfo(state_dir=str(tmp_path / "st"))
        info.postgres.datadir = str(tmp_path / "st" / "postgres")  # not /var/tmp (as root)
        with pytest.raises(local_stack.StackError, match="initdb failed"):
            local_stack.start_postgres(info)
        assert seen == {"mode": 0o600, "text": info.postgres.password}
        assert not list(tmp_path.rglob("pgpass.tmp"))  # removed after initdb

        state = tmp_path / "cluster"
        (state / "spark").mkdir(parents=True)
        properties = stack_spark._auth_properties(state)
        secret = stack_spark.auth_secret_file(state)
        for path in (properties, secret):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        lines = properties.read_text().splitlines()
        assert "spark.authenticate true" in lines and "spark.network.crypto.enabled true" in lines
        assert f"spark.authenticate.secret {secret.read_text().strip()}" in lines
        assert len(secret.read_text().strip()) >= 32
        assert stack_spark._auth_properties(state).read_text() == properties.read_text()  # kept
    finally:
        os.umask(old)
