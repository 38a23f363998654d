"""Prometheus metrics of ingest (names follow Debezium's streaming metrics where they
overlap: MilliSecondsBehindSource, TotalNumberOfEventsSeen, ...)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

EVENTS = Counter("cdc_ingest_events", "Change events written, by table and op", ["table", "op"])
TRANSACTIONS = Counter("cdc_ingest_source_transactions", "Source transactions read")
KAFKA_COMMITS = Counter("cdc_ingest_kafka_transactions", "Kafka transactions committed")
ERRORS = Counter("cdc_ingest_errors", "Errors, by kind", ["kind"])
BEHIND = Gauge(
    "cdc_ingest_MilliSecondsBehindSource", "Milliseconds between the source commit and ingest reading the event"
)
BINLOG_POSITION = Gauge("cdc_ingest_binlog_position", "Position in the current binlog file", ["file"])
GTID_SEQ = Gauge("cdc_ingest_gtid_sequence", "Sequence number of the last committed GTID", ["domain"])
CONNECTED = Gauge("cdc_ingest_connected", "1 while connected to the source's binlog")
MARKERS = Counter("cdc_ingest_watermark_markers", "Watermark markers written", ["table", "kind"])
UNAVAILABLE = Gauge(
    "cdc_ingest_unavailable", "1 while ingest waits for the source or the broker to come back, by kind", ["kind"]
)
RETRY_DELAY = Gauge("cdc_ingest_retry_delay_seconds", "Backoff before the next retry (0 while streaming)")
# a sharded source's, per shard (the gauges above then show whichever shard set them last)
SHARD_CONNECTED = Gauge("cdc_ingest_shard_connected", "1 while connected to the shard's binlog", ["shard"])
SHARD_BEHIND = Gauge(
    "cdc_ingest_shard_MilliSecondsBehindSource",
    "Milliseconds between the shard's commit and ingest reading the event",
    ["shard"],
)
SHARD_WAITING = Gauge(
    "cdc_ingest_shard_waiting_for_switch",
    "the move whose switch the shard's reader waits at, for the source shard to reach its own (0: none)",
    ["shard"],
)
SHARD_UNAVAILABLE = Gauge("cdc_ingest_shard_unavailable", "1 while ingest waits for the shard to come back", ["shard"])
SHARD_COMMITTED_MS = Gauge(
    "cdc_ingest_shard_committed_timestamp_ms", "When the shard's position last moved in a committed vector", ["shard"]
)
