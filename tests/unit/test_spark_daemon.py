"""The merger's Python daemon: workers import the installed pyspark, not the bundled zip
(Python compiles a zip's modules on every import: 1.5-2 CPU seconds per worker)."""

from __future__ import annotations

import os
from pathlib import Path

import pyspark

from merger.spark_daemon import without_bundled_pyspark

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
