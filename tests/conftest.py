"""Shared fixtures: a real broker (from the provider's pytest plugin: Apache Kafka, or tansu with
``KAFKA_BATCH_TEST_BROKER=tansu``) and a real Spark session (on the worker's Spark Connect server)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.areas import DURATIONS, attach_cpu, mark_cpu
from tests.bad_input import tally as _bad_input_tally  # noqa: F401 - registers its matrix
from tests.faults import tally as _faults_tally  # noqa: F401 - registers its matrix
from tests.matrix import MATRICES
from tests.support import generated_tally as _generated_tally  # noqa: F401 - registers its counts

pytest_plugins = [
    "kafka_batch_provider.testing.pytest_plugin",
    "tests.support.spark_cluster",
    "tests.support.secure_kafka",
    "tests.support.cdc",
    "tests.support.databases",
]

ROOT = Path(__file__).resolve().parent.parent

# Airflow reads its configuration when first imported: give the tests their own home
# (SQLite, no examples) before anything imports it, so no user's ~/airflow is touched.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="kafka-batch-airflow-home-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
# No spark-submit is put on PATH: KafkaSparkBatchOperator finds the one pip installed next to
# this Python, as it must for an Airflow started from a virtualenv nobody activated.

# Apache Kafka's jars (the session's broker, dev/kafka.py) are in the project's tools folder,
# fetched by `make jvm-tools`; the Makefile exports the same, this covers a plain `pytest`.
os.environ.setdefault("KAFKA_BATCH_TOOLS_DIR", str(ROOT / ".tools"))

# The shipped DAGs' output (required when they are parsed): a folder of the session; a test that runs
# them names its own.
os.environ.setdefault("KAFKA_BATCH_OUTPUT", tempfile.mkdtemp(prefix="kafka-batch-dag-output-"))

# Spark binds the interface the hostname resolves to; keep everything on loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Spark's Python workers must use this interpreter (it has confluent-kafka and pyarrow).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


# py4j logs its shutdown at INFO from __del__, after pytest closed the captured streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def spark(spark_connect_remote: str) -> Iterator[pyspark.sql.SparkSession]:  # noqa: F821
    """The worker's one Spark engine for in-process batches: a session on the worker's Spark Connect
    server, the same (shared) session ``kafka-batch run --spark-remote`` joins, so the tests' own
    batches and the CLI's find its Python workers warm. Only tests whose subject is spark-submit start
    another JVM."""
    from kafka_batch_provider.spark.connect import connect_session

    session = connect_session(spark_connect_remote)
    yield session
    session.client.close()


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """The worker's Airflow metadata DB (SQLite in its AIRFLOW_HOME): a copy of one that ``airflow db
    migrate`` made once for the whole session (a migration costs ~4 s of CPU; the file is the same)."""
    from kafka_batch_provider.testing.pytest_plugin import shared_servers  # registered as a plugin first

    home = os.environ["AIRFLOW_HOME"]

    def migrate(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "AIRFLOW_HOME": str(folder)}
        airflow = str(Path(sys.executable).parent / "airflow")
        result = subprocess.run([airflow, "db", "migrate"], capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, f"airflow db migrate failed: {result.stderr[-2000:]}"
        return folder / "airflow.db"

    info = shared_servers().get("airflow-db", migrate, lambda db: [], lambda db: {"db": str(db)})
    shutil.copyfile(info["db"], Path(home) / "airflow.db")
    return home


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    return f"g-{request.node.name[:30]}-{uuid.uuid4().hex[:6]}"


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run when pytest-xdist's ``--dist loadgroup`` cannot keep a group on one worker.

    Its workers mark grouped tests by setting ``item._nodeid`` to ``<id>@<group>``; pytest 9.2
    keeps node ids elsewhere, so that no longer takes effect (pytest-xdist #1386) and every
    expensive session server of a group (the live Airflow stack, the Spark cluster) is started
    once per worker, silently. The attribute xdist writes must be the one pytest reads.
    """
    from _pytest.nodes import Node

    if config.getoption("dist", "no") == "loadgroup" and not hasattr(Node, "_nodeid"):
        raise pytest.UsageError(LOADGROUP_BROKEN)


LOADGROUP_BROKEN = (
    f"pytest {pytest.__version__} breaks pytest-xdist's --dist loadgroup (pytest-xdist #1386): "
    "install the pinned pytest (pip install -c constraints.txt pytest), or run with -n0"
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, after xdist renamed the grouped tests: check that the new ids took
    effect (the attribute check above cannot see a pytest that keeps ``_nodeid`` but reads
    another)."""
    if config.getoption("dist", "no") != "loadgroup" or not hasattr(config, "workerinput"):
        return
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        if marker is not None and "@" not in item.nodeid:
            raise pytest.UsageError(f"{LOADGROUP_BROKEN} ({item.nodeid} lost its group)")


# -- the counted matrices (tests/matrix.py) and the time and CPU per area (tests/areas.py): here, because
# xdist's controller loads this file ----------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    mark_cpu(item, nextitem)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    attach_cpu(item, report)
    for matrix in MATRICES:
        matrix.attach(item, report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for matrix in MATRICES:
        matrix.count(report)
    DURATIONS.count(report)


def pytest_terminal_summary(terminalreporter) -> None:
    for matrix in MATRICES:
        matrix.summary(terminalreporter)
    DURATIONS.summary(terminalreporter)
