"""The alert rules (deploy/prometheus/alerts.yml) and the Grafana dashboard
(deploy/grafana/cdc-dashboard.json): valid for promtool, their unit tests pass
(deploy/prometheus/alerts_test.yml), and every metric they name is one that ingest or the
merger exports (read from the product's own prometheus_client collectors, not from a list
kept here), with label names those metrics have. The end-to-end check, a real Prometheus
scraping a real ingest: tests/integration/test_prometheus_alerts.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "cdc-dashboard.json"
IS_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Prometheus's own series, not the product's
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE"}
# labels Prometheus adds to every scraped series (deploy/prometheus.yml: job, instance, and
# topic_prefix, which the rules pair a merger with its ingest by)
TARGET_LABELS = {"job", "instance", "topic_prefix"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool"}
PROMQL_WORDS |= {"inf", "nan", "sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk"}
PROMQL_WORDS |= {"quantile", "count_values"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if IS_CI:
            pytest.fail("promtool is missing: scripts/bootstrap.sh installs it (Debian package prometheus)")
        pytest.skip("promtool is not installed (Debian package prometheus; scripts/bootstrap.sh installs it)")
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


# ----------------------------------------------------------------------------- the product's metrics


def exported() -> dict[str, set[str]]:
    """Every series name the product's processes export -> the label names it has."""
    from prometheus_client import REGISTRY
    from prometheus_client.metrics import MetricWrapperBase

    import ingest.metrics
    import merger.metrics
    import merger.verify.continuous

    labels = {}
    for module in (ingest.metrics, merger.metrics, merger.verify.continuous):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                labels[value._name] = set(value._labelnames)
    names: dict[str, set[str]] = {}
    for family in REGISTRY.collect():  # the product's metrics and prometheus_client's process_*, python_*
        own = labels.get(family.name, set())
        # a counter's, histogram's or summary's series are only the suffixed ones
        for name in [family.name + s for s in SUFFIXES.get(family.type, ())] or [family.name]:
            extra = {"le"} if name.endswith("_bucket") else {"quantile"} if family.type == "summary" else set()
            names[name] = own | extra
    assert "cdc_ingest_events_total" in names and "cdc_merger_verify_differing_keys" in names
    return names


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """The metric names an expression selects, each with the label names it matches on."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, Grafana's $vars
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    found = []
    for m in re.finditer(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*(\()?", text):
        name, matchers, call = m.groups()
        if call and not matchers:
            continue  # a function or an aggregation
        if name.lower() in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", name):
            continue
        label_names = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers or ""))
        found.append((name, label_names - {"__name__"}))
    return found


def rule_exprs(path: Path) -> list[tuple[str, str]]:
    doc = yaml.safe_load(path.read_text())
    return [(r.get("alert") or r.get("record"), r["expr"]) for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs(path: Path) -> list[tuple[str, str]]:
    doc = json.loads(path.read_text())
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))

    walk(doc["panels"])
    for var in doc.get("templating", {}).get("list", []):
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        m = re.fullmatch(r"label_values\((.+),\s*\w+\)", query or "")
        if m:
            out.append((f"variable {var['name']}", m.group(1)))
    return out


def unknown_metrics(exprs: list[tuple[str, str]], names: dict[str, set[str]]) -> list[str]:
    problems = []
    for where, expr in exprs:
        for name, label_names in selectors(expr):
            if name in PROMETHEUS_OWN:
                continue
            if name not in names:
                problems.append(f"{where}: {name} is no metric ingest or the merger exports")
            elif label_names - names[name] - TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {sorted(label_names - names[name] - TARGET_LABELS)}")
    return problems


# ----------------------------------------------------------------------------- the tests


def test_the_rules_are_valid_for_promtool():
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_unit_tests_pass():
    result = run_promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_config_loads_the_rules():
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    assert [(ROOT / "deploy" / f).resolve() for f in config["rule_files"]] == [RULES]
    result = run_promtool("check", "config", str(ROOT / "deploy" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.split(":")[:2][::-1] for v in compose["services"]["prometheus"]["volumes"])
    # mounted where the config (/etc/prometheus/prometheus.yml) finds it
    assert mounts["/etc/prometheus/" + config["rule_files"][0]] == "./deploy/prometheus/alerts.yml"


def test_every_alert_is_unit_tested_firing_and_not_firing():
    alerts = {name for name, _ in rule_exprs(RULES)}
    tests = yaml.safe_load(RULE_TESTS.read_text())
    fired, quiet = set(), set()
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
            # the group has series the alert does not fire for
            assert len(group["input_series"]) > len(case.get("exp_alerts") or []), case["alertname"]
    assert alerts - fired == set(), "alerts no test sees firing"
    assert alerts - quiet == set(), "alerts no test sees quiet"


def test_every_alert_says_what_to_do_and_links_an_existing_runbook():
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            ann = rule["annotations"]
            assert ann.get("summary") and ann.get("description"), rule["alert"]
            assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
            path, _, anchor = ann["runbook"].partition("#")
            page = ROOT / path
            assert page.is_file(), f"{rule['alert']}: {path}"
            headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}
            assert anchor in headings, f"{rule['alert']}: no section #{anchor} in {path}"
    # each rule has a comment above it saying what the operator should do
    text = RULES.read_text()
    for m in re.finditer(r"^( *)- alert: (\w+)", text, re.M):
        before = text[: m.start()].rstrip("\n").splitlines()[-1]
        assert before.strip().startswith("#"), f"{m.group(2)}: no comment above the rule"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_rules_use_only_exported_metrics():
    assert unknown_metrics(rule_exprs(RULES), exported()) == []


def test_dashboard_uses_only_exported_metrics():
    exprs = dashboard_exprs(DASHBOARD)
    assert len(exprs) > 20
    assert unknown_metrics(exprs, exported()) == []


def test_dashboard_is_an_importable_grafana_model(tmp_path):
    doc = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in doc["__inputs"]] == ["DS_PROMETHEUS"]
    ids = []

    def walk(panels):
        for p in panels:
            ids.append(p["id"])
            if p["type"] != "row":
                assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
                assert p["targets"], p["title"]
            walk(p.get("panels", []))

    walk(doc["panels"])
    assert len(ids) == len(set(ids))
    # each expression is valid PromQL: promtool checks them as recording rules, Grafana's
    # variables replaced by what Grafana puts in their place
    rules = [
        {"record": f"dashboard:expr_{i}", "expr": expr.replace("$__rate_interval", "1m").replace("$table", ".*")}
        for i, (_, expr) in enumerate(dashboard_exprs(DASHBOARD))
    ]
    path = tmp_path / "dashboard-exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# ----------------------------------------------------------------------------- the checks catch mistakes


def _broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = RULES.read_text()
    assert old in text
    path = tmp_path / "alerts.yml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("cdc_ingest_unavailable == 1", "cdc_ingest_unavailble == 1", "cdc_ingest_unavailble is no metric"),
        ("cdc_merger_bad_records[15m]", "cdc_merger_bad_record[15m]", "cdc_merger_bad_record is no metric"),
        # prometheus_client adds _total to a counter: the bare name is not exported
        ("increase(cdc_ingest_errors_total{", "increase(cdc_ingest_errors{", "cdc_ingest_errors is no metric"),
        ('cdc_merger_table_phase{phase="paused"}', 'cdc_merger_table_phase{state="paused"}', "has no label ['state']"),
    ],
)
def test_a_misspelled_metric_is_caught(tmp_path, old, new, expected):
    problems = unknown_metrics(rule_exprs(_broken_copy(tmp_path, old, new)), exported())
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("expr: cdc_ingest_unavailable == 1", "expr: cdc_ingest_unavailable == == 1"),  # PromQL
        ("for: 5m", "for: five minutes"),  # a duration
        ("        labels:\n          severity: critical", "        labels:\n        severity: critical"),  # YAML
    ],
)
def test_a_syntax_error_fails_the_check(tmp_path, old, new):
    result = run_promtool("check", "rules", str(_broken_copy(tmp_path, old, new)))
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_a_wrong_expectation_fails_the_unit_tests(tmp_path):
    """A rule whose threshold moved no longer fires where its unit test says: promtool fails."""
    _broken_copy(tmp_path, "cdc_ingest_unavailable == 1", "cdc_ingest_unavailable == 2")
    (tmp_path / "alerts_test.yml").write_text(RULE_TESTS.read_text())
    result = run_promtool("test", "rules", str(tmp_path / "alerts_test.yml"))
    assert result.returncode != 0
    assert "CdcIngestUnavailable" in result.stdout + result.stderr
