"""A micro-batch that Spark plans as one read task is read by the driver itself.

The batch's Spark job (scheduling, a Python worker's round trip, the records converted
from Arrow to Spark's rows in the JVM and back to Arrow for the driver) costs ~60 ms of
CPU whatever the batch carries, most of a small batch's cost. The driver reads the same
offset ranges, planned by the same source (``CdcKafkaStreamReader.partitions``), with the
same reader (:func:`merger.kafka.reader.read_ranges`), so what the processor gets is the
same records; the offsets a batch covers stay Spark's (its checkpoint), so exactly-once
does not change. A batch Spark spreads over several tasks (a backlog) is still read by
Spark's tasks in parallel."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from merger.kafka.offsets import KafkaRanges
from merger.kafka.options import SourceOptions
from merger.kafka.reader import SCHEMA, read_ranges

# the Spark class that carries a Python data source's pickled input partition
PYTHON_PARTITION = "PythonStreamingInputPartition"


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
    columns: Sequence[str],
    cancelled: Callable[[], bool] | None = None,
) -> pa.Table:
    """The records of ``tasks`` read in this process, as one table of ``columns`` (the
    source's output columns the processor reads). ``cancelled``: as for ``read_ranges``."""
    batches = [b for task in tasks for b in read_ranges(opts, task.ranges, SCHEMA, cancelled)]
    if not batches:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(SCHEMA, timezone="UTC").empty_table().select(list(columns))
    return pa.Table.from_batches(batches).select(list(columns))
