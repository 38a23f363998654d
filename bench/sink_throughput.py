"""Sink apply throughput: load N rows of a 6-column table in batches (a snapshot load:
new keys, op 'r'), then apply update batches of random existing keys (op 'u'), through
the PostgreSQL, Delta Lake and Kafka-changelog sinks. Prints rows/s per sink and phase.

    .venv/bin/python bench/sink_throughput.py [--rows 1000000] [--batch 100000]
        [--updates 200000] [--sinks postgres,delta,kafka] [--state-dir /tmp/cdc-bench-stack]
        [--pg-modes latest,changelog,scd2]

``--pg-modes``: the PostgreSQL sink once per table mode (``merger.history.modes``), one
after the other in the same run: the cost of a change log against the latest state (the
batches then carry the commit time a history table needs).

PostgreSQL and the broker come from the local embedded stack (started in --state-dir if
not running; left running). Delta tables go to a temporary directory (removed after).
The time measured is the sink's ``apply`` only (batches are built beforehand).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from merger.sinks import TableId  # noqa: E402
from tests.support import readback  # noqa: E402

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("qty", pa.int32()),
        ("name", pa.string()),
        ("price", pa.float64()),
        ("updated", pa.timestamp("us")),
        ("active", pa.bool_()),
    ]
)


def make_batch(ids: pa.Array, op: str, seq_base: int) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "id": ids,
            "qty": pc.cast(pc.bit_wise_and(ids, 0xFFFF), pa.int32()),
            "name": pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), ""),
            "price": pc.multiply(pc.cast(ids, pa.float64()), 0.25),
            "updated": pc.cast(pc.add(pc.multiply(ids, 1000), 1_700_000_000_000_000), pa.timestamp("us")),
            "active": pc.equal(pc.bit_wise_and(ids, 1), 0),
            "_cdc_op": pa.array([op] * n, pa.string()),
            "_cdc_seq": pc.add(ids, seq_base),
        }
    )


def batches(rows: int, batch: int, updates: int, seed: int = 7):
    load = [make_batch(pa.array(range(s, min(s + batch, rows)), pa.int64()), "r", 0) for s in range(0, rows, batch)]
    rnd = random.Random(seed)
    upd = []
    for i, s in enumerate(range(0, updates, batch)):
        ids = sorted(rnd.sample(range(rows), min(batch, updates - s)))
        upd.append(make_batch(pa.array(ids, pa.int64()), "u", (i + 1) * 10 * rows))
    return load, upd


def run(sink, name: str, load, upd, table: TableId | None = None) -> dict:
    table = table or TableId("bench", f"t_{uuid.uuid4().hex[:8]}")
    sink.ensure_table(table, SCHEMA, ["id"])
    version = 0
    result = {}
    for phase, data in (("load", load), ("update", upd)):
        if not data:
            continue
        n = sum(b.num_rows for b in data)
        t0 = time.perf_counter()
        per = []
        for b in data:
            version += 1
            t1 = time.perf_counter()
            assert sink.apply(table, version, b)
            per.append(time.perf_counter() - t1)
        elapsed = time.perf_counter() - t0
        result[phase] = (n, elapsed, per)
        print(
            f"{name:9s} {phase:6s} {n:>9,d} rows in {elapsed:6.2f} s = {n / elapsed:>9,.0f} rows/s "
            f"(batch min/max {min(per):.2f}/{max(per):.2f} s)",
            flush=True,
        )
    # replaying the last version is a no-op and cheap
    t1 = time.perf_counter()
    assert not sink.apply(table, version, (upd or load)[-1])
    print(f"{name:9s} replay of an applied version skipped in {time.perf_counter() - t1:.3f} s", flush=True)
    if name in ("postgres", "delta"):
        assert readback.count(sink, table) == sum(b.num_rows for b in load)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--updates", type=int, default=200_000)
    ap.add_argument("--sinks", default="postgres,delta,kafka")
    ap.add_argument("--state-dir", default="/tmp/cdc-bench-stack")
    ap.add_argument(
        "--pg-merge-only",
        action="store_true",
        help="PostgreSQL: MERGE snapshot rows too (no direct COPY into the target)",
    )
    ap.add_argument("--pg-modes", default="latest", help="PostgreSQL table modes, each in turn: latest,changelog")
    args = ap.parse_args(argv)
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    print(
        f"building {args.rows:,d} load rows + {args.updates:,d} update rows "
        f"(6 columns, batches of {args.batch:,d}) ...",
        flush=True,
    )
    load, upd = batches(args.rows, args.batch, args.updates)
    info = None
    if {"postgres", "kafka"} & set(sinks):
        from cdc import stack

        comps = tuple(c for c in ("postgres", "kafka") if c in sinks)
        info = stack.up(Path(args.state_dir), components=comps)
    for name in sinks:
        if name == "postgres":
            from merger.sinks import PostgresSink

            for mode in [m.strip() for m in args.pg_modes.split(",") if m.strip()]:
                if mode == "latest":
                    sink = PostgresSink(info.postgres, fast_snapshot=not args.pg_merge_only)
                    try:
                        run(sink, name, load, upd)
                    finally:
                        sink.close()
                    continue
                if mode not in ("changelog", "scd2"):
                    ap.error(f"--pg-modes: {mode!r} is not latest, changelog or scd2")
                from merger.history.modes import COMMIT_US, ChangelogMode, SCD2Mode, TableModes

                table = TableId("bench", f"{mode}_{uuid.uuid4().hex[:8]}")
                kept = ChangelogMode() if mode == "changelog" else SCD2Mode()
                sink = PostgresSink(info.postgres, modes=TableModes({str(table): kept}))
                timed = [
                    [b.append_column(COMMIT_US, pc.multiply(b["_cdc_seq"], 1000)) for b in part] for part in (load, upd)
                ]
                try:
                    run(sink, f"pg-{mode}", *timed, table=table)
                finally:
                    sink.close()
        elif name == "delta":
            from merger.sinks import DeltaSink

            tmp = tempfile.mkdtemp(prefix="cdc-bench-delta-")
            try:
                run(DeltaSink(tmp), name, load, upd)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        elif name == "kafka":
            from merger.sinks import KafkaChangelogSink

            sink = KafkaChangelogSink(info.kafka.bootstrap, "bench" + uuid.uuid4().hex[:6], partitions=4)
            try:
                run(sink, name, load, upd)
            finally:
                sink.close()
        else:
            ap.error(f"unknown sink {name!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
