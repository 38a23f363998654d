"""A snapshot read's child process (merger.snapshot.chunk_read.in_child): its answer and
errors come back, and what it leaves behind (threads) ends with it. No database needed."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from merger.snapshot.chunk_read import in_child


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_the_childs_result_comes_back():
    assert in_child(lambda a, b: a + b, 2, 3) == 5
    assert in_child(lambda: {"rows": [1, 2]}) == {"rows": [1, 2]}


def test_the_childs_error_comes_back_with_its_text():
    def unavailable():
        raise RuntimeError("cdc-source-unavailable: (2003) Can't connect")

    def other():
        raise ValueError("no such column")

    with pytest.raises(RuntimeError) as err:
        in_child(unavailable)
    assert str(err.value) == "cdc-source-unavailable: (2003) Can't connect"
    with pytest.raises(RuntimeError) as err:
        in_child(other)
    assert str(err.value) == "ValueError: no such column"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_threads_the_call_leaves_behind_end_with_the_child():
    """As ConnectorX's connection pool threads do after every read: here they never pile up."""
    stop = threading.Event()

    def leaves_threads() -> int:
        for _ in range(3):
            threading.Thread(target=stop.wait, args=(60,)).start()  # not daemon threads, never joined
        return 7

    before = _threads()
    started = time.monotonic()
    for _ in range(5):
        assert in_child(leaves_threads) == 7
    # at most as many: threads of other tests in this process may end meanwhile (CI saw 104 -> 83)
    assert _threads() <= before
    assert time.monotonic() - started < 10  # the child does not wait for its threads


def test_a_child_that_dies_is_an_error_not_a_hang():
    def dies() -> int:
        os.kill(os.getpid(), signal.SIGKILL)
        return 0

    with pytest.raises(RuntimeError) as err:
        in_child(dies)
    assert "cdc-source-error" in str(err.value) and f"signal {int(signal.SIGKILL)}" in str(err.value)
