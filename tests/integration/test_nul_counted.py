"""The PostgreSQL sink's NUL rule (default ``strip``) is never silent, end to end on the
real stack (ingest and the merger as processes): text and JSON values with NUL characters,
snapshotted and streamed, are counted by the merger (its Prometheus counter, one WARNING
per table in its log, ``cdc status --json``), and ``cdc verify --json`` calls the tables
equal except N values changed by the rule, N counted here with a plain SELECT of the
source. One table has a JSON column (verify compares it row by row), the other only text
(verify's SQL digests settle it): both of verify's counts are checked."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pymysql
import pytest

from tests.cli_util import run_cli
from tests.merger_harness import SinkChecker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(conn, *statements) -> None:
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(*s) if isinstance(s, tuple) else cur.execute(s)


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, list):
        for x in obj:
            yield from _strings(x)
    elif isinstance(obj, dict):
        for k, x in obj.items():
            yield k
            yield from _strings(x)


def _nul_values(conn, db: str, table: str, text: list[str], js: list[str]) -> int:
    """Values holding U+0000 per a plain SELECT (a JSON value: in one of its strings)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(text + js)} FROM `{db}`.`{table}`")
        rows = cur.fetchall()
    n = 0
    for r in rows:
        n += sum(1 for v in r[: len(text)] if v is not None and "\x00" in v)
        n += sum(1 for v in r[len(text) :] if v is not None and any("\x00" in s for s in _strings(json.loads(v))))
    return n


def _metric(port: int, db: str, table: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(
        r'^cdc_merger_nul_values_changed_total\{sink="postgres",table="%s"\} (\S+)$' % re.escape(f"{db}.{table}"),
        text,
        re.M,
    )
    return float(m.group(1)) if m else None


@pytest.mark.timeout(600)
def test_values_changed_by_the_nul_policy_are_counted_and_reported(stack, unique_name, pipeline):
    db = pipeline.database(f"nc_{unique_name}")
    port, mcfg, merger, mark = pipeline.metrics_port, pipeline.merger_config, pipeline.merger, pipeline.mark()
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    _run(
        conn,
        f"CREATE DATABASE {db}",
        f"USE {db}",
        "CREATE TABLE docs (id INT PRIMARY KEY, v VARCHAR(40), t TEXT, j JSON)",
        "CREATE TABLE notes (id INT PRIMARY KEY, v VARCHAR(40), t TEXT)",
        # snapshotted: left out of the binlog, the snapshot of the new tables brings them
        "SET SESSION sql_log_bin = 0",
        (
            "INSERT INTO docs VALUES (1, %s, 'plain', %s), (2, 'none', NULL, '{\"k\": \"ok\"}')",
            ("a\x00b", '{"k": "x\\u0000y"}'),
        ),
        ("INSERT INTO notes VALUES (1, %s, %s), (2, 'ok', 'ok')", ("\x00", "t\x00\x00")),
        "SET SESSION sql_log_bin = 1",
    )
    checker = SinkChecker(stack, pipeline.work)
    try:
        for t in ("docs", "notes"):
            checker.wait_equal(db, t, proc=merger)
        # streamed: every NUL-bearing value is written once (new keys, or a value that had none)
        _run(
            conn,
            ("INSERT INTO docs VALUES (3, 'ok', %s, %s)", ("long \x00 text", '["\\u0000", "b"]')),
            ("UPDATE docs SET t = %s WHERE id = 2", ("now\x00",)),
            ("INSERT INTO notes VALUES (3, %s, NULL)", ("z\x00",)),
            "DELETE FROM notes WHERE id = 2",
        )
        for t in ("docs", "notes"):
            checker.wait_equal(db, t, proc=merger)
        want = {
            # j is text in PostgreSQL (a MariaDB JSON column): its escapes \u0000 stay, nothing changed
            "docs": _nul_values(conn, db, "docs", ["v", "t"], []),
            "notes": _nul_values(conn, db, "notes", ["v", "t"], []),
        }
        assert want == {"docs": 3, "notes": 3}
        assert _nul_values(conn, db, "docs", [], ["j"]) == 2  # the statements above, read back from the source

        def counted():
            tables = json.loads(run_cli("status", "--json", "-c", str(mcfg)).stdout)["tables"]
            got = {t: tables.get(f"{db}.{t}", {}).get("nul_values_changed") for t in want}
            return got == want and all(_metric(port, db, t) == want[t] for t in want)

        deadline = time.monotonic() + 60
        while not counted() and time.monotonic() < deadline:
            time.sleep(1)
        status = json.loads(run_cli("status", "--json", "-c", str(mcfg)).stdout)["tables"]
        assert {t: status[f"{db}.{t}"]["nul_values_changed"] for t in want} == want
        assert {t: _metric(port, db, t) for t in want} == {t: float(n) for t, n in want.items()}

        log = pipeline.merger_log_since(mark)
        for t, cols in (("docs", ("'v'",)), ("notes", ("'v'", "'t'"))):
            lines = [ln for ln in log.splitlines() if f"table {db}.{t}: NUL characters (U+0000) removed" in ln]
            assert len(lines) == 1, lines  # once per table, however many batches
            assert all(c in lines[0] for c in cols), lines[0]
            assert "nul_policy: strip" in lines[0] and "docs/values.md" in lines[0] and "WARNING" in lines[0]

        res = run_cli("verify", "-c", str(mcfg), "--json", f"{db}.docs", f"{db}.notes")
        assert res.returncode == 0, res.stdout + res.stderr
        results = {(r["table"], r["sink"]): r for r in json.loads(res.stdout)["tables"]}
        for t, n in want.items():
            pg, delta = results[(f"{db}.{t}", "postgres")], results[(f"{db}.{t}", "delta")]
            assert pg["verdict"] == "equal" and pg["nul_values_changed"] == n and pg["nul_policy"] == "strip"
            assert pg["nul_note"].startswith(f"equal except {n} values changed by the NUL policy (nul_policy: strip")
            assert delta["verdict"] == "equal" and delta["nul_values_changed"] == 0 and delta["nul_note"] is None
        # the JSON table was compared row by row; the text-only one's digests differ in
        # PostgreSQL (the source's text keeps its NULs), so its rows were compared under the
        # rule, which counted them; Delta holds the NULs: its digests settled the chunk
        assert results[(f"{db}.docs", "postgres")]["digest_chunks"] == 0
        assert results[(f"{db}.notes", "postgres")]["digest_chunks"] == 0
        assert results[(f"{db}.notes", "delta")]["digest_chunks"] == 1
        text = run_cli("verify", "-c", str(mcfg), "--sink", "postgres", f"{db}.notes")
        assert text.returncode == 0 and "equal except 3 values changed by the NUL policy" in text.stdout, text.stdout
    finally:
        checker.close()
        conn.close()
