"""The local stack's Spark standalone cluster (``cdc stack up --spark-workers N``): a master
and N workers (one core each by default) started with pyspark's own ``spark-class``
(``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker``) as processes
under ``<state>/spark/``; ``<state>/spark.json`` says where (issue 25).

The merger runs on it in client mode: ``spark_master: spark://127.0.0.1:<port>`` in its
config (its process is the driver; the executors run on the workers). Everything here is
on one machine, so the workers reach the merger's state directory and staged windows by
their local paths."""

from __future__ import annotations

import json
import os
import secrets
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cdc import stack as local_stack
from cdc.stack import StackError

SPARK_FILE = "spark.json"
AUTH_SECRET = "spark_auth_secret"  # under <state>/secrets/: what the merger's spark_auth_secret_file names
AUTH_PROPERTIES = "auth.properties"  # under <state>/spark/: the master's and workers' --properties-file
MAX_WORKERS = 8  # a bound for a laptop-sized stack: each worker is a JVM


@dataclass
class SparkWorker:
    name: str  # worker1, worker2, ...
    webui_port: int  # also what tells its process apart (the worker's own port is picked by Spark)
    dir: str  # SPARK_WORKER_DIR: the executors' logs (stderr) and files, per application


@dataclass
class SparkCluster:
    state_dir: str
    port: int = 0
    webui_port: int = 0
    cores_per_worker: int = 1
    memory: str = "2g"
    workers: list[SparkWorker] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"


def spark_home() -> Path:
    """The installed pyspark: it ships ``bin/spark-class`` and Spark's jars."""
    import pyspark

    return Path(pyspark.__file__).parent


def _path(state_dir: Path | str) -> Path:
    return Path(state_dir) / SPARK_FILE


def load(state_dir: Path | str) -> SparkCluster | None:
    """The cluster of the stack at ``state_dir`` (None if it never had one)."""
    path = _path(state_dir)
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    workers = [SparkWorker(**w) for w in raw.pop("workers", [])]
    return SparkCluster(**raw, workers=workers)


def _save(cluster: SparkCluster) -> None:
    path = _path(cluster.state_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cluster), indent=2))
    os.replace(tmp, path)


def _env(work_dir: str | None = None) -> dict:
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    if work_dir:
        env["SPARK_WORKER_DIR"] = work_dir
    return env


def auth_secret_file(state_dir: Path | str) -> Path:
    """The cluster's shared secret (spark.authenticate), made at its first start (0600): the
    merger's ``spark_auth_secret_file``."""
    return Path(state_dir).resolve() / "secrets" / AUTH_SECRET


def _auth_properties(state: Path) -> Path:
    """The master's and workers' properties file (0600): RPC authenticated with the cluster's
    secret and encrypted, so only an application with the secret may register and run
    executors. A file, not ``-D`` options: a command line is readable by every local user."""
    secret_path = auth_secret_file(state)
    if not secret_path.exists():
        secret_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        local_stack.write_private(secret_path, secrets.token_hex(32))
    secret = secret_path.read_text().strip()
    path = state / "spark" / AUTH_PROPERTIES
    local_stack.write_private(
        path,
        f"spark.authenticate true\nspark.authenticate.secret {secret}\nspark.network.crypto.enabled true\n",
    )
    return path


def _marker(webui_port: int) -> str:
    return f"--webui-port {webui_port}"


def master_state(cluster: SparkCluster, timeout_s: float = 10) -> dict:
    """The master's JSON status (workers, applications), from its web UI."""
    with urllib.request.urlopen(f"{cluster.web_url}/json/", timeout=timeout_s) as resp:
        return json.loads(resp.read())


def _alive_workers(cluster: SparkCluster) -> int:
    try:
        return sum(1 for w in master_state(cluster, 2)["workers"] if w["state"] == "ALIVE")
    except (OSError, ValueError, KeyError):
        return 0


def up(
    state_dir: Path | str,
    workers: int,
    cores_per_worker: int = 1,
    memory: str = "2g",
    worker_prefix: tuple[str, ...] = (),
) -> SparkCluster:
    """Start the master and ``workers`` workers (those already running are kept);
    ``worker_prefix``: a command the workers run under (e.g. in a mount namespace of
    their own, as on another machine)."""
    if not 1 <= workers <= MAX_WORKERS:
        raise StackError(f"--spark-workers: between 1 and {MAX_WORKERS}, not {workers}")
    state = Path(state_dir).resolve()
    home = state / "spark"
    home.mkdir(parents=True, exist_ok=True)
    cluster = load(state) or SparkCluster(state_dir=str(state))
    cluster.cores_per_worker, cluster.memory = cores_per_worker, memory
    spark_class = str(spark_home() / "bin" / "spark-class")
    properties = ["--properties-file", str(_auth_properties(state))]
    if not (cluster.port and local_stack.running_pid(state, "spark-master", _marker(cluster.webui_port))):
        cluster.port = local_stack.free_port(cluster.port)
        cluster.webui_port = local_stack.free_port(cluster.webui_port)
        log = home / "master.log"
        args = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", *properties]
        args += ["--port", str(cluster.port), "--webui-port", str(cluster.webui_port)]
        pid = local_stack.spawn(args, log, env=_env())
        local_stack.pid_file(state, "spark-master").write_text(str(pid))
        _save(cluster)
        local_stack.wait_until(lambda: local_stack.port_open(cluster.webui_port), 120, "Spark master", log)
    known = {w.name: w for w in cluster.workers}
    cluster.workers = [known.get(f"worker{i}") or SparkWorker(f"worker{i}", 0, "") for i in range(1, workers + 1)]
    for worker in cluster.workers:
        if worker.webui_port and local_stack.running_pid(state, f"spark-{worker.name}", _marker(worker.webui_port)):
            continue
        worker.webui_port = local_stack.free_port(worker.webui_port)
        worker.dir = str(home / worker.name)
        Path(worker.dir).mkdir(parents=True, exist_ok=True)
        args = [*worker_prefix, spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
        args += ["--cores", str(cores_per_worker), "--memory", memory, "--work-dir", worker.dir, *properties]
        args += ["--webui-port", str(worker.webui_port), cluster.master_url]
        pid = local_stack.spawn(args, home / f"{worker.name}.log", env=_env(worker.dir))
        local_stack.pid_file(state, f"spark-{worker.name}").write_text(str(pid))
        _save(cluster)
    local_stack.wait_until(
        lambda: _alive_workers(cluster) >= len(cluster.workers),
        120,
        f"{len(cluster.workers)} Spark workers registered with the master",
        home / "master.log",
    )
    return cluster


def worker_pid(cluster: SparkCluster, name: str) -> int | None:
    for worker in cluster.workers:
        if worker.name == name:
            return local_stack.running_pid(Path(cluster.state_dir), f"spark-{name}", _marker(worker.webui_port))
    return None


def _processes(cluster: SparkCluster) -> list[tuple[str, int]]:
    """(name, web UI port) of every process: the workers first."""
    return [(f"spark-{w.name}", w.webui_port) for w in cluster.workers] + [("spark-master", cluster.webui_port)]


def down(state_dir: Path | str) -> list[str]:
    cluster = load(state_dir)
    if cluster is None:
        return []
    state, stopped = Path(cluster.state_dir), []
    for name, port in _processes(cluster):
        pid = local_stack.running_pid(state, name, _marker(port))
        if pid is not None:
            local_stack.stop_pid(pid)
            stopped.append(name)
        local_stack.pid_file(state, name).unlink(missing_ok=True)
    return stopped


def status(state_dir: Path | str) -> dict[str, dict]:
    cluster = load(state_dir)
    if cluster is None:
        return {}
    state = Path(cluster.state_dir)
    out = {}
    for name, port in _processes(cluster):
        pid = local_stack.running_pid(state, name, _marker(port))
        address = cluster.master_url if name == "spark-master" else f"web UI :{port}"
        out[name] = {"pid": pid, "port": port, "running": bool(pid) and local_stack.port_open(port), "address": address}
    return out
