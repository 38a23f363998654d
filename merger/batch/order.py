"""The order in which a micro-batch's records of one table are applied (pure).

One server: binlog order, the order of the records' sequences; it agrees with every
partition's offset order, which the reconciler needs (``merger.dblog``: a marker or an
event met below an offset already taken is a replay).

A sharded source: the shards' sequences do not compare. Ingest writes every shard's
records through one producer, so the order it sent them in agrees with each partition's
offsets and with each shard's binlog order; once replays are dropped (per partition and
shard) such an order exists, and ``shards_merged`` finds one: it takes, among the
partitions' next records, one that comes first in its shard's binlog.

Except after an ingest crash on a broker that shows aborted transactions' records (the
local Tansu does, docs/kafka_source.md "Transaction markers"): the crashed run's last
transaction may show in some partitions and not in others, and the next run sends those
shards' records again in another interleaving. Then no order may keep both every partition and every shard; for
example ``[a2, b1]`` in one partition and ``[b2, a1]`` in another. The partitions' order
is kept always (the reconciler tells replays by offset); when every partition's next
record waits for a lower one of its shard, one of them goes first anyway, the one whose
early place matters least:

1. a data record: two data records in different partitions are changes of different
   keys, whose order between them changes nothing;
2. else a watermark marker: a window is reconciled per partition, against the changes
   before and after the marker in that partition, which keep their places;
3. else a truncate or DDL marker (two of different shards inside one crash's aborted
   records): its first copy acts for the whole table before a lower change of its shard
   read from another partition, the very case of a partition that lags across batches,
   which the merger already handles by order (a change older than its origin's truncate
   is dropped; one older than the DDL decodes leniently).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple


def binlog_order(item) -> int:
    """A record's (``merger.batch.records.ParsedRecord``) place in its server's binlog: its
    position's sequence; without a position, its Kafka offset."""
    return item.position.sequence() if item.position else item.record["offset"]


def by_sequence(items: Sequence) -> list:
    """One server's records (``merger.batch.records.ParsedRecord``) in binlog order: by
    sequence, then partition (a record without a position first)."""
    return sorted(items, key=lambda it: (it.position.sequence() if it.position else 0, it.record["partition"]))


class Placed(NamedTuple):
    """Where a record sits: its partition and offset, its shard and its sequence there."""

    partition: int
    offset: int
    shard: str
    sequence: int
    spread: int = 0  # DATA, WINDOW or CUT: where the record acts


DATA = 0  # a change of one key, in its key's partition
WINDOW = 1  # a watermark marker: a copy in every partition, each acting in its own
CUT = 2  # a truncate or DDL marker: a copy in every partition, the first acting for the table


class OrderConflict(ValueError):
    """No order agrees with both the partitions and the shards (records not deduplicated)."""


def shards_merged(records: Sequence[Placed]) -> list[int]:
    """Indexes of ``records`` in an order that keeps every partition's offset order and
    every shard's sequence order, or when a crash's aborted records leave none, as much of
    the shards' order as the rule of the module allows. OrderConflict if a partition's
    records of one shard go down (a replay left in)."""
    queues: dict[int, list[int]] = {}
    for i in sorted(range(len(records)), key=lambda i: (records[i].partition, records[i].offset)):
        queues.setdefault(records[i].partition, []).append(i)
    # per shard, the sequences still to place (a heap; a placed one is popped off its top)
    pending: dict[str, list[tuple[int, int]]] = {}
    for i, r in enumerate(records):
        pending.setdefault(r.shard, []).append((r.sequence, i))
    for heap in pending.values():
        heapq.heapify(heap)
    heads = {p: 0 for p in queues}
    last: dict[tuple[int, str], int] = {}  # per partition and shard, the sequence last taken
    out: list[int] = []
    while len(out) < len(records):
        chosen = waiting = None  # waiting: the partition whose next record goes first if all wait
        for p, queue in queues.items():
            at = heads[p]
            if at == len(queue):
                continue
            r = records[queue[at]]
            if pending[r.shard][0][0] == r.sequence:
                chosen = p
                break
            if waiting is None or r.spread < records[queues[waiting][heads[waiting]]].spread:
                waiting = p
        if chosen is None:
            chosen = waiting
        i = queues[chosen][heads[chosen]]
        r = records[i]
        if r.sequence < last.get((chosen, r.shard), r.sequence):
            raise OrderConflict(
                f"partition {chosen} holds a record of shard {r.shard} below one of that shard before it "
                f"(offset {r.offset}): a replay left in"
            )
        last[(chosen, r.shard)] = r.sequence
        heads[chosen] += 1
        heap = pending[r.shard]
        # equal sequences (the halves of a key change, a marker in every partition) go in any order
        top = heapq.heappop(heap)
        if top[1] != i:
            heap.remove((r.sequence, i))
            heapq.heappush(heap, top)
            heapq.heapify(heap)
        out.append(i)
    return out
