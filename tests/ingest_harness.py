"""Runs ingest as a real process (so it can be killed with SIGKILL) against the stack."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pymysql
import yaml

from cdc import stack as local_stack
from cdc.offsets_topic import read_offsets
from cdc.wire.resume_point import ResumePoint
from cdc.wire.topics import offsets_topic
from tests import procfs

ROOT = Path(__file__).resolve().parents[1]


def read_resume_point(client_config: dict, topic: str, source_key: bytes, **kwargs) -> ResumePoint | None:
    """The last committed position for ``source_key`` on ingest's offsets topic, or None.

    A transaction open on the topic hides every committed position on the local broker (its
    read_committed end is 0 meanwhile): a running ingest's next commit closes it, one that a
    takeover fenced may stay open longer, so the read waits up to 30 s for it by default."""
    kwargs.setdefault("wait_s", 30.0)
    return read_offsets(client_config, topic, source_key, **kwargs).point


def write_config(stack: local_stack.StackInfo, path: Path, prefix: str, databases: list[str], **extra) -> Path:
    cfg = {
        "topic_prefix": prefix,
        "server_id": 6000 + (abs(hash(prefix)) % 20000),
        "mysql": {
            "host": stack.mariadb.host,
            "port": stack.mariadb.port,
            "user": stack.mariadb.user,
            "password_file": str(local_stack.secret_file(stack, "mysql_password")),
        },
        "kafka": {"bootstrap_servers": stack.kafka.bootstrap},
        "database_include": databases,
        "heartbeat_interval_ms": 1000,
        "retry_max_s": 4,  # the tests' outages are short: reconnect within seconds of the end
    }
    set_dotted(cfg, extra)
    path.write_text(yaml.safe_dump(cfg))
    return path


def set_dotted(cfg: dict, values: dict) -> dict:
    """{"a.b": 1} -> cfg["a"]["b"] = 1"""
    for dotted, value in values.items():
        node = cfg
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return cfg


class IngestProcess:
    def __init__(self, config_path: Path, log_path: Path, args: tuple[str, ...] = ()):
        self.config_path = config_path
        self.log_path = log_path
        self.args = list(args)  # more of `cdc ingest`'s options (``--shard NAME``)
        self.proc: subprocess.Popen | None = None

    def start(self) -> "IngestProcess":
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli", "ingest", "-c", str(self.config_path), *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        return self

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill9()
        if hasattr(self, "_log"):
            self._log.close()

    def alive(self) -> bool:
        return bool(self.proc) and self.proc.poll() is None

    def wait_exit(self, timeout_s: float = 90) -> bool:
        """Waits (bounded) for the process to end by itself; True if it did."""
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.3)
        return not self.alive()

    def peak_rss_kb(self) -> int:
        return procfs.peak_rss_kb(self.proc.pid)

    def rss_kb(self) -> int:
        return procfs.rss_kb(self.proc.pid)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def source_gtid(stack: local_stack.StackInfo) -> str:
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return cur.fetchone()[0]
    finally:
        conn.close()


def wait_caught_up(
    stack: local_stack.StackInfo, prefix: str, timeout_s: float = 180.0, proc: IngestProcess | None = None
) -> ResumePoint:
    """Waits until ingest's committed position reaches the source's current GTID."""
    import json

    target = source_gtid(stack)
    key = json.dumps({"server": prefix}, separators=(",", ":")).encode()
    deadline = time.monotonic() + timeout_s
    point = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"ingest exited:\n{proc.log_text()[-3000:]}")
        point = read_resume_point({"bootstrap.servers": stack.kafka.bootstrap}, offsets_topic(prefix), key, timeout_s=5)
        if point and point.trx_gtid is None and _gtid_ge(point.gtid_state, target):
            return point
        time.sleep(0.5)
    raise AssertionError(
        f"ingest did not catch up to {target} within {timeout_s}s (at {point})"
        + (f"\n{proc.log_text()[-3000:]}" if proc else "")
    )


def _gtid_ge(state: str, target: str) -> bool:
    have = {g.split("-")[0]: int(g.split("-")[2]) for g in state.split(",") if g}
    for g in target.split(","):
        if not g:
            continue
        domain, _, seq = g.split("-")
        if have.get(domain, -1) < int(seq):
            return False
    return True
