"""The ``cdc_kafka`` source's quiet triggers (``CdcKafkaStreamReader._why_asked``): when
nothing can have moved, a trigger answers its start offsets without asking the broker.

The planning runs here against a broker model (topics whose ends move when the test
writes; the broker clients themselves are covered by the integration tests in
test_kafka_source.py). The property: a reader with quiet triggers answers every trigger
as a twin that goes the whole way every time, and asks the broker far less while idle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

import merger.kafka.datasource as datasource
from merger.kafka.datasource import CdcKafkaStreamReader
from merger.kafka.offsets import TICK_TP, parse_offsets
from merger.kafka.reader import SCHEMA

TOPICS = [f"cdc.app.t{i}" for i in range(4)]
PARTS = 3


class Truth:
    """What the broker holds: each partition's end, and the feeds that hear of writes."""

    def __init__(self) -> None:
        self.ends = {(t, p): 0 for t in TOPICS for p in range(PARTS)}
        self.feeds: list[Feed] = []
        self.landing: list[tuple[tuple[str, int], int]] = []  # announced, not on the partition yet

    def write(self, tp: tuple[str, int], n: int, how: str = "announced") -> None:
        """``how``: announced (the feed names the topic), silent (a producer other than
        ingest), early (the feed names it before the records land: they land at the next
        step)."""
        if how == "early":
            self.landing.append((tp, n))
        else:
            self.ends[tp] += n
        if how != "silent":
            for f in self.feeds:
                f.pending.add(tp[0])

    def heartbeat(self) -> None:
        """Ingest's heartbeat: its transaction names a topic this source does not read."""
        for f in self.feeds:
            f.pending.add("__debezium-heartbeat.cdc")

    def land(self) -> None:
        for tp, n in self.landing:
            self.ends[tp] += n
        self.landing = []


class Feed:
    """The moved-topics feed: the topics written since the last take (None at first)."""

    def __init__(self, truth: Truth) -> None:
        self.pending: set[str] = set()
        self.started = False
        truth.feeds.append(self)

    def take(self, now: float) -> frozenset[str] | None:
        if not self.started:
            self.started = True
            self.pending.clear()
            return None
        out, self.pending = frozenset(self.pending), set()
        return out

    def close(self) -> None:
        pass


class Broker:
    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.calls = 0
        self.unsettled: set = set()

    def partitions(self):
        self.calls += 1
        return sorted(self.truth.ends)

    def list_offsets(self, tps, earliest):
        self.calls += 1 if tps else 0
        return {tp: 0 if earliest else self.truth.ends[tp] for tp in tps}

    def scan(self, froms, cap, ends=None):
        # this model's ListOffsets is exact: a tail read finds nothing past the ends given
        # (the real probe reads only partitions whose end moved: offsets.partitions_to_scan)
        self.calls += 1 if froms else 0
        return {tp: max(o, (ends or {}).get(tp, o)) for tp, o in froms.items()}

    def topic_ids(self, topics):
        self.calls += 1
        return {t: "id-" + t for t in topics}

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reader(truth: Truth, tick_file: str) -> tuple[CdcKafkaStreamReader, Broker]:
    r = CdcKafkaStreamReader(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribepattern": r"^cdc\.app\..*",
            "movedtopicsfrom": "cdc.offsets",
            "endcheckallms": "5000",
            "tickfile": tick_file,
        },
        SCHEMA,
    )
    b = Broker(truth)
    r._broker = b
    r._moved = Feed(truth)
    return r, b


class Query:
    """Spark's side: the start is the last answer (each batch commits at once)."""

    def __init__(self, r: CdcKafkaStreamReader, limit=None) -> None:
        self.r = r
        self.limit = limit or ReadAllAvailable()
        self.start = r.initialOffset()

    def trigger(self) -> dict:
        out = self.r.latestOffset(self.start, self.limit)
        self.start = out
        return out


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.sampled_from(TOPICS),
            st.integers(0, PARTS - 1),
            st.integers(1, 5),
            st.sampled_from(["announced", "silent", "early"]),
        ),
        st.tuples(st.just("wait"), st.floats(0.05, 8.0)),
        st.tuples(st.just("tick")),
        st.tuples(st.just("heartbeat")),
        st.tuples(st.just("trigger")),
    ),
    max_size=60,
)


def _run(seq, tmp, monkeypatch, max_rows: int | None = None) -> tuple[int, int]:
    clock = Clock()
    monkeypatch.setattr(datasource.time, "monotonic", clock)
    tick_file = tmp / "tick"
    truth = Truth()
    quiet_reader, quiet_broker = reader(truth, str(tick_file))
    whole_reader, whole_broker = reader(truth, str(tick_file))
    whole_reader._why_asked = lambda *a: "twin"  # the twin goes the whole way every time
    limit = ReadMaxRows(max_rows) if max_rows else None
    q, w = Query(quiet_reader, limit), Query(whole_reader, limit)
    tick = 0
    for op in seq + [("trigger",)]:
        if op[0] in ("wait", "tick"):
            truth.land()
        if op[0] == "write":
            _, topic, part, n, how = op
            truth.write((topic, part), n, how)
        elif op[0] == "wait":
            clock.now += op[1]
        elif op[0] == "heartbeat":
            truth.heartbeat()
        elif op[0] == "tick":
            tick += 1
            tick_file.write_text(str(tick))
        else:
            assert q.trigger() == w.trigger()
            truth.land()  # an early write's records land after the trigger that heard of them
            clock.now += 0.2
    # everything written is answered once the check of every partition has run
    truth.land()
    clock.now += 6.0
    for _ in range(1 + sum(n for *_, n, _how in [op for op in seq if op[0] == "write"])):
        q.trigger(), w.trigger()
        clock.now += 0.2
    final = q.trigger()
    assert final == w.trigger()
    answered = parse_offsets(final)
    assert {tp: answered.get(tp, 0) for tp in truth.ends} == truth.ends
    return quiet_broker.calls, whole_broker.calls


def test_quiet_triggers_property(tmp_path, monkeypatch):
    @settings(max_examples=200, deadline=None)
    @given(ops, st.sampled_from([None, 1, 3]))
    def prop(seq, max_rows):
        with monkeypatch.context() as m:
            _run(seq, tmp_path, m, max_rows)
            (tmp_path / "tick").unlink(missing_ok=True)

    prop()


def test_idle_triggers_ask_the_broker_nothing(tmp_path, monkeypatch):
    seq = [("write", TOPICS[0], 0, 3, "announced"), ("trigger",)] + [("heartbeat",), ("trigger",)] * 200
    quiet_calls, whole_calls = _run(seq, tmp_path, monkeypatch)
    # 40 s of idle triggers: the quiet reader asks at the check of every partition (each
    # 5 s) and while the written topic is hot; the twin asks on every trigger
    assert quiet_calls < whole_calls / 4, (quiet_calls, whole_calls)


def idle_query(tmp_path, monkeypatch) -> tuple[Query, Truth, Clock]:
    """A query 8 s into an idle stretch (its triggers quiet)."""
    clock = Clock()
    monkeypatch.setattr(datasource.time, "monotonic", clock)
    truth = Truth()
    r, _ = reader(truth, str(tmp_path / "tick"))
    q = Query(r)
    for _ in range(40):
        q.trigger()
        clock.now += 0.2
    return q, truth, clock


def test_a_tick_is_answered_on_a_quiet_trigger(tmp_path, monkeypatch):
    q, _, _ = idle_query(tmp_path, monkeypatch)
    (tmp_path / "tick").write_text("7")
    assert parse_offsets(q.trigger())[TICK_TP] == 7


def test_an_unannounced_write_is_answered_within_the_full_check(tmp_path, monkeypatch):
    q, truth, clock = idle_query(tmp_path, monkeypatch)
    truth.write((TOPICS[1], 2), 4, "silent")  # a producer other than ingest
    seen_after = None
    for i in range(40):
        if parse_offsets(q.trigger()).get((TOPICS[1], 2)) == 4:
            seen_after = i * 0.2
            break
        clock.now += 0.2
    assert seen_after is not None and seen_after <= 5.0


def test_offsets_of_an_earlier_version_are_read(tmp_path, monkeypatch):
    """A checkpoint written before the offsets' compact form: its Kafka-form offsets are
    the start; the answer (compact) names the same offsets, and the batch between the two
    reads nothing."""
    clock = Clock()
    monkeypatch.setattr(datasource.time, "monotonic", clock)
    truth = Truth()
    truth.write((TOPICS[0], 1), 3)
    r, _ = reader(truth, str(tmp_path / "tick"))
    r.initialOffset()
    old = {TOPICS[0]: {"1": 3}}
    out = r.latestOffset(old, ReadAllAvailable())
    assert parse_offsets(out) == {(TOPICS[0], 1): 3} and "offsets" in out
    assert list(r.partitions(old, out)) == []
