"""`cdc demo`: the whole path on the embedded local stack.

Starts the stack and ingest, runs a small mixed workload (inserts, updates, a primary-key
change, deletes, a DDL, a truncate) on a demo database, and shows the change events as
they arrive on Kafka.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pymysql
from confluent_kafka import Consumer, TopicPartition
from rich.console import Console

from cdc import stack as local_stack
from cdc.config import IngestConfig, load_model
from cdc.tail import format_record

DEMO_DB = "demo_shop"


def _root(info: local_stack.StackInfo):
    return pymysql.connect(host=info.mariadb.host, port=info.mariadb.port, user="root",
                           password=info.mariadb.root_password, autocommit=True)


def _workload(info: local_stack.StackInfo, rows: int, console: Console) -> int:
    rnd = random.Random(7)
    conn = _root(info)
    statements = 0
    with conn.cursor() as cur:
        cur.execute(f"USE {DEMO_DB}")
        for i in range(1, rows + 1):
            cur.execute("INSERT INTO customers (id, name, email, balance) VALUES (%s,%s,%s,%s)",
                        (i, f"customer {i}", f"c{i}@example.com", round(rnd.uniform(0, 1000), 2)))
            statements += 1
        cur.execute("BEGIN")
        for i in range(1, rows + 1, 3):
            cur.execute("UPDATE customers SET balance = balance + 10 WHERE id = %s", (i,))
            statements += 1
        cur.execute("COMMIT")
        cur.execute("UPDATE customers SET id = %s WHERE id = 1", (rows + 1000,))  # PK change
        cur.execute("DELETE FROM customers WHERE id BETWEEN 2 AND 5")
        cur.execute("ALTER TABLE customers ADD COLUMN tier VARCHAR(10) DEFAULT 'basic'")
        cur.execute("UPDATE customers SET tier = 'gold' WHERE balance > 900")
        cur.execute("INSERT INTO orders (customer_id, amount) SELECT id, balance / 10 FROM customers LIMIT 20")
        cur.execute("TRUNCATE TABLE orders")
        statements += 6
    conn.close()
    return statements


def run_demo(state_dir: Path, rows: int, console: Console) -> None:
    from ingest.app import Ingest

    console.rule("[bold]1. local stack")
    info = local_stack.up(state_dir)
    console.print(f"MariaDB {info.mariadb.version} on {info.mariadb.port}, broker on "
                  f"{info.kafka.bootstrap}, PostgreSQL on {info.postgres.port}")

    conn = _root(info)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DEMO_DB}")
        cur.execute(f"CREATE DATABASE {DEMO_DB}")
        cur.execute(f"CREATE TABLE {DEMO_DB}.customers (id INT PRIMARY KEY, name VARCHAR(100), "
                    "email VARCHAR(200), balance DECIMAL(10,2), updated TIMESTAMP(3) "
                    "DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3))")
        cur.execute(f"CREATE TABLE {DEMO_DB}.orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                    "customer_id INT, amount DECIMAL(12,2))")
    conn.close()

    console.rule("[bold]2. ingest")
    prefix = f"demo{int(time.time())}"
    config = load_model(IngestConfig, None, {
        "topic_prefix": prefix, "server_id": 5402,
        "mysql.host": info.mariadb.host, "mysql.port": info.mariadb.port,
        "mysql.user": info.mariadb.user,
        "mysql.password_file": str(local_stack.secret_file(info, "mysql_password")),
        "kafka.bootstrap_servers": info.kafka.bootstrap,
        "database_include": [DEMO_DB], "heartbeat_interval_ms": 2000,
    })
    ingest = Ingest(config)
    stop = threading.Event()
    failure: list[BaseException] = []

    def _run():
        try:
            ingest.run(stop)
        except BaseException as exc:  # shown below
            failure.append(exc)

    thread = threading.Thread(target=_run, name="ingest", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while ingest.committed is None and time.monotonic() < deadline and not failure:
        time.sleep(0.2)
    if failure:
        raise failure[0]
    console.print(f"ingest streaming from GTID {ingest.committed.gtid_state}, topic prefix {prefix}")

    console.rule("[bold]3. workload")
    statements = _workload(info, rows, console)
    console.print(f"ran {statements} statements on {DEMO_DB}")

    console.rule("[bold]4. change events")
    topics = [f"{prefix}.{DEMO_DB}.customers", f"{prefix}.{DEMO_DB}.orders", prefix]
    counts = _show_events(info.kafka.bootstrap, topics, console, expect_min=rows)
    stop.set()
    thread.join(timeout=30)
    if failure:
        raise failure[0]
    console.rule("[bold]done")
    for topic, n in counts.items():
        console.print(f"{topic}: {n} records")
    console.print(f"ingest: {ingest.stats}")


def _show_events(bootstrap: str, topics: list[str], console: Console, expect_min: int,
                 timeout_s: float = 60.0) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-demo",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    counts = {t: 0 for t in topics}
    assigned: set[str] = set()
    shown = 0
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            missing = [t for t in topics if t not in assigned]
            if missing:
                md = consumer.list_topics(timeout=5).topics
                new = [TopicPartition(t, p, 0) for t in missing if t in md and md[t].error is None
                       for p in md[t].partitions]
                if new:
                    assigned |= {tp.topic for tp in new}
                    consumer.incremental_assign(new)
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                if sum(counts.values()) >= expect_min and time.monotonic() - quiet_since > 3:
                    break
                continue
            quiet_since = time.monotonic()
            counts[msg.topic()] += 1
            shown += 1
            if shown <= 25 or shown % 100 == 0 or msg.topic() == topics[-1]:
                console.print(f"[dim]{msg.topic()}[/dim] " + format_record(msg), highlight=False,
                              soft_wrap=True)
    finally:
        consumer.close()
    return counts
