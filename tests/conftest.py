"""Session fixtures: one SparkSession, one Kafka broker, one PostgreSQL server, one
MariaDB server, started on demand.

Servers start only when a test asks for them. A server that cannot start fails the test under
CI=true and skips it loudly elsewhere (tests/helpers/servers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.servers import unavailable


def pytest_configure(config: pytest.Config) -> None:
    # Configurations the tests write keep their findings history in the user's state folder by
    # default: a folder of the session's own, inherited by every eoctl the tests start.
    import os
    import tempfile

    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="eoctl-test-state-")


def pytest_unconfigure(config: pytest.Config) -> None:
    import os
    import shutil

    state = os.environ.get("XDG_STATE_HOME", "")
    if "eoctl-test-state-" in state:
        shutil.rmtree(state, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--scale", action="store_true",
                     help="also run the tests marked scale (tens of minutes; README, Development)")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (addopts): a worker per core, as many as the memory holds (a worker may run its own
    Spark driver, Kafka broker, PostgreSQL and MariaDB, and a command's JVM beside them: some
    6 GiB at its peak), at most 4; none (one process) on one core."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    workers = min(cores, int(memory_gib // 6), 4)
    return workers if workers > 1 else 0


#: Files whose tests take minutes, started first so that no worker is left with one at the end
#: while the others idle (`--dist loadfile --no-loadscope-reorder` sends files in this order).
LONGEST_FILES = ("test_incremental_property.py", "test_incremental.py", "test_secrets_outputs.py",
                 "engine/spark/test_class_archive.py", "expr/test_blobs.py", "expr/test_engine_parity.py",
                 "expr/test_topics.py", "test_audit_chaos.py", "ops/test_overlap.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The longest files first, the others in their order (a stable sort).
    first = {f"tests/{name}": rank for rank, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::", 1)[0], len(first)))
    # Tests are unit tests unless marked integration; `-m unit` runs only the fast ones.
    for item in items:
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
    # Scale tests take longer than CI's budget: deselected unless asked for, whatever -m says
    # (an -m given on the command line would replace one in addopts).
    if not config.getoption("--scale"):
        scale = [item for item in items if item.get_closest_marker("scale")]
        if scale:
            config.hook.pytest_deselected(items=scale)
            items[:] = [item for item in items if not item.get_closest_marker("scale")]


@pytest.fixture(scope="session")
def spark_jars() -> Path:
    from tests.helpers.jars import spark_jars_dir

    try:
        return spark_jars_dir()
    except Exception as exc:
        unavailable("Spark connector jars", str(exc))
        raise


@pytest.fixture(scope="session")
def engine_config(spark_jars: Path):
    from eoctl.config.model import EngineConfig

    # Tuned for the tests' small inputs: adaptive execution re-plans every stage and the UI starts a
    # web server, which cost a warm audit of the chaos sample about a fifth of its time. The CLI
    # tests run eoctl's own defaults (adaptive execution on), so that path stays tested.
    return EngineConfig(master="local[2]", jars_dir=str(spark_jars), conf={
        "spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "false", "spark.ui.enabled": "false"})


@pytest.fixture(scope="session")
def spark(engine_config):
    """The one SparkSession of the test run, built by eoctl's own factory."""
    from eoctl.engine.spark import start_session
    from eoctl.engine.spark.session import java_version

    try:
        java_version()
    except Exception as exc:
        unavailable("Spark (Java)", str(exc))
    session = start_session(engine_config)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka() -> Iterator:
    from tests.helpers.kafka_broker import KafkaBroker

    broker = KafkaBroker()
    try:
        broker.start()
    except Exception as exc:
        unavailable("Kafka broker", str(exc))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def mariadb() -> Iterator:
    """A MariaDB server (MySQL's protocol and SQL) for the MySQL store's tests."""
    from tests.helpers.mariadb import MariaDBServer

    server = MariaDBServer()
    try:
        server.start()
    except Exception as exc:
        unavailable("MariaDB", str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator:
    from tests.helpers.postgres import PostgresServer

    server = PostgresServer()
    try:
        server.start()
    except Exception as exc:
        unavailable("PostgreSQL", str(exc))
    yield server
    server.stop()
