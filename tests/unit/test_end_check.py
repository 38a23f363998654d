"""merger.kafka.end_check: which partitions' ends are asked for on a trigger, against a
simple model of what the source must never miss."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from merger.kafka.end_check import HOT_S, EndCheck

TOPICS = ["p.db.a", "p.db.b", "p.db.c", "p"]
CURRENT = [(t, n) for t in TOPICS for n in range(2 if t != "p" else 1)]


def test_without_the_feed_every_partition_on_every_trigger():
    check = EndCheck(None)
    for now in (0.0, 0.2, 0.4):
        ask, everything = check.plan(now, CURRENT, frozenset(), {tp: 5 for tp in CURRENT})
        assert (ask, everything) == (CURRENT, True)
        check.answered(now, everything)


def test_only_named_topics_between_full_checks_and_they_stay_hot():
    check = EndCheck(5.0)
    ends = {tp: 5 for tp in CURRENT}
    assert check.plan(0.0, CURRENT, frozenset(), ends) == (CURRENT, True)  # the first: all
    check.answered(0.0, True)
    assert check.plan(0.2, CURRENT, frozenset(), ends) == ([], False)
    check.answered(0.2, False)
    assert check.plan(0.4, CURRENT, frozenset({"p.db.b"}), ends) == ([("p.db.b", 0), ("p.db.b", 1)], False)
    check.answered(0.4, False)
    # hot for HOT_S: asked again without being named (its partitions' commit markers may lag)
    assert check.plan(0.4 + HOT_S - 0.1, CURRENT, frozenset(), ends)[0] == [("p.db.b", 0), ("p.db.b", 1)]
    assert check.plan(0.4 + HOT_S + 0.1, CURRENT, frozenset(), ends)[0] == []
    # unknown end, unsettled scan: asked
    partial = {tp: 5 for tp in CURRENT if tp != ("p", 0)}
    assert check.plan(3.0, CURRENT, frozenset(), partial, {("p.db.c", 1)})[0] == [("p.db.c", 1), ("p", 0)]
    assert check.plan(5.0, CURRENT, frozenset(), ends) == (CURRENT, True)  # every_s after the last full check


def test_unknown_news_and_failures_mean_every_partition():
    check = EndCheck(5.0)
    ends = {tp: 5 for tp in CURRENT}
    check.answered(0.0, True)
    assert check.plan(0.2, CURRENT, None, ends) == (CURRENT, True)  # the feed cannot tell
    check.answered(0.2, True)
    assert check.plan(0.4, CURRENT, frozenset({"p"}), ends) == ([("p", 0)], False)
    check.failed()
    assert check.plan(0.6, CURRENT, frozenset(), ends) == (CURRENT, True)


step = st.tuples(
    st.floats(min_value=0.01, max_value=3.0),  # time since the last trigger
    st.frozensets(st.sampled_from(TOPICS)),  # topics ingest's transactions named
    st.booleans(),  # the feed could not tell
    st.booleans(),  # the broker did not answer
    st.frozensets(st.sampled_from(CURRENT), max_size=2),  # not settled by the scan
)


@settings(max_examples=400, deadline=None)
@given(st.floats(min_value=0.5, max_value=10.0), st.lists(step, max_size=40))
def test_no_partition_goes_unasked_longer_than_the_model_allows(every_s, steps):
    """The model: a partition is left out of a trigger's request only if its topic was not
    named on that trigger, its end is known, the scan settled it, the feed could tell, the
    last request did not fail, and every partition was answered less than every_s ago."""
    check = EndCheck(every_s)
    now, last_all, failed_before = 0.0, None, False
    ends: dict = {}
    for dt, named, unknown, fails, unsettled in steps:
        now += dt
        moved = None if unknown else named
        ask, everything = check.plan(now, CURRENT, moved, ends, unsettled)
        assert everything == (set(ask) == set(CURRENT))
        for tp in set(CURRENT) - set(ask):
            assert moved is not None and not failed_before
            assert tp[0] not in moved and tp in ends and tp not in unsettled
            assert last_all is not None and now - last_all < every_s
        if fails:
            check.failed()
        else:
            check.answered(now, everything)
            ends.update({tp: 1 for tp in ask})
            if everything:
                last_all = now
        failed_before = fails


def test_the_scan_follows_partitions_whose_end_moved_lately():
    from merger.kafka.end_check import FOLLOW_S

    assert EndCheck(None).followed(0.0, CURRENT, {}, {}) == CURRENT  # without the feed: all
    check = EndCheck(5.0)
    ends = {tp: 5 for tp in CURRENT}
    assert check.followed(0.0, CURRENT, {}, ends) == CURRENT  # first answers: all moved
    moved = {**ends, ("p.db.a", 1): 6, ("p", 0): 0}  # one end moved; one tells nothing (0)
    assert check.followed(FOLLOW_S, CURRENT, ends, moved) == [("p.db.a", 1), ("p", 0)]
    check.plan(FOLLOW_S + 1, CURRENT, frozenset({"p.db.c"}), moved)  # named: hot
    assert check.followed(FOLLOW_S + 1, CURRENT, moved, {}) == [("p.db.a", 1), ("p.db.c", 0), ("p.db.c", 1), ("p", 0)]
    assert check.followed(2 * FOLLOW_S + 2, CURRENT, moved, {("p.db.b", 0): 5}) == []
    # an end of 0 again (an open transaction, an empty partition) is no move: the scan
    # stops following it FOLLOW_S after its last change
    zero = {("p", 0): 0}
    assert check.followed(3 * FOLLOW_S, CURRENT, zero, zero) == []
    assert check.followed(3 * FOLLOW_S + 1, CURRENT, zero, {("p", 0): 4}) == [("p", 0)]
    assert check.followed(3 * FOLLOW_S + 2, CURRENT, {("p", 0): 4}, zero) == [("p", 0)]
