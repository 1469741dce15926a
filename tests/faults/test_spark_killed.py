"""Spark dies in the middle of the write: spark-submit's process group, or the Spark Connect server (items 1 and 10)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from kafka_batch_provider.local_servers import free_port
from kafka_batch_provider.spark.connect_server import SparkConnectServer
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.harness import (
    CliRun,
    committed,
    expect_exactly_once,
    expect_nothing_new_visible,
    offsets,
    run_cli,
    scenario_args,
)

pytestmark = pytest.mark.integration

RECORDS = 60_000  # 30,000 per partition, in 3,000-offset tasks: the write lasts long enough to be cut


def wait_until_tasks_write(run: CliRun, lake, timeout: float = 240) -> None:
    store = lake.store()
    deadline = time.monotonic() + timeout
    while not lake.staged_names(store) and time.monotonic() < deadline and run.process.poll() is None:
        time.sleep(0.1)
    assert run.process.poll() is None, f"the batch ended before the kill: {run.finish().stderr[-800:]}"
    assert lake.staged_names(store), f"no task wrote a file within {timeout:g} s"


def test_spark_submit_killed_with_its_process_group_mid_write_then_a_retry_lands_the_batch_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, RECORDS, value_size=100))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote, "--max-offsets-per-task", "3000")
    submit_args = [a for a in args if a not in ("--spark-remote", spark_connect_remote)]
    submit_args += ["--spark-master", "local[2]"]

    run = CliRun(submit_args, lake.env()).start()  # its own session: the CLI, spark-submit's JVM, its Python workers
    try:
        wait_until_tasks_write(run, lake)
    finally:
        run.kill_group()  # as a lost worker, or Airflow killing the task, would
    run.finish()

    assert run.killed, f"expected SIGKILL, got exit {run.process.returncode}"
    assert committed(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    expect_nothing_new_visible(lake, Counter())
    # The retry replays the saved plan; it goes through the session's Connect server so the
    # suite does not pay a second JVM start (the plan and output are the same either way).
    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == RECORDS, f"the retry must replay the same plan: {retried}"
    assert committed(kafka_config, group_id, topic, 2) == {0: RECORDS // 2, 1: RECORDS // 2}
    expect_exactly_once(outcome, lake, offsets(topic, {0: RECORDS // 2, 1: RECORDS // 2}))
    assert lake.staged_names() == [], "the killed attempt's files were not cleaned up"


def test_the_spark_connect_server_killed_mid_batch_then_a_retry_lands_the_batch_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, RECORDS, value_size=100))
    port = free_port()
    remote = f"sc://127.0.0.1:{port}"
    args = scenario_args(lake, kafka_config, topic, group_id, remote, "--max-offsets-per-task", "3000")

    server = SparkConnectServer(port=port, master="local[2]", log_path=tmp_path / "server-1.log", detach=True)
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
    assert committed(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    expect_nothing_new_visible(lake, Counter())
    # The retry goes to another server (the session's), as it would after a fail-over; the plan
    # is the output's, whichever server reads it.
    retry_args = scenario_args(
        lake, kafka_config, topic, group_id, spark_connect_remote, "--max-offsets-per-task", "3000"
    )
    retried = run_cli(retry_args, lake.env(), timeout=600).result()

    assert retried["reused"] and retried["records"] == RECORDS, f"the retry must replay the same plan: {retried}"
    assert committed(kafka_config, group_id, topic, 2) == {0: RECORDS // 2, 1: RECORDS // 2}
    expect_exactly_once(outcome, lake, offsets(topic, {0: RECORDS // 2, 1: RECORDS // 2}))
    assert lake.staged_names() == [], "the killed attempt's files were not cleaned up"
