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
