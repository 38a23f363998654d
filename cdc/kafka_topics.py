"""A topic's partition count as the broker knows it, asked without creating the topic.

Ingest asks it of each table's topic before its first record, the merger of each table it
meets. Both asked with a listing of every topic on the broker; with hundreds of tables
that listing (built into Python objects, a few per partition) took half of ingest's time
and a third of the merger's while their first snapshot ran (issue 23). DescribeTopics
names the one topic in a metadata request that never auto-creates it.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def partition_count(admin, topic: str, timeout_s: float) -> int | None:
    """``topic``'s partition count, None if the broker does not know it. ``admin``: a
    confluent-kafka ``AdminClient``. A broker that cannot describe topics is asked for
    the listing of every topic (a metadata request naming the topic could auto-create it
    with the broker's default partition count); an unreachable one raises."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    try:
        found = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
        return len(found.result(timeout_s).partitions) or None
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        log.debug("describing topic %s: %s; listing every topic instead", topic, exc)
    listed = admin.list_topics(timeout=timeout_s).topics.get(topic)
    if listed is None or listed.error is not None or not listed.partitions:
        return None
    return len(listed.partitions)


def partition_counts(admin, topics: list[str], timeout_s: float) -> dict[str, int | None]:
    """``partition_count`` of several topics in one DescribeTopics request (ingest meets the
    topics of 16 tables at once in a group of watermark markers)."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    if not topics:
        return {}
    out: dict[str, int | None] = {}
    try:
        futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout_s)
    except KafkaException:
        return {t: partition_count(admin, t, timeout_s) for t in topics}
    for topic, fut in futures.items():
        try:
            out[topic] = len(fut.result(timeout_s).partitions) or None
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                out[topic] = None
            else:
                out[topic] = partition_count(admin, topic, timeout_s)
    return out
