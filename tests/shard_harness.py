"""What the sharded-source tests share: shard servers (`cdc stack up --shards` as a test
fixture), plain SQL on a shard, the configs of a sharded ingest and merger, the oracle (a
plain SELECT of every physical table of every shard against each sink read by its own
reader), writers, and the position records of `<prefix>.offsets`."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pymysql
import yaml
from confluent_kafka import Consumer, KafkaException, TopicPartition

from cdc import stack as local_stack
from cdc import stack_shards
from cdc.wire.topics import offsets_topic
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sinks.postgres import PostgresReader
from tests.ingest_harness import set_dotted
from tests.merger_harness import write_merger_config

TABLES = ("orders_0", "orders_1")  # the physical tables of every shard, routed into <db>.orders
COLUMNS = ["id", "v", "__cdc_origin"]


def running_shards(tmp_path_factory, count: int, replicas: bool = False):
    """For a fixture: ``count`` shard servers under a fresh directory (yielded), stopped after."""
    state = tmp_path_factory.mktemp("shards")
    try:
        stack_shards.up(state, count, replicas=replicas)
        yield state
    finally:
        stack_shards.down(state)


def servers(state: Path) -> dict[str, local_stack.StackInfo]:
    """The shards' primaries, by name."""
    return {s.name: local_stack.StackInfo.load(Path(s.primary)) for s in stack_shards.load(state)}


def sql(info: local_stack.StackInfo, *statements: str, fetch: bool = False):
    conn = pymysql.connect(
        ssl_disabled=True,
        host="127.0.0.1",
        port=info.mariadb.port,
        user="root",
        password=info.mariadb.root_password,
        autocommit=True,
    )
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return cur.fetchall() if fetch else None
    finally:
        conn.close()


def shard_list(shards: dict, user: str = "root") -> list[dict]:
    """The config's ``shards``: each server as root (the merger's, and the tests' ingest) or
    as the stack's capture user (``user="cdc"``)."""
    out = []
    for name, info in shards.items():
        secret = "mysql_root_password" if user == "root" else "mysql_password"
        mysql = {
            "host": "127.0.0.1",
            "port": info.mariadb.port,
            "user": user if user == "root" else info.mariadb.user,
            "password_file": str(local_stack.secret_file(info, secret)),
        }
        out.append({"name": name, "mysql": mysql})
    return out


def ingest_config(path: Path, stack, shards: dict, prefix: str, db: str, user: str = "cdc", **extra) -> Path:
    """A sharded ingest's config, reading the shards as the stack's capture user."""
    cfg = {
        "topic_prefix": prefix,
        "server_id": 7000 + (abs(hash(prefix)) % 20000),
        "kafka": {"bootstrap_servers": stack.kafka.bootstrap},
        "database_include": [db, "cdc"],
        "heartbeat_interval_ms": 1000,
        "retry_max_s": 4,  # the tests' outages are short: reconnect within seconds of the end
        "shards": shard_list(shards, user),
        "routes": [{"match": rf"{db}\.orders_\d+", "to": f"{db}.orders"}],
    }
    set_dotted(cfg, extra)  # {"kafka.request_timeout_s": 6}: cfg["kafka"]["request_timeout_s"]
    path.write_text(yaml.safe_dump(cfg))
    return path


def write_configs(
    tmp_path: Path, stack, shards: dict, prefix: str, db: str, changelog: str | None = None, **ingest_extra
) -> tuple[Path, Path]:
    """The ingest and merger configs of a sharded source whose ``orders_<n>`` tables are
    routed into ``<db>.orders`` (``changelog``: also into the Kafka changelog sink, with
    that topic prefix)."""
    ingest = ingest_config(tmp_path / "ingest.yaml", stack, shards, prefix, db, **ingest_extra)
    sinks = {"sinks.kafka_changelog.topic_prefix": changelog} if changelog else {}
    merger = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        prefix,
        [db],
        tmp_path,
        shards=shard_list(shards),
        routes=[{"match": rf"{db}\.orders_\d+", "to": f"{db}.orders"}],
        **{"snapshot.chunk_size": 100, "snapshot.chunks_per_window": 2, **sinks},
    )
    return ingest, merger


def fill(info, db: str, rows: int) -> None:
    """The database with both physical tables (AUTO_INCREMENT keys: equal on every shard)."""
    sql(info, f"CREATE DATABASE IF NOT EXISTS {db}")
    for table in TABLES:
        sql(info, f"CREATE TABLE {db}.{table} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))")
        if rows:
            values = ", ".join(f"('{table}-{i}')" for i in range(rows))
            sql(info, f"INSERT INTO {db}.{table} (v) VALUES {values}")


def source_rows(shards: dict, db: str) -> set[tuple]:
    """(id, v, origin) of every row of every physical table of every shard."""
    out = set()
    for name, info in shards.items():
        for table in TABLES:
            for id_, v in sql(info, f"SELECT id, v FROM {db}.{table}", fetch=True):
                out.add((id_, v, f"{name}/{db}.{table}"))
    return out


def sink_readers(stack, work: Path) -> dict:
    pg = stack.postgres
    return {
        "delta": DeltaReader(str(work / "delta")),
        "postgres": PostgresReader(
            {"host": pg.host, "port": pg.port, "user": pg.user, "dbname": pg.database, "password": pg.password}
        ),
    }


def sink_rows(stack, work: Path, db: str) -> dict[str, set[tuple] | str]:
    """Per sink, (id, v, origin) of every row of ``<db>.orders`` (or why it cannot be read)."""
    out = {}
    for name, reader in sink_readers(stack, work).items():
        try:
            cols = reader.columns(db, "orders")
            out[name] = "no table" if cols is None else set(reader.rows(db, "orders", COLUMNS, cols))
        except Exception as exc:  # noqa: BLE001 - shown in the failure
            out[name] = f"{type(exc).__name__}: {exc}"
        finally:
            reader.close()
    return out


def wait_equal(
    stack, shards, work: Path, db: str, procs, timeout_s: float = 300, source=source_rows, sinks=sink_rows
) -> set[tuple]:
    """Until every sink holds what the shards hold (``source``/``sinks``: the readers of
    both sides); the rows."""
    deadline = time.monotonic() + timeout_s
    found, expected = None, set()
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.alive(), proc.log_text()[-4000:]
        expected = source(shards, db)
        found = sinks(stack, work, db)
        if all(rows == expected for rows in found.values()):
            return expected
        time.sleep(1)
    summary = {
        k: (
            v
            if isinstance(v, str)
            else f"{len(v)} rows, extra {sorted(v - expected)[:5]}, missing {sorted(expected - v)[:5]}"
        )
        for k, v in found.items()
    }
    raise AssertionError(f"sinks differ from the shards: {summary}\n" + procs[-1].log_text()[-4000:])


def writer(info, db: str, stop: threading.Event, seed: int, errors: list, outages: bool = False) -> None:
    """Transactions of 1-4 statements on the physical tables until stopped; with
    ``outages`` a server that is away is waited for (what was in flight then is whatever the
    server kept: the checks read it)."""
    rnd = random.Random(seed)
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = pymysql.connect(
                    ssl_disabled=True,
                    host="127.0.0.1",
                    port=info.mariadb.port,
                    user="root",
                    password=info.mariadb.root_password,
                )
            with conn.cursor() as cur:
                table = rnd.choice(TABLES)
                for _ in range(rnd.randint(1, 4)):
                    op = rnd.random()
                    if op < 0.6:
                        cur.execute(f"INSERT INTO {db}.{table} (v) VALUES (%s)", (f"v{rnd.random():.6f}",))
                    elif op < 0.85:
                        cur.execute(
                            f"UPDATE {db}.{table} SET v = %s ORDER BY RAND() LIMIT 1", (f"u{rnd.random():.6f}",)
                        )
                    else:
                        cur.execute(f"DELETE FROM {db}.{table} ORDER BY RAND() LIMIT 1")
            conn.commit()
            time.sleep(0.01)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
            if not outages:
                errors.append(exc)
                return
            conn = None
            time.sleep(0.3)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
            return
    if conn is not None:
        conn.close()


def offsets_record(stack, prefix: str, shard: str | None = None, committed: bool = True) -> dict | None:
    """The last position record of the prefix's ingest (of the process that follows
    ``shard`` alone, if named), read to the end of ``<prefix>.offsets``. ``committed``:
    read_committed (on the local broker two producers' overlapping transactions hold that
    back: a test of several processes reads uncommitted)."""
    key = {"server": prefix} if shard is None else {"server": prefix, "shard": shard}
    raw_key = json.dumps(key, separators=(",", ":")).encode()
    conf = {"bootstrap.servers": stack.kafka.bootstrap, "group.id": "t"}
    if committed:
        conf["isolation.level"] = "read_committed"
    consumer = Consumer(conf)
    try:
        tp = TopicPartition(offsets_topic(prefix), 0, 0)
        try:
            end = consumer.get_watermark_offsets(tp, timeout=10)[1]
            # Tansu reports a partition's read_committed end as 0 while a transaction is open
            # on it (test_kafka_source's xfail): a running ingest's next commit closes it
            wait_until = time.monotonic() + 10
            while committed and end == 0 and time.monotonic() < wait_until:
                time.sleep(0.3)
                end = consumer.get_watermark_offsets(tp, timeout=10)[1]
        except KafkaException:
            return None  # not made yet
        consumer.assign([tp])
        found, at, deadline = None, 0, time.monotonic() + 20
        while at < end and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                continue
            at = msg.offset() + 1
            if msg.key() == raw_key and msg.value():
                found = json.loads(msg.value())
        return found
    finally:
        consumer.close()


class Writers:
    """A ``writer`` thread per shard, started and stopped together; ``errors`` collects
    what they met."""

    def __init__(self, shards: dict, db: str, seed: int = 0, outages: bool = False):
        self.stop = threading.Event()
        self.errors: list = []
        self.threads = [
            threading.Thread(target=writer, args=(info, db, self.stop, seed + i, self.errors, outages))
            for i, info in enumerate(shards.values())
        ]

    def start(self) -> "Writers":
        for thread in self.threads:
            thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            if thread.is_alive():
                thread.join(30)


def start_pipeline(
    tmp_path: Path, stack, shards: dict, prefix: str, db: str, changelog: str | None = None, **ingest_extra
):
    """The configs written (``write_configs``) and ingest and the merger started:
    ``(ingest_cfg, merger_cfg, ingest, merger)``."""
    from tests.ingest_harness import IngestProcess
    from tests.merger_harness import MergerProcess

    ingest_cfg, merger_cfg = write_configs(tmp_path, stack, shards, prefix, db, changelog, **ingest_extra)
    ingest = IngestProcess(ingest_cfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(merger_cfg, tmp_path / "merger.log").start()
    return ingest_cfg, merger_cfg, ingest, merger
