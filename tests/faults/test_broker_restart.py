"""The broker's process itself stops and starts again mid-batch (Apache Kafka only).

:mod:`tests.faults.test_outages` makes the broker unreachable (its proxy goes dark) while the
process keeps running. Here the process goes too: while Spark's tasks read, the proxy goes dark
(the moment the clients lose the broker is then exact: a clean shutdown takes seconds, during which
the broker still serves), the process stops with SIGTERM (a clean shutdown, as a rolling restart
does) and starts again on the same port with the same data folder, and the proxy comes back. The
readers reconnect to a new broker process (leader epochs bumped, fetch sessions gone, the group
coordinator reloaded) and the same run finishes within ``--stall-timeout``.

A crash (SIGKILL) is not among the scenarios: a single KRaft node restarted after one refuses its
own registration (DUPLICATE_BROKER_REGISTRATION) until ``broker.session.timeout.ms`` (9 s) has
passed, seconds of waiting that show nothing a clean restart and the proxy's outages do not.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.conftest import FaultBroker, private_fault_broker
from tests.faults.harness import CliRun, expect_exactly_once, scenario_args, wait_until_tasks_write
from tests.integration.helpers import group_offsets, offsets_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fault_broker(kafka_broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultBroker]:
    """A broker of this module's own behind its proxy: its process is stopped here, which the
    session's shared fault broker must never be."""
    kind = "tansu" if kafka_broker_kind == "tansu" else "kafka"
    with private_fault_broker(kind, tmp_path_factory.mktemp("restarted-broker")) as broker:
        yield broker


# One output format: what is tested is the readers' way through a broker restart, which no format changes.
@pytest.mark.parametrize("lake", ["parquet"], indirect=True)
def test_the_broker_restarted_while_tasks_read_is_waited_through_and_the_batch_lands_once(
    outcome, lake, kafka_process, kafka_proxy, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    records, per_task = 2_000, 200
    produce(kafka_config, topic, sample_records(2, records))
    tasks = records // per_task  # a first batch keeps one task per slice
    args = scenario_args(
        lake, kafka_config, topic, group_id, spark_connect_remote, "--max-offsets-per-task", str(per_task)
    )
    # librdkafka's reconnect backoff doubles up to 10 s: capped at 1 s, a reader finds the restarted broker
    # within a second instead of up to ten (the same path, less test time).
    args += ["--stall-timeout", "60", "--kafka-config", "reconnect.backoff.max.ms=1000"]

    run = CliRun(args, lake.env()).start()
    wait_until_tasks_write(run, lake, timeout=120)
    kafka_proxy.go_dark()  # from now on no reader reaches the broker until it has restarted
    staged = len(lake.staged_names())
    assert run.process.poll() is None and staged < tasks - 2, (
        f"expected the broker gone while tasks still had ranges to read (fewer than {tasks - 2} of {tasks} "
        f"files staged, the run going on), found {staged} staged, run exit {run.process.poll()}"
    )
    kafka_process.stop()  # SIGTERM: a clean shutdown
    kafka_process.start()  # the same port and data folder
    kafka_proxy.restore()
    result = run.finish().result()

    assert result["records"] == records and not result["reused"], (
        f"expected the same run to finish its {records} records once the broker was back, found {result}"
    )
    half = records // 2
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: half, 1: half}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: half, 1: half}))
