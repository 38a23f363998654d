"""Micro-batches read by the driver itself (``batch_reads``: which ones, :func:`read_in_driver`).

A batch's Spark job (scheduling, a Python worker's round trip, the records converted
from Arrow to Spark's rows in the JVM and back to Arrow for the driver) costs ~60 ms of
CPU whatever the batch carries, most of a small batch's cost. The driver reads the same
offset ranges, planned by the same source (``CdcKafkaStreamReader.partitions``), with the
same reader (:func:`merger.kafka.reader.read_ranges`), so what the processor gets is the
same records; the offsets a batch covers stay Spark's (its checkpoint), so exactly-once
does not change. A large batch too: in local mode the driver reads 120,000 records in
0.6 s, where two tasks took 1.1 s (their rows go through the JVM to reach the driver). On
a cluster, a batch Spark spreads over several tasks is left to the executors by default,
whose machines then do the fetch and the conversion."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from merger.kafka.offsets import KafkaRanges
from merger.kafka.options import SourceOptions
from merger.kafka.reader import SCHEMA, messages_to_rows, read_ranges

# the Spark class that carries a Python data source's pickled input partition
PYTHON_PARTITION = "PythonStreamingInputPartition"


def read_in_driver(batch_reads: str, local: bool, tasks: int) -> bool:
    """Whether the driver reads a batch of ``tasks`` planned read tasks: ``batch_reads``
    (driver, spark or auto) on a local master (``local``) or a cluster."""
    if batch_reads == "auto":
        return local or tasks <= 1
    return batch_reads == "driver"


def planned_tasks(batch_df: Any) -> list[KafkaRanges] | None:
    """The read tasks Spark planned for ``batch_df`` (a foreachBatch DataFrame): the
    source's input partitions, unpickled from the batch's scan. None when the plan is not
    one scan of our source's partitions (another Spark's plan): the batch is then read by
    Spark. The scan is already planned when foreachBatch runs: nothing is planned again."""
    try:
        leaves = batch_df._jdf.queryExecution().executedPlan().collectLeaves()
        if leaves.size() != 1:
            return None
        parts = leaves.apply(0).rdd().partitions()
        tasks = []
        for part in parts:
            found = part.inputPartition()
            if found.isEmpty():
                return None
            java_partition = found.get()
            if java_partition.getClass().getSimpleName() != PYTHON_PARTITION:
                return None
            task = pickle.loads(bytes(java_partition.pickedPartition()))
            if not isinstance(task, KafkaRanges):
                return None
            tasks.append(task)
        return tasks
    except Exception:  # a plan of another shape: Spark reads the batch, as it always did
        return None


def read_here(
    opts: SourceOptions,
    tasks: Sequence[KafkaRanges],
    cancelled: Callable[[], bool] | None = None,
) -> list[dict]:
    """The records of ``tasks`` read in this process, as the rows the processor reads
    (``merger.batch.records.kafka_rows`` of the same records read by Spark: topic,
    partition and offset order). ``cancelled``: as for ``read_ranges``."""
    rows = []
    for task in tasks:
        for run in read_ranges(opts, task.ranges, SCHEMA, cancelled, messages_to_rows):
            rows.extend(run)
    rows.sort(key=itemgetter("topic", "partition", "offset"))  # runs of ascending offsets: timsort merges them
    return rows
