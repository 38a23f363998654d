"""`cdc demo`: the whole path on the embedded local stack.

1. starts the local stack and loads two tables into MariaDB;
2. starts ingest (binlog -> Kafka) and the merger (Spark -> Delta + PostgreSQL);
3. while the merger snapshots the tables in watermark windows, a live workload inserts,
   updates, deletes and changes primary keys; progress bars follow the snapshots;
4. shows some of the change events on Kafka;
5. ends by comparing every sink table with its source, row for row.

With ``--shards N`` the source is N shard servers (``cdc stack up --shards``), each with
its own copy of the tables (the same keys on every shard): one ingest follows them all,
the merger snapshots each shard, and each lake and warehouse table holds every shard's
rows, told apart by ``__cdc_origin``; `cdc verify` compares them with the shards.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cdc import stack as local_stack
from cdc import stack_shards
from cdc.errors import UserError
from cdc.wire.topics import table_topic

DEMO_DB = "demo_shop"
ROOT = Path(__file__).resolve().parents[2]


class DemoError(UserError, RuntimeError):
    """The demo could not finish (printed as one line, with the log to read)."""


def _root(info, db=None):
    return pymysql.connect(
        host=info.mariadb.host,
        port=info.mariadb.port,
        user="root",
        password=info.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _load(info, rows: int) -> None:
    conn = _root(info)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DEMO_DB}")
        cur.execute(f"CREATE DATABASE {DEMO_DB}")
        cur.execute(f"USE {DEMO_DB}")
        cur.execute(
            "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(100), email VARCHAR(200), "
            "balance DECIMAL(10,2), tier ENUM('basic','gold') DEFAULT 'basic', "
            "updated TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3))"
        )
        cur.execute(
            f"INSERT INTO customers (id, name, email, balance) SELECT seq, CONCAT('customer ', seq), "
            f"CONCAT('c', seq, '@example.com'), (seq * 37) % 100000 / 100 FROM seq_1_to_{rows // 4}"
        )
        cur.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id INT, amount DECIMAL(12,2), "
            "placed DATETIME(3), note TEXT)"
        )
        cur.execute(
            f"INSERT INTO orders SELECT seq, 1 + seq % {rows // 4}, (seq * 13) % 10000 / 10, "
            f"'2025-01-01 00:00:00' + INTERVAL seq MINUTE, NULL FROM seq_1_to_{rows}"
        )
    conn.close()


class LiveWorkload(threading.Thread):
    def __init__(self, info, rows: int):
        super().__init__(daemon=True, name="workload")
        self.info, self.rows = info, rows
        self.stop = threading.Event()
        self.statements = 0
        self.error = None

    def run(self) -> None:
        rnd = random.Random(42)
        try:
            conn = _root(self.info, DEMO_DB)
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    k = rnd.randint(1, self.rows)
                    r = rnd.random()
                    if r < 0.35:
                        cur.execute("UPDATE orders SET amount = amount + 1, note = 'updated' WHERE id = %s", (k,))
                    elif r < 0.55:
                        cur.execute("INSERT IGNORE INTO orders VALUES (%s, 1, 9.99, NOW(3), 'new')", (self.rows + k,))
                    elif r < 0.65:
                        cur.execute("DELETE FROM orders WHERE id = %s", (k,))
                    elif r < 0.72:
                        try:  # a primary-key change
                            cur.execute("UPDATE orders SET id = %s WHERE id = %s", (3 * self.rows + k, k))
                        except pymysql.err.IntegrityError:
                            pass
                    else:
                        cur.execute(
                            "UPDATE customers SET balance = balance + 5, tier = 'gold' WHERE id = %s",
                            (k % (self.rows // 4) + 1,),
                        )
                    self.statements += 1
                    time.sleep(0.005)
        except BaseException as exc:  # reported at the end
            self.error = exc


def _configs(info, work: Path, prefix: str) -> tuple[Path, Path]:
    mysql_pw = str(local_stack.secret_file(info, "mysql_password"))
    root_pw = str(local_stack.secret_file(info, "mysql_root_password"))
    ingest = {
        "topic_prefix": prefix,
        "server_id": 5402,
        "mysql": {
            "host": info.mariadb.host,
            "port": info.mariadb.port,
            "user": info.mariadb.user,
            "password_file": mysql_pw,
        },
        "kafka": {"bootstrap_servers": info.kafka.bootstrap},
        "database_include": [DEMO_DB, "cdc"],
        "heartbeat_interval_ms": 2000,
    }
    merger = {
        "topic_prefix": prefix,
        "mysql": {"host": info.mariadb.host, "port": info.mariadb.port, "user": "root", "password_file": root_pw},
        "kafka": {"bootstrap_servers": info.kafka.bootstrap},
        "table_include": [rf"{DEMO_DB}\..*"],
        "state_dir": str(work / "merger-state"),
        "sinks": {
            "delta": {"path": str(work / "delta")},
            "postgres": {
                "host": info.postgres.host,
                "port": info.postgres.port,
                "user": info.postgres.user,
                "dbname": info.postgres.database,
                "password_file": str(local_stack.secret_file(info, "postgres_password")),
            },
        },
        "snapshot": {"chunk_size": 25000, "chunks_per_window": 2, "parallelism": 2},
        "trigger_interval_ms": 300,
    }
    (work / "ingest.yaml").write_text(yaml.safe_dump(ingest))
    (work / "merger.yaml").write_text(yaml.safe_dump(merger))
    return work / "ingest.yaml", work / "merger.yaml"


def _sharded_configs(info, shards: dict, work: Path, prefix: str) -> tuple[Path, Path]:
    """The configs of a sharded source: one ingest and one merger for every shard."""
    ingest_path, merger_path = _configs(info, work, prefix)
    ingest, merger = yaml.safe_load(ingest_path.read_text()), yaml.safe_load(merger_path.read_text())
    ingest["shards"], merger["shards"] = [], []
    for name, shard in shards.items():
        where = {"host": shard.mariadb.host, "port": shard.mariadb.port}
        user = {"user": shard.mariadb.user, "password_file": str(local_stack.secret_file(shard, "mysql_password"))}
        root = {"user": "root", "password_file": str(local_stack.secret_file(shard, "mysql_root_password"))}
        ingest["shards"].append({"name": name, "mysql": {**where, **user}})
        merger["shards"].append({"name": name, "mysql": {**where, **root}})
    ingest_path.write_text(yaml.safe_dump(ingest))
    merger_path.write_text(yaml.safe_dump(merger))
    return ingest_path, merger_path


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "cdc.cli", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _status(work: Path) -> dict:
    try:
        return json.loads((work / "merger-state" / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def run_demo(state_dir: Path, rows: int, console: Console, shards: int = 0) -> None:
    console.rule("[bold]1. local stack and data")
    info = local_stack.up(state_dir)
    console.print(
        f"MariaDB {info.mariadb.version} :{info.mariadb.port}, broker {info.kafka.bootstrap}, "
        f"PostgreSQL :{info.postgres.port}"
    )
    work = Path(info.state_dir) / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    prefix = f"demo{int(time.time())}"
    if shards:
        stack_shards.up(state_dir, shards, replicas=False)
        servers = {s.name: local_stack.StackInfo.load(Path(s.primary)) for s in stack_shards.load(state_dir)[:shards]}
        rows = max(4, rows // shards)
        for name, shard in servers.items():
            _load(shard, rows)
            console.print(
                f"{name} (:{shard.mariadb.port}): loaded {DEMO_DB}.customers ({rows // 4:,} rows) and "
                f"{DEMO_DB}.orders ({rows:,} rows), the same keys as on every shard"
            )
        ingest_cfg, merger_cfg = _sharded_configs(info, servers, work, prefix)
    else:
        servers = {"": info}
        _load(info, rows)
        console.print(f"loaded {DEMO_DB}.customers ({rows // 4:,} rows) and {DEMO_DB}.orders ({rows:,} rows)")
        ingest_cfg, merger_cfg = _configs(info, work, prefix)

    console.rule("[bold]2. ingest and merger")
    ingest = _spawn(["ingest", "-c", str(ingest_cfg)], work / "ingest.log")
    merger = _spawn(["merge", "-c", str(merger_cfg)], work / "merger.log")
    workloads = [LiveWorkload(server, rows) for server in servers.values()]
    try:
        console.print(
            f"ingest pid {ingest.pid} (log {work / 'ingest.log'}), merger pid {merger.pid} "
            f"(log {work / 'merger.log'}), topic prefix {prefix}"
        )
        console.rule("[bold]3. snapshots while a live workload runs")
        for workload in workloads:
            workload.start()
        tables = [f"{DEMO_DB}.customers", f"{DEMO_DB}.orders"]
        _wait_for_snapshots(ingest, merger, work, tables, console)
        time.sleep(3)
        for workload in workloads:
            workload.stop.set()
            workload.join(10)
        statements = sum(w.statements for w in workloads)
        console.print(f"live workload: {statements:,} statements during the snapshots")
        for workload in workloads:
            if workload.error:
                raise workload.error

        console.rule("[bold]4. change events on Kafka")
        _show_events(info.kafka.bootstrap, table_topic(prefix, DEMO_DB, "orders"), console, 12)

        console.rule("[bold]5. sinks compared with the source")
        if shards:
            _verify_shards(merger_cfg, console)
        else:
            _compare(info, work, tables, console)
    finally:
        for workload in workloads:
            workload.stop.set()
        for proc in (merger, ingest):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (merger, ingest):
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    console.print("the stack keeps running: `cdc stack down` stops it")


def _wait_for_snapshots(
    ingest, merger, work: Path, tables: list[str], console: Console, timeout_s: float = 600
) -> None:
    """Shows each table's snapshot progress (from the merger's status file) until every
    table is snapshotted and streaming."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("chunks  {task.fields[rows]:>9,} rows  {task.fields[phase]}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        tasks = {t: progress.add_task(t, total=None, rows=0, phase="waiting") for t in tables}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc, name in ((ingest, "ingest"), (merger, "merger")):
                if proc.poll() is not None:
                    raise DemoError(f"{name} exited; see {work / (name + '.log')}")
            st = _status(work).get("tables", {})
            done = 0
            for t in tables:
                s = st.get(t)
                if not s:
                    continue
                progress.update(
                    tasks[t],
                    total=max(1, s["chunks_total"]),
                    completed=s["chunks_done"],
                    rows=s["snapshot_rows"],
                    phase=s["phase"],
                )
                if s["chunks_total"] and s["chunks_done"] >= s["chunks_total"] and s["phase"] == "streaming":
                    done += 1
            if done == len(tables):
                return
            time.sleep(0.5)
    raise DemoError(f"the snapshots did not finish within {timeout_s:.0f} s; see {work / 'merger.log'}")


def _show_events(bootstrap: str, topic: str, console: Console, n: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from cdc.cli.tail import format_record

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cdc-demo",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        md = consumer.list_topics(timeout=10).topics.get(topic)
        if md is None:
            console.print(f"{topic}: no events")
            return
        consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        shown, deadline = 0, time.monotonic() + 15
        while shown < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            console.print(format_record(msg), highlight=False, soft_wrap=False, overflow="ellipsis", no_wrap=True)
            shown += 1
    finally:
        consumer.close()


def _verify_shards(merger_cfg: Path, console: Console, timeout_s: float = 180) -> None:
    """`cdc verify` of the sharded tables (each sink table against the union of the shards),
    again until equal: the last changes may still be on their way."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run(
            [sys.executable, "-m", "cdc.cli", "verify", "-c", str(merger_cfg)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    console.print(done.stdout.rstrip(), highlight=False)
    if done.returncode != 0:
        raise DemoError(f"cdc verify found differences (exit {done.returncode}): {done.stderr.strip()[-300:]}")


def _compare(info, work: Path, tables: list[str], console: Console) -> None:
    from merger.verify.sinks.base import SinkReadError
    from merger.verify.sinks.delta import DeltaReader
    from merger.verify.sinks.postgres import PostgresReader
    from merger.verify.source import SourceReader
    from merger.verify.table import compare_table

    result = Table()
    for col in ("table", "sink", "source rows", "sink rows", "result"):
        result.add_column(col)
    deadline = time.monotonic() + 180
    pending = list(tables)
    rows_out = {}
    while pending and time.monotonic() < deadline:
        for t in list(pending):
            db, name = t.split(".", 1)
            source = SourceReader(lambda: _root(info))
            outcome = []
            try:
                for sink_name, reader in (
                    ("delta", DeltaReader(str(work / "delta"))),
                    (
                        "postgres",
                        PostgresReader(
                            {
                                "host": info.postgres.host,
                                "port": info.postgres.port,
                                "user": info.postgres.user,
                                "dbname": info.postgres.database,
                                "password": info.postgres.password,
                            }
                        ),
                    ),
                ):
                    try:
                        outcome.append((sink_name, compare_table(source, reader, db, name)))
                    except SinkReadError:  # not created yet
                        outcome.append((sink_name, None))
                    finally:
                        reader.close()
            finally:
                source.close()
            rows_out[t] = outcome
            if all(c is not None and c.ok for _, c in outcome):
                pending.remove(t)
        if pending:
            time.sleep(2)
    for t, outcome in rows_out.items():
        for sink_name, c in outcome:
            if c is None:
                result.add_row(t, sink_name, "-", "-", "[red]no sink table")
                continue
            result.add_row(
                t,
                sink_name,
                f"{c.source_rows:,}",
                f"{c.sink_rows:,}",
                "[green]equal" if c.ok else f"[red]{c.summary()[:80]}",
            )
    console.print(result)
    if pending:
        raise DemoError(f"sinks did not converge for {pending}")
