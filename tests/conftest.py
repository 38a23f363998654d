"""Shared fixtures. Integration tests run against the embedded local stack (real MariaDB,
the Tansu broker, PostgreSQL), started once per test session under .cdc/test-stack
(override with CDC_TEST_STATE_DIR) and stopped at the end if this session started it.
Under pytest-xdist (``-n 2``) each worker has its own stack (``<state dir>-gw0``, ...): a
test that restarts a server never disturbs another worker's test.
With ``--backend containers`` (or CDC_TEST_BACKEND=containers) the stack is MySQL 8.4, Apache
Kafka and PostgreSQL in Docker containers instead (tests/container_stack.py)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from cdc import stack as local_stack

ROOT = Path(__file__).resolve().parents[1]
# no per-example deadline: on a loaded 2-core machine (two test workers, servers, Spark) an
# example's time says nothing about the code, and a timing failure is a flaky test
settings.register_profile("cdc", deadline=None)
# scripts/mutation.sh (--hypothesis-profile=mutation): a failing example kills the mutant,
# shrinking it would only cost time; no example database in the throwaway copy
settings.register_profile(
    "mutation", deadline=None, database=None, phases=(Phase.explicit, Phase.reuse, Phase.generate)
)
settings.load_profile("cdc")
IS_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BACKENDS = ("local", "containers")


def pytest_addoption(parser):
    parser.addoption(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="test stack: local processes (default) or Docker containers; env CDC_TEST_BACKEND",
    )


def _backend(config) -> str:
    return config.getoption("--backend") or os.environ.get("CDC_TEST_BACKEND") or "local"


def pytest_configure(config):
    backend = _backend(config)
    if backend not in BACKENDS:
        pytest.exit(f"CDC_TEST_BACKEND={backend}: must be one of {', '.join(BACKENDS)}", returncode=4)
    if backend == "containers":
        from tests.container_stack import docker_problem

        problem = docker_problem()
        if problem:
            pytest.exit(f"no Docker engine: {problem}", returncode=4)


def _stack_dir(base: str) -> Path:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return Path(f"{base}-{worker}" if worker else base)


@pytest.fixture(scope="session")
def stack(request) -> local_stack.StackInfo:
    if _backend(request.config) == "containers":
        from tests.container_stack import ContainerStack

        containers = ContainerStack(
            _stack_dir(os.environ.get("CDC_TEST_STATE_DIR") or str(ROOT / ".cdc" / "test-containers"))
        )
        yield containers.start()
        containers.stop()
        return
    state_dir = _stack_dir(os.environ.get("CDC_TEST_STATE_DIR") or str(ROOT / ".cdc" / "test-stack"))
    already = False
    try:
        found = local_stack.status(state_dir)
        already = all(found[name]["running"] for name in local_stack.COMPONENTS)  # s3: its own fixture
    except local_stack.StackError:
        pass
    info = local_stack.up(state_dir)
    yield info
    if not already:
        local_stack.down(state_dir)


@pytest.fixture(scope="session")
def s3_store(request, stack) -> local_stack.S3Info:
    """The stack's S3 server (moto, a process like the others) and its bucket, started for
    the tests that put Delta tables on an object store; stopped at the end if started here."""
    if _backend(request.config) == "containers":
        pytest.skip("the S3 server is part of the local stack only")
    state_dir = Path(stack.state_dir)
    already = local_stack.status(state_dir).get("s3", {}).get("running", False)
    info = local_stack.up(state_dir, ("s3",))
    stack.s3 = info.s3  # the session's stack object: its secret files name these keys
    local_stack.secret_file(stack, "s3_credentials")
    yield info.s3
    if not already:
        local_stack.down(state_dir, ("s3",))


_PIPELINES: list = []  # this worker's shared pipeline, once made


@pytest.fixture(scope="session")
def shared_pipeline(stack, tmp_path_factory):
    """This worker's shared ingest and merger (tests/shared_pipeline.py), started at first use."""
    from tests.shared_pipeline import SharedPipeline

    pipeline = SharedPipeline(stack, tmp_path_factory.mktemp("shared-pipeline"))
    _PIPELINES.append(pipeline)
    yield pipeline
    pipeline.stop()


@pytest.fixture
def pipeline(shared_pipeline):
    """The shared pipeline, running: a test that uses it writes only its own database
    (``pipeline.database(unique_name)``) and never stops either process."""
    shared_pipeline.ensure_running()
    return shared_pipeline


@pytest.fixture(autouse=True)
def _shared_pipeline_off(request):
    """The tests that use the shared pipeline run first (``_balanced``); the first test
    after them stops it: an idle merger and ingest still cost ~0.04 of a core."""
    if "pipeline" not in request.fixturenames:
        for pipeline in _PIPELINES:
            pipeline.stop()


@pytest.fixture
def mysql_root(stack):
    """A root connection (autocommit) to the stack's MariaDB."""
    import pymysql

    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    yield conn
    conn.close()


@pytest.fixture
def unique_name():
    """A short unique identifier for databases/topic prefixes of one test."""
    return "t" + uuid.uuid4().hex[:8]


SERVER_FIXTURES = {"stack", "s3_store", "shared_pipeline", "pipeline"}


def pytest_collection_modifyitems(config, items):
    """tests/integration/ is integration by place; a test under tests/unit/ that needs the
    stack is misfiled, and collection stops saying which (the split must stay true)."""
    misfiled = []
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "unit" in parts and SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            misfiled.append(item.nodeid)
    if misfiled:
        raise pytest.UsageError(
            "unit tests that need the local stack (move them to tests/integration/): " + ", ".join(misfiled)
        )
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        items[:] = _balanced(items, workers)


def _balanced(items: list, workers: int) -> list:
    """The order for pytest-xdist's worksteal scheduler, which gives each worker a
    contiguous share of the collection and lets an idle worker steal from the end of
    another's: the first share starts with every test on the shared pipeline (so one
    worker starts it, and stops it after them), then each share has its part of the tests
    marked slow (a minute or more), then of the other integration tests, and ends with
    unit tests, so that the workers end together and what is stolen at the end is short.
    Same on every worker."""

    def group(item) -> int:
        if "pipeline" in getattr(item, "fixturenames", ()):
            return 0  # together, so that the shared pipeline runs only while they do
        if item.get_closest_marker("slow") or item.get_closest_marker("soak"):
            return 1
        return 2 if item.get_closest_marker("integration") else 3

    shares: list[list] = [[] for _ in range(workers)]
    dealt = 0
    shares[0] += [i for i in items if group(i) == 0]  # one worker: one shared pipeline started
    for g in (1, 2, 3):
        for item in (i for i in items if group(i) == g):
            shares[(dealt + 1) % workers].append(item)  # the other workers first
            dealt += 1
    return [item for share in shares for item in share]
