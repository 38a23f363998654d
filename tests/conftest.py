"""Shared fixtures. Integration tests run against the embedded local stack (real MariaDB,
the Tansu broker, PostgreSQL), started once per test session under .cdc/test-stack
(override with CDC_TEST_STATE_DIR) and stopped at the end if this session started it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from cdc import stack as local_stack

ROOT = Path(__file__).resolve().parents[1]
IS_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def stack() -> local_stack.StackInfo:
    state_dir = Path(os.environ.get("CDC_TEST_STATE_DIR", ROOT / ".cdc" / "test-stack"))
    already = False
    try:
        already = all(c["running"] for c in local_stack.status(state_dir).values())
    except local_stack.StackError:
        pass
    info = local_stack.up(state_dir)
    yield info
    if not already:
        local_stack.down(state_dir)


@pytest.fixture
def mysql_root(stack):
    """A root connection (autocommit) to the stack's MariaDB."""
    import pymysql

    conn = pymysql.connect(host=stack.mariadb.host, port=stack.mariadb.port, user="root",
                           password=stack.mariadb.root_password, autocommit=True)
    yield conn
    conn.close()


@pytest.fixture
def unique_name():
    """A short unique identifier for databases/topic prefixes of one test."""
    return "t" + uuid.uuid4().hex[:8]
