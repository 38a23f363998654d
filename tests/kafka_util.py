"""Test helpers: read topics the way a careful consumer does, and rebuild tables from them.

``read_changes`` reads with read_committed and drops every record at or below the highest
``cdc.position`` already taken from its partition. The local broker (Tansu) shows records
of aborted transactions, so after ingest is killed and restarted the replayed suffix is
visible twice; the position dedup is what makes it harmless (with Apache Kafka,
read_committed alone hides it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from cdc.wire.headers import POSITION_HEADER
from cdc.wire.position import EventPosition, ReplayFilter


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict
    position: EventPosition | None

    @property
    def payload(self) -> dict | None:
        if self.value is None:
            return None
        v = json.loads(self.value)
        return v["payload"] if isinstance(v, dict) and "payload" in v and "schema" in v else v

    @property
    def key_payload(self):
        if self.key is None:
            return None
        k = json.loads(self.key)
        return k["payload"] if isinstance(k, dict) and "payload" in k and "schema" in k else k


def list_topics(bootstrap: str, prefix: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t"})
    try:
        return sorted(t for t in c.list_topics(timeout=10).topics if t.startswith(prefix))
    finally:
        c.close()


def read_records(
    bootstrap: str,
    topics: list[str],
    idle_s: float = 2.0,
    timeout_s: float = 120.0,
    dedup: bool = True,
    expect: int | None = None,
) -> tuple[list[Record], int]:
    """All records of ``topics`` (read_committed); returns (records, duplicates dropped).
    Done once nothing came for ``idle_s``; with ``expect``, once that many records were kept,
    after 1 s with nothing more (what would come after them, duplicates included)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cdc-tests",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    out: list[Record] = []
    dropped = 0
    replay = ReplayFilter()
    try:
        md = consumer.list_topics(timeout=10).topics
        tps = [TopicPartition(t, p, 0) for t in topics if t in md for p in md[t].partitions]
        if not tps:
            return [], 0
        consumer.assign(tps)
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        idle = idle_s
        while time.monotonic() < deadline and time.monotonic() - last < idle:
            msgs = consumer.consume(10000, 0.3)
            for msg in msgs:
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(msg.error().str())
                    continue
                last = time.monotonic()
                headers = {k: v for k, v in (msg.headers() or [])}
                pos = EventPosition.decode(headers[POSITION_HEADER]) if POSITION_HEADER in headers else None
                if dedup and not replay.accept(msg.topic(), msg.partition(), pos, msg.value() is None):
                    dropped += 1
                    continue
                out.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers, pos))
            if expect is not None and len(out) >= expect:
                idle = min(idle_s, 1.0)
    finally:
        consumer.close()
    return out, dropped


def rebuild(records: list[Record], key_columns: list[str]) -> dict[tuple, dict]:
    """Replays change events in binlog order into {key: after-image}."""
    rows: dict[tuple, dict] = {}
    ordered = sorted(
        (r for r in records if r.value is not None and r.position is not None),
        key=lambda r: (r.position.key(), r.partition),
    )
    seen_truncate = set()
    for r in ordered:
        p = r.payload
        op = p.get("op")
        if op == "t":
            if r.position in seen_truncate:  # one truncate record per partition
                continue
            seen_truncate.add(r.position)
            rows.clear()
        elif op in ("c", "u", "r"):
            after = p["after"]
            rows[tuple(after[k] for k in key_columns)] = after
        elif op == "d":
            before = p["before"]
            rows.pop(tuple(before[k] for k in key_columns), None)
    return rows
