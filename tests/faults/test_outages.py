"""The broker or the S3 server goes away at each step of a batch, then comes back (items 3 and 4).

"Goes away" is the server's port going dark (:class:`FaultProxy`): open connections are cut
and new ones refused, exactly what a stopped server looks like to its clients, while the
embedded servers keep their in-memory data for the retry.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kafka_batch_provider.errors import EXIT_TRANSIENT
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.harness import (
    CliRun,
    expect_exactly_once,
    expect_nothing_new_visible,
    run_cli,
    run_through_outage,
    scenario_args,
    through_spark_submit,
    wait_until_tasks_write,
)
from tests.integration.helpers import group_offsets, offsets_of

pytestmark = pytest.mark.integration


def test_the_broker_gone_during_planning_fails_in_one_line_leaves_no_plan_and_a_retry_succeeds(
    outcome, lake, kafka_proxy, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote, "--timeout", "3")

    kafka_proxy.go_dark()
    failed = run_cli(args, lake.env())
    kafka_proxy.restore()

    line = failed.error_line()
    assert "did not answer" in line and kafka_config["bootstrap.servers"] in line, line
    assert lake.store().plan_files() == [], "a refused run must not leave a plan behind"
    expect_nothing_new_visible(lake, Counter())
    retried = run_cli(args, lake.env()).result()
    assert retried["records"] == 20 and not retried["reused"], retried
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 10, 1: 10}))


def test_a_broker_outage_shorter_than_the_stall_timeout_is_read_through(
    outcome, lake, kafka_proxy, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 2_000))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote, "--stall-timeout", "60")

    # The plan is saved; every read starts against a broker that is gone, for 6 s.
    result = run_through_outage(args, lake.env(), "after-plan", kafka_proxy, back_after=6).result()

    assert result["records"] == 2_000, f"the batch must complete once the broker is back: {result}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 1_000, 1: 1_000}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 1_000, 1: 1_000}))


# Each Spark path once, each with another output format: the stalled read and its replay are the
# reader's, which no format changes.
@pytest.mark.parametrize(("spark", "lake"), [("connect", "parquet"), ("spark-submit", "delta")], indirect=["lake"])
def test_a_broker_outage_longer_than_the_stall_timeout_fails_in_one_line_and_a_retry_replays_the_plan(
    outcome, lake, kafka_proxy, kafka_config, new_topic, group_id, spark_connect_remote, spark
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote, "--stall-timeout", "3")
    if spark == "spark-submit":
        args = through_spark_submit(args, spark_connect_remote)

    failed = run_through_outage(args, lake.env(), "after-plan", kafka_proxy)
    line = failed.error_line()

    assert "no progress for 3s" in line and topic in line, f"the line must name the stalled range: {line}"
    # A stall is transient on both Spark paths: exit 3, which Airflow's task would retry.
    assert failed.process.returncode == EXIT_TRANSIENT, (
        f"expected exit {EXIT_TRANSIENT} (transient: a retry may pass) through {spark}, "
        f"found {failed.process.returncode}: {line}"
    )
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    expect_nothing_new_visible(lake, Counter())
    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == 40, f"the retry must replay the saved plan: {retried}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 20, 1: 20}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 20, 1: 20}))


def test_the_broker_gone_at_the_commit_fails_in_one_line_and_the_next_run_commits_without_reading(
    outcome, lake, kafka_proxy, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 30))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote, "--timeout", "3")

    line = run_through_outage(args, lake.env(), "after-log-entry", kafka_proxy).error_line()

    assert "did not answer" in line and kafka_config["bootstrap.servers"] in line, (
        f"the line must name the broker: {line}"
    )
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    [entry] = lake.log_entries()
    finished = run_cli(args, lake.env()).result()
    assert finished["repaired"] == [entry["batch_id"]] and "spark_seconds" not in finished["timings"], (
        f"the next run must finish the commit without reading again: {finished}"
    )
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 15, 1: 15}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 15, 1: 15}))


def test_the_s3_server_gone_while_tasks_write_fails_in_one_line_and_a_retry_writes_once(
    outcome, lake, s3_proxy, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 60_000, value_size=200))
    args = scenario_args(
        lake, kafka_config, topic, group_id, spark_connect_remote, "--max-offsets-per-task", "3000", "--timeout", "5"
    )

    run = CliRun(args, lake.env()).start()
    wait_until_tasks_write(run, lake, timeout=120)
    s3_proxy.go_dark()  # tasks are writing; others have not started
    line = run.finish().error_line()
    s3_proxy.restore()

    assert "s3" in line.lower() or "storage" in line.lower(), f"the line must name the storage: {line}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    expect_nothing_new_visible(lake, Counter())
    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == 60_000, retried
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 30_000, 1: 30_000}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 30_000, 1: 30_000}))


def test_the_s3_server_gone_at_the_storage_commit_fails_in_one_line_and_a_retry_writes_once(
    outcome, lake, s3_proxy, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 50))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)

    # The files are staged and checked; the log entry (Delta commit) is next.
    line = run_through_outage(args, lake.env(), "before-log-entry", s3_proxy).error_line()

    assert "s3" in line.lower() or "storage" in line.lower() or "delta" in line.lower(), line
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    assert lake.log_entries() == [], "no log entry may exist after a failed storage commit"
    expect_nothing_new_visible(lake, Counter())
    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == 50, retried
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 25, 1: 25}))
