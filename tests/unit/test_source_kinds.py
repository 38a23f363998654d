"""The kinds of source (merger/sources/): the registry, and each kind's pure behaviour
(replay rule, sequences, what the merger asks of it). The processor with Debezium's
records is in test_debezium_mode.py; with ingest's, in test_processor.py and others."""

from __future__ import annotations

import json
import typing

import pytest

from cdc.config import MergerConfig
from cdc.wire.headers import EMITTED_HEADER, WATERMARK_HEADER
from cdc.wire.position import EventPosition, ReplayFilter
from merger.app import source_options
from merger.batch.records import BadRecord, ParsedRecord, change_event
from merger.errors import MergerError
from merger.sources import KINDS, SourceKind, source_kind
from merger.sources.debezium_topics import DebeziumReplayFilter, DebeziumTopics, SignalWriter
from merger.sources.ingest_topics import IngestTopics
from merger.sources.sharded_topics import ShardedTopics
from merger.sources.unique_sharded_topics import UniqueShardedTopics

P = EventPosition


# ---------------------------------------------------------------------- the registry


def test_every_source_connector_value_has_its_kind_and_no_other():
    names = set(typing.get_args(MergerConfig.model_fields["source_connector"].annotation))
    assert names == set(KINDS) == {"ingest", "debezium"}
    for name in names:
        kind = source_kind(name)
        assert isinstance(kind, SourceKind) and kind.name == name
    assert isinstance(source_kind("ingest"), IngestTopics)
    assert isinstance(source_kind("debezium"), DebeziumTopics)
    assert source_kind(MergerConfig().source_connector).name == "ingest"  # the default


def test_an_unknown_kind_is_one_line_naming_the_known_ones():
    with pytest.raises(MergerError) as exc:
        source_kind("maxwell")
    text = str(exc.value)
    assert "\n" not in text and "'maxwell'" in text and "ingest, debezium" in text


def test_a_kind_without_a_member_of_the_contract_is_not_one():
    class Partial:
        name = "partial"
        follows_moved_topics = False

        def replay_filter(self):
            return ReplayFilter()

    assert not isinstance(Partial(), SourceKind)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_watermark_windows_and_snapshot_signals_agree(name, tmp_path):
    """A kind either lets the merger read snapshots in watermark windows, or gives what
    asks its writer for them: never both, never neither."""
    kind = source_kind(name)
    cfg = MergerConfig(source_connector=name, signal_table="cdc.sig", state_dir=str(tmp_path))
    signals = kind.snapshot_signals(cfg, object(), object())
    assert (signals is None) == kind.watermark_windows


def test_each_kind_gives_a_new_replay_filter():
    for kind in KINDS.values():
        a, b = kind.replay_filter(), kind.replay_filter()
        assert a is not b and a.highest == {} and isinstance(a, ReplayFilter)


def test_a_sharded_source_is_ingests_topics_of_several_shards():
    kind = source_kind("ingest", sharded=True)
    assert isinstance(kind, ShardedTopics) and isinstance(kind, SourceKind) and kind.name == "ingest"
    assert kind.shards and not source_kind("ingest").shards and not source_kind("debezium").shards
    assert kind.watermark_windows and kind.ddl_markers and kind.sequence_of(12345, 7) == 12345
    with pytest.raises(MergerError, match="sharded source .* ingest's topics, not from debezium's"):
        source_kind("debezium", sharded=True)


def _record(partition: int, offset: int, position: EventPosition | None) -> ParsedRecord:
    return ParsedRecord({"partition": partition, "offset": offset}, {}, None, position)


def test_one_server_order_is_the_binlog_order_and_a_sharded_one_keeps_offsets_and_shards():
    one = [_record(1, 0, P("b.000001", 500)), _record(0, 0, P("b.000001", 100)), _record(0, 1, P("b.000001", 900))]
    for kind in (source_kind("ingest"), source_kind("debezium")):
        assert [it.record["offset"] for it in kind.in_order(one)] == [0, 0, 1]
        assert kind.reconciler_order(7, 12345) == (12345, None)
    # shard b's positions are lower than a's, yet they came later along partition 0
    sharded = [
        _record(0, 0, P("b.000001", 900, shard="a")),
        _record(0, 1, P("b.000001", 100, shard="b")),
        _record(0, 2, P("b.000001", 950, shard="a")),
        _record(1, 0, P("b.000001", 200, shard="b")),
    ]
    kind = source_kind("ingest", sharded=True)
    ordered = kind.in_order(sharded)
    along = [(it.record["partition"], it.record["offset"]) for it in ordered]
    assert [x for x in along if x[0] == 0] == [(0, 0), (0, 1), (0, 2)]
    for shard in "ab":
        seqs = [it.position.sequence() for it in ordered if it.position.shard == shard]
        assert seqs == sorted(seqs)
    assert kind.reconciler_order(7, 12345) == (7, 12345)  # the offset rises along a partition


# ---------------------------------------------------------------------- ingest's topics


def test_ingest_topics():
    kind = source_kind("ingest")
    assert kind.follows_moved_topics and kind.ddl_markers and kind.truncate_in_every_partition
    assert kind.watermark_windows
    assert kind.sequence_of(12345, 7) == 12345  # the binlog position, not the offset
    assert kind.snapshot_signals(MergerConfig(), object(), object()) is None


def test_ingest_replay_rule_drops_equal_positions_but_the_tombstone_of_a_delete():
    f = source_kind("ingest").replay_filter()
    t = "cdc.shop.t"
    assert f.accept_record(t, 0, P("binlog.000001", 100), {"op": "c"})
    assert not f.accept_record(t, 0, P("binlog.000001", 100), {"op": "c"})  # replayed
    assert f.accept_record(t, 0, P("binlog.000001", 200), {"op": "d"})
    assert f.accept_record(t, 0, P("binlog.000001", 200), None)  # its tombstone, once
    assert not f.accept_record(t, 0, P("binlog.000001", 200), None)
    assert not f.accept_record(t, 0, P("binlog.000001", 150), {"op": "u"})
    assert f.accept_record(t, 1, P("binlog.000001", 150), {"op": "u"})  # another partition
    assert f.accept_record(t, 0, None, {"op": "c"})  # no position: not judged
    # the same rule as ReplayFilter.accept
    g = ReplayFilter()
    for pos, payload in [(100, {}), (100, {}), (200, {}), (200, None), (200, None), (50, {})]:
        assert g.accept("t", 0, P("binlog.000001", pos), payload is None) == f.accept_record(
            "u", 0, P("binlog.000001", pos), payload
        )


def test_the_kafka_source_follows_the_moved_topics_feed_of_ingest_only():
    ingest = source_options(MergerConfig(topic_prefix="p", source_connector="ingest"))
    assert ingest["movedTopicsFrom"] == "p.offsets" and ingest["endCheckAllMs"] == "5000"
    assert "movedTopicsFrom" not in source_options(MergerConfig(source_connector="ingest", end_check_all_ms=0))
    debezium = source_options(MergerConfig(topic_prefix="p", source_connector="debezium"))
    assert "movedTopicsFrom" not in debezium and "endCheckAllMs" not in debezium


# ---------------------------------------------------------------------- Debezium's topics


def test_debezium_topics(tmp_path):
    kind = source_kind("debezium")
    assert not kind.follows_moved_topics and not kind.ddl_markers and not kind.truncate_in_every_partition
    assert not kind.watermark_windows
    assert kind.sequence_of(12345, 7) == 7  # the Kafka offset
    assert isinstance(kind.replay_filter(), DebeziumReplayFilter)
    store, guard = object(), object()
    cfg = MergerConfig(source_connector="debezium", signal_table="cdc.sig", state_dir=str(tmp_path))
    signals = kind.snapshot_signals(cfg, store, guard)
    assert isinstance(signals, SignalWriter)
    assert (signals.table, signals.store, signals.guard, signals.mysql) == ("cdc.sig", store, guard, cfg.mysql)


def test_debezium_replay_rule_lets_equal_positions_pass():
    f = source_kind("debezium").replay_filter()
    src = {"source": {"file": "binlog.000001", "pos": 100, "row": 0, "snapshot": "false"}}
    assert f.accept_record("t", 0, P("binlog.000001", 100), src)
    assert f.accept_record("t", 0, P("binlog.000001", 100), src)  # many records share a position
    assert not f.accept_record("t", 0, P("binlog.000001", 90), src)


# ---------------------------------------------------------------------- sequences of changes


def _item(offset: int, pos: EventPosition | None) -> ParsedRecord:
    record = {"topic": "cdc.shop.t", "partition": 2, "offset": offset}
    return ParsedRecord(record, {}, {"op": "u", "after": {"id": 1}}, pos)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_change_carries_its_kinds_sequence_and_the_binlog_order(name):
    kind = source_kind(name)
    pos = P("binlog.000003", 4000, 2)
    ev = change_event(_item(17, pos), kind)
    assert ev.order == pos.sequence()  # binlog order across partitions, for every kind
    assert ev.seq == kind.sequence_of(pos.sequence(), 17)
    assert ev.seq == (pos.sequence() if name == "ingest" else 17)
    # without a position both follow the offset
    ev = change_event(_item(18, None), kind)
    assert ev.order == ev.seq == 18


# ---------------------------------------------------------------------- key mode unique of a sharded source


def _stamped(offset: int, emitted, value: dict | None = None, headers: dict | None = None) -> ParsedRecord:
    record = {"topic": "cdc.shop.t", "partition": 1, "offset": offset}
    stamped = {} if emitted is None else {EMITTED_HEADER: emitted}
    pos = P("binlog.000003", 4000, shard="a")
    return ParsedRecord(record, {**stamped, **(headers or {})}, value or {"op": "u", "after": {"id": 1}}, pos)


def test_key_mode_unique_of_a_sharded_source_is_its_own_kind():
    kind = source_kind("ingest", sharded=True, key_mode="unique")
    assert isinstance(kind, UniqueShardedTopics) and isinstance(kind, SourceKind) and kind.shards
    assert type(source_kind("ingest", sharded=True, key_mode="origin")) is ShardedTopics
    assert type(source_kind("ingest", key_mode="unique")) is IngestTopics  # routes on one server: positions compare
    with pytest.raises(MergerError, match="ingest's topics"):
        source_kind("debezium", sharded=True, key_mode="unique")


def test_key_mode_unique_orders_and_sequences_by_the_emission_counter():
    """The emission counter, not the shard's binlog position, is both the order and the
    sink's sequence; a marker's copies share it, so the HIGH marker's sequence is one."""
    kind = source_kind("ingest", sharded=True, key_mode="unique")
    ev = change_event(_stamped(17, b"905"), kind)
    assert ev.order == ev.seq == 905
    marker = json.dumps({"table": "shop.t", "window": "w1", "kind": "high"}).encode()
    ev = change_event(_stamped(18, b"906", headers={WATERMARK_HEADER: marker}), kind)
    assert ev.op == "m" and ev.order == ev.seq == 906
    assert kind.reconciler_order(18, ev.seq) == (18, 906)  # the offset rises along a partition


@pytest.mark.parametrize("emitted", [None, b"", b"-3", b"12a", b"1e3", "\u00b2".encode()])
def test_key_mode_unique_refuses_a_record_without_its_counter(emitted):
    """Never ordered as 0: a bad record, whose error names the header."""
    kind = source_kind("ingest", sharded=True, key_mode="unique")
    with pytest.raises(BadRecord, match="cdc.emitted") as exc:
        change_event(_stamped(17, emitted), kind)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_other_kinds_ignore_the_emission_counter(name):
    kind = source_kind(name)
    ev = change_event(_stamped(17, b"905"), kind)
    assert ev.order == P("binlog.000003", 4000, shard="a").sequence()
