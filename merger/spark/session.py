"""The merger's SparkSession: made (local mode unless started by spark-submit, the project
on the workers' PYTHONPATH, the JVM started from the class-data archive) and stopped."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from cdc.config import SPARK_AUTH_SECRET, MergerConfig

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the project, for Spark's Python workers
SPARK_SITE = Path(__file__).resolve().parent / "site"
JDBC_JARS = ["/usr/share/java/mariadb-java-client.jar"]


CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"

# The driver JVM compiles with C1 only. It runs the same few hundred planner and scheduler
# methods twice a second, so C2 kept recompiling them for minutes (measured at 10 changes/s:
# the JIT threads were 2/3 of the JVM's CPU 30-50 s after the start, still 1/3 after 3 min).
# C1-only, same bench, back to back: the JVM's CPU at 1,000 changes/s 15.6 -> 10.4 core-s per
# minute; during a 1M-row snapshot 2.7 -> 1.2 core-s, wall 11.7-12.4 -> 10.1-10.2 s.
DRIVER_JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


class Py4jRetryNoise(logging.Filter):
    """Drops py4j's INFO record, with its traceback, for a command it sends again on a
    fresh connection after the JVM's side closed one ("Answer from Java side is empty", seen
    while the merger stops). The command is retried; a retry that fails too is logged by
    py4j at ERROR and kept. On the root logger: py4j logs this one with ``logging.info``."""

    def filter(self, record: logging.LogRecord) -> bool:
        retried = (
            record.levelno < logging.WARNING
            and record.msg == "Exception while sending command."
            and "py4j" in Path(record.pathname).parts
        )
        return not retried or logging.getLogger().isEnabledFor(logging.DEBUG)


def quiet_py4j_retries() -> None:
    root = logging.getLogger()
    if not any(isinstance(f, Py4jRetryNoise) for f in root.filters):
        root.addFilter(Py4jRetryNoise())


def make_spark(config: MergerConfig, class_archive: bool = True):
    """A SparkSession; local mode unless started by spark-submit. The project must be
    importable by Spark's Python workers (PYTHONPATH is set before the JVM starts).
    ``class_archive``: start the JVM from the class-data archive if there is one."""
    from merger.snapshot.chunk_read import launched_locally, local_default_master, read_parallelism

    quiet_py4j_retries()
    local = launched_locally()
    # the project for the workers; locally also merger/spark/site, whose sitecustomize makes
    # every Python process Spark starts import the installed pyspark, not the bundled zip
    ours = [str(ROOT)] + ([str(SPARK_SITE)] if local else [])
    paths = ours + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    jars = [j for j in JDBC_JARS if Path(j).exists()]
    builder = SparkSession.builder.appName("cdc-merger")
    if local:
        master = config.spark_master
        if local_default_master(config):
            # task slots (threads) for the snapshot's reads plus the stream's Kafka tasks: a
            # read must not queue behind a micro-batch (measured: the first window took 6 s)
            master = f"local[{read_parallelism(config) + 2}]"
        builder = builder.master(master)
        # workers import the installed pyspark (cached bytecode), not the bundled zip
        builder = builder.config("spark.python.daemon.module", "merger.spark.daemon")
        # the installed pyspark's class (spark-submit may bring another Spark): checkpoint
        # files through FileSystem.rename, which forks no readlink per file as FileContext's
        # does without Hadoop's native library (one merger per state_dir: merger.lock)
        builder = builder.config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.memory": "2g",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.python.worker.reuse": "true",
        "spark.ui.showConsoleProgress": "false",  # progress bars would fill the merger log
        # Spark keeps a pool of Python workers per environment; SQL tasks (the Kafka
        # source) add this variable, RDD tasks (chunk reads) do not: with it in both, both
        # share one pool, and the workers the start-up read spawned serve the stream too
        # (the read uses the reads' slots only: the stream may add a worker of its own)
        "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK": "1",
        # local files without Hadoop's .crc companions: without Hadoop's native library,
        # every checkpoint file it writes and renames forks chmod/readlink, 20 processes per
        # micro-batch with checksums (2 with these two settings); measured: JVM CPU -25% at
        # 1,000 changes/s. A file is still written aside and renamed (rename(2)): a crash
        # leaves only the temporary
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    }
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(spark_auth_conf(config))
    conf.update(config.spark_conf)
    if "SPARK_SUBMIT" not in os.environ:  # we start the driver JVM (before it starts: options)
        archive = ""
        if class_archive and config.spark_class_archive:
            from merger.spark import archive as spark_archive

            archive = spark_archive.java_options()
        # ours first: a user's own -XX:TieredStopAtLevel in spark_conf comes later and wins
        options = [DRIVER_JIT_OPTIONS, conf.get("spark.driver.extraJavaOptions"), archive]
        conf["spark.driver.extraJavaOptions"] = " ".join(filter(None, options))
    for k, v in conf.items():
        builder = builder.config(k, v)
    secret = config.spark_auth_secret()
    if secret is not None:
        # pyspark puts every setting on spark-submit's command line when it starts the JVM
        # (any local user may read that): the JVM starts without the secret, which goes
        # into the driver's SparkConf only. Under spark-submit the JVM is already there.
        _launch_jvm(dict(getattr(builder, "_options", {})))
        builder = builder.config(SPARK_AUTH_SECRET, secret.get_secret_value())
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet_query_failure(spark)
    return spark


def spark_auth_conf(config: MergerConfig) -> dict[str, str]:
    """With a cluster secret configured (``spark_auth_secret_env``/``_file``): Spark's RPC
    authenticated with it (the standalone master, workers and executors must have the same
    one) and encrypted (AES; spark.network.crypto). The secret itself is not in here."""
    if config.spark_auth_secret() is None:
        return {}
    return {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}


def _launch_jvm(settings: dict[str, str]) -> None:
    """Starts pyspark's JVM gateway with ``settings`` (if this process starts it and has
    not yet), so that settings added to the session afterwards reach the SparkConf only."""
    from pyspark import SparkConf, SparkContext

    from merger.snapshot.chunk_read import launched_locally

    if launched_locally() and SparkContext._gateway is None:
        launch = SparkConf(loadDefaults=False).setAll([(k, str(v)) for k, v in settings.items()])
        SparkContext._ensure_initialized(conf=launch)


# the loggers that print a failed query's Java stack trace before our one-line error (Spark
# 4.x and 3.x class names); ``Merger._watch`` logs an unexpected failure's trace itself
QUERY_FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
)


# what a task killed by the stop logs on its way out (a broadcast block already removed
# under its completion listener: "Block broadcast_1 does not exist"); nothing is lost by it
SHUTDOWN_NOISE_LOGGERS = ("org.apache.spark.TaskContextImpl",)


def _quiet_query_failure(spark) -> None:
    _loggers_off(spark, QUERY_FAILURE_LOGGERS)


def quiet_stopping_tasks(spark) -> None:
    """Called once the merger stops, before its query does: the tasks it kills say nothing."""
    _loggers_off(spark, SHUTDOWN_NOISE_LOGGERS)


def _loggers_off(spark, names: tuple[str, ...]) -> None:
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in names:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception as exc:  # another logging backend: its traces stay, nothing breaks
        log.debug("cannot quiet %s: %s", ", ".join(names), exc)


def stop_spark(spark, timeout_s: float = 30.0) -> None:
    """Stops the session and, in local mode, waits for the JVM to exit: until then it may
    still write to stderr. Never raises (it runs while an error is on its way out)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    try:
        spark.stop()
    except Exception as exc:
        log.debug("stopping Spark: %s", exc)
    if proc is None:  # spark-submit: the JVM is our parent and ends after us
        return
    try:
        proc.stdin.close()  # Spark's JVM exits when its parent's pipe closes
        proc.wait(timeout=timeout_s)
    except Exception as exc:
        log.debug("the Spark JVM did not exit in %.0fs (%s): killed", timeout_s, exc)
        proc.kill()
