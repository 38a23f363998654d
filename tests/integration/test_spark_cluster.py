"""The merger on a Spark standalone cluster (issue 25): a master and two workers of one
core each, started by the local stack with pyspark's own ``spark-class``
(``cdc stack up --spark-workers 2``), the merger in client mode
(``spark_master: spark://...``). The snapshot's chunk reads and the stream's Kafka reads
run as tasks on the executors, which Spark's REST API shows; the sinks equal the source."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from cdc import stack_spark
from cdc.stack import free_port
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.source_db import root_connection

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(stack):
    c = stack_spark.up(stack.state_dir, 2)
    yield c
    stack_spark.down(stack.state_dir)


def _run(stack, db, *statements):
    conn = root_connection(stack, db)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def _items_and_ingest(stack, tmp_path, unique_name: str, db: str, rows: int) -> IngestProcess:
    """A new database with the table ``items`` of ``rows`` rows, and ingest following it."""
    _run(stack, None, f"CREATE DATABASE {db}")
    _run(
        stack,
        db,
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), n INT)",
        f"INSERT INTO items SELECT seq, CONCAT('n', seq), seq % 7 FROM seq_1_to_{rows}",
    )
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    return IngestProcess(icfg, tmp_path / "ingest.log").start()


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _app_tasks(ui: str) -> tuple[dict[str, int], dict[str, set[str]]]:
    """From the running application's REST API: tasks per executor, and per stage name the
    executors its tasks ran on."""
    [app] = _get(f"{ui}/api/v1/applications")
    base = f"{ui}/api/v1/applications/{app['id']}"
    per_executor = {e["id"]: e["totalTasks"] for e in _get(f"{base}/executors")}
    where: dict[str, set[str]] = {}
    for stage in _get(f"{base}/stages?status=complete"):
        tasks = _get(f"{base}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
        where.setdefault(stage["name"], set()).update(t["executorId"] for t in tasks)
    return per_executor, where


@pytest.mark.timeout(900)
def test_the_merger_runs_its_reads_on_the_clusters_executors(stack, cluster, tmp_path, unique_name):
    db = f"sc_{unique_name}"
    ingest = _items_and_ingest(stack, tmp_path, unique_name, db, 40000)
    ui_port = free_port()
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        spark_master=cluster.master_url,
        spark_auth_secret_file=str(stack_spark.auth_secret_file(stack.state_dir)),  # it authenticates
        spark_conf={
            "spark.driver.memory": "1g",
            "spark.python.authenticate.socketTimeout": "120s",
            "spark.ui.enabled": "true",  # its REST API says where the tasks ran
            "spark.ui.port": str(ui_port),
        },
        **{"snapshot.chunk_size": 4000},
    )
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    try:
        time.sleep(3)
        _run(stack, db, "UPDATE items SET name = 'x' WHERE id < 300", "DELETE FROM items WHERE id > 39900")
        _run(stack, db, "INSERT INTO items VALUES (50001, 'streamed', 1)")
        checker.wait_equal(db, "items", timeout_s=400, proc=merger)
        per_executor, where = _app_tasks(f"http://127.0.0.1:{ui_port}")
        print(json.dumps({"tasks per executor": per_executor, "stages": {k: sorted(v) for k, v in where.items()}}))
        # two executors, one per worker, each ran tasks; the driver none
        assert sorted(e for e in per_executor if e != "driver") == ["0", "1"] or len(per_executor) >= 3
        assert per_executor.get("driver", 0) == 0
        assert all(n > 0 for e, n in per_executor.items() if e != "driver"), per_executor
        reads = [name for name in where if "chunk_read.py" in name]
        assert reads, sorted(where)
        assert all(where[name] and "driver" not in where[name] for name in where), where
        state = stack_spark.master_state(cluster)
        [app] = [a for a in state["activeapps"] if a["name"] == "cdc-merger"]
        assert app["cores"] == 2
    finally:
        merger.stop()
        ingest.stop()
        checker.close()


class Writes:
    """Updates and inserts on ``items`` from a thread until stopped."""

    def __init__(self, stack, db: str, first_id: int):
        import threading

        self.stack, self.db, self.first_id, self.count = stack, db, first_id, 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        try:
            while not self._stop.is_set():
                i += 1
                _run(
                    self.stack,
                    self.db,
                    f"UPDATE items SET n = n + 1 WHERE id = {1 + (i * 7919) % 60000}",
                    f"INSERT INTO items VALUES ({self.first_id + i}, 'w{i}', {i})",
                )
                self.count += 1
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by __exit__
            self.error = exc

    def __enter__(self) -> "Writes":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.error is None, self.error


def _wait_log(proc, text: str, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while proc.log_text().count(text) < count:
        assert proc.alive(), proc.log_text()[-3000:]
        assert time.monotonic() < deadline, f"{text!r} not {count} times in the merger's log"
        time.sleep(0.2)


@pytest.mark.timeout(900)
def test_workers_and_the_driver_killed_during_the_snapshot_and_the_stream(stack, cluster, tmp_path, unique_name):
    """kill -9 of a worker in the middle of the snapshot (its executor is lost; a task it was
    running, if any, Spark runs again on the other one), the worker started again, then
    kill -9 of the other one while changes stream (a micro-batch every 300 ms): the merger
    rides through both, and the sinks equal the source. Then kill -9 of the driver (the
    merger) under writes: started again, it resumes on the cluster."""
    db = f"sk_{unique_name}"
    # 30 chunks of 1,000 rows in windows of 2: the kill of worker1 needs 3 windows staged
    # before it and 5 after, with room to spare
    ingest = _items_and_ingest(stack, tmp_path, unique_name, db, 30000)
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        spark_master=cluster.master_url,
        spark_auth_secret_file=str(stack_spark.auth_secret_file(stack.state_dir)),  # it authenticates
        **{"snapshot.chunk_size": 1000, "snapshot.chunks_per_window": 2},
    )
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    try:
        with Writes(stack, db, 200_000) as writes:
            _wait_log(merger, "rows staged in", 3, 300)
            pid = stack_spark.worker_pid(cluster, "worker1")
            assert pid, "worker1 is not running"
            os.kill(pid, signal.SIGKILL)
            staged = merger.log_text().count("rows staged in")
            _wait_log(merger, "Lost executor", 1, 120)
            _wait_log(merger, "rows staged in", staged + 5, 300)  # the snapshot goes on, on worker2
            assert writes.count > 10
        checker.wait_equal(db, "items", timeout_s=400, proc=merger)
        stack_spark.up(stack.state_dir, 2)  # worker1 again: the application gets an executor there
        with Writes(stack, db, 300_000) as writes:
            time.sleep(4)
            pid = stack_spark.worker_pid(cluster, "worker2")
            assert pid, "worker2 is not running"
            os.kill(pid, signal.SIGKILL)
            _wait_log(merger, "Lost executor", 2, 120)
            time.sleep(3)
        assert writes.count > 20
        checker.wait_equal(db, "items", timeout_s=400, proc=merger)
        assert merger.alive() and "Traceback" not in merger.log_text()
        # the driver killed: the merger started again on the cluster resumes where it was
        stack_spark.up(stack.state_dir, 2)
        with Writes(stack, db, 400_000):
            time.sleep(3)
            merger.kill9()
            merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
            time.sleep(3)
        checker.wait_equal(db, "items", timeout_s=400, proc=merger)
    finally:
        merger.stop()
        ingest.stop()
        checker.close()
        stack_spark.up(stack.state_dir, 2)  # the cluster whole again for the module's other tests


UNAUTHENTICATED_APP = """
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.master(sys.argv[1]).appName("cdc-no-secret").getOrCreate()
print("RESULT", spark.sparkContext.parallelize(range(10), 2).sum(), flush=True)
"""


@pytest.mark.timeout(300)
def test_an_application_without_the_secret_is_refused(stack, cluster, tmp_path):
    """The stack's cluster authenticates (spark.authenticate, from its 0600 properties
    file): an application without the secret cannot register with the master."""
    log = tmp_path / "app.log"
    with open(log, "wb") as out:
        app = subprocess.Popen(
            [sys.executable, "-c", UNAUTHENTICATED_APP, cluster.master_url], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while "Failed to connect to master" not in log.read_text() and app.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        names = [a["name"] for a in stack_spark.master_state(cluster)["activeapps"]]
        assert "cdc-no-secret" not in names
        assert "RESULT" not in log.read_text()
    finally:
        app.kill()
        app.wait()


@pytest.mark.timeout(600)
def test_a_cluster_whose_workers_do_not_share_state_dir_is_refused_at_start(stack, tmp_path, unique_name):
    """A worker that sees another file system at the merger's state_dir (here: an empty
    tmpfs over it, in a mount namespace of its own, as on another machine without a shared
    file system): the merger stops at start with one line that says what to do, before it
    stages a snapshot window the driver could never read."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare(1) and root for a mount namespace")
    elsewhere = tmp_path / "cluster"
    hidden = tmp_path / "work"
    hidden.mkdir()
    prefix = (
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        'mount -t tmpfs none "$0" && exec "$@"',
        str(hidden),
    )
    cluster = stack_spark.up(elsewhere, 1, worker_prefix=prefix)
    try:
        mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, ["nothing"], hidden)
        mcfg.write_text(
            mcfg.read_text()
            + f"spark_master: {cluster.master_url}\n"
            + f"spark_auth_secret_file: {stack_spark.auth_secret_file(elsewhere)}\n"
        )
        merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
        try:
            assert merger.wait_exit(120), "the merger ran on workers that do not share its state_dir"
            log = merger.log_text()
            errors = [line for line in log.splitlines() if line.startswith("error: ")]
            assert len(errors) == 1 and "Traceback" not in log, log[-3000:]
            assert "do not share the merger's state_dir" in errors[0] and str(hidden / "state") in errors[0]
        finally:
            merger.stop()
    finally:
        stack_spark.down(elsewhere)
