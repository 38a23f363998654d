"""The merger's Spark starts from the class-data archive, and ignores a bad one.

Each case starts its own JVM in a child process (a session in this process would be
reused by ``getOrCreate`` with its old options)."""

import os
import subprocess
import sys

import pytest

from merger.spark import archive as spark_archive
from tests.conftest import ROOT

SESSION = """
import sys
from cdc.config import MergerConfig
from merger.spark.session import make_spark
spark = make_spark(MergerConfig(spark_conf={"spark.driver.extraJavaOptions": sys.argv[1]}))
assert spark.sql("SELECT 41 + 1 AS x").collect()[0].x == 42
args = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
print("JVM-ARGS", " ".join(str(a) for a in args))
jvm = spark.sparkContext._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
)
print("JIT-LEVEL", bean.getVMOption("TieredStopAtLevel").getValue())
"""


def _start_session(tmp_path, java_options: str, env: dict | None = None, jit_level: str | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-c", SESSION, java_options],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    if jit_level is not None:
        assert f"JIT-LEVEL {jit_level}" in out.stdout.splitlines(), out.stdout[-2000:]
    return next(line for line in out.stdout.splitlines() if line.startswith("JVM-ARGS"))


@pytest.mark.timeout(600)
def test_the_merger_jvm_maps_the_archive_that_bootstrap_built(tmp_path):
    path = spark_archive.build()  # the README's install built it: this only checks it is there
    loads = tmp_path / "class-load.log"
    # the JVM's own reason when it refuses the archive (the merger's `-Xlog:cds=off` only
    # silences standard output, not this file)
    cds = tmp_path / "cds.log"
    user = f"-Xlog:class+load=info:file={loads} -Xlog:cds=info,cds+dynamic=info,class+path=info:file={cds}"
    args = _start_session(tmp_path, user, jit_level="1")  # the merger's JVM compiles with C1 only
    assert f"-XX:SharedArchiveFile={path}" in args
    assert f"-Xlog:class+load=info:file={loads}" in args  # the user's options are kept
    text = loads.read_text()
    shared = text.count("source: shared objects file (top)")  # the dynamic archive's layer
    said = ("mismatch", "error", "fail", "unable", "not the one")
    why = [line[:300] for line in cds.read_text().splitlines() if any(w in line.lower() for w in said)]
    assert shared > 5000, f"only {shared} classes came from the archive {path}; the JVM said: {why[-8:]}"


@pytest.mark.timeout(600)
def test_a_corrupt_archive_is_ignored_and_spark_starts(tmp_path):
    env = {"CDC_CACHE_DIR": str(tmp_path / "cache")}
    path = subprocess.run(
        [sys.executable, "-c", "from merger.spark.archive import archive_path; print(archive_path())"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"\x00garbage" * 100_000)
    args = _start_session(tmp_path, "", env)
    assert f"-XX:SharedArchiveFile={path}" in args


@pytest.mark.timeout(600)
def test_a_users_own_jit_level_wins_over_the_mergers(tmp_path):
    args = _start_session(tmp_path, "-XX:TieredStopAtLevel=4", jit_level="4")
    assert args.index("-XX:TieredStopAtLevel=1") < args.index("-XX:TieredStopAtLevel=4")
