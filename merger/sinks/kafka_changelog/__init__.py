"""The Kafka merged-changelog sink (``sink.py`` says what it writes and how)."""

from merger.sinks.kafka_changelog.sink import KafkaChangelogSink

__all__ = ["KafkaChangelogSink"]
