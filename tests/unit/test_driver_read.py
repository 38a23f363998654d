"""Which micro-batches the merger's driver reads itself (merger.kafka.driver_read)."""

from __future__ import annotations

import pytest

from merger.kafka.driver_read import read_in_driver


@pytest.mark.parametrize("tasks", [0, 1, 2, 8])
def test_auto_reads_every_batch_in_the_driver_in_local_mode(tasks):
    assert read_in_driver("auto", local=True, tasks=tasks)


@pytest.mark.parametrize(("tasks", "expected"), [(0, True), (1, True), (2, False), (8, False)])
def test_auto_leaves_a_batch_of_several_tasks_to_a_clusters_executors(tasks, expected):
    assert read_in_driver("auto", local=False, tasks=tasks) is expected


@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("tasks", [0, 1, 2, 8])
def test_driver_and_spark_are_what_they_say(local, tasks):
    assert read_in_driver("driver", local=local, tasks=tasks)
    assert not read_in_driver("spark", local=local, tasks=tasks)
