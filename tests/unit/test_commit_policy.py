"""ingest.stream.CommitPolicy: when the open Kafka transaction is committed with the position."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.stream import CommitPolicy

P = CommitPolicy(every_events=100, every_ms=500, heartbeat_ms=2000)


def test_inside_a_large_transaction_only_the_event_count_commits():
    assert not P.inside_transaction(99)
    assert P.inside_transaction(100)


def test_held_records_are_sent_at_the_count_or_the_byte_bound():
    policy = CommitPolicy(every_events=100, every_ms=500, hold_max_bytes=1 << 20)
    assert not policy.release_held(99, (1 << 20) - 1)
    assert policy.release_held(100, 10)
    assert policy.release_held(3, 1 << 20)  # three large rows


def test_at_a_transaction_end_by_count_or_when_the_last_commit_is_every_ms_old():
    assert P.at_transaction_end(100, now=10.0, last_commit=10.0)
    assert not P.at_transaction_end(5, now=10.4, last_commit=10.0)
    assert P.at_transaction_end(5, now=10.5, last_commit=10.0)


def test_an_isolated_change_on_a_quiet_source_is_committed_at_its_transaction_end():
    """Issue 23 item 3: a change after a quiet spell did wait every_ms from its own arrival,
    i.e. for the next event or server heartbeat (a second on a quiet source)."""
    assert P.at_transaction_end(1, now=100.0, last_commit=10.0)


def test_with_nothing_pending_the_position_alone_moves_at_most_every_interval():
    assert not P.at_transaction_end(0, now=10.4, last_commit=10.0)
    assert P.at_transaction_end(0, now=10.5, last_commit=10.0)


def test_idle_commits_what_is_pending_or_a_moved_position_outside_a_transaction():
    assert P.while_idle(3, False, False, now=11.0, last_commit=10.0)
    assert P.while_idle(0, True, False, now=11.0, last_commit=10.0)
    assert not P.while_idle(0, False, False, now=99.0, last_commit=0.0)
    assert not P.while_idle(3, True, True, now=99.0, last_commit=0.0)
    assert not P.while_idle(3, False, False, now=10.4, last_commit=10.0)


def test_the_server_heartbeat_wakes_the_loop_every_interval_at_most_every_second():
    assert P.server_heartbeat_s() == 0.5
    assert CommitPolicy(100, 200).server_heartbeat_s() == 0.2
    assert CommitPolicy(100, 5000).server_heartbeat_s() == 1.0


def test_heartbeats_outside_transactions_and_never_when_off():
    assert P.heartbeat_due(False, now=12.0, last_heartbeat=10.0)
    assert not P.heartbeat_due(True, now=12.0, last_heartbeat=10.0)
    assert not P.heartbeat_due(False, now=11.9, last_heartbeat=10.0)
    assert not CommitPolicy(100, 500, 0).heartbeat_due(False, now=1e9, last_heartbeat=0.0)


@given(
    pending=st.integers(0, 300),
    dirty=st.booleans(),
    now=st.floats(0, 100),
    last=st.floats(0, 100),
)
def test_nothing_pending_and_nothing_moved_is_never_committed_while_idle(pending, dirty, now, last):
    """The idle rule never commits an unchanged position, and never inside a transaction."""
    committed = P.while_idle(pending, dirty, False, now, last)
    if not pending and not dirty:
        assert not committed
    assert not P.while_idle(pending, dirty, True, now, last)
    if committed:
        assert (now - last) * 1000 >= P.every_ms


@given(
    gaps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=200),
    pending_per_trx=st.integers(1, 50),
)
def test_transaction_ends_commit_at_most_once_per_interval_and_none_waits_past_it(gaps, pending_per_trx):
    """Replaying transaction ends ``gaps`` seconds apart: two commits (below every_events)
    are never closer than every_ms, and a transaction ending every_ms or more after the
    last commit is never left pending (the spacing, not the change, is what waits)."""
    policy = CommitPolicy(every_events=10_000, every_ms=200)
    now, last_commit, pending, commits = 0.0, 0.0, 0, []
    for gap in gaps:
        now += gap
        pending += pending_per_trx
        if policy.at_transaction_end(pending, now, last_commit):
            commits.append(now)
            pending, last_commit = 0, now
        else:
            assert (now - last_commit) * 1000 < policy.every_ms
    assert all((b - a) * 1000 >= policy.every_ms for a, b in zip(commits, commits[1:]))
