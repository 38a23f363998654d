"""The local stack: `up` twice is harmless, a stale pid file is handled, `down` stops
only what `up` started, and the stack file says where everything is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cdc import stack as local_stack

pytestmark = pytest.mark.integration


def test_up_twice_stale_pid_and_down(tmp_path):
    state = tmp_path / "st"
    try:
        first = local_stack.up(state, components=("mariadb", "kafka"))
        st1 = local_stack.status(state)
        assert st1["mariadb"]["running"] and st1["kafka"]["running"]
        second = local_stack.up(state, components=("mariadb", "kafka"))
        st2 = local_stack.status(state)
        assert (second.mariadb.port, second.kafka.port) == (first.mariadb.port, first.kafka.port)
        assert st2["mariadb"]["pid"] == st1["mariadb"]["pid"]  # nothing restarted
        info = json.loads((state / "stack.json").read_text())
        assert info["mariadb"]["port"] == first.mariadb.port
        assert oct((state / "stack.json").stat().st_mode & 0o777) == "0o600"

        # a pid file pointing at a process that is not ours is stale: removed, not killed
        (state / "kafka.pid").write_text(str(os.getpid()))
        assert local_stack.status(state)["kafka"]["pid"] is None
        assert not (state / "kafka.pid").exists()
        local_stack.stop(local_stack.StackInfo.load(state), "mariadb")
        assert local_stack.down(state) == []  # neither ours any more
        assert os.path.exists(f"/proc/{os.getpid()}")

        # the CLI prints one line for a missing stack
        res = subprocess.run(
            [sys.executable, "-m", "cdc.cli", "stack", "status", "--state-dir", str(tmp_path / "none")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 2 and "cdc stack up" in res.stderr and "Traceback" not in res.stderr
    finally:
        info = local_stack.StackInfo.load(state)
        # the broker whose pid file we replaced is still running: stop it by port owner
        subprocess.run(["pkill", "-f", f"tcp://127.0.0.1:{info.kafka.port}"], check=False)
        local_stack.down(state)


def test_s3_component_up_twice_bucket_and_down(tmp_path):
    """`cdc stack up --s3`: moto's server as a process with its pid file, log and port in
    stack.json, the bucket made; `up` again restarts nothing; `down` stops it."""
    import urllib.request

    state = tmp_path / "st"
    res = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "stack", "up", "--only", "kafka", "--s3", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        assert res.returncode == 0, res.stderr
        info = local_stack.StackInfo.load(state)
        first = local_stack.status(state)["s3"]
        assert first["running"] and first["port"] == info.s3.port and (state / "s3.pid").exists()
        assert info.s3.endpoint == f"http://127.0.0.1:{info.s3.port}" and (state / "s3.log").exists()
        with urllib.request.urlopen(f"{info.s3.endpoint}/{info.s3.bucket}", timeout=30) as answer:
            assert answer.status == 200
        local_stack.up(state, ("s3",))
        assert local_stack.status(state)["s3"]["pid"] == first["pid"]
        creds = local_stack.secret_file(info, "s3_credentials")
        assert oct(creds.stat().st_mode & 0o777) == "0o600" and info.s3.secret_access_key in creds.read_text()
    finally:
        stopped = local_stack.down(state)
    assert "s3" in stopped and _zombie_or_gone(first["pid"])


def _zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
