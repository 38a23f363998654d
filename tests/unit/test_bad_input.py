"""Bad input on a real pipeline (MariaDB, ingest, the broker, the merger, Delta, PostgreSQL).

One ingest + merger run covers:

* malformed records on a table topic (not JSON, JSON without op, an op without its image,
  an image that cannot be decoded for the table's types) go to ``<prefix>.dlq`` with the
  reason in headers, are counted (``cdc status`` and the Prometheus metric), and the
  table keeps flowing: the sinks still equal the source;
* a schema change the sinks cannot follow (BIGINT -> INT) pauses that table with the
  reason in ``cdc status`` while the other tables keep flowing; the changes of the paused
  table are kept on disk. Path A: the operator changes the sink tables, ``cdc resume``
  applies the kept changes. Path B: ``cdc snapshot`` rebuilds the sink tables. Both end
  equal to the source.

Then a second merger with ``on_bad_record: stop`` reads the same topics and stops with one
line naming the topic, partition and offset of the first bad record.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "config, needles",
    [
        ({"on_bad_record": "skip"}, ["on_bad_record", "'dead_letter'", "'stop'"]),
        ({"snapshot": {"chunk_size": 5}}, ["snapshot.chunk_size", "greater than or equal to 100"]),
        ({"sinks": {"delta": {"path": "/x", "paht": "/y"}}}, ["sinks.delta.paht", "unknown key"]),
        ({"sinks": {"delta": {}}}, ["sinks.delta.path", "required"]),
        ({"watermark_table": "nodot"}, ["watermark_table", "<database>.<table>"]),
        ({"table_include": ["(unclosed"]}, ["table_include", "invalid regex"]),
        ({"end_probe": "tail"}, ["end_probe", "'scan'", "'watermark'"]),
        ({"mysql": {"ssl_mode": "verify"}}, ["mysql.ssl_mode", "'verify_identity'"]),
        ({"mysql": {"port": 70000}}, ["mysql.port", "less than or equal to 65535"]),
        ({"mysql": {"password_env": "CDC_NO_SUCH_VARIABLE_X"}}, ["CDC_NO_SUCH_VARIABLE_X", "not set"]),
        ({"kafka": {"extra": {"sasl.password": "hunter2"}}}, ["kafka.extra", "kafka.sasl_password_env"]),
        ({"trigger_interval_ms": "soon"}, ["trigger_interval_ms", "integer"]),
    ],
)
def test_invalid_merger_configuration_is_one_line_naming_the_key(tmp_path, config, needles):
    """No servers needed: the configuration is checked before anything connects."""
    path = tmp_path / "merger.yaml"
    path.write_text(yaml.safe_dump(config))
    res = _cli("merge", "-c", str(path), timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "hunter2" not in res.stderr
