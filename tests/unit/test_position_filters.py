import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.config import IngestConfig
from cdc.wire.position import MAX_FILE_NUMBER, EventPosition
from cdc.wire.resume_point import ResumePoint
from ingest.filters import CaptureFilter
from ingest.position import advance_gtid_state, event_start, parse_gtid


def test_event_position_orders_by_file_sequence_then_pos_then_row():
    a = EventPosition("binlog.000009", 900, 3)
    b = EventPosition("binlog.000010", 4, 0)
    assert a < b
    assert EventPosition("binlog.000010", 4, 0) < EventPosition("binlog.000010", 4, 1)
    assert EventPosition("binlog.000010", 4, 5) < EventPosition("binlog.000010", 200, 0)


@given(st.integers(1, 999999), st.integers(4, 2**32 - 1), st.integers(0, 10**6))
def test_event_position_encode_roundtrip(seq, pos, row):
    p = EventPosition(f"binlog.{seq:06d}", pos, min(row, 2**32 - 1 - pos))
    assert EventPosition.decode(p.encode()) == p


@given(
    st.integers(1, MAX_FILE_NUMBER),
    st.lists(st.tuples(st.integers(2, 2**28), st.integers(1, 500)), min_size=1, max_size=60),
)
def test_sequence_strictly_grows_along_a_file_and_fits_a_positive_int64(file_no, events):
    """Events (size, rows) one after the other in one file up to its 4 GiB limit: every
    record's sequence (rows, and both halves of a key change) is above the one before."""
    file, start, seqs = f"binlog.{file_no:06d}", 4, []
    for size, rows in events:
        size = max(size, 2 * rows)  # a row takes more than a byte
        if start + size > 2**32:
            break
        for row in range(rows):
            for part in (0, 1):
                seqs.append(EventPosition(file, start, row, part).sequence())
        start += size
    assert seqs == sorted(set(seqs))
    assert all(0 < q < 2**63 for q in seqs)
    last = EventPosition(f"binlog.{MAX_FILE_NUMBER}", 2**32 - 2, 1, 1).sequence()
    assert seqs[-1] < last < 2**63 if seqs else last < 2**63


@pytest.mark.parametrize(
    "position",
    [
        EventPosition("binlog.000001", 2**32, 0),
        EventPosition("binlog.000001", 2**32 - 5, 5),
        EventPosition("binlog.000001", -1, 0),
        EventPosition("binlog.000001", 4, -1),
        EventPosition("binlog.000001", 4, 0, 2),
        EventPosition(f"binlog.{MAX_FILE_NUMBER + 1}", 4, 0),
    ],
)
def test_sequence_refuses_what_it_cannot_order(position):
    with pytest.raises(ValueError, match="binlog position"):
        position.sequence()
    with pytest.raises(ValueError):
        EventPosition.decode(position.encode())


@given(st.integers(4, 2**32 - 1), st.lists(st.integers(19, 2**30), min_size=1, max_size=40))
def test_event_start_from_headers_stops_at_the_4_gib_wrap(first, sizes):
    """The header carries where an event ends, in 4 bytes: past 4 GiB it wraps. Every
    event before the wrap gets its true start; the first one past it is refused."""
    file_end, real = 0, first
    for size in sizes:
        real_end = real + size
        start = event_start(real_end % 2**32, size, file_end)
        if real_end >= 2**32:
            assert start is None
            return
        assert start == real
        file_end, real = real_end, real_end


def test_gtid_state_advances_per_domain():
    assert advance_gtid_state("0-1-5", "0-1-6") == "0-1-6"
    assert advance_gtid_state("0-1-5", "1-2-3") == "0-1-5,1-2-3"
    assert advance_gtid_state("", "0-1-1") == "0-1-1"
    with pytest.raises(ValueError, match="not a MariaDB GTID"):
        parse_gtid("abc")


def test_resume_point_json_roundtrip():
    rp = ResumePoint("0-1-5", "binlog.000001", 1234, "0-1-6", 17, 99)
    assert ResumePoint.from_json(rp.to_json()) == rp


def test_capture_filter_rules():
    f = CaptureFilter(
        IngestConfig(
            database_include=["shop|crm"],
            table_exclude=[r"shop\.tmp_.*"],
            column_exclude=[r"crm\.users\.ssn"],
            column_mask=[r".*\.email"],
        )
    )
    assert f.captures_table("shop", "orders")
    assert not f.captures_table("shop", "tmp_x")
    assert not f.captures_table("other", "orders")
    assert not f.captures_table("mysql", "user")
    assert not f.captures_table("cdc", "cdc_watermarks")
    assert f.excluded_column("crm", "users", "ssn")
    assert not f.excluded_column("crm", "users", "name")
    assert f.masked_column("crm", "users", "email")


def test_replay_filter_drops_replayed_suffix_keeps_tombstone_and_pk_change():
    from cdc.wire.position import ReplayFilter

    f = ReplayFilter()
    d = EventPosition("b.000001", 100, 0)
    c_half = EventPosition("b.000001", 100, 0, 1)
    nxt = EventPosition("b.000001", 200, 0)
    assert f.accept("t", 0, d, False)
    assert f.accept("t", 0, d, True)  # tombstone after its delete
    assert f.accept("t", 0, c_half, False)  # create half of a PK change, same partition
    assert f.accept("t", 0, nxt, False)
    # a restarted ingest replays the suffix from the delete on
    assert not f.accept("t", 0, d, False)
    assert not f.accept("t", 0, d, True)
    assert not f.accept("t", 0, c_half, False)
    assert not f.accept("t", 0, nxt, False)
    assert f.accept("t", 0, EventPosition("b.000002", 4, 0), False)
    assert f.accept("t", 1, d, False)  # partitions are independent


@given(
    st.lists(
        st.tuples(st.integers(1, MAX_FILE_NUMBER), st.integers(4, 2**31), st.integers(0, 5000), st.integers(0, 1)),
        min_size=2,
        max_size=30,
    )
)
def test_sequence_orders_like_positions(raw):
    # rows of one event stay below the next event's start (events are at least 2 bytes apart per row)
    positions = [EventPosition(f"binlog.{f:06d}", p, r, part) for f, p, r, part in raw]
    by_seq = sorted(positions, key=lambda e: e.sequence())
    for a, b in zip(by_seq, by_seq[1:]):
        if (a.file, a.pos) != (b.file, b.pos):
            continue  # different events: exercised by the integration tests (pos + row < next pos)
        assert (a.row, a.part) <= (b.row, b.part)
    assert all(0 < e.sequence() < 2**63 for e in positions)


def test_column_exclude_and_mask_in_the_encoded_rows():
    import json

    from cdc.tablespec import ColumnSpec, TableSpec
    from ingest.codec import MASK, TableCodec, apply_column_filters, envelope_config

    spec = TableSpec(
        "crm",
        "users",
        (
            ColumnSpec("id", "int", 1, nullable=False),
            ColumnSpec("ssn", "varchar", 2, length=11),
            ColumnSpec("email", "varchar", 3, length=100),
            ColumnSpec("age", "int", 4),
        ),
        ("id",),
    )
    cfg = IngestConfig(topic_prefix="p", column_exclude=[r"crm\.users\.ssn"], column_mask=[r"crm\.users\.(email|age)"])
    filtered, masked = apply_column_filters(spec, CaptureFilter(cfg))
    assert [c.name for c in filtered.columns] == ["id", "email", "age"] and masked == ("email", "age")
    codec = TableCodec(filtered, envelope_config(cfg), masked)
    row = codec.mask({"id": 1, "ssn": "123-45-6789", "email": "a@b.c", "age": 41})
    [rec] = codec.encoder.change("c", None, row, codec.encoder.source_json(0, 1, "b.000001", 4))
    after = json.loads(rec.value)["after"]
    assert after == {"id": 1, "email": MASK, "age": MASK}


def test_a_captured_database_named_with_a_dot_is_refused_an_excluded_one_is_not():
    from ingest.errors import IngestError

    every = CaptureFilter(IngestConfig())
    with pytest.raises(IngestError) as refused:
        every.captures_database("a.b")
    assert "database 'a.b'" in str(refused.value) and 'database_exclude: ["a\\\\.b"]' in str(refused.value)
    with pytest.raises(IngestError, match="database 'a.b'"):
        every.captures_table("a.b", "t")
    assert every.captures_table("a", "b.t")  # a table's name may have one: db.table splits at the first
    excluded = CaptureFilter(IngestConfig(database_exclude=[r"a\.b"]))
    assert not excluded.captures_database("a.b") and not excluded.captures_table("a.b", "t")
