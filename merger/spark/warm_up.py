"""The child process of ``merger.spark.archive.build``: a short Spark run that loads the
classes a merger loads, then lets the JVM exit and dump them into the class-data archive
(``python -m merger.spark.warm_up <archive path>``)."""

from __future__ import annotations

import sys
import time

from cdc.config import MergerConfig
from merger.spark.archive import BUILD_TIMEOUT_S
from merger.spark.session import make_spark, stop_spark


def warm_up_source():
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Reader(DataSourceReader):
        def read(self, partition):
            yield (1, "one")

    class WarmUpSource(DataSource):
        @classmethod
        def name(cls):
            return "cdc_warm_up"

        def schema(self):
            return "id INT, v STRING"

        def reader(self, schema):
            return Reader()

    return WarmUpSource


def warm_up(dump_to: str) -> None:
    """Loads what a merger loads, then lets the JVM exit and dump."""

    # the merger's own session settings (same jars, same Python workers), dumping at exit
    dump = f"-XX:ArchiveClassesAtExit={dump_to} -Xlog:cds=off"
    spark = make_spark(MergerConfig(spark_conf={"spark.driver.extraJavaOptions": dump}), class_archive=False)
    df = spark.range(1000).selectExpr("id", "cast(id as string) AS s", "cast(id as decimal(20,2)) AS d")
    df.groupBy((df.id % 7).alias("k")).count().collect()
    df.toArrow()
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()  # a Python worker
    spark.dataSource.register(warm_up_source())
    spark.read.format("cdc_warm_up").load().collect()  # a Python data source, as the Kafka one
    query = spark.readStream.format("rate").load().writeStream.foreachBatch(lambda b, i: b.count()).start()
    deadline = time.monotonic() + 60
    while not query.recentProgress and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    stop_spark(spark, BUILD_TIMEOUT_S)  # the JVM dumps the archive as it exits


if __name__ == "__main__":
    warm_up(sys.argv[1])
