"""Python's garbage collector tuned for the merger's driver, which makes many short-lived
objects per record (rows, headers, payloads, events) beside a large heap of libraries.

At Python's default (a young collection every 700 new containers) the merger's catch-up ran
~12,500 young, ~1,100 middle and ~80 full collections, and each full one walked every object
of pyspark, py4j, pyarrow and the sinks' libraries: 8.3 s of a 27.5 s catch-up
(docs/performance.md). A record's objects are freed by their reference counts; the
collector is only needed for cycles, which the batches rarely make. Ingest's heap is small:
the same tuning measured no faster there (`bench/ingest_throughput.py`, 42,050 against
41,037 one-row events/s)."""

from __future__ import annotations

import gc

YOUNG_COLLECTION_OBJECTS = 50_000  # 200,000 measured no faster in the merger's catch-up


def collect_less() -> None:
    """Once the process has started: what it loaded is moved out of the collector's reach
    (``gc.freeze``: every later full collection walked it again for nothing), and the young
    generation is collected every ``YOUNG_COLLECTION_OBJECTS`` new containers."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_OBJECTS, 20, 100)
