"""Spark's Python daemon (``spark.python.daemon.module``), importing pyspark from its
installed package instead of ``$SPARK_HOME/python/lib/pyspark.zip``.

Spark puts that zip first on every Python worker's path. Python cannot cache bytecode
for modules in a zip, so each worker process the daemon forks compiles pyspark from
source: measured 1.5-2 CPU seconds per worker, ~5 CPU seconds in the first micro-batches
of a merger on 2 cores, while a snapshot waits behind them. With pyspark installed by
pip, the zip holds the same files as the package, whose ``__pycache__`` is warm.

Used only in local mode with a pip-installed pyspark (``merger.spark.session.make_spark``); the
daemon forks the workers, so it must import nothing that starts threads.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder


def without_bundled_pyspark(path: list[str], spark_home: str | None) -> list[str]:
    """``path`` without ``spark_home``'s pyspark zip, when the pyspark found without it
    is the package that ``spark_home`` is (a pip install); else ``path`` unchanged."""
    if not spark_home:
        return path
    bundled = os.path.realpath(os.path.join(spark_home, "python", "lib", "pyspark.zip"))
    rest = [p for p in path if os.path.realpath(p or ".") != bundled]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.origin:
        return path
    if os.path.realpath(os.path.dirname(spec.origin)) != os.path.realpath(spark_home):
        return path
    return rest


if __name__ == "__main__":
    sys.path[:] = without_bundled_pyspark(sys.path, os.environ.get("SPARK_HOME"))
    from pyspark.daemon import manager

    manager()
