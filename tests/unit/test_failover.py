"""Failover to a GTID replica (issue 22 item 1): the epoch in every record's position that
sorts above the new server's lower binlog coordinates, and the decision whether another
server continues what ingest has read (ingest.failover). End to end:
tests/integration/test_failover.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdc.wire.position import MAX_EPOCH, EventPosition, ReplayFilter, position_bytes
from cdc.wire.resume_point import ResumePoint
from ingest.failover import ServerState, continuation

# positions as the binlog has them: file number to 999999, 32-bit event positions, rows
# of an event below its size
coords = st.tuples(st.integers(1, 999_999), st.integers(4, 2**32 - 2**16), st.integers(0, 2**15), st.integers(0, 1))
epochs = st.integers(0, MAX_EPOCH)


def at(epoch: int, c: tuple) -> EventPosition:
    f, p, r, part = c
    return EventPosition(f"binlog.{f:06d}", p, r, part, epoch)


@given(st.lists(st.tuples(epochs, coords), min_size=2, max_size=40))
def test_sequences_are_positive_int64_and_order_epochs_above_coordinates(raw):
    positions = [at(e, c) for e, c in raw]
    for p in positions:
        assert 0 < p.sequence() < 2**63
    for a in positions:
        for b in positions:
            if a.epoch != b.epoch:
                # any position of a later epoch sorts above every one of an earlier epoch
                assert (a.sequence() < b.sequence()) == (a.epoch < b.epoch)
                assert (a < b) == (a.epoch < b.epoch)
            elif (a.file, a.pos) != (b.file, b.pos) and a.file != b.file:
                assert (a.sequence() < b.sequence()) == (a.file < b.file)


def test_epoch_zero_keeps_the_old_sequence_and_header():
    p = EventPosition("binlog.000042", 123456, 7, 1)
    assert p.sequence() == (42 << 33) | ((123456 + 7) << 1) | 1
    assert p.encode() == b"binlog.000042:123456:7:1"
    assert EventPosition.decode(b"binlog.000042:123456:7") == EventPosition("binlog.000042", 123456, 7, 0, 0)
    assert EventPosition.decode(b"binlog.000042:123456:7:1").epoch == 0


@given(epochs, coords)
def test_header_roundtrip_with_epoch(epoch, c):
    p = at(epoch, c)
    assert EventPosition.decode(p.encode()) == p
    assert position_bytes(p.file, p.pos, p.row, p.part, p.epoch) == p.encode()


def test_sequence_refuses_an_epoch_beyond_its_bits():
    import pytest

    with pytest.raises(ValueError, match="epoch"):
        EventPosition("binlog.000001", 4, 0, 0, MAX_EPOCH + 1).sequence()


@given(
    st.lists(coords, min_size=1, max_size=15),
    st.lists(coords, min_size=1, max_size=15),
    st.integers(0, MAX_EPOCH - 1),
    st.data(),
)
def test_replay_filter_takes_the_new_servers_lower_positions_and_drops_true_replays(old, new, epoch, data):
    """One partition: ingest read ``old`` from the first server, then (a failover) ``new``
    from the second server at the next epoch, whose coordinates may be lower. Then it is
    killed and replays a suffix of what it wrote: all of it is dropped."""
    written = [at(epoch, c) for c in sorted(set(old))] + [at(epoch + 1, c) for c in sorted(set(new))]
    f = ReplayFilter()
    assert all(f.accept("t", 0, p, False) for p in written)
    start = data.draw(st.integers(0, len(written) - 1))
    assert not any(f.accept("t", 0, p, False) for p in written[start:])
    # the next change on the new server is taken
    last = written[-1]
    assert f.accept("t", 0, EventPosition(last.file, last.pos + 10**6, 0, 0, epoch + 1), False)


SERVER_B = dict(server_id=2, gtid_strict_mode=True, binlog_files=("binlog.000001",))


def test_same_server_goes_on_at_its_epoch():
    point = ResumePoint("0-1-40", "binlog.000002", 400, server_id=1, epoch=3)
    verdict = continuation(
        point, ServerState(1, "0-1-55", "0-1-55", True, ("binlog.000001", "binlog.000002", "binlog.000003"))
    )
    assert (verdict.epoch, verdict.moved, verdict.backwards, verdict.unverifiable) == (3, False, None, None)
    behind = continuation(point, ServerState(1, "", "", True, ("binlog.000001",)))
    assert "behind" in behind.backwards


def test_a_replica_holding_every_gtid_read_continues_at_the_next_epoch():
    point = ResumePoint("0-1-40,1-7-5", "binlog.000009", 400, server_id=1, epoch=2)
    # the replica logged server 1's transactions to 0-1-40 and its own after promotion
    state = ServerState(gtid_binlog_pos="0-2-43,1-7-9", gtid_binlog_state="0-1-40,0-2-43,1-7-9", **SERVER_B)
    verdict = continuation(point, state)
    assert (verdict.epoch, verdict.moved, verdict.backwards, verdict.unverifiable) == (3, True, None, None)


def test_a_lossy_failover_stops():
    point = ResumePoint("0-1-40", "binlog.000009", 400, server_id=1)
    # the replica had 0-1-38 when promoted, then wrote 0-2-39.. itself: 0-2-40 is another transaction
    verdict = continuation(point, ServerState(gtid_binlog_pos="0-2-45", gtid_binlog_state="0-1-38,0-2-45", **SERVER_B))
    assert verdict.moved and "does not hold GTID 0-1-40" in verdict.backwards and "0-2-45" in verdict.backwards
    # a server that lags: behind
    lag = continuation(point, ServerState(gtid_binlog_pos="0-1-38", gtid_binlog_state="0-1-38", **SERVER_B))
    assert "behind" in lag.backwards
    # a fresh server
    assert "behind" in continuation(point, ServerState(gtid_binlog_pos="", gtid_binlog_state="", **SERVER_B)).backwards
    # a domain the new server never had
    two = ResumePoint("0-1-40,1-1-3", "binlog.000009", 400, server_id=1)
    state = ServerState(gtid_binlog_pos="0-1-40", gtid_binlog_state="0-1-40", **SERVER_B)
    assert "behind" in continuation(two, state).backwards


def test_a_transaction_cut_in_pieces_must_be_on_the_new_server_too():
    point = ResumePoint("0-1-40", "binlog.000009", 400, trx_gtid="0-1-41", trx_events=3, server_id=1)
    held = ServerState(gtid_binlog_pos="0-2-50", gtid_binlog_state="0-1-41,0-2-50", **SERVER_B)
    assert continuation(point, held).backwards is None
    lost = ServerState(gtid_binlog_pos="0-2-50", gtid_binlog_state="0-1-40,0-2-50", **SERVER_B)
    assert "0-1-41" in continuation(point, lost).backwards


def test_without_strict_mode_a_change_of_server_cannot_be_verified():
    point = ResumePoint("0-1-40", "binlog.000009", 400, server_id=1)
    state = ServerState(2, "0-1-40", "0-1-40", False, ("binlog.000001",))
    verdict = continuation(point, state)
    assert verdict.backwards is None and "gtid_strict_mode is OFF" in verdict.unverifiable


def test_the_epoch_has_a_limit():
    point = ResumePoint("0-1-40", "binlog.000009", 400, server_id=1, epoch=MAX_EPOCH)
    verdict = continuation(point, ServerState(gtid_binlog_pos="0-1-40", gtid_binlog_state="0-1-40", **SERVER_B))
    assert verdict.backwards and str(MAX_EPOCH) in verdict.backwards


def test_resume_point_keeps_its_epoch_and_old_points_read_as_epoch_zero():
    rp = ResumePoint("0-1-5", "binlog.000001", 1234, None, 0, 99, 2, 4)
    assert ResumePoint.from_json(rp.to_json()) == rp
    assert ResumePoint.from_json(b'{"gtid_state":"0-1-5","server_id":1}').epoch == 0


# issue 41 items 1 and 6: the decision is against what ingest SENT, not only what it committed.
# A sharded source's failed shard leaves its records in the shared open transaction (any
# shard's next commit publishes them); a broker that shows aborted records shows a one-server
# source's aborted ones. ``sent``: the GTID state of the transactions whose records ingest
# handed to the broker.


def test_a_replica_lacking_a_transaction_sent_past_the_committed_position_is_lossy():
    committed = ResumePoint("2-200-15", "binlog.000003", 900, server_id=200)
    # the replica stopped at 2-200-15, was promoted and wrote 2-201-16.. itself
    state = ServerState(gtid_binlog_pos="2-201-18", gtid_binlog_state="2-200-15,2-201-18", **SERVER_B)
    assert continuation(committed, state).lost is None  # what the committed position alone says
    verdict = continuation(committed, state, sent="2-200-17")
    assert verdict.moved and verdict.backwards is None and verdict.lacks == "2-200-17", verdict
    assert "does not hold GTID 2-200-17" in verdict.lost, verdict.lost
    # a replica that stopped short and took no writes: behind
    lag = continuation(
        committed, ServerState(gtid_binlog_pos="2-200-15", gtid_binlog_state="2-200-15", **SERVER_B), "2-200-17"
    )
    assert lag.lacks == "2-200-17" and "behind" in lag.lost


def test_a_replica_holding_every_transaction_sent_continues():
    committed = ResumePoint("2-200-15,3-9-4", "binlog.000003", 900, server_id=200, epoch=1)
    state = ServerState(gtid_binlog_pos="2-201-20,3-9-4", gtid_binlog_state="2-200-17,2-201-20,3-9-4", **SERVER_B)
    verdict = continuation(committed, state, sent="2-200-17,3-9-2")  # an older sent entry counts as held
    assert (verdict.epoch, verdict.moved, verdict.backwards, verdict.lost) == (2, True, None, None), verdict


def test_a_committed_gap_is_still_said_as_before_and_not_as_lost():
    committed = ResumePoint("2-200-15", "binlog.000003", 900, server_id=200)
    state = ServerState(gtid_binlog_pos="2-201-18", gtid_binlog_state="2-200-12,2-201-18", **SERVER_B)
    verdict = continuation(committed, state, sent="2-200-17")
    assert "does not hold GTID 2-200-15" in verdict.backwards and verdict.lost is None


def test_the_same_server_back_with_a_shorter_binlog_than_sent_is_lossy():
    """sync_binlog != 1: the server crashed and came back without its last transactions,
    which ingest had sent; new ones would reuse their positions and be dropped as replays."""
    committed = ResumePoint("0-1-40", "binlog.000002", 400, server_id=1)
    files = ("binlog.000001", "binlog.000002")
    assert continuation(committed, ServerState(1, "0-1-40", "0-1-40", True, files), "0-1-42").lacks == "0-1-42"
    assert continuation(committed, ServerState(1, "0-1-42", "0-1-42", True, files), "0-1-42").lost is None
    same = continuation(committed, ServerState(1, "0-1-41", "0-1-41", True, files), "0-1-42")
    assert same.lacks == "0-1-42" and not same.moved and same.backwards is None and "behind" in same.lost


def test_a_sent_state_merges_per_domain_by_sequence():
    from ingest.position import highest_gtid_state

    assert highest_gtid_state("", "0-1-5") == "0-1-5"
    assert highest_gtid_state("0-1-5,1-3-9", "0-2-4") == "0-1-5,1-3-9"
    assert highest_gtid_state("0-1-5,1-3-9", "1-4-10") == "0-1-5,1-4-10"
    assert highest_gtid_state("1-4-10", "0-1-1,1-3-2") == "0-1-1,1-4-10"


def test_a_binlog_stream_silent_for_binlog_silence_s_counts_as_lost():
    """`binlog_silence_s` is the stream's read timeout: no event and no heartbeat for that
    long ends the read (pymysql raises), and ingest reads again from its position."""
    import pytest

    from cdc.config import IngestConfig
    from ingest.binlog import open_reader

    mysql = {"host": "db", "user": "u"}
    assert IngestConfig(mysql=mysql).binlog_silence_s == 20.0
    with pytest.raises(ValueError, match="binlog_silence_s"):
        IngestConfig(mysql=mysql, binlog_silence_s=1)  # below three heartbeats
    kw = {"host": "db", "port": 3306, "user": "u", "password": "p"}
    reader = open_reader(kw, 1234, "0-1-1", 1.0, silence_s=7.5, blocking=False)
    assert reader._BinLogStreamReader__connection_settings["read_timeout"] == 7.5
