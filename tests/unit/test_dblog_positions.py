"""Tests of merger.dblog's positional windows (watermarks read from the source's positions,
nothing written): unit tests of the rule, and the simulation of ``test_dblog`` run again
with positions instead of markers, from the source itself and from a lagging replica.

Both simulations run the same scenarios against the same oracle (the dict sink): the
marker rule and the positional rule must each leave the sink equal to the source on every
interleaving, including windows whose HIGH is behind what the merger has already read."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.dblog import HIGH, LOW, Positions, Reconciler
from merger.snapshot.chunking import KeyRange, make_chunks
from tests.support.dict_sink import live_rows
from tests.unit.test_dblog import World, emit, run_scenario, scenarios

# -- unit tests ------------------------------------------------------------------------


def _positional(rec: Reconciler, wid: str = "w", low: int = 10, high: int = 20) -> None:
    rec.open_positional_window(wid, ["c"], 0.0)
    rec.position_low(wid, low)
    rec.position_high(wid, high)
    rec.mark_staged(wid)


def test_every_event_read_after_the_window_opened_is_seen_in_every_partition():
    rec = Reconciler(2)
    rec.on_event(0, 3, ("before",), "u")
    rec.open_positional_window("w", ["c"], 0.0)
    rec.on_event(0, 4, ("a",), "u")
    rec.on_event(1, 5, ("b",), "d")
    assert rec.window("w").seen == {("a",), ("b",)}
    assert not rec.windows["w"].high and rec.windows["w"].positions == Positions(read_at_open=3)


def test_a_partition_met_after_the_window_opened_counts_too():
    """The partition count grows while a window is open (a topic created by its first
    record after the table was met, or given partitions): events of the new partitions were
    all read after the window opened, so their keys are seen. (Found end to end: a table
    whose topic ingest created after the snapshot began got stale rows of deleted keys.)"""
    rec = Reconciler(1)
    rec.on_event(0, 3, ("before",), "u")
    rec.open_positional_window("w", ["c"], 0.0)
    rec.num_partitions = 3
    rec.on_event(2, 7, ("late",), "d")
    rec.on_event(1, 6, ("later",), "u")
    assert rec.window("w").seen == {("late",), ("later",)}
    # a marker window's LOW comes as a marker in each partition: not met there yet, not seen
    rec.open_window("m", ["c"], 0.0)
    rec.on_event(2, 8, ("x",), "u")
    assert ("x",) not in rec.window("m").seen and ("x",) in rec.window("w").seen


def test_the_window_is_ready_once_every_partition_is_read_through_high_minus_one():
    rec = Reconciler(3)
    _positional(rec, high=20)
    rec.on_read_through(0, 19)
    rec.on_read_through(1, 25)
    assert not rec.is_ready("w")
    rec.on_read_through(2, 18)
    assert not rec.is_ready("w")
    rec.on_read_through(2, 19)
    assert rec.is_ready("w") and rec.window("w").high == {0: 19, 1: 19, 2: 19}


def test_partitions_already_read_past_high_count_at_once():
    """A HIGH behind what was read (a lagging replica): ready as soon as it is known."""
    rec = Reconciler(2)
    rec.on_read_through(0, 50)
    rec.on_read_through(1, 40)
    _positional(rec, low=60, high=61)
    assert not rec.is_ready("w")
    rec2 = Reconciler(2)
    rec2.open_positional_window("w", ["c"], 0.0)
    rec2.position_low("w", 10)
    rec2.on_read_through(0, 50)
    rec2.on_read_through(1, 40)
    rec2.position_high("w", 30, time_us=7)
    rec2.mark_staged("w")
    assert rec2.is_ready("w") and rec2.window("w").high_time_us == 7


def test_a_low_not_above_what_was_read_before_the_window_opened_is_a_problem():
    rec = Reconciler(2)
    rec.on_event(0, 5, ("i",), "u")
    rec.on_event(1, 30, ("k",), "u")  # the furthest read of any partition counts
    rec.open_positional_window("w", ["c"], 5.0)
    rec.on_event(0, 31, ("j",), "u")
    rec.position_low("w", 30)
    window = rec.window("w")
    assert "behind" in window.problem and not window.seen
    assert rec.expired(5.0, 100) == ["w"]  # read again at once
    ok = Reconciler(2)
    ok.on_event(1, 30, ("k",), "u")
    ok.open_positional_window("w", ["c"], 5.0)
    ok.position_low("w", 31)
    assert ok.window("w").problem is None


def test_a_window_with_a_problem_takes_no_high():
    rec = Reconciler(1)
    rec.on_event(0, 30, ("k",), "u")
    rec.open_positional_window("w", ["c"], 0.0)
    rec.position_low("w", 10)
    rec.on_read_through(0, 100)
    rec.position_high("w", 20)
    rec.mark_staged("w")
    assert not rec.is_ready("w") and rec.window("w").high == {}


def test_emitted_rows_carry_high_minus_one():
    rec = Reconciler(1)
    _positional(rec, high=20)
    rec.on_event(0, 12, (2,), "u")
    rec.on_read_through(0, 19)
    assert emit(rec, "w", [((1,), "one"), ((2,), "two")]) == [(((1,), "one"), 19)]


def test_positions_are_checked():
    rec = Reconciler(2)
    rec.open_window("m", ["c"], 0.0)
    with pytest.raises(ValueError, match="markers, not positions"):
        rec.position_low("m", 1)
    rec.open_positional_window("w", ["c"], 0.0)
    with pytest.raises(ValueError, match="no LOW"):
        rec.position_high("w", 5)
    with pytest.raises(ValueError, match="non-negative"):
        rec.position_low("w", -1)
    rec.position_low("w", 5)
    with pytest.raises(ValueError, match="already has its LOW"):
        rec.position_low("w", 6)
    with pytest.raises(ValueError, match="not below LOW"):
        rec.position_high("w", 4)
    rec.position_high("w", 5)
    with pytest.raises(ValueError, match="already has its HIGH"):
        rec.position_high("w", 6)
    with pytest.raises(ValueError, match="outside"):
        rec.on_read_through(2, 1)
    with pytest.raises(ValueError, match="must be an int"):
        rec.on_read_through(0, "1")
    with pytest.raises(KeyError):
        rec.position_low("nope", 1)


def test_markers_and_read_through_leave_each_other_s_windows_alone():
    rec = Reconciler(1)
    rec.open_window("m", ["c"], 0.0)
    rec.on_marker(0, 1, "m", LOW)
    _positional(rec, "p", low=2, high=3)
    rec.on_read_through(0, 100)
    assert rec.window("m").high == {} and rec.is_ready("p")
    rec.on_marker(0, 101, "p", HIGH)  # no marker names a positional window; ignored if one did
    rec.on_marker(0, 102, "m", HIGH)
    assert rec.window("m").high == {0: 102} and rec.window("p").high == {0: 2}


def test_the_saved_form_keeps_the_positions_and_not_the_read_through():
    rec = Reconciler(2)
    rec.on_event(0, 4, ("a",), "u")
    _positional(rec, low=10, high=20)
    rec.on_read_through(0, 30)
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["windows"][0]["positions"] == {"read_at_open": 4, "low": 10, "high": 20}
    back = Reconciler.from_dict(data)
    assert back.windows == rec.windows and back.read_through == {}
    back.on_read_through(1, 19)
    assert back.is_ready("w")
    plain = Reconciler(1)
    plain.open_window("m", ["c"], 0.0)
    assert "positions" not in plain.to_dict()["windows"][0]  # marker windows' state as before


# -- the simulation with positions ---------------------------------------------------------


class PositionalWorld(World):
    """``World`` with positional watermarks: LOW and HIGH are the next binlog position of the
    server the chunks are read from, no marker is written. ``replica``: chunks are read from
    a replica that applies the source's transactions behind it (``lag`` says by how many
    transactions it moves per step); else from the source itself.

    Sequences are twice the binlog position, so that ``HIGH - 1`` (the rows' sequence)
    falls between two events as it does in the real layout (an event's sequence is its
    position shifted left, a row index never reaching the next event)."""

    def __init__(self, num_partitions, initial_rows, chunks, replica=False, lag=(0,)):
        self.replica = replica
        self.lag = list(lag) or [0]
        self.steps = 0
        self.caught_up = False
        self.history = [(0, dict(initial_rows))]  # (binlog position, the source after it)
        self.applied = 0  # index into history: the replica's state
        super().__init__(num_partitions, initial_rows, chunks)

    def binlog_position(self, gap):
        self.binlog += 1 + gap
        return 2 * self.binlog

    def _committed(self):  # a source transaction ended
        self.history.append((self.binlog, dict(self.source)))
        if not self.replica:
            self.applied = len(self.history) - 1

    # update() is an insert() over an existing key: its transaction ends there
    def insert(self, key, gap):
        super().insert(key, gap)
        self._committed()

    def delete(self, pick, gap):
        super().delete(pick, gap)
        self._committed()

    def move(self, pick, new_key, gap):
        super().move(pick, new_key, gap)
        self._committed()

    def truncate(self, gap):
        super().truncate(gap)
        self._committed()

    def replicate(self):
        """The replica applies a few more transactions (all of them once draining)."""
        self.steps += 1
        step = len(self.history) if self.caught_up else self.lag[self.steps % len(self.lag)]
        self.applied = min(len(self.history) - 1, self.applied + step)

    def _next_position(self):  # what the server the chunks come from says, as a sequence
        return 2 * self.history[self.applied][0] + 2

    def start_window(self, wid, chunk_ids):
        self.rec.open_positional_window(wid, chunk_ids, self.clock)

    def low(self, wid, w, lose):
        w["lost"] = lose  # the runner died before reading LOW: the window expires
        if not lose:
            self.rec.position_low(wid, self._next_position())

    def read(self):  # the replica's state (the source's without one)
        return self.history[self.applied][1]

    def high(self, wid, w, lose):
        if not w["lost"] and self.rec.window(wid).problem is None:
            self.rec.position_high(wid, self._next_position())

    def consume(self, p, count):
        super().consume(p, count)
        self.tell_read_through(p % self.P)

    def tell_read_through(self, p):
        """Below the next unread record; at the end, all ingest wrote (it writes at once)."""
        log, at = self.logs[p], self.pos[p]
        self.rec.on_read_through(p, log[at][0] - 1 if at < len(log) else 2 * self.binlog + 1)

    def drain(self):
        self.caught_up = True
        self.replicate()
        super().drain()


def run_positional(sc, replica, lag):
    world = PositionalWorld(sc["P"], sc["initial"], sc["chunks"], replica, lag)
    for step in sc["steps"]:
        name, args = step[0], step[1:]
        if name == "pump":
            for p in range(world.P):
                world.consume(p, *args)
            world.emit()
        elif name == "restart":  # the source may have moved on since the last read: told first
            for p in range(world.P):
                world.tell_read_through(p)
            world.save_checkpoint()
            state, _, pos = world.saved
            world.crash(*args)
            for p in range(world.P):
                world.consume(p, pos[p] - world.pos[p])
            assert json.dumps(world.rec.to_dict()) == state
        elif name in ("checkpoint", "emit"):
            getattr(world, "save_checkpoint" if name == "checkpoint" else "emit")()
        else:
            getattr(world, name)(*args)
        world.replicate()
    world.drain()
    return world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.lists(st.integers(0, 2), min_size=1, max_size=5))
def test_positions_and_markers_both_bring_the_sink_to_the_source(sc, lag):
    markers = run_scenario(sc)
    primary = run_positional(sc, replica=False, lag=lag)
    replica = run_positional(sc, replica=True, lag=lag)
    assert markers.source == primary.source == replica.source
    for world in (markers, primary, replica):
        assert live_rows(world.sink) == world.source
        assert world.done == set(range(len(sc["chunks"])))
        assert world.rec.windows == {}
        assert world.stale_emissions == 0  # without rollbacks, no emitted row is ever stale


def _lagging_world():
    """A replica two transactions behind: a window opened after the merger read past it."""
    chunks = make_chunks("db.t", [KeyRange(None, None)])
    initial = {(k, "a"): ((k, "a"), 0) for k in range(3)}
    return PositionalWorld(1, initial, chunks, replica=True, lag=(0,)), chunks


def test_a_lagging_replica_makes_a_window_wait_rather_than_emit_a_stale_row():
    world, _ = _lagging_world()
    world.update(1, 0)  # (1, 'a') changes on the source; the replica does not apply it
    world.consume(0, 10)  # the merger applies it
    world.open(1)
    wid = next(iter(world.inflight))
    world.advance(0, False)  # LOW from the replica: behind what was read
    assert "behind" in world.rec.window(wid).problem
    world.drain()
    assert live_rows(world.sink) == world.source


def test_the_simulation_reads_chunks_from_the_replicas_past():
    """Sanity check of the harness: the replica's rows are older than the source's."""
    world, _ = _lagging_world()
    world.open(1)
    world.advance(0, False)
    world.update(1, 0)
    world.advance(0, False)  # SELECT on the replica: the old row
    wid = next(iter(world.inflight))
    assert ((1, "a"), 0) in world.inflight[wid]["rows"]
    world.advance(0, False)
    world.consume(0, 10)
    world.emit()  # the update was read after the window opened: its key is not emitted
    world.drain()
    assert live_rows(world.sink) == world.source and world.source[(1, "a")] != ((1, "a"), 0)


def test_a_change_right_after_high_wins_over_the_emitted_row():
    """The rows' sequence is below HIGH: a change committed at HIGH itself (the next
    position the server named) and read after the emission replaces the emitted row."""
    world, _ = _lagging_world()
    world.replica = False
    world.open(1)
    for _ in range(3):
        world.advance(0, False)
    world.consume(0, 10)
    world.emit()
    assert not world.inflight and live_rows(world.sink) == world.source
    world.update(1, 0)  # at exactly the position HIGH named
    world.consume(0, 10)
    assert live_rows(world.sink) == world.source
