"""The topics a committed ingest transaction wrote, named in its position record.

Every Kafka transaction of ingest ends with its position record on ``<prefix>.offsets``
(``cdc.wire.resume_point.ResumePoint``), committed with the events. The record also names, in
``"topics"``, the topics the transaction wrote to. The merger's ``cdc_kafka`` source follows
that one partition and asks the broker for the ends of those topics' partitions only,
instead of every partition's end on every trigger: with 500 tables (1,500 partitions)
that request was most of an idle merger's CPU and a third of each micro-batch (issue 23).
The source still asks for every partition's end now and then (``endCheckAllMs``): records
of other producers, or of an ingest that does not name its topics, arrive that much later
at worst, never not at all."""

from __future__ import annotations

import json
from collections.abc import Iterable

TOPICS_FIELD = "topics"
POSITION_FIELD = "gtid_state"  # every one-server position record has it; a lease record does not
VECTOR_FIELD = "shards"  # a sharded source's position record (cdc.wire.resume_point.PositionVector)


def with_topics(position_record: bytes, topics: Iterable[str]) -> bytes:
    """``position_record`` (a JSON object) with the sorted ``topics`` added."""
    data = json.loads(position_record)
    data[TOPICS_FIELD] = sorted(set(topics))
    return json.dumps(data, separators=(",", ":")).encode()


def topics_of(value: bytes | None) -> frozenset[str] | None:
    """The topics a record of the offsets topic says moved: the position record's
    ``"topics"``; none for another record (a lease, a tombstone); ``None`` (any topic may
    have moved) for a position record without the field (an older ingest) or a value that
    cannot be read."""
    if value is None:
        return frozenset()
    try:
        data = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if POSITION_FIELD not in data and VECTOR_FIELD not in data:
        return frozenset()
    topics = data.get(TOPICS_FIELD)
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        return None
    return frozenset(topics)
