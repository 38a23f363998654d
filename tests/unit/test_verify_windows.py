"""The merger's record of `cdc verify`'s watermark windows (merger.verify.windows)."""

from __future__ import annotations

from merger.verify.windows import KEEP_S, MAX_WINDOWS, VerifyWindows, is_verify_window


def test_only_verify_window_ids_are_taken():
    assert is_verify_window("verify-abc") and not is_verify_window("3f2a") and not is_verify_window(None)


def test_a_window_shows_only_once_its_batch_is_applied():
    w = VerifyWindows()
    w.on_marker("verify-1", "LOW", 0, 100, now=0)
    w.on_marker("verify-1", "LOW", 1, 100, now=0)
    w.on_marker("verify-1", "HIGH", 0, 120, now=0)
    assert w.status() == {}  # the batch has not written its changes yet
    w.commit(now=1)
    assert w.status() == {"verify-1": {"low": 100, "high_partitions": 1, "truncated": False}}
    w.on_marker("verify-1", "HIGH", 1, 120, now=2)
    assert w.status()["verify-1"]["high_partitions"] == 1
    w.commit(now=2)
    assert w.status()["verify-1"]["high_partitions"] == 2


def test_a_high_without_its_low_in_that_partition_does_not_count():
    w = VerifyWindows()
    w.on_marker("verify-1", "HIGH", 0, 120, now=0)
    w.commit(now=0)
    assert w.status()["verify-1"]["high_partitions"] == 0


def test_a_truncate_after_low_marks_the_window_but_not_before():
    w = VerifyWindows()
    w.on_truncate(0)  # nothing open: nothing to mark
    w.on_marker("verify-1", "LOW", 0, 100, now=0)
    w.on_truncate(1)  # LOW not read in partition 1 yet: the truncate came before it there
    w.commit(now=0)
    assert not w.status()["verify-1"]["truncated"]
    w.on_truncate(0)
    w.commit(now=1)
    assert w.status()["verify-1"]["truncated"]


def test_replayed_markers_change_nothing_and_old_windows_are_forgotten():
    w = VerifyWindows()
    for _ in range(2):
        w.on_marker("verify-1", "LOW", 0, 100, now=0)
        w.on_marker("verify-1", "HIGH", 0, 120, now=0)
    w.commit(now=0)
    assert w.status() == {"verify-1": {"low": 100, "high_partitions": 1, "truncated": False}}
    w.commit(now=KEEP_S + 1)
    assert w.status() == {}
    for i in range(MAX_WINDOWS + 5):
        w.on_marker(f"verify-{i}", "LOW", 0, i, now=KEEP_S + i)
    w.commit(now=KEEP_S + MAX_WINDOWS + 5)
    assert len(w.status()) == MAX_WINDOWS and "verify-0" not in w.status()
