"""Kafka topic names of table topics, made legal the way Debezium does it.

Kafka allows only ``[A-Za-z0-9._-]`` (at most 249 characters) in a topic name. Debezium's
``AbstractTopicNamingStrategy.sanitizedTopicName`` replaces every other character with
``_`` (per UTF-16 code unit, so a character outside the BMP becomes ``__``), cuts the name
at 249 characters and turns the names ``.``/``..`` into ``_``/``__``. We do the same, so a
consumer finds our topics where it finds Debezium's.

The mapping is not one-to-one: ``shop.Straße`` and ``shop.Stra_e`` share the topic
``<prefix>.shop.Stra_e``. Records still say which table they belong to (``source.db`` and
``source.table`` of the value, the ``table`` of a watermark marker), and the merger routes
by that, so tables that share a topic are still merged apart.
"""

from __future__ import annotations

import functools
import re

MAX_TOPIC_LENGTH = 249
REPLACEMENT = "_"


def _valid(ch: str) -> bool:
    return ch in "._-" or ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ("0" <= ch <= "9")


def topic_safe(name: str) -> str:
    """``name`` with every character Kafka does not allow replaced like Debezium does."""
    out = []
    for ch in name:
        if _valid(ch):
            out.append(ch)
        else:
            out.append(REPLACEMENT * (2 if ord(ch) > 0xFFFF else 1))  # Java chars are UTF-16
    text = "".join(out)
    if len(text) > MAX_TOPIC_LENGTH:
        return text[:MAX_TOPIC_LENGTH]
    if text in (".", ".."):
        return REPLACEMENT * len(text)
    return text


@functools.lru_cache(maxsize=65536)  # called per record by the merger's routing
def table_topic(prefix: str, db: str, table: str) -> str:
    """The topic of a table's change events: ``<prefix>.<db>.<table>``, made legal."""
    return topic_safe(f"{prefix}.{db}.{table}")


# The merged-changelog sink's topics (merger/sinks/kafka_changelog/) keep their own,
# older rule: one "_" per character Kafka does not allow, no length cap. Their names are
# in use; the Debezium rule above would rename topics of non-BMP or overlong names.
INVALID_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def changelog_topic_safe(name: str) -> str:
    return INVALID_TOPIC_CHARS.sub("_", name) or "_"
