"""Positions of a sharded source: ``EventPosition.shard`` in the ``cdc.position`` header,
the ReplayFilter per partition and shard, and the position vector ingest commits to its
offsets topic (``PositionVector``, ``position_record``, ``topics_of``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from cdc.wire.moved_topics import topics_of, with_topics
from cdc.wire.position import MAX_EPOCH, MAX_FILE_NUMBER, EventPosition, ReplayFilter, position_bytes
from cdc.wire.resume_point import PositionVector, ResumePoint, position_record

SHARD_NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)


# --------------------------------------------------------------------------- the header


@st.composite
def positions(draw, shard=st.one_of(st.just(""), SHARD_NAMES)):
    base = draw(st.sampled_from(["binlog", "mysql-bin", "mariadb-bin"]))
    file = f"{base}.{draw(st.integers(1, MAX_FILE_NUMBER)):06d}"
    pos = draw(st.integers(0, 2**32 - 1))
    row = draw(st.integers(0, 2**32 - 1 - pos))
    return file, pos, row, draw(st.integers(0, 1)), draw(st.integers(0, MAX_EPOCH)), draw(shard)


@given(positions())
def test_a_position_with_its_shard_round_trips(p):
    file, pos, row, part, epoch, shard = p
    raw = position_bytes(file, pos, row, part, epoch, shard)
    expected = EventPosition(file, pos, row, part, epoch, shard)
    assert EventPosition.decode(raw) == expected
    assert EventPosition.decode(raw.decode()) == expected
    assert expected.encode() == raw
    assert raw.endswith(f"@{shard}".encode()) == bool(shard)
    assert (b"@" in raw) == bool(shard)


@given(positions(shard=SHARD_NAMES))
def test_the_sequence_leaves_the_shard_out(p):
    file, pos, row, part, epoch, shard = p
    assert (
        EventPosition(file, pos, row, part, epoch, shard).sequence()
        == EventPosition(file, pos, row, part, epoch).sequence()
    )


def test_header_texts():
    assert position_bytes("binlog.000001", 4) == b"binlog.000001:4:0"
    assert position_bytes("binlog.000001", 4, shard="s1") == b"binlog.000001:4:0@s1"
    assert position_bytes("binlog.000001", 4, 2, 1, 3, "s-2") == b"binlog.000001:4:2:1:3@s-2"
    assert EventPosition.decode("binlog.000001:4@s1") == EventPosition("binlog.000001", 4, shard="s1")


@pytest.mark.parametrize(
    "text",
    ["binlog.000001:4@", "binlog.000001:4:0@", "@s1", "binlog.000001@s1", "binlog.000001:x@s1", ":4@s1"],
)
def test_decode_refuses_what_is_not_a_position(text):
    with pytest.raises(ValueError, match="not a binlog position"):
        EventPosition.decode(text)


def test_positions_of_shards_sort_by_shard_first():
    a = EventPosition("binlog.000009", 900, shard="a")
    b = EventPosition("binlog.000001", 4, shard="b")
    assert a < b  # only to make sorting total: the two do not compare
    assert sorted([b, a]) == [a, b]


# --------------------------------------------------------------------------- the replay filter

SHARDS = ["s1", "s2", "s3"]
TOPIC, PARTITION = "p.shop.orders", 0


def _position(shard: str, i: int) -> EventPosition:
    # every shard's binlog has the same names and offsets: only the shard tells them apart
    return EventPosition(f"binlog.{1 + i // 4:06d}", 4 + 100 * (i % 4), shard=shard)


@st.composite
def shard_streams(draw):
    """Each shard's records in its own order: new changes (some deletes with their
    tombstone, at the delete's position), and replays of a suffix of what it wrote (a
    crash of ingest)."""
    streams = {}
    for shard in SHARDS:
        written: list[tuple[EventPosition, bool]] = []
        out: list[tuple[EventPosition, bool]] = []
        n = 0
        for step in draw(st.lists(st.one_of(st.sampled_from(["row", "delete"]), st.integers(1, 6)), max_size=12)):
            if step == "row":
                written.append((_position(shard, n), False))
                out.append(written[-1])
                n += 1
            elif step == "delete":
                written += [(_position(shard, n), False), (_position(shard, n), True)]
                out += written[-2:]
                n += 1
            elif written:
                out += written[-step:]  # a replay: the records since the last commit, again
        streams[shard] = out
    return streams


@st.composite
def interleavings(draw):
    """The shards' records in one partition, in any interleaving that keeps each shard's order."""
    streams = draw(shard_streams())
    tags = [shard for shard, records in streams.items() for _ in records]
    order = draw(st.permutations(tags))
    at = dict.fromkeys(SHARDS, 0)
    out = []
    for shard in order:
        out.append(streams[shard][at[shard]])
        at[shard] += 1
    return out


def _first_occurrences(records) -> list[bool]:
    """The model: a record is new exactly when its (shard, position, tombstone) was not seen."""
    seen, out = set(), []
    for pos, tomb in records:
        out.append((pos.shard, pos, tomb) not in seen)
        seen.add((pos.shard, pos, tomb))
    return out


def _highest_per_shard(records) -> list[bool]:
    """The same model told another way: a per-shard "highest seen" (position, tombstone)."""
    highest: dict[str, tuple[EventPosition, bool]] = {}
    out = []
    for pos, tomb in records:
        prev = highest.get(pos.shard)
        new = prev is None or (pos, tomb) > prev
        out.append(new)
        if new:
            highest[pos.shard] = (pos, tomb)
    return out


class OneHighestPerPartition:
    """A broken copy: the ReplayFilter before shards, one highest position per partition
    (positions compared without their shard, as they were)."""

    def __init__(self) -> None:
        self.highest: dict[tuple[str, int], tuple[EventPosition, bool]] = {}

    def accept(self, topic, partition, position, is_tombstone):
        if position is None:
            return True
        position = dataclasses.replace(position, shard="")
        prev = self.highest.get((topic, partition))
        if prev is not None:
            if position < prev[0] or (position == prev[0] and (not is_tombstone or prev[1])):
                return False
        self.highest[(topic, partition)] = (position, is_tombstone)
        return True


def _run(filter_, records) -> list[bool]:
    return [filter_.accept(TOPIC, PARTITION, pos, tomb) for pos, tomb in records]


@settings(max_examples=300)
@given(interleavings())
def test_the_filter_takes_the_first_occurrence_of_every_shard_position(records):
    accepted = _run(ReplayFilter(), records)
    assert accepted == _first_occurrences(records) == _highest_per_shard(records)
    taken = [r for r, ok in zip(records, accepted) if ok]
    for shard in SHARDS:  # each shard's records once each, in its own order
        mine = [r for r in taken if r[0].shard == shard]
        assert mine == sorted(set(mine))


def _is_counterexample(records) -> bool:
    return _run(OneHighestPerPartition(), records) != _first_occurrences(records)


def test_one_highest_per_partition_drops_records_of_other_shards():
    """The test above is able to fail: a filter keyed by (topic, partition) alone fails it."""
    concrete = [(_position("s1", 5), False), (_position("s2", 0), False)]
    assert _run(ReplayFilter(), concrete) == [True, True]
    assert _run(OneHighestPerPartition(), concrete) == [True, False]  # s2's first change dropped
    found = find(interleavings(), _is_counterexample, settings=settings(max_examples=500, database=None))
    assert _run(ReplayFilter(), found) == _first_occurrences(found)


def test_partitions_and_topics_keep_their_own_highest():
    f = ReplayFilter()
    high, low = EventPosition("binlog.000002", 4, shard="s1"), EventPosition("binlog.000001", 4, shard="s1")
    assert f.accept("t", 0, high, False)
    assert f.accept("t", 1, low, False)
    assert f.accept("u", 0, low, False)
    assert not f.accept("t", 0, low, False)
    assert f.accept("t", 0, dataclasses.replace(low, shard=""), False)  # the one-server source's own
    assert f.accept("t", 0, None, False) and f.accept("t", 0, None, False)  # no position: always
    assert f.accept_record("t", 0, high, None)  # the delete's tombstone, once
    assert not f.accept_record("t", 0, high, None)


# --------------------------------------------------------------------------- the position vector

RESUME_POINTS = st.builds(
    ResumePoint,
    gtid_state=st.from_regex(r"(0-[1-9][0-9]{0,3}-[1-9][0-9]{0,5})?", fullmatch=True),
    file=st.one_of(st.none(), st.sampled_from(["binlog.000001", "mariadb-bin.000042"])),
    pos=st.one_of(st.none(), st.integers(4, 2**32 - 1)),
    trx_gtid=st.one_of(st.none(), st.just("0-1-7")),
    trx_events=st.integers(0, 10**6),
    ts_ms=st.integers(0, 2**41),
    server_id=st.one_of(st.none(), st.integers(1, 2**32 - 1)),
    epoch=st.integers(0, MAX_EPOCH),
)
VECTORS = st.builds(PositionVector, st.dictionaries(SHARD_NAMES, RESUME_POINTS, max_size=5))
TOPICS = st.sets(st.text(alphabet="abcxyz._-", min_size=1, max_size=12), max_size=6)


@given(VECTORS)
def test_a_position_vector_round_trips(vector):
    raw = vector.to_json()
    assert position_record(raw) == vector
    assert list(json.loads(raw)) == ["shards"]
    assert list(json.loads(raw)["shards"]) == sorted(vector.shards)


@given(RESUME_POINTS)
def test_a_one_server_position_record_reads_as_a_resume_point(point):
    assert position_record(point.to_json()) == point
    assert isinstance(position_record(point.to_json()), ResumePoint)


@given(st.one_of(VECTORS, RESUME_POINTS), TOPICS)
def test_the_topics_of_a_position_record_of_either_form(record, topics):
    raw = with_topics(record.to_json(), topics)
    assert topics_of(raw) == frozenset(topics)
    assert position_record(raw) == record  # the topics do not disturb the position


def test_a_vector_without_topics_may_have_moved_any():
    vector = PositionVector({"s1": ResumePoint("0-1-1", "binlog.000001", 4)})
    assert topics_of(vector.to_json()) is None  # a position record that names no topics
    assert topics_of(PositionVector({}).to_json()) is None
    assert position_record(PositionVector({}).to_json()) == PositionVector({})


def test_with_point_replaces_one_shard_and_leaves_the_vector_alone():
    a, b, c = ResumePoint("0-1-1"), ResumePoint("0-2-5"), ResumePoint("0-1-2")
    vector = PositionVector({"s1": a, "s2": b})
    moved = vector.with_point("s1", c)
    assert moved == PositionVector({"s1": c, "s2": b})
    assert vector == PositionVector({"s1": a, "s2": b})
    assert vector.with_point("s3", c).shards == {"s1": a, "s2": b, "s3": c}


# --------------------------------------------------------------------------- the documented schemas

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _schema(name):
    return json.loads((SCHEMAS / name).read_text())


# BUG (schemas/ingest-headers.schema.json): the pattern of "cdc.position",
# ^[^:]+:[0-9]+:[0-9]+(:1|:[01]:[1-9][0-9]*)?$, has no "@shard" suffix, so the header of
# every record of a sharded source (position_bytes(..., shard), written by ingest/writer.py)
# fails the schema tests/unit/test_schemas.py says describes what the code writes.
def test_a_sharded_position_header_matches_the_headers_schema():
    header = _schema("ingest-headers.schema.json")["properties"]["cdc.position"]
    jsonschema.validate(position_bytes("binlog.000001", 4, 0, 1, 2).decode(), header)  # one server's: fine
    jsonschema.validate(position_bytes("binlog.000001", 4, 0, shard="s1").decode(), header)


# BUG (schemas/resume-point.schema.json): the offsets topic's position record schema only
# knows the one-server ResumePoint ("additionalProperties": false, "gtid_state" required);
# the {"shards": {...}} vector a sharded ingest commits (PositionVector.to_json) fails it.
def test_a_position_vector_matches_the_resume_point_schema():
    vector = PositionVector({"s1": ResumePoint("0-1-5", "binlog.000001", 1234, None, 0, 1)})
    jsonschema.validate(json.loads(vector.to_json()), _schema("resume-point.schema.json"))
