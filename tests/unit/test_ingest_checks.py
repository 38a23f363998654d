"""Start-up checks: each user mistake ends in one line naming the problem and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _run_ingest(config: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", "ingest", "-c", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    text = " ".join(lines)
    assert lines and lines[-1].startswith("error:") or "error:" in text, res.stderr
    for n in needles:
        assert n.lower() in text.lower(), (n, text)


def test_invalid_configuration_names_the_key(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump({"decimal_handling_mode": "exact"}))
    _assert_one_line_error(_run_ingest(cfg), "decimal_handling_mode", "precise")
    cfg.write_text(yaml.safe_dump({"mysql": {"hots": "x"}}))
    _assert_one_line_error(_run_ingest(cfg), "mysql.hots", "unknown key")
    cfg.write_text("topic_prefix: [unclosed")
    _assert_one_line_error(_run_ingest(cfg), "not valid YAML")
    _assert_one_line_error(_run_ingest(tmp_path / "missing.yaml"), "file not found")
    cfg.write_text(yaml.safe_dump({"mysql": {"password_env": "CDC_NO_SUCH_VARIABLE"}}))
    _assert_one_line_error(_run_ingest(cfg), "CDC_NO_SUCH_VARIABLE")
