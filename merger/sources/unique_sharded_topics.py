"""The kind of source ``ingest`` of a sharded source in key mode ``unique``
(``UniqueShardedTopics``): keys declared unique across shards, whose ranges move between
shards (docs/sharding.md, section 4). As ``ShardedTopics``, except:

* **The order and the sink's sequence are the emission counter** (header
  ``cdc.emitted``): one ingest process stamps every record it writes with a counter
  rising with each write, committed with the position vector. It orders one shard's
  changes as its binlog does, and a moved key's changes across shards (ingest's barrier
  at a switch), so a key's sink sequence compares whichever shard wrote it. The copies of
  one marker share one value, so a window's HIGH sequence is the same in every partition.
* A record without the header is a bad record (ingest not in key mode ``unique``, or an
  older one): never ordered as 0.
"""

from __future__ import annotations

from cdc.wire.headers import EMITTED_HEADER
from merger.errors import BadRecord
from merger.sources.sharded_topics import ShardedTopics


class UniqueShardedTopics(ShardedTopics):
    """Topics written by ``ingest`` from the shards of a sharded source in key mode unique."""

    #: a marker's sequence is the emission counter: copies that differ (ingest crashed
    #: part-way through them) refuse the window (``merger.dblog.Reconciler.on_marker``)
    counted_markers = True

    def order_of(self, item) -> int:
        raw = item.headers.get(EMITTED_HEADER)
        if raw is None:
            raise BadRecord(
                f"no {EMITTED_HEADER} header (the emission counter): in key mode unique the merger orders a "
                "sharded source's changes by it; is ingest's key_mode unique too, and ingest new enough?"
            )
        try:
            text = raw if isinstance(raw, str) else bytes(raw).decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if not text.isdigit():
            raise BadRecord(f"{EMITTED_HEADER} header {raw!r} is not a decimal counter")
        return int(text)
