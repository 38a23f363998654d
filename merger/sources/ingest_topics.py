"""The kind of source ``ingest`` (``IngestTopics``): the topics the project's own ``ingest``
writes (``source_connector: ingest``, the default).

* **Replays are recognised by the ``cdc.position`` header** (``cdc.wire.position``): a
  position only grows along the binlog, every record has its own, so a record at or
  below the highest one taken from its partition is a replay and is dropped (a tombstone
  passes once after its delete, whose position it carries).
* **Sequences are binlog positions** (``EventPosition.sequence``): the same in every
  partition, so they order the changes of a key across partitions, and a reconciled
  snapshot row carries the position of its window's HIGH marker.
* **Snapshots are the merger's DBLog watermark windows** (``merger.snapshot.runner``):
  LOW and HIGH rows written to the watermark table come back as markers in every
  partition of the table's topic.
* **DDL and truncates cut every partition**: ingest writes a DDL marker and a truncate
  into every partition of the table's topic, at the statement's binlog position.
* **The moved-topics feed**: each ingest transaction's position record on
  ``<prefix>.offsets`` names the topics it wrote (``cdc.wire.moved_topics``), which the
  Kafka source follows between checks of every partition's end.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdc.wire.position import ReplayFilter
from merger.batch.order import binlog_order, by_sequence


class IngestTopics:
    """Topics written by ``ingest`` (``merger.sources.SourceKind``)."""

    name = "ingest"
    follows_moved_topics = True
    ddl_markers = True
    truncate_in_every_partition = True
    watermark_windows = True
    shards = False

    def replay_filter(self) -> ReplayFilter:
        return ReplayFilter()

    def order_of(self, item) -> int:
        return binlog_order(item)

    def sequence_of(self, order: int, offset: int) -> int:
        return order

    def in_order(self, items: Sequence) -> list:
        return by_sequence(items)

    def reconciler_order(self, offset: int, sequence: int) -> tuple[int, int | None]:
        return sequence, None

    def snapshot_signals(self, config, store, guard) -> None:
        return None  # the merger reads the snapshots itself
