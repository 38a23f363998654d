"""Kafka topic names: every topic name derived from a ``topic_prefix`` is built here (ingest
writes them, the merger and the commands read them; tests may spell them out where they
assert the contract).

* ``schema_topic``: ``<prefix>``, the schema-change topic (Debezium's);
* ``table_topic``: ``<prefix>.<db>.<table>``, a table's change events, made legal (below);
* ``offsets_topic``: ``<prefix>.offsets``, ingest's committed positions and its lease;
* ``transaction_topic``: ``<prefix>.transaction``, transaction metadata (Debezium's default);
* ``heartbeat_topic``: ``__debezium-heartbeat.<prefix>`` (Debezium's default);
* ``dead_letter_topic``: ``<prefix>.dlq``, the merger's bad records;
* ``source_topics_pattern``: the regex of the schema-change and table topics the merger reads;
* ``changelog_topic``, ``changelog_control_topic``: the merged-changelog sink's topics under
  its own prefix (an older rule, below).

Table topics are made legal the way Debezium does it.

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


def schema_topic(prefix: str) -> str:
    """The schema-change topic: the prefix itself (Debezium's ``topic.prefix``)."""
    return prefix


def topic_table_part(prefix: str, topic: str) -> str:
    """What follows ``<prefix>.`` in a table topic's name: ``db.table`` made legal, the table's
    name when its records do not say it (a sanitized name may stand for several tables)."""
    return topic[len(prefix) + 1 :]


def offsets_topic(prefix: str) -> str:
    """Ingest's committed positions (and its instance lease), one compacted partition."""
    return f"{prefix}.offsets"


def transaction_topic(prefix: str) -> str:
    """Transaction metadata (BEGIN/END records), unless the config names another topic."""
    return f"{prefix}.transaction"


def heartbeat_topic(prefix: str) -> str:
    """Debezium's heartbeat topic, unless the config names another topic."""
    return f"__debezium-heartbeat.{prefix}"


def dead_letter_topic(prefix: str) -> str:
    """Where the merger writes a record it cannot read (``on_bad_record: dead_letter``)."""
    return f"{prefix}.dlq"


def source_topics_pattern(prefix: str, skip_prefix: str | None = None) -> str:
    """A regex of the schema-change topic and every table topic ``<prefix>.<db>.<table>``
    (dots are allowed in the table part, not in the database part: Debezium does not escape
    them, so ``<prefix>.a.b.c`` can only be read one way); topics under ``skip_prefix``
    (the changelog sink's, when its prefix lies inside ours) are left out."""
    skip = rf"(?!{re.escape(skip_prefix)}\.)" if skip_prefix is not None else ""
    return rf"^{skip}{re.escape(prefix)}(\.[^.]+\..+)?$"


# The merged-changelog sink's topics (merger/sinks/kafka_changelog/) keep their own,
# older rule: one "_" per character Kafka does not allow, no length cap. Their names are
# in use; the Debezium rule above would rename topics of non-BMP or overlong names.
INVALID_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def changelog_topic_safe(name: str) -> str:
    return INVALID_TOPIC_CHARS.sub("_", name) or "_"


def changelog_topic(prefix: str, db: str, table: str) -> str:
    """The changelog sink's topic of a table: ``<prefix>.<db>.<table>`` by its own rule."""
    return f"{prefix}.{changelog_topic_safe(db)}.{changelog_topic_safe(table)}"


def changelog_control_topic(prefix: str) -> str:
    """The changelog sink's compacted control topic (each table's state and version)."""
    return f"{prefix}._cdc.changelog_versions"
