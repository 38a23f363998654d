"""ingest.cutover: the counter, the decisions, the barrier between two reader threads, and
what the position vector keeps of them."""

from __future__ import annotations

import threading
import time

import pytest

from cdc.shard_cutover import BEGIN, SWITCH, KeyRange, Move
from cdc.wire.resume_point import PositionVector, ResumePoint, position_record
from ingest.cutover import BarrierInterrupted, EmissionCounter, ShardCutover, move_of
from ingest.errors import IngestError

MOVE = Move(1, KeyRange(100, 200), "a", "b", "shop.orders")


def test_the_counter_rises_above_the_committed_value_and_the_clock():
    assert EmissionCounter(50, clock=lambda: 10).next() == 51
    assert EmissionCounter(50, clock=lambda: 1000).next() == 1001
    counter = EmissionCounter(0)
    values = [counter.next() for _ in range(1000)]
    assert values == sorted(set(values))


def test_decisions_of_the_source_and_the_target():
    cut = ShardCutover(PositionVector({}), {})
    assert cut.decide("b", "shop.orders", 150) == b""  # no move yet
    cut.meet("b", MOVE, BEGIN)
    assert cut.decide("b", "shop.orders", 150) is None  # the copy
    assert cut.decide("b", "shop.orders", 250) == b""  # outside the range
    assert cut.decide("b", "shop.other", 150) == b""  # another table
    cut.meet("a", MOVE, SWITCH)
    assert cut.decide("a", "shop.orders", 150) is None  # the cleanup
    cut.meet("b", MOVE, SWITCH)
    assert cut.decide("b", "shop.orders", 150) == b"a"  # the new owner's, moved from a
    marker = cut.marker_cutover("b", "shop.orders")
    assert marker == {"passed": [[MOVE.to_json(), BEGIN], [MOVE.to_json(), SWITCH]], "switched": [MOVE.to_json()]}
    assert cut.marker_cutover("b", "shop.other") == {"passed": [], "switched": []}
    with pytest.raises(IngestError, match="does not compare"):
        cut.decide("b", "shop.orders", "text key")


def test_the_target_waits_at_its_switch_for_the_source():
    cut = ShardCutover(PositionVector({}), {"a": threading.Event(), "b": threading.Event()})
    cut.meet("b", MOVE, BEGIN)
    passed = threading.Event()

    def target():
        cut.meet("b", MOVE, SWITCH)
        passed.set()

    thread = threading.Thread(target=target)
    thread.start()
    time.sleep(0.7)
    assert not passed.is_set(), "the target passed its switch before the source"
    cut.meet("a", MOVE, SWITCH)
    thread.join(5)
    assert passed.is_set()


def test_a_waiting_reader_is_interrupted():
    interrupts = {"b": threading.Event()}
    cut = ShardCutover(PositionVector({}), interrupts)
    failed = []

    def target():
        try:
            cut.meet("b", MOVE, SWITCH)
        except BarrierInterrupted:
            failed.append(True)

    thread = threading.Thread(target=target)
    thread.start()
    interrupts["b"].set()
    thread.join(5)
    assert failed == [True]
    assert not cut.filter.switched("b", 1)


def test_the_vector_keeps_the_passed_rows_and_the_counter():
    cut = ShardCutover(PositionVector({}), {})
    cut.meet("b", MOVE, BEGIN)
    cut.meet("b", MOVE, BEGIN)  # replayed: met once
    vector = PositionVector({"b": ResumePoint("0-2-5", cutover=cut.passed("b")), "a": ResumePoint("0-1-9")}, 777)
    back = position_record(vector.to_json())
    assert back == vector
    assert b'"cutover"' not in ResumePoint("0-1-9").to_json()  # a one-server point is as before
    again = ShardCutover(back, {})
    assert again.decide("b", "shop.orders", 150) is None
    assert again.counter.next() > 777


def test_rows_of_the_cutover_table():
    row = {"move_id": 3, "kind": "switch", "table_name": "shop.orders", "low_key": "100", "high_key": "200"}
    assert move_of({**row, "source": "a", "target": "b"}, "a") == (
        Move(3, KeyRange(100, 200), "a", "b", "shop.orders"),
        SWITCH,
    )
    assert move_of({**row, "source": "a", "target": "b"}, "c") is None  # not this shard's
    assert move_of({**row, "kind": "begin", "source": "a", "target": "b"}, "a") is None  # a begin is the target's
    with pytest.raises(IngestError, match="not a move"):
        move_of({"kind": "switch"}, "a")
    with pytest.raises(IngestError, match="not begin or switch"):
        move_of({**row, "kind": "go", "source": "a", "target": "b"}, "a")


def _shards_config(**extra):
    from cdc.config import IngestConfig

    shards = [{"name": n, "mysql": {"host": f"{n}.example", "port": 3306}} for n in ("s1", "s2")]
    return IngestConfig(shards=shards, **extra)


def test_one_shard_alone_is_refused_in_key_mode_unique():
    from ingest.shards import ShardedIngest

    with pytest.raises(IngestError, match="one ingest process follows every shard"):
        ShardedIngest(_shards_config(key_mode="unique"), only="s1")


def test_the_move_commands_refuse_what_they_cannot_do():
    from cdc.cli.shard_move import Keyspace, begin, bound
    from cdc.config import ConfigError, MergerConfig, ShardConfig

    shards = [ShardConfig(name=n, mysql={"host": f"{n}.example", "port": 3306}) for n in ("s1", "s2")]
    sinks = {"delta": {"path": "/tmp/d"}}
    with pytest.raises(ConfigError, match="no shards"):
        Keyspace(MergerConfig(key_mode="unique", sinks=sinks))
    with pytest.raises(ConfigError, match="for key_mode unique"):
        Keyspace(MergerConfig(shards=shards))
    unique = MergerConfig(shards=shards, key_mode="unique", sinks=sinks)
    ks = Keyspace(unique, connect=lambda shard: pytest.fail("connected"))
    with pytest.raises(ConfigError, match="same shard"):
        begin(ks, "shop.orders", 0, 10, "s1", "s1", print)
    with pytest.raises(ConfigError, match="empty"):
        begin(ks, "shop.orders", 10, 10, "s1", "s2", print)
    with pytest.raises(ConfigError, match="do not compare"):
        begin(ks, "shop.orders", 10, "x", "s1", "s2", print)
    with pytest.raises(ConfigError, match="db.table"):
        begin(ks, "orders", 0, 10, "s1", "s2", print)
    with pytest.raises(ConfigError, match="no shard 's9'"):
        ks.conn("s9")
    assert bound("1000") == 1000 and bound('"eu"') == "eu" and bound("eu") == "eu" and bound(None) is None


def test_a_write_on_the_source_after_its_switch_is_emitted_to_pause_the_table():
    from cdc.wire.headers import MOVED_FROM_HEADER, MOVED_TO_HEADER

    cut = ShardCutover(PositionVector({}), {})
    assert cut.headers("a", "shop.orders", 150, write=True) == []  # no move: a plain change
    cut.meet("b", MOVE, BEGIN)
    assert cut.headers("b", "shop.orders", 150, write=True) is None  # the copy
    cut.meet("a", MOVE, SWITCH)
    cut.meet("b", MOVE, SWITCH)
    assert cut.headers("a", "shop.orders", 150, write=False) is None  # the cleanup
    assert cut.headers("a", "shop.orders", 150, write=True) == [(MOVED_TO_HEADER, b"b")]  # the wrong shard
    assert cut.headers("b", "shop.orders", 150, write=True) == [(MOVED_FROM_HEADER, b"a")]
    assert cut.headers("a", "shop.orders", 250, write=True) == []  # outside the range


def test_a_reused_move_number_with_other_content_stops_ingest():
    """Issue 41, item 5: numbers are max(rows)+1, reused after rows of cdc_cutover are
    deleted, a shard removed, or two operators race. A move met again under a number some
    shard passed with other content stops ingest with one line; the same row replayed does
    not."""
    cut = ShardCutover(PositionVector({}), {})
    cut.meet("b", MOVE, BEGIN)
    cut.meet("b", MOVE, BEGIN)  # the same row replayed after a retry: met once
    cut.meet("a", MOVE, SWITCH)  # the same move's switch on its source
    with pytest.raises(IngestError, match=r"move 1 .*reused") as err:
        cut.meet("c", Move(1, KeyRange(300, 400), "a", "c", "shop.orders"), BEGIN)  # another shard
    assert "\n" not in str(err.value)
    with pytest.raises(IngestError, match="reused"):
        cut.meet("b", Move(1, KeyRange(100, 300), "a", "b", "shop.orders"), SWITCH)  # the same shard
    # what a restart reads from the position record counts too
    vector = PositionVector({"b": ResumePoint("0-2-5", cutover=cut.passed("b"))}, 5)
    again = ShardCutover(position_record(vector.to_json()), {})
    with pytest.raises(IngestError, match="reused"):
        again.meet("a", Move(1, KeyRange(100, 200), "a", "b", "shop.other"), SWITCH)


class _FakeKeyspace:
    """What `begin` asks of the shards, without servers: the key column of the logical
    table's physical tables, the rows of cdc_cutover, the inserts."""

    def __init__(self, data_type: str = "int", collation: str | None = None, rows: dict | None = None):
        from cdc.cli.shard_move import Keyspace
        from cdc.config import MergerConfig, ShardConfig

        shards = [ShardConfig(name=n, mysql={"host": f"{n}.example", "port": 3306}) for n in ("s1", "s2")]
        cfg = MergerConfig(shards=shards, key_mode="unique", sinks={"delta": {"path": "/tmp/d"}})
        self.ks = Keyspace(cfg, connect=lambda shard: object())
        self.ks.rows = lambda: dict(rows or {})
        self.inserted: list = []
        self.ks.insert = lambda name, number, kind, move, **kw: self.inserted.append((name, number, kind, move))
        self.ks.key_columns = lambda shard, logical: [(f"{shard}:shop.t_0", "k", data_type, collation)]


@pytest.mark.parametrize(
    "data_type,collation,low,high,refused",
    [
        # utf8mb4_general_ci holds 'B' and 'é' in ['a', 'm'); ingest's Python order does not
        ("varchar", "utf8mb4_general_ci", '"a"', '"m"', "utf8mb4_general_ci"),
        ("varchar", "utf8mb4_uca1400_ai_ci", '"eu-7"', None, "utf8mb4_uca1400_ai_ci"),
        # ['A', 'a') holds nothing in a case-insensitive collation: refused for its collation
        ("varchar", "utf8mb4_general_ci", '"A"', '"a"', "utf8mb4_general_ci"),
        # a binary collation's order is the code points' (PAD SPACE): 'a' and 'a ' are equal
        ("varchar", "utf8mb4_bin", '"a"', '"a "', "empty"),
        ("varchar", "utf8mb4_bin", '"a"', '"A"', "empty"),
        ("varchar", "utf8mb4_bin", "5", None, "text"),  # a number on a text key: compared as DOUBLE
        ("int", None, '"5"', None, "number"),
        ("double", None, "1", "2", "DOUBLE"),
        ("varchar", "utf8mb4_nopad_bin", '"a"', '"b"', "utf8mb4_nopad_bin"),
        # accepted
        ("varchar", "utf8mb4_bin", '"A"', '"a"', None),
        ("varchar", "utf8mb4_bin", '"eu-7"', None, None),
        ("decimal", None, "1.1", "2", None),
        ("bigint", None, "10", "20", None),
    ],
)
def test_begin_refuses_bounds_it_cannot_order_as_the_server(data_type, collation, low, high, refused):
    """Issue 41, item 3: a move's range is decided in Python (ingest's filter, the
    merger's windows) and in SQL (the copy, the switch's check, verify): `begin` accepts
    only bounds both order alike, and says why in one line otherwise."""
    from cdc.cli.shard_move import begin, bound
    from cdc.config import ConfigError

    fake = _FakeKeyspace(data_type, collation)
    if refused is None:
        begin(fake.ks, "shop.t", bound(low), bound(high), "s1", "s2", lambda line: None)
        assert len(fake.inserted) == 1
        return
    with pytest.raises(ConfigError, match=refused) as err:
        begin(fake.ks, "shop.t", bound(low), bound(high), "s1", "s2", lambda line: None)
    assert "\n" not in str(err.value) and fake.inserted == []


def test_decimal_bounds_are_exact_from_the_command_line_to_ingest():
    """`--low 1.1`: Decimal('1.1') on every side (a float 1.1 is above DECIMAL 1.1)."""
    from decimal import Decimal

    from cdc.cli.shard_move import begin, bound

    fake = _FakeKeyspace("decimal")
    begin(fake.ks, "shop.t", bound("1.1"), bound("2"), "s1", "s2", lambda line: None)
    (name, number, kind, move) = fake.inserted[0]
    assert (name, number, kind) == ("s2", 1, BEGIN)
    row = {"move_id": number, "kind": kind, "table_name": move["table"], "low_key": move["low"]}
    row.update({"high_key": move["high"], "source": move["source"], "target": move["target"]})
    met, _ = move_of(row, "s2")
    assert met.keys.holds(Decimal("1.1")) and met.keys.holds(Decimal("1.10")) and not met.keys.holds(Decimal("2.00"))
    assert not met.keys.holds(Decimal("1.0999999999999999999999999"))
    # the position record keeps it exact
    cut = ShardCutover(PositionVector({}), {})
    cut.meet("s2", met, BEGIN)
    vector = PositionVector({"s2": ResumePoint("0-2-5", cutover=cut.passed("s2"))})
    back = ShardCutover(position_record(vector.to_json()), {})
    assert back.decide("s2", "shop.t", Decimal("1.1")) is None  # the copy, exactly at the bound


def test_a_shard_sending_while_the_process_has_no_producer_goes_back_to_wait():
    """A fence or a broker error takes the process's producer away; a shard still streaming
    (a heartbeat) is sent back to wait for a new one, not into an AttributeError."""
    from ingest.shards import Rewind, ShardedIngest, ShardProducer

    hub = ShardedIngest(_shards_config())
    view = ShardProducer(hub, "s1")
    sent = []

    class Producer:
        def send(self, *args):
            sent.append(args)

    hub.process.producer = Producer()
    view.send("topic", b"k", b"v", None, [])
    assert len(sent) == 1
    hub.process.producer = None
    with pytest.raises(Rewind):
        view.send("topic", b"k", b"v", None, [])
    with pytest.raises(Rewind):
        view.commit("offsets", b"key", None)
    assert len(sent) == 1
