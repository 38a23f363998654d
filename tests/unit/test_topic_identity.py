"""merger.kafka.topic_identity: a topic deleted and created again is told by its id."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from merger.kafka.options import KafkaSourceError
from merger.kafka.topic_identity import CHECK_EVERY_S, TopicIdentities, changed_topics

ids = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["id1", "id2", "id3"]), max_size=4)


@given(ids, ids)
def test_changed_topics_are_exactly_the_names_whose_id_differs(recorded, current):
    want = {t for t in current if t in recorded and recorded[t] != current[t]}
    assert {t for t, _, _ in changed_topics(recorded, current)} == want


def test_a_topic_created_again_stops_the_source_across_restarts(tmp_path):
    path = str(tmp_path / "topic-ids.json")
    first = TopicIdentities(path)
    first.check(0.0, {"p.db.t": "AAA", "p.db.u": "BBB"})
    first.check(1.0, {"p.db.t": "AAA", "p.db.u": "BBB", "p.db.v": ""})  # not described this time: not recorded
    assert json.loads(open(path).read()) == {"p.db.t": "AAA", "p.db.u": "BBB"}
    restarted = TopicIdentities(path)  # a merger started again on its state_dir
    with pytest.raises(KafkaSourceError, match="topic p.db.u was deleted and created again .*BBB, now CCC.*state_dir"):
        restarted.check(2.0, {"p.db.t": "AAA", "p.db.u": "CCC"})


def test_when_the_ids_are_asked_for():
    ti = TopicIdentities(None)
    assert ti.due(0.0, ["t", "u"]) == (["t", "u"], True)  # the first planning: all
    ti.check(0.0, {"t": "A", "u": "B"})
    assert ti.due(1.0, ["t", "u"]) == ([], False)
    assert ti.due(1.0, ["t", "u"], {"u"}) == (["u"], False)  # an end below what was read: that topic, at once
    ti.check(1.0, {"u": "B"}, everything=False)
    assert ti.due(2.0, ["t", "u", "new"]) == (["new"], False)  # a topic not recorded yet
    assert ti.due(CHECK_EVERY_S - 0.1, ["t", "u"]) == ([], False)  # a partial check does not restart the period
    assert ti.due(CHECK_EVERY_S, ["t", "u"]) == (["t", "u"], True)
    with pytest.raises(KafkaSourceError, match="topic u was deleted and created again"):
        ti.check(CHECK_EVERY_S, {"u": "C"}, everything=False)


def test_an_unreadable_record_of_ids_is_an_error(tmp_path):
    path = tmp_path / "topic-ids.json"
    path.write_text("{not json")
    with pytest.raises(KafkaSourceError, match="cannot read the recorded topic ids"):
        TopicIdentities(str(path))
