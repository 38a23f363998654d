"""A micro-batch read by several tasks applies every key's changes in order (issue 23, item 4):
the order in which Spark hands over the tasks' records does not matter, for the processor
orders a batch's records by partition and offset (``ReplayFilter``) and each table's changes
by binlog sequence. Pure: the source's packing (``merger.kafka.offsets.pack_ranges``), the
processor and an in-memory sink; no Spark, no broker."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from merger.batch.processor import BatchProcessor
from merger.kafka.offsets import KafkaRange, pack_ranges
from merger.state.store import StateStore
from tests.unit.test_processor import PREFIX, SPEC, MemorySink, Stream

PARTITIONS = 8


def _source_history(rnd: random.Random, keys: int, steps: int, s: Stream) -> dict:
    """Random changes of a table with a per-key counter, as ingest writes them (a key's
    changes in its partition, in binlog order); the source's final rows."""
    rows: dict[int, dict] = {}
    for _ in range(steps):
        k = rnd.randrange(keys)
        if k in rows and rnd.random() < 0.15:
            s.change("d", {"id": k}, before=rows.pop(k))
        elif k in rows:
            before, after = rows[k], {"id": k, "v": str(int(rows[k]["v"]) + 1)}
            s.change("u", {"id": k}, before=before, after=after)
            rows[k] = after
        else:
            rows[k] = {"id": k, "v": str(rnd.randrange(1000) * 1000)}
            s.change("c", {"id": k}, after=rows[k])
    return {(k,): r for k, r in rows.items()}


def _as_read(batch: pa.Table, records_per_task: int, min_tasks: int, rnd: random.Random, scramble: str) -> pa.Table:
    """The batch as Spark hands it over when the source packs its ranges into tasks: each
    task's records, tasks in a random order; ``scramble``: also each task's records reversed,
    or the whole batch shuffled."""
    ends: dict[int, int] = {}
    for p in batch.column("partition").to_pylist():
        ends[p] = ends.get(p, 0) + 1
    ranges = [KafkaRange(PREFIX + ".db.t", p, 0, n) for p, n in sorted(ends.items())]
    tasks = pack_ranges(ranges, records_per_task, min_tasks)
    rows = batch.to_pylist()
    parts = []
    for t in rnd.sample(tasks, len(tasks)):
        mine = [
            r for r in rows if any(r["partition"] == q.partition and q.start <= r["offset"] < q.end for q in t.ranges)
        ]
        parts.append(mine[::-1] if scramble == "reversed" else mine)
    out = [r for part in parts for r in part]
    if scramble == "shuffled":
        rnd.shuffle(out)
    assert len(out) == len(rows)
    return pa.Table.from_pylist(out, schema=batch.schema)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(1, 60),
    st.integers(1, 8),
    st.sampled_from(["in order", "reversed", "shuffled"]),
)
def test_each_keys_last_change_wins_however_the_tasks_deliver_the_batch(seed, records_per_task, min_tasks, scramble):
    rnd = random.Random(seed)
    s = Stream(partitions=PARTITIONS)
    expected = _source_history(rnd, keys=12, steps=150, s=s)
    batch = _as_read(s.batch(), records_per_task, min_tasks, rnd, scramble)
    with tempfile.TemporaryDirectory() as tmp:
        sink = MemorySink()
        proc = BatchProcessor(PREFIX, StateStore(Path(tmp) / "state"), [sink], None, lambda topic: PARTITIONS)
        proc.clock.restored = True
        proc.table("db.t", SPEC)  # the table's definition, as the catalog would give it
        proc.process(0, batch)
        assert sink.state() == expected
