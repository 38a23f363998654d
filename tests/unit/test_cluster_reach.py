"""merger/spark/cluster_reach.py: which probe tasks show that an executor does not share the
merger's state_dir, and the one-line refusal."""

from __future__ import annotations

from merger.spark.cluster_reach import ProbeResult, probe_task, refusal, unreachable


def test_an_executor_that_missed_the_probe_or_whose_file_is_unseen_is_named(tmp_path):
    (tmp_path / "probe").write_text("tok")
    here = probe_task(str(tmp_path), "tok", 0)
    assert here.read_probe and here.wrote and (tmp_path / here.wrote).read_text() == "tok"
    seen = {p.name for p in tmp_path.iterdir()}
    assert unreachable([here], seen) == []
    # another machine: the probe is not there, and what it writes the driver never sees
    elsewhere = ProbeResult("worker-b", 1, False, "task-1-x")
    written_unseen = ProbeResult("worker-c", 2, True, "task-2-y")
    cannot_write = ProbeResult("worker-d", 3, True, None)
    assert unreachable([here, elsewhere, written_unseen, cannot_write], seen) == [
        elsewhere,
        written_unseen,
        cannot_write,
    ]
    text = refusal("spark://m:7077", "/data/state", [elsewhere, written_unseen, elsewhere])
    assert "\n" not in text and "worker-b, worker-c" in text and "/data/state" in text and "local mode" in text


def test_a_probe_task_that_finds_another_token_did_not_read_the_probe(tmp_path):
    (tmp_path / "probe").write_text("other")
    assert not probe_task(str(tmp_path), "tok", 0).read_probe
    assert not probe_task(str(tmp_path / "missing"), "tok", 0).read_probe
    assert probe_task(str(tmp_path / "missing"), "tok", 0).wrote is None
