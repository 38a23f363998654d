"""Operating the merger while it streams: `cdc snapshot --where`, pause / resume / cancel of
a running snapshot, `cdc status`, the Prometheus endpoint, and the merger started by
`spark-submit`. Real MariaDB, ingest, broker, Spark local mode, Delta and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pymysql
import pytest
from deltalake import DeltaTable

from cdc import stack as local_stack
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.support import readback

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _cdc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _status(cfg: Path) -> dict:
    out = _cdc("status", "-c", str(cfg), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _wait(predicate, timeout_s: float, what: str, proc=None, interval: float = 1.0):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"merger exited while waiting for {what}:\n{proc.log_text()[-4000:]}")
        try:
            last = predicate()
        except (OSError, ValueError, KeyError, AssertionError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout_s}s waiting for {what} (last: {last!r})"
        + (f"\n{proc.log_text()[-3000:]}" if proc else "")
    )


def _table_status(cfg: Path, table: str) -> dict:
    return _status(cfg)["tables"].get(table) or {}


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def _metric(text: str, name: str, table: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'{name}{{table="{table}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_snapshot_where_pause_resume_cancel_status_and_metrics(stack, tmp_path, unique_name):
    db = f"ops_{unique_name}"
    conn = _conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
        cur.execute("INSERT INTO t SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_3000")
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO u SELECT seq, CONCAT('u', seq) FROM seq_1_to_16000")
    metrics_port = local_stack.free_port()
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        **{
            "snapshot.chunk_size": 1000,
            "snapshot.chunks_per_window": 1,
            "snapshot.parallelism": 1,
            # windows emitted in slices over several batches, on an idle source (needs the ticks)
            "snapshot.emit_rows_per_batch": 600,
            "metrics_port": metrics_port,
        },
    )
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    try:
        for table in ("t", "u"):
            checker.wait_equal(db, table, proc=merger, timeout_s=400)
        # the status file is written after a batch: the phase may lag the rows by one batch
        st = _wait(
            lambda: (lambda s: s if s.get("phase") == "streaming" and s.get("snapshot") == "finished" else None)(
                _table_status(mcfg, f"{db}.t")
            ),
            120,
            "table t to finish its snapshot",
            merger,
        )
        assert st["chunks_done"] == st["chunks_total"] == 3

        # -- metrics: Debezium-like names, values as status says
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {db}.t SET n = n + 1 WHERE id = 5")
        checker.wait_equal(db, "t", proc=merger)
        text = _wait(
            lambda: (lambda m: m if _metric(m, "cdc_merger_MilliSecondsBehindSource", f"{db}.t") is not None else None)(
                _metrics(metrics_port)
            ),
            60,
            "lag metric",
            merger,
        )
        assert _metric(text, "cdc_merger_snapshot_RowsScanned", f"{db}.u") == 16000
        assert _metric(text, "cdc_merger_snapshot_ChunksRemaining", f"{db}.u") == 0
        assert 'cdc_merger_table_phase{phase="streaming",table="' + f"{db}.t" + '"} 1.0' in text

        # -- --where: the sinks lost rows 1..100 (drift); a snapshot of id <= 50 brings back
        # exactly those, and nothing else
        DeltaTable(str(tmp_path / "delta" / db / "t")).delete("id <= 100")
        pg = checker.pg
        pg.session.run(lambda c: c.execute(f'DELETE FROM "{db}"."t" WHERE id <= 100'))
        out = _cdc("snapshot", f"{db}.t", "--where", "id <= 50", "-c", str(mcfg))
        assert out.returncode == 0, out.stderr
        # (the status may still show the previous, finished plan for a moment)
        _wait(
            lambda: (
                checker.counts(db, "t") == {"source": 3000, "delta": 2950, "postgres": 2950}
                and _table_status(mcfg, f"{db}.t").get("snapshot") == "finished"
            ),
            180,
            "the --where snapshot",
            merger,
        )
        for name, sink in (("delta", checker.delta), ("postgres", checker.pg)):
            ids = set(readback.rows(sink, (db, "t")).column("id").to_pylist())
            assert set(range(1, 51)) <= ids, name
            assert not ids & set(range(51, 101)), name

        # -- pause a running snapshot: no chunk finishes while paused; resume finishes it
        for args in (("snapshot", f"{db}.u"), ("snapshot", f"{db}.u", "--pause")):
            out = _cdc(*args, "-c", str(mcfg))
            assert out.returncode == 0, out.stderr
        _wait(lambda: _table_status(mcfg, f"{db}.u").get("snapshot") == "paused", 60, "paused", merger)
        time.sleep(8)  # windows opened before the pause may still be emitted
        before = _table_status(mcfg, f"{db}.u")
        time.sleep(5)
        after = _table_status(mcfg, f"{db}.u")
        assert after["snapshot"] == "paused" and after["phase"] == "snapshotting"
        assert after["chunks_done"] == before["chunks_done"] < after["chunks_total"] == 16
        human = _cdc("status", "-c", str(mcfg))
        assert human.returncode == 0 and "(paused)" in human.stdout
        assert _cdc("snapshot", f"{db}.u", "--resume", "-c", str(mcfg)).returncode == 0
        _wait(
            lambda: (lambda s: s.get("snapshot") == "finished" and s["phase"] == "streaming")(
                _table_status(mcfg, f"{db}.u")
            ),
            300,
            "the resumed snapshot to finish",
            merger,
        )
        checker.wait_equal(db, "u", proc=merger)

        # -- cancel: the plan stops, the table streams on
        for args in (("snapshot", f"{db}.u"), ("snapshot", f"{db}.u", "--cancel")):
            assert _cdc(*args, "-c", str(mcfg)).returncode == 0
        done = _wait(
            lambda: (lambda s: s if s.get("snapshot") == "cancelled" and s["phase"] == "streaming" else None)(
                _table_status(mcfg, f"{db}.u")
            ),
            60,
            "cancelled",
            merger,
        )
        assert done["chunks_done"] < done["chunks_total"]
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {db}.u SET v = 'after cancel' WHERE id % 100 = 0")
            cur.execute(f"DELETE FROM {db}.u WHERE id > 15900")
        checker.wait_equal(db, "u", proc=merger)

        # -- user mistakes: one line, exit 2
        bad = _cdc("snapshot", "nodot", "-c", str(mcfg))
        assert bad.returncode == 2 and "Traceback" not in bad.stderr and "<database>.<table>" in bad.stderr
    finally:
        merger.stop()
        ingest.stop()
        checker.close()
        conn.close()


def _venv_env() -> dict:
    """As in an activated virtual environment: spark-submit finds pyspark's SPARK_HOME
    through the `python` on PATH."""
    import os

    bindir = str(Path(sys.executable).parent)
    return dict(
        os.environ,
        PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
        VIRTUAL_ENV=str(Path(bindir).parent),
        PYSPARK_PYTHON=sys.executable,
    )


@pytest.mark.timeout(900)
def test_merger_runs_under_spark_submit(stack, tmp_path, unique_name):
    """The documented spark-submit form: the project zipped into --py-files, the MariaDB
    JDBC driver in --jars, merger/app.py as the application."""
    db = f"ss_{unique_name}"
    conn = _conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_5000")
    conn.close()
    bundle = tmp_path / "cdc.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        for pkg in ("cdc", "ingest", "merger"):
            for f in (ROOT / pkg).rglob("*.py"):
                zf.write(f, f.relative_to(ROOT))
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    spark_submit = Path(sys.executable).parent / "spark-submit"
    log = open(tmp_path / "spark-submit.log", "ab")
    # run from elsewhere: only --py-files makes the project importable
    proc = subprocess.Popen(
        [
            str(spark_submit),
            "--master",
            "local[2]",
            "--jars",
            "/usr/share/java/mariadb-java-client.jar",
            "--py-files",
            str(bundle),
            str(ROOT / "merger" / "app.py"),
            "-c",
            str(mcfg),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=_venv_env(),
    )
    checker = SinkChecker(stack, tmp_path)

    class _Proc:
        def alive(self):
            return proc.poll() is None

        def log_text(self):
            return (tmp_path / "spark-submit.log").read_text(errors="replace")

    try:
        checker.wait_equal(db, "t", proc=_Proc(), timeout_s=400)
        c = _conn(stack, db)
        with c.cursor() as cur:
            cur.execute("UPDATE t SET v = 'streamed' WHERE id <= 10")
            cur.execute("DELETE FROM t WHERE id > 4990")
        c.close()
        checker.wait_equal(db, "t", proc=_Proc())
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        ingest.stop()
        checker.close()
