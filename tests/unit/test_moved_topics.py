"""cdc.wire.moved_topics: the topics a transaction wrote, in ingest's position record."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from cdc.wire.moved_topics import topics_of, with_topics
from cdc.wire.resume_point import ResumePoint


@given(st.sets(st.text(alphabet="abcxyz._-", min_size=1, max_size=12), max_size=6))
def test_the_position_record_names_the_topics_and_still_reads_as_a_position(topics):
    point = ResumePoint("0-1-42", "mariadb-bin.000003", 1234, "0-1-42", 3, 1700000000000, 1, 0)
    record = with_topics(point.to_json(), topics)
    assert topics_of(record) == frozenset(topics)
    assert ResumePoint.from_json(record) == point  # ingest reads its position back unchanged


def test_records_that_do_not_name_topics():
    assert topics_of(ResumePoint("0-1-1").to_json()) is None  # an older ingest: any topic may have moved
    assert topics_of(b"{not json") is None
    assert topics_of(b"[1, 2]") is None
    assert topics_of(json.dumps({"gtid_state": "0-1-1", "topics": "p.db.t"}).encode()) is None
    lease = {"identity": "x", "state_name": None, "host": "h", "pid": 1, "run": "r", "renewed_ms": 0}
    assert topics_of(json.dumps(lease).encode()) == frozenset()  # a lease moves no table topic
    assert topics_of(None) == frozenset()  # a tombstone (compaction)
