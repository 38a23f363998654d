"""merger.kafka.pacing: micro-batches start at least the gap apart; a change on a quiet
source is not held, nor a batch the merger asks for."""

from hypothesis import given
from hypothesis import strategies as st

from merger.kafka.pacing import BatchPacing


def test_the_first_batch_is_never_held():
    assert not BatchPacing(0.6).hold(100.0)


def test_a_batch_within_the_gap_waits_and_one_after_it_starts():
    p = BatchPacing(0.6)
    p.started(10.0)
    assert p.hold(10.2)
    assert p.hold(10.599)
    assert not p.hold(10.625)
    assert not p.hold(30.0)  # a quiet source: the change goes at once


def test_an_asked_batch_and_a_zero_gap_are_never_held():
    p = BatchPacing(0.6)
    p.started(10.0)
    assert not p.hold(10.1, asked=True)
    z = BatchPacing(0)
    z.started(10.0)
    assert not z.hold(10.0)


@given(
    st.floats(min_value=0.0, max_value=5.0),
    st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1, max_size=50),
)
def test_batches_started_when_not_held_are_never_closer_than_the_gap(gap, steps):
    """The model: triggers at increasing times; a batch starts where the source does not
    hold it. Any two starts are at least the gap apart, and a trigger that comes the gap
    or more after the last start always starts one."""
    p = BatchPacing(gap)
    now, starts = 0.0, []
    for step in steps:
        now += step
        held = p.hold(now)
        if starts and now - starts[-1] >= gap:
            assert not held
        if not held:
            p.started(now)
            starts.append(now)
    assert all(b - a >= gap for a, b in zip(starts, starts[1:]))


def test_the_prompt_file_the_store_writes_is_what_the_source_reads(tmp_path):
    import time

    from merger.kafka.offsets import read_prompt_until
    from merger.kafka.pacing import PROMPT_S
    from merger.state.store import PROMPT_FILE, StateStore, batch_prompter

    path = str(tmp_path / PROMPT_FILE)
    assert read_prompt_until(path) == 0.0 and read_prompt_until(None) == 0.0
    assert batch_prompter(StateStore(tmp_path), 0) is None  # no gap: nothing to prompt
    before = time.time()
    batch_prompter(StateStore(tmp_path), 600)()
    assert before + PROMPT_S <= read_prompt_until(path) <= time.time() + PROMPT_S
