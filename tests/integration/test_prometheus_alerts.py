"""The alert rules against the real thing: a real Prometheus scrapes a real ingest and
evaluates deploy/prometheus/alerts.yml; ingest killed, the "ingest down" alert fires.
(promtool's unit tests, tests/unit/test_prometheus_rules.py, cover each rule's logic.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from cdc import stack as local_stack
from tests.ingest_harness import IngestProcess, write_config

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"


def _api(base: str, path: str, **params) -> dict:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def _wait(what: str, check, timeout_s: float, diagnose) -> object:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as exc:  # Prometheus not listening yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s}s: {what} (last: {last})\n{diagnose()}")


class Prometheus:
    def __init__(self, workdir: Path, ingest_port: int, prefix: str):
        self.workdir = workdir
        self.port = local_stack.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        # the rules as they are, but for the `for:` durations (see the test's docstring)
        (workdir / "alerts.yml").write_text(re.sub(r"(?m)^(\s+)for: \S+$", r"\1for: 2s", RULES.read_text()))
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [
                {
                    "job_name": "cdc-ingest",  # the job name of deploy/prometheus.yml that the rules use
                    "static_configs": [{"targets": [f"127.0.0.1:{ingest_port}"], "labels": {"topic_prefix": prefix}}],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Prometheus":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                shutil.which("prometheus"),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if hasattr(self, "_log"):
            self._log.close()

    def query(self, expr: str) -> list[dict]:
        return _api(self.base, "/api/v1/query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        return _api(self.base, "/api/v1/alerts")["alerts"]

    def rules(self) -> list[dict]:
        return [r for g in _api(self.base, "/api/v1/rules")["groups"] for r in g["rules"]]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_ingest_down_alert_fires_in_a_real_prometheus(stack, mysql_root, tmp_path, unique_name):
    """Ingest (with metrics_port) and a Prometheus that scrapes it every second and evaluates
    a copy of deploy/prometheus/alerts.yml every second. In that copy every `for:` is 2s
    instead of minutes: the production durations would make this test wait minutes for
    nothing it checks. The expressions, the job name, the metrics ingest really exports and
    Prometheus's evaluation are the real ones; what `for:` does is promtool's unit tests'
    part (deploy/prometheus/alerts_test.yml). While ingest runs no ingest alert fires and
    every rule evaluates without error; once ingest is killed, CdcIngestDown fires."""
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is missing: scripts/bootstrap.sh installs it (Debian package prometheus)")
    db = f"prom_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    ingest_port = local_stack.free_port()
    cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db], metrics_port=ingest_port)
    ingest = IngestProcess(cfg, tmp_path / "ingest.log")
    prometheus = Prometheus(tmp_path, ingest_port, unique_name)
    instance = f"127.0.0.1:{ingest_port}"

    def diagnose() -> str:
        return f"--- prometheus log:\n{prometheus.log_text()}\n--- ingest log:\n{ingest.log_text()[-3000:]}"

    def ingest_alerts(state: str) -> list[dict]:
        return [a for a in prometheus.alerts() if a["labels"].get("job") == "cdc-ingest" and a["state"] == state]

    try:
        ingest.start()
        prometheus.start()
        # ingest is scraped and streams: its own gauge, through Prometheus
        _wait(
            "ingest scraped, connected to the source",
            lambda: (
                prometheus.query(f'cdc_ingest_connected{{job="cdc-ingest",instance="{instance}"}} == 1')
                and prometheus.query(f'up{{job="cdc-ingest",instance="{instance}"}} == 1')
            ),
            60,
            diagnose,
        )
        assert ingest.alive(), diagnose()
        # rules evaluated since (more than the 2 s of `for:`): all healthy, none of ingest's fires
        since = time.time()
        _wait(
            "every rule evaluated twice more",
            lambda: all(_evaluated_after(r, since + 2.5) for r in prometheus.rules()),
            30,
            diagnose,
        )
        broken = [(r["name"], r.get("lastError")) for r in prometheus.rules() if r["health"] != "ok"]
        assert broken == [], broken
        assert ingest_alerts("firing") == [] and ingest_alerts("pending") == [], diagnose()

        ingest.kill9()
        fired = _wait(
            "CdcIngestDown firing",
            lambda: [a for a in ingest_alerts("firing") if a["labels"]["alertname"] == "CdcIngestDown"],
            60,
            diagnose,
        )
        (alert,) = fired
        assert alert["labels"]["instance"] == instance and alert["labels"]["severity"] == "critical"
        assert alert["annotations"]["runbook"] == "docs/operations/faults.md#crashes-and-restarts"
        assert instance in alert["annotations"]["summary"]
    finally:
        ingest.kill9()
        ingest.stop()
        prometheus.stop()


def _evaluated_after(rule: dict, when: float) -> bool:
    from datetime import datetime

    stamp = rule.get("lastEvaluation", "")
    if not stamp or stamp.startswith("0001-"):
        return False
    # RFC 3339 with nanoseconds: keep microseconds for fromisoformat
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp() > when
