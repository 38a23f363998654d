"""How many records of each partition a micro-batch admits, so that the merger's memory for
one batch stays within ``batch_memory_mb`` whatever the rows' width (pure, no I/O).

The driver holds a whole micro-batch: as Arrow (the Kafka bytes), then as Python objects
(each record parsed: about 8 KB of objects for a small row, and a few times its bytes for
a wide one). Offsets say nothing of sizes, so each topic's bytes per record are learned
from the batches the merger processed (:func:`learn`, kept in the state directory) and a
record costs ``RECORD_OVERHEAD + BYTES_FACTOR * bytes``. A topic not seen yet is assumed
to cost ``budget / UNKNOWN_SHARE`` per record: its first batch holds a few records, and
teaches the estimate for the next.

An estimate rises at once with a batch of wider records and falls slowly, so a few narrow
records do not open the gate to a wave of wide ones. The bound is therefore "about": a
batch whose records are much wider than their topic's recent ones can exceed it once. A
batch always admits at least one record when any is available, so a single record larger
than the budget still goes through (alone)."""

from __future__ import annotations

from collections.abc import Mapping

from merger.kafka.limits import TP, allocate_limit

# Python objects per record beyond its bytes (dicts, parsed payload, change event), and
# the bytes' multiple (Arrow copy, Python copy, parsed values, sink rows). Measured: a
# batch of 1,088 records of 112 KB (122 MB) raised the Python driver's peak by 1.3 GB;
# bench/memory_bench.py (docs/operations/sizing.md, "Memory")
RECORD_OVERHEAD = 8 * 1024
BYTES_FACTOR = 8
UNKNOWN_SHARE = 64
# how far an estimate moves down per batch toward a lower observation
FALL = 0.25


def record_cost(bytes_per_record: float | None, budget: int) -> float:
    """The memory one record of a topic costs the driver (its estimate, or the unknown
    topic's share of the budget)."""
    if bytes_per_record is None:
        return max(budget / UNKNOWN_SHARE, RECORD_OVERHEAD)
    return RECORD_OVERHEAD + BYTES_FACTOR * bytes_per_record


def learn(estimates: Mapping[str, float], observed: Mapping[str, tuple[int, int]]) -> dict[str, float]:
    """New bytes-per-record estimates from a batch's ``topic -> (records, bytes)``: up to a
    wider average at once, down by ``FALL`` of the gap toward a narrower one."""
    out = dict(estimates)
    for topic, (records, size) in observed.items():
        if records <= 0:
            continue
        seen = size / records
        old = out.get(topic)
        out[topic] = seen if old is None or seen >= old else old - FALL * (old - seen)
    return out


def admit(
    available: Mapping[TP, int],
    costs: Mapping[TP, float],
    budget: float,
    max_rows: int | None,
    rotate: int = 0,
) -> dict[TP, int]:
    """Records per partition for the next batch: at most ``max_rows`` split by
    :func:`allocate_limit`, then cut to ``budget`` by sharing the budget max-min fairly
    (every partition with records an equal share of the memory, one that needs less
    gives the rest to the others), so a topic of wide rows does not hold back the
    records of narrow ones. At least one record when any is available."""
    if max_rows is None:
        wanted = {tp: max(0, n) for tp, n in available.items()}
    else:
        wanted = allocate_limit(available, max_rows, rotate)
    if batch_cost(wanted, costs) <= budget:
        return wanted
    alloc = {tp: 0 for tp in available}
    pending = sorted(tp for tp, n in wanted.items() if n > 0)
    remaining = float(budget)
    while pending:
        share = remaining / len(pending)
        whole = [tp for tp in pending if wanted[tp] * costs[tp] <= share]
        if not whole:
            for tp in pending:  # the level: as many records as the share pays for
                alloc[tp] = min(wanted[tp], int(share // costs[tp]))
                remaining -= alloc[tp] * costs[tp]
            break
        for tp in whole:
            alloc[tp] = wanted[tp]
            remaining -= wanted[tp] * costs[tp]
        pending = [tp for tp in pending if tp not in whole]
    # what the level's rounding down left: one more record each, round-robin from
    # `rotate`, while it pays for them (one each: fair to one record). With more partitions than the budget pays records
    # for (hundreds of new topics at budget / UNKNOWN_SHARE each) the level is 0 for every
    # one: without this a batch took one record, and the watermark markers of hundreds of
    # tables took one batch each (issue 23)
    if pending:
        k = rotate % len(pending)
        for tp in pending[k:] + pending[:k]:
            if alloc[tp] < wanted[tp] and costs[tp] <= remaining:
                alloc[tp] += 1
                remaining -= costs[tp]
    if not any(alloc.values()):
        # progress before the bound: one record, round-robin over the batches
        ready = sorted(tp for tp, n in wanted.items() if n > 0)
        if ready:
            alloc[ready[rotate % len(ready)]] = 1
    return alloc


def batch_cost(alloc: Mapping[TP, int], costs: Mapping[TP, float]) -> float:
    """The summed cost of the records of ``alloc``."""
    return sum(n * costs[tp] for tp, n in alloc.items() if n)


def record_bytes(row: dict) -> int:
    """A record's bytes of key and value (a null counts 0); ``row``: as the processor reads
    records (``merger.batch.records.kafka_rows``)."""
    key, value = row.get("key"), row.get("value")
    return (len(key) if key is not None else 0) + (len(value) if value is not None else 0)


def observed_sizes(rows: list[dict], skip_headers: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """``topic -> (records, bytes of keys and values)`` of a micro-batch's records (rows of
    topic, key, value, headers), without the records that carry one of ``skip_headers``:
    the merger skips its watermark and DDL markers, small records in a table's topic that
    say nothing of its rows' width (a topic seen only through them stays new to the
    admission)."""
    skip = frozenset(skip_headers)
    seen: dict[str, list[int]] = {}
    for row in rows:
        headers = row.get("headers")
        if headers and skip:
            if isinstance(headers, dict):
                if not skip.isdisjoint(headers):
                    continue
            elif any(h["key"] in skip for h in headers):
                continue
        got = seen.get(row["topic"])
        if got is None:
            got = seen[row["topic"]] = [0, 0]
        got[0] += 1
        got[1] += record_bytes(row)
    return {topic: (n, size) for topic, (n, size) in seen.items()}
