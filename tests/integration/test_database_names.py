"""A captured database whose name has a '.': ingest refuses it with one line (at start, and
when one is created later in the binlog), never writes its changes under another
database's name; once it is excluded, ingest goes on. Real MariaDB and broker."""

from __future__ import annotations

import re

import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import list_topics, read_records, rebuild

pytestmark = pytest.mark.integration


def _refused(proc: IngestProcess, dotted: str) -> None:
    assert proc.wait_exit(90), "ingest went on with a captured database named with a '.'"
    log = proc.log_text()
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert errors and "Traceback" not in log and proc.proc.returncode == 2, log[-3000:]
    assert repr(dotted) in errors[0] and "database_exclude" in errors[0], errors


@pytest.mark.timeout(300)
def test_a_database_named_with_a_dot_is_refused_never_misrouted(stack, mysql_root, unique_name, tmp_path):
    plain = f"dn_{unique_name}"
    dotted = f"{plain}.x"  # its table x.t would read as table "x.t" of database `plain`
    prefix = unique_name
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {plain}")
        cur.execute(f"CREATE TABLE {plain}.t (id INT PRIMARY KEY)")
    include = [f"{re.escape(plain)}.*"]  # matches both
    cfg = write_config(stack, tmp_path / "ingest.yaml", prefix, include)
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        # 1. created while ingest runs: it stops at its first DDL, before any of its changes
        wait_caught_up(stack, prefix, proc=proc)
        with mysql_root.cursor() as cur:
            cur.execute(f"INSERT INTO {plain}.t VALUES (1)")
            cur.execute(f"CREATE DATABASE `{dotted}`")
            cur.execute(f"CREATE TABLE `{dotted}`.t (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO `{dotted}`.t VALUES (100)")
        _refused(proc, dotted)

        # 2. at start: refused before reading anything
        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        _refused(proc, dotted)

        # nothing of it was written, under any name
        records, _ = read_records(stack.kafka.bootstrap, list_topics(stack.kafka.bootstrap, f"{prefix}."))
        blocks = [r.payload.get("source") or {} for r in records if r.value and isinstance(r.payload, dict)]
        sources = {(src.get("db"), src.get("table")) for src in blocks}
        assert not any(db == dotted or (db == plain and (table or "").startswith("x")) for db, table in sources)
        assert not any(r.value and b'"id":100' in r.value for r in records)

        # 3. excluded, as the error says: ingest goes on, the other database's changes flow
        cfg = write_config(stack, tmp_path / "ingest.yaml", prefix, include, database_exclude=[re.escape(dotted)])
        proc = IngestProcess(cfg, tmp_path / "ingest3.log").start()
        with mysql_root.cursor() as cur:
            cur.execute(f"INSERT INTO {plain}.t VALUES (2)")
            cur.execute(f"INSERT INTO `{dotted}`.t VALUES (101)")
        wait_caught_up(stack, prefix, proc=proc)
        records, _ = read_records(stack.kafka.bootstrap, [f"{prefix}.{plain}.t"])
        assert set(rebuild(records, ["id"])) == {(1,), (2,)}
        assert not any(r.value and b'"id":10' in r.value for r in records)
    finally:
        proc.stop()
        with mysql_root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{dotted}`")
