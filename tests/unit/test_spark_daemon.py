"""The merger's Python daemon: workers import the installed pyspark, not the bundled zip
(Python compiles a zip's modules on every import: 1.5-2 CPU seconds per worker)."""

from __future__ import annotations

import os
from pathlib import Path

import pyspark

from merger.spark.daemon import without_bundled_pyspark

INSTALLED = str(Path(pyspark.__file__).parent)
ZIP = os.path.join(INSTALLED, "python", "lib", "pyspark.zip")
PY4J = os.path.join(INSTALLED, "python", "lib", "py4j-0.10.9.9-src.zip")
SITE = str(Path(INSTALLED).parent)


def test_the_zip_of_the_installed_pyspark_is_dropped():
    path = ["/work", ZIP, PY4J, SITE]
    assert without_bundled_pyspark(path, INSTALLED) == ["/work", PY4J, SITE]


def test_another_spark_home_keeps_its_zip(tmp_path):
    # a Spark distribution of its own (spark-submit): its pyspark may differ from pip's
    home = tmp_path / "spark"
    (home / "python" / "lib").mkdir(parents=True)
    other_zip = str(home / "python" / "lib" / "pyspark.zip")
    path = [other_zip, SITE]
    assert without_bundled_pyspark(path, str(home)) == path


def test_no_installed_pyspark_keeps_the_zip():
    assert without_bundled_pyspark([ZIP], INSTALLED) == [ZIP]


def test_no_spark_home_changes_nothing():
    assert without_bundled_pyspark([ZIP, SITE], None) == [ZIP, SITE]


def test_spark_site_drops_the_zip_at_start_and_runs_the_sitecustomize_it_hides(tmp_path):
    # merger/spark/site is on the PYTHONPATH of every Python process the local Spark starts
    import subprocess
    import sys

    from merger.spark.session import ROOT, SPARK_SITE

    hidden = tmp_path / "other"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import os\nos.environ['HIDDEN_RAN'] = '1'\n")
    probe = "import os, sys; print(os.environ.get('HIDDEN_RAN'), any(p.endswith('pyspark.zip') for p in sys.path))"
    env = {
        "PYTHONPATH": os.pathsep.join([ZIP, PY4J, str(ROOT), str(SPARK_SITE), str(hidden)]),
        "SPARK_HOME": INSTALLED,
        "PATH": os.environ.get("PATH", ""),
    }
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]
    # another Spark (spark-submit's own): its zip stays
    other = {**env, "SPARK_HOME": str(tmp_path / "spark")}
    out = subprocess.run([sys.executable, "-c", probe], env=other, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True"]
