"""The failover decision's edges (ingest.failover), each shown by a mutant of mutmut that
the broader tests of test_failover.py let live: the exact bounds (a server holding exactly
the GTID read, the last epoch), the first transaction of a domain, several domains in a
GTID position, what a verdict carries besides its reason, and the texts an operator reads."""

from __future__ import annotations

from cdc.wire.position import MAX_EPOCH
from cdc.wire.resume_point import ResumePoint
from ingest.failover import ServerState, continuation, missing_transaction


def replica(pos: str, state: str | None = None, server_id: int = 2, strict: bool = True, files=()) -> ServerState:
    return ServerState(server_id, pos, pos if state is None else state, strict, tuple(files))


def test_another_server_holding_exactly_the_gtid_read_or_sent_continues():
    read = ResumePoint("0-1-10", server_id=1)
    verdict = continuation(read, replica("0-1-10"), sent="0-1-10")
    assert verdict.moved and verdict.epoch == 1
    assert (verdict.backwards, verdict.unverifiable, verdict.lost) == (None, None, None)
    # one less, and the sent one is lost, named with the replica's position
    lost = continuation(ResumePoint("0-1-9", server_id=1), replica("0-1-9"), sent="0-1-10")
    assert lost.lacks == "0-1-10" and "its GTID position 0-1-9 is behind GTID 0-1-10" in lost.lost
    assert "had not caught up" in lost.lost


def test_the_first_transaction_of_a_domain_the_server_never_logged_is_missing():
    # the server logged nothing of domain 1 (nor of origin 7 in domain 0): 1-5-1 and 0-7-1 are not held
    server = replica("0-1-10", "0-1-10")
    assert missing_transaction(ResumePoint("0-1-10,1-5-1", server_id=1), server) is not None
    assert missing_transaction(ResumePoint("0-7-1", server_id=1), server) is not None
    assert missing_transaction(ResumePoint("0-1-10", server_id=1), server) is None
    # a domain's origins are kept apart: origin 5's 3 does not hold origin 1's 3
    assert missing_transaction(ResumePoint("0-1-3", server_id=1), replica("0-5-3", "0-5-3")) is not None


def test_the_last_epoch_is_still_taken_and_the_one_above_refused():
    at_last = continuation(ResumePoint("0-1-10", server_id=1, epoch=MAX_EPOCH - 1), replica("0-1-10"))
    assert at_last.epoch == MAX_EPOCH and at_last.backwards is None
    beyond = continuation(ResumePoint("0-1-10", server_id=1, epoch=MAX_EPOCH), replica("0-1-10"))
    assert beyond.epoch == MAX_EPOCH + 1 and beyond.moved is True
    assert f"continued across {MAX_EPOCH} changes of server" in beyond.backwards


def test_refusals_carry_their_epoch_and_that_the_server_moved():
    missing = continuation(ResumePoint("0-1-10", server_id=1, epoch=3), replica("0-1-8"))
    assert missing.epoch == 4 and missing.moved is True and missing.backwards.startswith("the source is another")
    assert "server_id 2; ingest's position is on server_id 1" in missing.backwards
    loose = continuation(ResumePoint("0-1-10", server_id=1, epoch=3), replica("0-1-10", strict=False))
    assert loose.epoch == 4 and loose.moved is True and "gtid_strict_mode is OFF" in loose.unverifiable
    same = continuation(ResumePoint("0-1-10", server_id=2, epoch=3), replica("0-1-10"))
    assert same.epoch == 3 and same.moved is False and same.backwards is None


def test_an_unverifiable_server_stays_unverifiable_whatever_was_sent():
    read = ResumePoint("0-1-10", server_id=1)
    verdict = continuation(read, replica("0-1-5", strict=False), sent="0-1-12")
    assert verdict.unverifiable and verdict.lost is None and verdict.lacks is None


def test_the_same_server_checks_every_domain_of_its_position():
    # several domains in @@gtid_binlog_pos, written without spaces as MariaDB does
    read = ResumePoint("0-1-10,1-1-4", server_id=1)
    assert continuation(read, replica("0-1-10,1-1-4", server_id=1), sent="0-1-10,1-1-4").lost is None
    lost = continuation(read, replica("0-1-10,1-1-4", server_id=1), sent="1-1-5")
    assert lost.lacks == "1-1-5" and "the source's GTID position 0-1-10,1-1-4 is behind GTID 1-1-5" in lost.lost
    assert "past its committed position 0-1-10,1-1-4" in lost.lost
    empty = continuation(ResumePoint("", server_id=1), replica("", server_id=1), sent="0-1-1")
    assert "the source's GTID position <empty> is behind" in empty.lost and "committed position <empty>" in empty.lost


def test_the_same_server_gone_back_names_its_binlogs():
    # the GTIDs are all there, but the binlog files start again (RESET MASTER)
    read = ResumePoint("0-1-10", file="binlog.000007", pos=400, server_id=1)
    verdict = continuation(read, replica("0-1-10", server_id=1, files=("binlog.000001",)))
    assert (
        verdict.backwards and "in binlog.000007, but the source's newest binlog is binlog.000001" in verdict.backwards
    )


def test_texts_of_a_failover_that_lacks_what_was_read():
    server = replica("", "")
    text = missing_transaction(ResumePoint("0-1-10", server_id=1), server)
    assert text.startswith("and its GTID position <empty> is behind ingest's 0-1-10")
    other = replica("0-1-12", "0-1-12,0-9-3")
    lost = continuation(ResumePoint("0-9-3", server_id=1), other, sent="0-9-4")
    assert "its GTID position 0-1-12 is behind GTID 0-9-4" not in lost.lost
    assert "its binlog does not hold GTID 0-9-4" in lost.lost and "but 0-1-12 in that domain" in lost.lost


def test_a_domain_whose_last_gtid_has_the_same_number_from_another_origin_is_not_called_behind():
    # the promoted server logged 0-5-10, not ingest's 0-1-10: not "behind" but "does not hold"
    server = replica("0-5-10", "0-5-10")
    text = missing_transaction(ResumePoint("0-1-10", server_id=1), server)
    assert text.startswith("and its binlog does not hold GTID 0-1-10") and "but 0-5-10 in that domain" in text
    lost = continuation(ResumePoint("0-5-10", server_id=1), replica("0-5-10,1-5-4", "0-5-10,1-5-4"), sent="1-1-4")
    assert "its binlog does not hold GTID 1-1-4" in lost.lost and "but 1-5-4 in that domain" in lost.lost
    # a promoted server with an empty position: "behind", naming it <empty>
    empty = continuation(ResumePoint("", server_id=1), replica("", ""), sent="0-1-1")
    assert "and its GTID position <empty> is behind GTID 0-1-1" in empty.lost and "had not caught up" in empty.lost
