"""Prometheus metrics of the merger (named like Debezium's where they overlap)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

BEHIND = Gauge("cdc_merger_MilliSecondsBehindSource", "Source commit to sink apply, last batch", ["table"])
SHARD_BEHIND = Gauge(
    "cdc_merger_shard_MilliSecondsBehindSource", "A sharded source's: per shard, last batch", ["table", "shard"]
)
SHARD_CHUNKS_REMAINING = Gauge(
    "cdc_merger_shard_snapshot_ChunksRemaining", "A sharded source's: snapshot chunks not emitted", ["table", "shard"]
)
ROWS_SCANNED = Gauge("cdc_merger_snapshot_RowsScanned", "Snapshot rows emitted", ["table"])
CHUNKS_REMAINING = Gauge("cdc_merger_snapshot_ChunksRemaining", "Snapshot chunks not yet emitted", ["table"])
ROWS_APPLIED = Gauge("cdc_merger_rows_applied", "Streamed changes applied", ["table"])
PHASE = Gauge("cdc_merger_table_phase", "1 for the table's current phase", ["table", "phase"])
BAD_RECORDS = Gauge("cdc_merger_bad_records", "Records sent to the dead-letter topic")
LAST_BATCH = Gauge("cdc_merger_last_batch", "Id of the last micro-batch")
READ_TASKS = Gauge("cdc_merger_last_batch_read_tasks", "Spark tasks that read the last micro-batch with records")
# counted where it happens (merger.sinks.nul_count), not from the status
NUL_VALUES_CHANGED = Counter(
    "cdc_merger_nul_values_changed",
    "Stored values whose NUL characters the sink's nul_policy removed or replaced",
    ["table", "sink"],
)

PHASES = ("snapshotting", "streaming", "paused", "failed", "dropped")


_observed: dict[str, tuple] = {}  # table -> the figures last set (a batch sets only what moved)


def observe(status: dict) -> None:
    BAD_RECORDS.set(status.get("bad_records", 0))
    if status.get("last_batch") is not None:
        LAST_BATCH.set(status["last_batch"])
    for name, t in status.get("tables", {}).items():
        figures = (
            t.get("lag_ms"),
            t.get("snapshot_rows", 0),
            max(0, t.get("chunks_total", 0) - t.get("chunks_done", 0)),
            t.get("rows_applied", 0),
            t.get("phase"),
            str(t.get("shards")),
        )
        if _observed.get(name) == figures:
            continue  # 500 tables x 9 labelled gauges on every batch cost what one table changed
        _observed[name] = figures
        lag_ms, snapshot_rows, chunks_remaining, rows_applied, current, _ = figures
        for shard, s in (t.get("shards") or {}).items():
            if s.get("lag_ms") is not None:
                SHARD_BEHIND.labels(name, shard).set(s["lag_ms"])
            SHARD_CHUNKS_REMAINING.labels(name, shard).set(max(0, s.get("chunks_total", 0) - s.get("chunks_done", 0)))
        if lag_ms is not None:
            BEHIND.labels(name).set(lag_ms)
        ROWS_SCANNED.labels(name).set(snapshot_rows)
        CHUNKS_REMAINING.labels(name).set(chunks_remaining)
        ROWS_APPLIED.labels(name).set(rows_applied)
        for phase in PHASES:
            PHASE.labels(name, phase).set(1 if current == phase else 0)
