"""Binlog positions that go backwards (RESET MASTER, failover to another server): ingest
stops with a clear error and the way out, never writes changes that consumers would drop
as replays. The end-to-end test runs on a private MariaDB (RESET MASTER would disturb
every other test on the shared one) with the shared broker."""

from __future__ import annotations

from cdc.wire.resume_point import ResumePoint
from ingest.failover import ServerState, continuation
from ingest.position import backwards_reason

FILES = ["binlog.000001", "binlog.000002", "binlog.000003"]


def test_same_server_further_on_is_fine():
    point = ResumePoint("0-1-40", "binlog.000002", 400, server_id=1)
    assert backwards_reason(point, "0-1-55", FILES) is None
    assert backwards_reason(ResumePoint("", None, None), "", FILES) is None  # nothing read yet
    assert backwards_reason(ResumePoint("0-1-40", "binlog.000002", 400), "0-1-40", FILES) is None  # old point


def test_another_server():
    # the failover rules (tests/unit/test_failover.py): one that lacks what ingest read stops
    point = ResumePoint("0-1-40", "binlog.000002", 400, server_id=1)
    reason = continuation(point, ServerState(2, "0-2-90", "0-2-90", True, tuple(FILES))).backwards
    assert "another server" in reason and "server_id 2" in reason


def test_reset_master_or_lagging_server():
    assert "behind" in backwards_reason(ResumePoint("0-1-40", "binlog.000002", 400, server_id=1), "", FILES)
    assert "behind" in backwards_reason(
        ResumePoint("0-1-40,1-1-5", "binlog.000002", 4, server_id=1), "0-1-41,1-1-4", FILES
    )
    reason = backwards_reason(ResumePoint("0-1-40", "binlog.000009", 400, server_id=1), "0-1-40", FILES)
    assert "binlog.000009" in reason and "RESET MASTER" in reason
