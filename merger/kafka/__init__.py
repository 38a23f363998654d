"""The ``cdc_kafka`` Spark stream source: Kafka read with confluent-kafka as a PySpark Python
data source (options and schema: docs/configuration.md).

``options`` parses the options, ``offsets`` plans offsets and ranges (pure), ``probe`` asks
the broker for partitions and ends (driver), ``reader`` reads ranges into Arrow (executors),
``datasource`` is the Spark data source that ties them together."""

from importlib import import_module
from typing import Any

# where each name lives: imported on first use, so that a light module of the package (the
# pacing rule `cdc status` reads) does not bring pyspark in with it
_HOMES = {
    "FORMAT_NAME": "merger.kafka.datasource",
    "CdcKafkaDataSource": "merger.kafka.datasource",
    "CdcKafkaStreamReader": "merger.kafka.datasource",
    "KafkaSourceError": "merger.kafka.options",
    "SourceOptions": "merger.kafka.options",
    "SCHEMA": "merger.kafka.reader",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'merger.kafka' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
