"""The test stack in Docker containers (testcontainers), selected with ``pytest --backend
containers`` or ``CDC_TEST_BACKEND=containers``: MySQL 8.4 (binlog settings as in
docker-compose.yml), Apache Kafka in KRaft mode and PostgreSQL. ``start`` returns the same
``StackInfo`` as the local stack (cdc/stack.py) and writes it to ``<state_dir>/stack.json``,
so fixtures, harnesses and ``cdc ... --local`` work unchanged; secrets go through
``cdc.stack.secret_file`` as usual.

Images can be changed with CDC_TEST_MYSQL_IMAGE (a ``mariadb:<version>`` image works too:
today's ingest reads MariaDB sources only), CDC_TEST_KAFKA_IMAGE, CDC_TEST_POSTGRES_IMAGE.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from cdc import stack as local_stack

MYSQL_IMAGE = os.environ.get("CDC_TEST_MYSQL_IMAGE", "mysql:8.4.5")
KAFKA_IMAGE = os.environ.get("CDC_TEST_KAFKA_IMAGE", "apache/kafka:4.1.1")
POSTGRES_IMAGE = os.environ.get("CDC_TEST_POSTGRES_IMAGE", "postgres:16.9")
STARTUP_TIMEOUT_S = 180

MYSQL_FLAGS = [
    "--server-id=1",
    "--log-bin=mysql-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--gtid-mode=ON",
    "--enforce-gtid-consistency=ON",
    "--mysql-native-password=ON",
    "--character-set-server=utf8mb4",
]
MARIADB_FLAGS = [
    "--server-id=1",
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--gtid-strict-mode=1",
    "--log-slave-updates=1",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
]


def docker_problem() -> str | None:
    """Why no Docker engine can be used (one line), or None if one answers."""
    try:
        import docker
        import testcontainers  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]')"
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # the Docker SDK wraps every connection failure differently
        text = " ".join(str(exc).split())
        return f"{text[:200]} (start Docker or set DOCKER_HOST, or run without --backend containers)"
    return None


def _module(name: str):
    """testcontainers.community.<name> (4.14+), else the older testcontainers.<name>."""
    import importlib

    try:
        return importlib.import_module(f"testcontainers.community.{name}")
    except ImportError:
        return importlib.import_module(f"testcontainers.{name}")


def _host(container) -> str:
    host = container.get_container_host_ip()
    return "127.0.0.1" if host == "localhost" else host


class ContainerStack:
    """Starts the three containers; ``stop`` removes them (and the stack.json it wrote)."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.containers: list = []

    def start(self) -> local_stack.StackInfo:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        info = local_stack.StackInfo(state_dir=str(self.state_dir.resolve()))
        try:
            self._mysql(info)
            self._kafka(info)
            self._postgres(info)
        except BaseException:
            self.stop()
            raise
        info.save()
        return info

    def stop(self) -> None:
        for container in reversed(self.containers):
            try:
                container.stop()
            except Exception:  # already gone: nothing left to clean
                pass
        self.containers = []
        (self.state_dir / "stack.json").unlink(missing_ok=True)

    # ------------------------------------------------------------------ MySQL / MariaDB

    def _mysql(self, info: local_stack.StackInfo) -> None:
        from testcontainers.core.container import ExecConfig

        MySqlContainer = _module("mysql").MySqlContainer

        mariadb = "mariadb" in MYSQL_IMAGE.split(":")[0]
        m = info.mariadb
        m.user, m.password, m.root_password = "cdc", secrets.token_hex(12), secrets.token_hex(12)
        container = MySqlContainer(
            MYSQL_IMAGE, username=m.user, password=m.password, root_password=m.root_password, dbname="cdc"
        )
        container.with_command(MARIADB_FLAGS if mariadb else MYSQL_FLAGS)
        self.containers.append(container)
        container.start()
        # like the local stack: the test user may do anything; native passwords so that
        # pymysql needs no `cryptography` for MySQL 8.4's caching_sha2_password
        sql = f"GRANT ALL ON *.* TO '{m.user}'@'%';"
        if not mariadb:
            sql = (
                f"ALTER USER 'root'@'%' IDENTIFIED WITH mysql_native_password BY '{m.root_password}';"
                f"ALTER USER '{m.user}'@'%' IDENTIFIED WITH mysql_native_password BY '{m.password}';" + sql
            )
        result = container.exec(
            ExecConfig(
                command=["sh", "-c", 'exec "$(command -v mariadb || command -v mysql)" -uroot -e "$CDC_SQL"'],
                environment={"MYSQL_PWD": m.root_password, "CDC_SQL": sql},
            )
        )
        if result.exit_code:
            raise local_stack.StackError(
                f"setting up users in {MYSQL_IMAGE} failed: {result.output.decode(errors='replace').strip()[-300:]}"
            )
        m.host, m.port = _host(container), int(container.get_exposed_port(3306))
        import pymysql

        conn = pymysql.connect(host=m.host, port=m.port, user=m.user, password=m.password)
        with conn.cursor() as cur:
            cur.execute("SELECT @@version")
            m.version = cur.fetchone()[0]
        conn.close()

    # ------------------------------------------------------------------ Apache Kafka (KRaft)

    def _kafka(self, info: local_stack.StackInfo) -> None:
        from confluent_kafka.admin import AdminClient
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy

        # the broker must advertise the address clients use, so its port is fixed up front
        port = local_stack.free_port()
        container = DockerContainer(KAFKA_IMAGE).with_bind_ports(port, port)
        host = container.get_docker_client().host()
        host = "127.0.0.1" if host == "localhost" else host
        container.with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS=f"PLAINTEXT://:{port},CONTROLLER://:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://{host}:{port}",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            KAFKA_INTER_BROKER_LISTENER_NAME="PLAINTEXT",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
        )
        container.waiting_for(
            LogMessageWaitStrategy(re.compile(r"Kafka Server started")).with_startup_timeout(STARTUP_TIMEOUT_S)
        )
        self.containers.append(container)
        container.start()
        k = info.kafka
        k.port, k.bootstrap, k.binary = port, f"{host}:{port}", KAFKA_IMAGE
        deadline = time.monotonic() + 60
        while True:  # the log line comes a moment before the listener answers metadata requests
            try:
                AdminClient({"bootstrap.servers": k.bootstrap}).list_topics(timeout=5)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise local_stack.StackError(f"Kafka in {KAFKA_IMAGE} did not answer at {k.bootstrap}")
                time.sleep(0.5)

    # ------------------------------------------------------------------ PostgreSQL

    def _postgres(self, info: local_stack.StackInfo) -> None:
        PostgresContainer = _module("postgres").PostgresContainer

        p = info.postgres
        p.user, p.password, p.database = "cdc", secrets.token_hex(12), "cdc"
        container = PostgresContainer(
            POSTGRES_IMAGE, username=p.user, password=p.password, dbname=p.database, driver=None
        )
        self.containers.append(container)
        container.start()
        p.host, p.port = _host(container), int(container.get_exposed_port(5432))
