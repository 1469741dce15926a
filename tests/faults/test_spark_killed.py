"""Spark dies in the middle of the write: spark-submit's process group, or the Spark Connect server (items 1 and 10)."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from kafka_batch_provider.dev.local_servers import free_port
from kafka_batch_provider.dev.spark_connect import SparkConnectServer
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.harness import (
    CliRun,
    expect_exactly_once,
    expect_nothing_new_visible,
    run_cli,
    scenario_args,
    through_spark_submit,
    wait_until_tasks_write,
)
from tests.integration.helpers import group_offsets, offsets_of

pytestmark = pytest.mark.integration

RECORDS = 60_000  # 30,000 per partition, in 3,000-offset tasks: the write lasts long enough to be cut


# One output format (the other's is in the matrix's other Spark path): what is tested is a killed
# process's retry, which stages the same way for every format; the formats' commits are in test_crash_points.py.
@pytest.mark.parametrize("lake", ["parquet"], indirect=True)
def test_spark_submit_killed_with_its_process_group_mid_write_then_a_retry_lands_the_batch_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, RECORDS, value_size=100))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote, "--max-offsets-per-task", "3000")
    submit_args = through_spark_submit(args, spark_connect_remote)

    run = CliRun(submit_args, lake.env()).start()  # its own session: the CLI, spark-submit's JVM, its Python workers
    try:
        wait_until_tasks_write(run, lake)
    finally:
        run.kill_group()  # as a lost worker, or Airflow killing the task, would
    run.finish()

    assert run.killed, f"expected SIGKILL, got exit {run.process.returncode}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    expect_nothing_new_visible(lake, Counter())
    # The retry replays the saved plan; it goes through the session's Connect server so the
    # suite does not pay a second JVM start (the plan and output are the same either way).
    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == RECORDS, f"the retry must replay the same plan: {retried}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: RECORDS // 2, 1: RECORDS // 2}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: RECORDS // 2, 1: RECORDS // 2}))
    assert lake.staged_names() == [], "the killed attempt's files were not cleaned up"


@pytest.mark.parametrize("lake", ["delta"], indirect=True)
def test_the_spark_connect_server_killed_mid_batch_then_a_retry_lands_the_batch_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, RECORDS, value_size=100))
    port = free_port()
    remote = f"sc://127.0.0.1:{port}"
    args = scenario_args(lake, kafka_config, topic, group_id, remote, "--max-offsets-per-task", "3000")

    server = SparkConnectServer(
        port=port, master="local[2]", log_path=tmp_path / "server-1.log", detach=True, lean=True
    )
    server.start(timeout=180)
    run = CliRun(args, lake.env()).start()
    try:
        wait_until_tasks_write(run, lake)
        os.killpg(server.pid, signal.SIGKILL)  # the JVM and its Python workers
        line = run.finish().error_line()
    finally:
        server.stop()  # also when an assertion failed: a detached server would outlive pytest
        if run.process.poll() is None:
            run.kill_group()

    assert "Spark Connect" in line, f"the line must say the Spark Connect server went away: {line}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    expect_nothing_new_visible(lake, Counter())
    # The retry goes to another server (the session's), as it would after a fail-over; the plan
    # is the output's, whichever server reads it.
    retry_args = scenario_args(
        lake, kafka_config, topic, group_id, spark_connect_remote, "--max-offsets-per-task", "3000"
    )
    retried = run_cli(retry_args, lake.env(), timeout=600).result()

    assert retried["reused"] and retried["records"] == RECORDS, f"the retry must replay the same plan: {retried}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: RECORDS // 2, 1: RECORDS // 2}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: RECORDS // 2, 1: RECORDS // 2}))
    assert lake.staged_names() == [], "the killed attempt's files were not cleaned up"
