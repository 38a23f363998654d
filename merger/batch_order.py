"""The order in which a micro-batch's records of one table are applied (pure).

One server: binlog order, the order of the records' sequences; it agrees with every
partition's offset order, which the reconciler needs (``merger.dblog``: a marker or an
event met below an offset already taken is a replay).

A sharded source: the shards' sequences do not compare. Ingest writes every shard's
records through one producer, so the order it sent them in agrees with each partition's
offsets and with each shard's binlog order; once replays are dropped (per partition and
shard) such an order always exists, and ``shards_merged`` finds one: it takes, among the
partitions' next records, one that comes first in its shard's binlog.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple


def binlog_order(item) -> int:
    """A record's (``merger.records.ParsedRecord``) place in its server's binlog: its
    position's sequence; without a position, its Kafka offset."""
    return item.position.sequence() if item.position else item.record["offset"]


def by_sequence(items: Sequence) -> list:
    """One server's records (``merger.records.ParsedRecord``) in binlog order: by
    sequence, then partition (a record without a position first)."""
    return sorted(items, key=lambda it: (it.position.sequence() if it.position else 0, it.record["partition"]))


class Placed(NamedTuple):
    """Where a record sits: its partition and offset, its shard and its sequence there."""

    partition: int
    offset: int
    shard: str
    sequence: int


class OrderConflict(ValueError):
    """No order agrees with both the partitions and the shards (records not deduplicated)."""


def shards_merged(records: Sequence[Placed]) -> list[int]:
    """Indexes of ``records`` in an order that keeps every partition's offset order and
    every shard's sequence order (OrderConflict if there is none)."""
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
    out: list[int] = []
    while len(out) < len(records):
        chosen = None
        for p, queue in queues.items():
            at = heads[p]
            if at == len(queue):
                continue
            i = queue[at]
            first = pending[records[i].shard][0]
            if first[0] == records[i].sequence:
                chosen = p
                break
        if chosen is None:
            raise OrderConflict("the partitions' records disagree with their shards' order (replays left in?)")
        i = queues[chosen][heads[chosen]]
        heads[chosen] += 1
        heap = pending[records[i].shard]
        # equal sequences (the halves of a key change, a marker in every partition) go in any order
        top = heapq.heappop(heap)
        if top[1] != i:
            heap.remove((records[i].sequence, i))
            heapq.heappush(heap, top)
            heapq.heapify(heap)
        out.append(i)
    return out
