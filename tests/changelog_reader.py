"""What a consumer materializing a Kafka changelog topic holds, read with a plain
confluent-kafka consumer (read_committed), independent of the changelog sink's code."""

from __future__ import annotations

import json


def changelog_rows(bootstrap: str, topic: str) -> dict[tuple, dict]:
    """Per key (its JSON object as sorted ``(column, value)`` pairs), the last value's
    ``after`` unless that value is a delete or a tombstone; {} for a topic that does not
    exist."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "changelog-reader", "isolation.level": "read_committed"})
    held: dict[tuple, dict] = {}
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return held
        c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        idle = 0
        while idle < 3:
            got = c.consume(1000, 0.5)
            idle = 0 if got else idle + 1
            for m in got:
                if m.error():
                    raise AssertionError(f"reading {topic}: {m.error()}")
                key = tuple(sorted(json.loads(m.key()).items()))
                value = None if m.value() is None else json.loads(m.value())
                if value is None or value["op"] == "d":
                    held.pop(key, None)
                else:
                    held[key] = value["after"]
    finally:
        c.close()
    return held
