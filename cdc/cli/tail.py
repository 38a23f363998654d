"""`cdc tail`: print a topic's records as they arrive (read_committed, explicit offsets)."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, TopicPartition
from rich.console import Console


def tail_topic(bootstrap: str, topic: str, idle_seconds: float, out: Console, from_beginning: bool = True) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cdc-tail",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    shown = 0
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            out.print(f"topic {topic} does not exist (yet)")
            return 0
        consumer.assign([TopicPartition(topic, p, 0 if from_beginning else -1) for p in meta.partitions])
        last = time.monotonic()
        while time.monotonic() - last < idle_seconds:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                continue
            last = time.monotonic()
            shown += 1
            out.print(format_record(msg), highlight=False, soft_wrap=True)
    finally:
        consumer.close()
    return shown


def format_record(msg) -> str:
    key = msg.key().decode(errors="replace") if msg.key() else "null"
    if msg.value() is None:
        return f"[dim]p{msg.partition()}@{msg.offset()} key={key} (tombstone)[/dim]"
    try:
        value = json.loads(msg.value())
    except ValueError:
        return f"p{msg.partition()}@{msg.offset()} key={key} <{len(msg.value())} bytes>"
    payload = value.get("payload", value) if isinstance(value, dict) else value
    if isinstance(payload, dict) and "op" in payload:
        op = payload["op"]
        color = {"c": "green", "u": "yellow", "d": "red", "t": "magenta", "m": "cyan"}.get(op, "white")
        body = {k: payload.get(k) for k in ("before", "after") if payload.get(k) is not None}
        return f"[{color}]{op}[/{color}] p{msg.partition()}@{msg.offset()} key={key} {json.dumps(body)}"
    return f"p{msg.partition()}@{msg.offset()} key={key} {json.dumps(payload)[:200]}"
