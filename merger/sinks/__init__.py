"""Sinks: where the merger writes merged changes (see merger/sinks/base.py for the contract).

Importing a concrete sink pulls in its client library (deltalake, psycopg,
confluent-kafka) only when that sink is used.
"""

from merger.sinks.base import (
    IncompatibleSchemaChange,
    Sink,
    SinkError,
    SinkUnavailable,
    TableId,
    UnstorableValue,
)

__all__ = [
    "Sink",
    "TableId",
    "SinkError",
    "SinkUnavailable",
    "IncompatibleSchemaChange",
    "UnstorableValue",
    "DeltaSink",
    "PostgresSink",
    "PgSettings",
    "KafkaChangelogSink",
]


def __getattr__(name):
    if name == "DeltaSink":
        from merger.sinks.delta import DeltaSink

        return DeltaSink
    if name in ("PostgresSink", "PgSettings"):
        from merger.sinks import postgres

        return getattr(postgres, name)
    if name == "KafkaChangelogSink":
        from merger.sinks.kafka_changelog import KafkaChangelogSink

        return KafkaChangelogSink
    raise AttributeError(name)
