"""Transaction control in the binlog: savepoints (as ORMs write them), ROLLBACK TO that
MariaDB leaves in the binlog, XA transactions. Unit tests of the classifier, then ingest
end to end on the real MariaDB and broker: the topics rebuild the source exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdc.config import IngestConfig
from cdc.wire.resume_point import ResumePoint
from ingest import statements as st
from ingest.errors import IngestError
from ingest.stream import BinlogStream, CommitPolicy, SourceTransaction
from ingest.transaction_control import TransactionControl


@pytest.mark.parametrize(
    "query,kind,name",
    [
        ("BEGIN", st.BEGIN, None),
        ("begin work", st.BEGIN, None),
        ("START TRANSACTION", st.BEGIN, None),
        ("START TRANSACTION WITH CONSISTENT SNAPSHOT", st.BEGIN, None),
        ("COMMIT", st.COMMIT, None),
        ("commit;", st.COMMIT, None),
        ("ROLLBACK", st.ROLLBACK, None),
        ("SAVEPOINT `s1`", st.SAVEPOINT, "s1"),
        ("savepoint s2", st.SAVEPOINT, "s2"),
        ("SAVEPOINT `a``b`", st.SAVEPOINT, "a`b"),
        ("ROLLBACK TO `q`", st.ROLLBACK_TO, "q"),
        ("ROLLBACK TO SAVEPOINT q", st.ROLLBACK_TO, "q"),
        ("rollback work to savepoint `django_1`", st.ROLLBACK_TO, "django_1"),
        ("RELEASE SAVEPOINT `s2`", st.RELEASE, "s2"),
        ("XA START X'7831',X'',1", st.XA_START, "X'7831',X'',1"),
        ("XA END X'7831',X'',1", st.XA_END, "X'7831',X'',1"),
        ("XA PREPARE X'7831',X'',1", st.XA_PREPARE, "X'7831',X'',1"),
        ("XA COMMIT X'7831',X'',1", st.XA_COMMIT, "X'7831',X'',1"),
        ("XA ROLLBACK X'7832',X'',1", st.XA_ROLLBACK, "X'7832',X'',1"),
        ("/* app */ SAVEPOINT x", st.SAVEPOINT, "x"),
        ("ALTER TABLE t ADD COLUMN c INT", st.STATEMENT, None),
        ("CREATE TABLE savepoints (id INT)", st.STATEMENT, None),
        ("ROLLBACK_LOG_TRUNCATE", st.STATEMENT, None),
        ("COMMITTED_TABLE", st.STATEMENT, None),
        ("DROP TABLE `rollback`", st.STATEMENT, None),
    ],
)
def test_classify(query, kind, name):
    stmt = st.classify(query)
    assert (stmt.kind, stmt.name) == (kind, name)


def test_which_statements_end_a_group():
    assert [
        k
        for k in (
            st.BEGIN,
            st.COMMIT,
            st.ROLLBACK,
            st.SAVEPOINT,
            st.ROLLBACK_TO,
            st.RELEASE,
            st.XA_START,
            st.XA_END,
            st.XA_PREPARE,
            st.XA_COMMIT,
            st.XA_ROLLBACK,
            st.STATEMENT,
        )
        if st.Statement(k).ends_group
    ] == [st.COMMIT, st.ROLLBACK, st.XA_PREPARE, st.XA_COMMIT, st.XA_ROLLBACK]
    one = st.classify("XA COMMIT 'x' ONE PHASE")
    assert (one.kind, one.name, one.one_phase) == (st.XA_COMMIT, "'x'", True)


# ---------------------------------------------------------------------------- a resume inside a transaction


class _Ingest:
    """What BinlogStream calls on the ingest process: nothing committed anywhere."""

    def __init__(self, committed: ResumePoint):
        self.committed = committed
        self.epoch = committed.epoch
        self.shard = None
        self.config = IngestConfig(topic_prefix="p", commit_every_events=20)
        self.stats = {"source_transactions": 0}


class _Writer:
    """What BinlogStream calls on the record writer: records held per rows event of a
    captured table (one each), sent by ``release_held``; nothing written anywhere."""

    def __init__(self, captured: set[str]):
        self.captured = captured
        self.transactions = TransactionControl(IngestConfig(topic_prefix="p", commit_every_events=20))
        self.sent: list[str] = []  # the GTIDs noted as sent (issue 41)

    def note_sent(self, gtid: str) -> None:
        self.sent.append(gtid)

    def holds_records_of(self, event):
        name = f"{event.schema}.{event.table}"
        return name if name in self.captured else None

    def write_rows(self, event, trx, position) -> int:
        name = self.holds_records_of(event)
        if name is not None:
            trx.held.append(("topic", None, b"{}", 0, []))
            trx.tables.add(name)
        return 0

    def release_held(self, trx) -> int:
        n, trx.held = len(trx.held), []
        trx.released += n
        return n

    def write_ddl(self, *args) -> int:
        return 0


def _packet(pos: int):
    return SimpleNamespace(log_pos=pos + 100, event_size=100, server_id=1, timestamp=0)


def _run(committed: ResumePoint, captured: set[str], script: list[tuple[str, str]]) -> SourceTransaction:
    """Feeds a transaction (GTID 0-1-9) to a BinlogStream resumed at ``committed``:
    ("row", "db.table") or ("sql", statement)."""
    stream = BinlogStream(_Ingest(committed), _Writer(captured), CommitPolicy(every_events=1000, every_ms=10_000))
    stream.file = "binlog.000001"
    stream.on_gtid(SimpleNamespace(gtid="0-1-9", timestamp=0, flags=0, packet=_packet(0)))
    for pos, (kind, what) in enumerate(script, 1):
        if kind == "row":
            db, table = what.split(".")
            stream.on_rows(SimpleNamespace(schema=db, table=table, packet=_packet(pos * 100)))
        else:
            stream.on_query(SimpleNamespace(query=what, packet=_packet(pos * 100)))
    return stream.trx


SCRIPT = [
    ("row", "shop.orders"),
    ("sql", "SAVEPOINT s"),
    ("row", "shop.orders"),
    ("row", "shop.orders"),
    ("row", "shop.log"),
    ("row", "shop.orders"),
    ("sql", "ROLLBACK TO s"),
]


@pytest.mark.parametrize("skipped", [2, 3, 4])
def test_rollback_to_a_savepoint_before_row_events_written_by_an_earlier_run_is_refused(skipped):
    """Resumed after ``skipped`` row events of the transaction (committed to Kafka by the
    run before), of which at least one after SAVEPOINT s: the ROLLBACK TO s would have to
    take them back."""
    resumed = ResumePoint("0-1-8", "binlog.000001", 300, trx_gtid="0-1-9", trx_events=skipped)
    with pytest.raises(IngestError, match=r"ROLLBACK TO s rolls back row changes of shop\.orders that ingest already"):
        _run(resumed, {"shop.orders"}, SCRIPT)


def test_rollback_to_a_savepoint_after_what_an_earlier_run_wrote_drops_only_what_is_held():
    # resumed after the first row event only (before the savepoint), or after rows of a
    # table not captured (no record written): nothing written after s, the rollback drops
    # the held records; without a resume, the one record before s stays
    for skipped, captured, held_left in [(1, {"shop.orders"}, 0), (3, {"shop.log"}, 0), (0, {"shop.orders"}, 1)]:
        resumed = ResumePoint("0-1-8", trx_gtid="0-1-9" if skipped else None, trx_events=skipped)
        trx = _run(resumed, captured, SCRIPT)
        assert len(trx.held) == held_left and "s" in trx.savepoints


class _WriterWithMarkers(_Writer):
    """Rows of ``db.marks`` are sent at once, three records each (as watermark markers are
    sent into every partition); other captured rows are held."""

    def __init__(self, captured: set[str]):
        super().__init__(captured)
        self.trx = None

    def write_rows(self, event, trx, position) -> int:
        self.trx = trx
        if f"{event.schema}.{event.table}" == "db.marks":
            return 3
        return super().write_rows(event, trx, position)


class _IngestRecordingCommits(_Ingest):
    """Commits are recorded with what the writer still held at that moment."""

    def __init__(self, committed: ResumePoint, writer: _WriterWithMarkers):
        super().__init__(committed)
        self.writer = writer
        self.commits: list[tuple[int, int]] = []  # (trx_events of the point, records still held)

    def commit(self, point: ResumePoint) -> None:
        self.commits.append((point.trx_events, len(self.writer.trx.held)))


def test_a_commit_inside_a_transaction_never_covers_row_events_whose_records_are_held():
    """A resume point inside a transaction says 'these row events are in Kafka': a commit
    taken while records of earlier events are still held (sent directly written records,
    such as markers, filled the commit's quota) would make a resume skip them."""
    ingest = _IngestRecordingCommits(ResumePoint("0-1-8"), _WriterWithMarkers({"db.t"}))
    stream = BinlogStream(ingest, ingest.writer, CommitPolicy(every_events=3, every_ms=10_000))
    stream.file = "binlog.000001"
    stream.on_gtid(SimpleNamespace(gtid="0-1-9", timestamp=0, flags=0, packet=_packet(0)))
    for pos, table in enumerate(["t", "marks", "t", "marks", "t", "t", "t", "marks"], 1):
        stream.on_rows(SimpleNamespace(schema="db", table=table, packet=_packet(pos * 100)))
    assert ingest.commits, "the markers filled the quota: a commit inside the transaction is due"
    assert all(held == 0 for _, held in ingest.commits), ingest.commits


@pytest.mark.parametrize(
    "script, sent",
    [
        ([("row", "shop.orders"), ("sql", "COMMIT")], ["0-1-9"]),  # released at its end
        ([("row", "shop.log"), ("sql", "COMMIT")], []),  # nothing captured: nothing sent
        ([("sql", "SAVEPOINT s"), ("row", "shop.orders"), ("sql", "ROLLBACK TO s"), ("sql", "COMMIT")], []),
    ],
)
def test_a_transaction_counts_as_sent_once_its_records_are_handed_to_the_broker(script, sent):
    """Issue 41: the failover decision holds a server to every transaction whose records were
    sent, so the stream notes each such GTID (and no other: a replica may lack those)."""
    writer = _Writer({"shop.orders"})
    stream = BinlogStream(_Ingest(ResumePoint("0-1-8")), writer, CommitPolicy(every_events=1000, every_ms=10_000))
    stream.file = "binlog.000001"
    stream.on_gtid(SimpleNamespace(gtid="0-1-9", timestamp=0, flags=0, packet=_packet(0)))
    stream._committed = lambda point: None
    for pos, (kind, what) in enumerate(script, 1):
        if kind == "row":
            db, table = what.split(".")
            stream.on_rows(SimpleNamespace(schema=db, table=table, packet=_packet(pos * 100)))
        else:
            stream.on_query(SimpleNamespace(query=what, packet=_packet(pos * 100)))
    assert stream.trx is None and writer.sent == sent


def test_a_quiet_source_moves_the_committed_position_but_never_past_a_resumed_transaction():
    """Between transactions, a heartbeat (or a rotation's events) moves the position ingest
    commits while idle: on a quiet source, or after a start with nothing committed yet, the
    committed position reaches the source's (what a positional snapshot window waits for).
    It only moves forward, and not while a transaction cut at a commit is still to resume
    (its committed part would not be skipped)."""
    stream = BinlogStream(
        _Ingest(ResumePoint("0-1-5")), _Writer(set()), CommitPolicy(every_events=1000, every_ms=10_000)
    )
    stream.file = "binlog.000002"
    stream.on_other(SimpleNamespace(packet=SimpleNamespace(log_pos=0)))  # an artificial event: no position
    assert not stream.dirty and stream.point == ResumePoint("0-1-5")
    committed = []
    stream.ingest.commit = committed.append
    stream.on_other(SimpleNamespace(packet=SimpleNamespace(log_pos=900)))
    # the first position after a start with nothing committed is committed at once
    assert [(p.file, p.pos, p.gtid_state) for p in committed] == [("binlog.000002", 900, "0-1-5")]
    assert stream.point == committed[0] and not stream.dirty
    stream.on_other(SimpleNamespace(packet=SimpleNamespace(log_pos=800)))  # never backwards
    assert not stream.dirty and stream.point.pos == 900
    stream.file = "binlog.000003"
    stream.on_other(SimpleNamespace(packet=SimpleNamespace(log_pos=4)))  # a new file is forward
    assert stream.dirty and (stream.point.file, stream.point.pos) == ("binlog.000003", 4)
    assert len(committed) == 1  # later moves wait for the commit interval (while_idle)

    resumed = ResumePoint("0-1-5", "binlog.000001", 500, trx_gtid="0-1-6", trx_events=3)
    stream = BinlogStream(_Ingest(resumed), _Writer(set()), CommitPolicy(every_events=1000, every_ms=10_000))
    stream.file = "binlog.000001"
    stream.on_other(SimpleNamespace(packet=SimpleNamespace(log_pos=900)))
    assert not stream.dirty and stream.point == resumed
