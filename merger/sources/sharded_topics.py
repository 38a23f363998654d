"""The kind of source ``ingest`` of a sharded source (``ShardedTopics``): the topics one
``ingest`` writes from several servers (docs/sharding.md). As ``IngestTopics``, except:

* **Every position names its shard**, and a shard's positions compare only with its own:
  the replay rule keeps the highest position per partition and shard (``ReplayFilter``
  does so for positions that name a shard).
* **A batch's order** is one that keeps every partition's offsets and every shard's
  binlog order (``merger.batch.order.shards_merged``), never an order made up between
  shards; after an ingest crash whose aborted records the broker shows, a shard's order
  may give way where no order keeps it (data records first, markers last).
* **The reconciler tells replays by the Kafka offset**, which rises along a partition
  (the sequences of two shards do not); markers still carry their window's sequence.
* **A DDL marker counts per shard**, checked against the other shards' definitions
  (``merger.batch.shard_ddl``).
"""

from __future__ import annotations

from collections.abc import Sequence

from cdc.wire.headers import DDL_HEADER, WATERMARK_HEADER
from merger.batch.order import CUT, DATA, WINDOW, Placed, shards_merged
from merger.sources.ingest_topics import IngestTopics


def spread_of(item) -> int:
    """Where a record (a ``merger.batch.records.ParsedRecord``) acts (``merger.batch.order``):
    a DDL marker or a truncate (CUT) and a watermark marker (WINDOW) have a copy in every
    partition of the topic; a change (DATA) is in its key's partition."""
    headers, payload = item.headers, item.payload
    op = payload.get("op") if isinstance(payload, dict) else None
    if DDL_HEADER in headers or op == "t":
        return CUT
    if WATERMARK_HEADER in headers or op == "m":
        return WINDOW
    return DATA


class ShardedTopics(IngestTopics):
    """Topics written by ``ingest`` from the shards of a sharded source."""

    shards = True

    def in_order(self, items: Sequence) -> list:
        placed = [
            Placed(
                it.record["partition"],
                it.record["offset"],
                it.position.shard if it.position else "",
                it.position.sequence() if it.position else 0,
                spread_of(it),
            )
            for it in items
        ]
        return [items[i] for i in shards_merged(placed)]

    def reconciler_order(self, offset: int, sequence: int) -> tuple[int, int | None]:
        return offset, sequence
