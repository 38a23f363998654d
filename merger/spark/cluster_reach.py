"""On a Spark cluster, whether the executors reach the merger's ``state_dir``: they write
each snapshot window's staged rows there, and the merger (the driver) reads them. At start,
the driver writes a probe file, one task per executor core reads it back and writes a file
of its own beside it, and the driver looks for those: an executor that did not find the
probe, or whose file the driver does not find, is on a machine where ``state_dir`` is not
the driver's (not a shared file system). The merger then stops with the way out, instead
of staging windows nobody can read."""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from merger.errors import MergerError


@dataclass(frozen=True)
class ProbeResult:
    """What one probe task found: where it ran, whether it read the probe, what it wrote."""

    host: str
    task: int
    read_probe: bool
    wrote: str | None  # the name of its file beside the probe (None: it could not write)


def probe_task(directory: str, token: str, task: int) -> ProbeResult:
    """Runs on an executor."""
    path = Path(directory)
    try:
        read = (path / "probe").read_text() == token
    except OSError:
        read = False
    name = f"task-{task}-{uuid.uuid4().hex}"
    try:
        (path / name).write_text(token)
    except OSError:
        name = None
    return ProbeResult(socket.gethostname(), task, read, name)


def unreachable(results: list[ProbeResult], seen: set[str]) -> list[ProbeResult]:
    """The probe tasks that show ``state_dir`` is not shared: they did not read the driver's
    probe, or the driver does not see the file they wrote (``seen``: the files it sees)."""
    return [r for r in results if not r.read_probe or r.wrote is None or r.wrote not in seen]


def refusal(master: str, state_dir: str, bad: list[ProbeResult]) -> str:
    hosts = sorted({r.host for r in bad})
    return (
        f"spark_master {master}: the executors on {', '.join(hosts)} ({len(bad)} probe tasks) do not share "
        f"the merger's state_dir {state_dir} (they write each snapshot window's rows there and the merger "
        "reads them): put state_dir on a file system mounted at the same path on the merger's machine "
        "and every worker, or run Spark in local mode"
    )


def check_state_dir_reached(spark, state_dir: Path) -> None:
    """Stops (MergerError) if an executor does not share ``state_dir`` with the driver; in
    local mode there is nothing to check."""
    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return
    directory = Path(state_dir).resolve() / "cluster-probe" / uuid.uuid4().hex
    directory.mkdir(parents=True)
    token = uuid.uuid4().hex
    (directory / "probe").write_text(token)
    tasks = max(2, sc.defaultParallelism)
    where = str(directory)
    try:
        results = sc.parallelize(range(tasks), tasks).map(lambda i: probe_task(where, token, i)).collect()
        seen = {p.name for p in directory.iterdir()}
        bad = unreachable(results, seen)
        if bad:
            raise MergerError(refusal(sc.master, str(state_dir), bad))
    finally:
        for p in directory.iterdir():
            p.unlink(missing_ok=True)
        directory.rmdir()
