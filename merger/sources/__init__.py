"""The kinds of source the merger reads: what wrote the topics (``source_connector``).

A kind is one module here and decides, for the merger, everything that depends on the
writer of the topics; the processor, the snapshot runner, the start-up checks and the
Kafka source's options ask the kind instead of testing a name:

* ``ingest`` (``ingest_topics.IngestTopics``): the project's own topics;
* ``debezium`` (``debezium_topics.DebeziumTopics``): Debezium's MySQL connector;
* ``ingest`` of a sharded source (``sharded_topics.ShardedTopics``): the project's own
  topics, written from several servers (the merger's config lists ``shards``);
* the same in key mode ``unique`` (``unique_sharded_topics.UniqueShardedTopics``): ordered
  by ingest's emission counter.

``source_kind(name, sharded, key_mode)`` gives the kind of a ``source_connector`` value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from merger.errors import MergerError
from merger.sources.debezium_topics import DebeziumTopics
from merger.sources.ingest_topics import IngestTopics
from merger.sources.sharded_topics import ShardedTopics
from merger.sources.unique_sharded_topics import UniqueShardedTopics

if TYPE_CHECKING:
    from cdc.config import MergerConfig
    from cdc.wire.position import ReplayFilter
    from merger.mysql.source import SourceGuard
    from merger.sources.debezium_topics import SignalWriter
    from merger.state.store import StateStore


@runtime_checkable
class SourceKind(Protocol):
    """What the merger needs to know about the writer of its topics."""

    #: the ``source_connector`` value
    name: str
    #: the writer's position records on ``<prefix>.offsets`` name the topics each of its
    #: transactions wrote: the Kafka source follows them between checks of every end
    follows_moved_topics: bool
    #: a DDL arrives as a marker in every partition of the table's topic, where the sink
    #: tables follow it; otherwise they follow the schema-change topic's records
    ddl_markers: bool
    #: a truncate is written into every partition of the table's topic; otherwise into
    #: one, and the merger asks for a snapshot of the table after it
    truncate_in_every_partition: bool
    #: snapshots are the merger's DBLog watermark windows (it writes the watermark
    #: table); otherwise the writer's own, on the topics as ``r`` records
    watermark_windows: bool
    #: every position names its shard (a sharded source): positions of two shards do
    #: not compare, and a DDL marker counts per shard (``merger.batch.shard_ddl``)
    shards: bool

    def replay_filter(self) -> ReplayFilter:
        """A new replay filter with this writer's rule (``accept_record``; its ``highest``
        positions are saved with the merger's state)."""

    def order_of(self, item) -> int:
        """A record's order across the partitions of its table (truncates and DDL cut
        there): its binlog position's sequence (its offset without one); in key mode
        ``unique`` of a sharded source the emission counter. Raises
        ``merger.errors.BadRecord`` when a record (``merger.batch.records.ParsedRecord``) lacks what
        the kind orders by."""

    def sequence_of(self, order: int, offset: int) -> int:
        """The sink's sequence of a change (it orders the changes of one key): from its
        order ``order`` (``order_of``) and its Kafka ``offset``."""

    def in_order(self, items: Sequence) -> list:
        """A batch's records of one table (``merger.batch.records.ParsedRecord``) in the order
        they are applied in: each
        partition's offset order, each server's binlog order (``merger.batch.order``)."""

    def reconciler_order(self, offset: int, sequence: int) -> tuple[int, int | None]:
        """What the reconciler tells replays by (it must rise along a partition) and the
        sequence a HIGH marker gives its window's rows, from a record's Kafka ``offset``
        and its ``sequence``; ``None``: the first one."""

    def snapshot_signals(self, config: MergerConfig, store: StateStore, guard: SourceGuard) -> SignalWriter | None:
        """What asks the writer for snapshots (its ``check()`` at start, ``handle(request)``
        for each control request); ``None`` where the merger reads them itself
        (``watermark_windows``)."""


KINDS: dict[str, SourceKind] = {kind.name: kind for kind in (IngestTopics(), DebeziumTopics())}


def source_kind(name: str, sharded: bool = False, key_mode: str = "origin") -> SourceKind:
    """The kind of source a ``source_connector`` value names (``sharded``: the merger's
    config lists shards; ``key_mode``: its ``key_mode``)."""
    kind = KINDS.get(name)
    if kind is None:
        raise MergerError(f"source_connector {name!r} is not a kind of source the merger reads: {', '.join(KINDS)}")
    if sharded:
        if not isinstance(kind, IngestTopics):
            raise MergerError(f"a sharded source (`shards`) is read from ingest's topics, not from {name}'s")
        return UniqueShardedTopics() if key_mode == "unique" else ShardedTopics()
    return kind
