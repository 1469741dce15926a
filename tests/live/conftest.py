"""One live Airflow for the whole session: api-server, scheduler, dag-processor and triggerer.

The stack runs the project's dags/ with a test-local AIRFLOW_HOME (SQLite, LocalExecutor),
its ``kafka_default`` connection pointing at the session's broker and ``spark_default`` at a
local Spark. The ingest DAG gets a one-minute schedule, a deferrable sensor and a short retry
delay through its environment knobs; each test picks its topic, group and output through the
DAG's Variables and leaves the DAG paused with nothing running (``live_dag``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafka_batch_provider.dev.airflow_live import AirflowStack, orphans_of

DAGS = Path(__file__).resolve().parents[2] / "dags"
INGEST = "kafka_batch_ingest"
BACKFILL = "kafka_batch_backfill"
DOWNSTREAM = "kafka_batch_downstream"
ON_LAG = "kafka_batch_ingest_on_lag"
LINEAGE_NAMESPACE = "kafka-batch-live"

# What the ingest DAG reads when it is parsed (its environment knobs) for the live stack.
LIVE_DAG_ENV = {
    "KAFKA_BATCH_SCHEDULE": "* * * * *",  # cron's shortest interval
    "KAFKA_BATCH_SENSOR_DEFERRABLE": "true",
    "KAFKA_BATCH_SENSOR_POKE_SECONDS": "2",
    "KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS": "120",
    "KAFKA_BATCH_RETRY_DELAY_SECONDS": "3",
}


@pytest.hookimpl(tryfirst=True)  # before xdist turns the group into the test ids, however pytest was called
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.airflow_live)
            item.add_marker(pytest.mark.xdist_group("airflow-live"))  # one xdist worker, one Airflow stack


CHROMIUM = Path(os.environ.get("KAFKA_BATCH_CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium (Playwright) for the browser tests of the live UI. Per module, not per
    session: Playwright's sync API keeps an event loop running in this thread while it is open,
    and later tests on the same worker call asyncio.run()."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"expected Chromium at {CHROMIUM} (make test installs it: apt-get install chromium)"
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start.
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    page = chromium.new_page(viewport={"width": 1400, "height": 1300})
    page.set_default_timeout(30_000)
    yield page
    page.close()


@pytest.fixture(scope="session")
def airflow_stack(kafka_bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    home = tmp_path_factory.mktemp("airflow-live")
    lag_name = f"live-lag-{uuid.uuid4().hex[:8]}"
    env = {
        **LIVE_DAG_ENV,
        # Defaults only: every test sets its own through the Variables.
        "KAFKA_BATCH_OUTPUT": str(home / "lake-default"),  # the downstream DAG's asset: its test's output
        "KAFKA_BATCH_REPORT_DB": str(home / "batch_report.sqlite"),
        # The lag-fired DAG's trigger is fixed at parse time: a topic, group and output of its own.
        "KAFKA_BATCH_TOPICS": lag_name,
        "KAFKA_BATCH_GROUP": lag_name,
        "KAFKA_BATCH_LAG_OUTPUT": str(home / "lake-lag"),
        "KAFKA_BATCH_LAG_POKE_SECONDS": "1",
        "KAFKA_BATCH_MAX_DATA_AGE_SECONDS": "3600",
        # OpenLineage through its file transport, one JSON file per event (openlineage_events()).
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(home / "lineage" / "event")}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": LINEAGE_NAMESPACE,
        # The operators' lineage reads XCom and connections: in a thread of the task, not a fork.
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "true",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "true",
        # Task events only: the scheduler's DAG-run events are built in a forked process pool that
        # queries the metadata DB, and on this stack's SQLite that once held the DB's lock for 60 s
        # (the api-server and the triggerer stalled). The tasks' events are what this provider makes.
        "AIRFLOW__OPENLINEAGE__EMISSION_POLICY": json.dumps([{"scope": {}, "controls": {"emit_dag_events": False}}]),
    }
    (home / "lineage").mkdir()
    stack = AirflowStack(home=home, dags_folder=DAGS, env=env, stop_timeout=3)
    with stack:
        stack.set_connection("kafka_default", "kafka", extra={"bootstrap.servers": kafka_bootstrap_servers})
        stack.set_connection("spark_default", "spark", host="local[2]")
        stack.wait_for_dags([INGEST, BACKFILL, DOWNSTREAM, ON_LAG])
        yield stack
    left = [f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in orphans_of(home)]
    assert not left, f"expected every process of the Airflow stack to be gone after stop(), found {left}"


@pytest.fixture
def live_ingest(
    airflow_stack: AirflowStack, tmp_path: Path, group_id: str, new_topic: Callable[..., str]
) -> Iterator[dict[str, str]]:
    """A fresh topic, group and output for the ingest DAG, set as its Variables.

    Afterwards the DAG is paused, its unfinished runs failed and waited for, so the next test
    starts from a quiet DAG even when this one failed halfway.
    """
    settings = {
        "topic": new_topic(partitions=2),
        "group": group_id,
        "output": str(tmp_path / f"lake-{uuid.uuid4().hex[:6]}"),
    }
    airflow_stack.set_variable("kafka_batch_topics", settings["topic"])
    airflow_stack.set_variable("kafka_batch_group", settings["group"])
    airflow_stack.set_variable("kafka_batch_output", settings["output"])
    try:
        yield settings
    finally:
        airflow_stack.quiesce(INGEST)
