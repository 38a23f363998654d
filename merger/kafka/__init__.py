"""The ``cdc_kafka`` Spark stream source: Kafka read with confluent-kafka as a PySpark Python
data source (options and schema: docs/configuration.md).

``options`` parses the options, ``offsets`` plans offsets and ranges (pure), ``probe`` asks
the broker for partitions and ends (driver), ``reader`` reads ranges into Arrow (executors),
``datasource`` is the Spark data source that ties them together."""

from merger.kafka.datasource import FORMAT_NAME, CdcKafkaDataSource, CdcKafkaStreamReader
from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.reader import SCHEMA

__all__ = [
    "FORMAT_NAME",
    "SCHEMA",
    "CdcKafkaDataSource",
    "CdcKafkaStreamReader",
    "KafkaSourceError",
    "SourceOptions",
]
