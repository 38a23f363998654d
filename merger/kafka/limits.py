"""How many records of each partition a micro-batch takes: the max-min fair split of a
record limit (the admission by cost, ``merger.kafka.admission``, builds on it)."""

from __future__ import annotations

from collections.abc import Mapping

TP = tuple[str, int]  # (topic, partition)


def allocate_limit(available: Mapping[TP, int], max_rows: int, rotate: int = 0) -> dict[TP, int]:
    """Split ``max_rows`` over partitions max-min fairly (water-filling): every partition with
    data gets an equal share, a partition that needs less than its share gives the rest to
    the others. When fewer rows than partitions remain, single rows go round-robin starting
    at ``rotate`` (so no partition is starved across triggers). Never gives a partition more
    than it has available; the sum is ``min(max_rows, sum(available))``."""
    alloc = {tp: 0 for tp in available}
    pending = sorted(tp for tp, n in available.items() if n > 0)
    remaining = max(0, int(max_rows))
    while remaining > 0 and pending:
        share = remaining // len(pending)
        if share == 0:
            k = rotate % len(pending)
            for tp in (pending[k:] + pending[:k])[:remaining]:
                alloc[tp] += 1
            remaining = 0
            break
        still = []
        for tp in pending:
            give = min(share, available[tp] - alloc[tp])
            alloc[tp] += give
            remaining -= give
            if alloc[tp] < available[tp]:
                still.append(tp)
        pending = still
    return alloc
