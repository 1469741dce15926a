"""Two runs at once (racing for one log entry; one publishing while the other plans), upkeep while
a batch is about to commit, and Airflow retrying a task that failed half way (items 5 and 6)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.dags.conftest import DAGS
from tests.faults.harness import CliRun, expect_exactly_once, race, scenario_args
from tests.integration.helpers import group_offsets, offsets_of
from tests.support import cli_runner

pytestmark = pytest.mark.integration

SPARK_TASK = "ingest.spark_write"


def test_two_runs_at_once_one_writes_the_batch_and_the_other_never_writes_it_again(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)

    # Both freeze with their files staged, then race for the same log entry from the same start.
    runs = race([CliRun(args, lake.env(), fail_point="before-log-entry:stop").start() for _ in range(2)])

    # The same command planned the same batch: exactly one run writes it; the other either
    # fails in one line, or finds that batch logged and stops without writing it again.
    wrote = [run for run in runs if run.process.returncode == 0 and " rows in " in run.stderr]
    others = [run for run in runs if run not in wrote]
    assert len(wrote) == 1, f"exactly one run must write the batch: {[r.stderr.splitlines()[-2:] for r in runs]}"
    [other] = others
    # Three ways to lose: it logs after the winner and drops its files ("logged it first"), its own
    # log commit conflicts and it finds the winner's entry ("this attempt stops here"), or it fails.
    stopped = "logged it first" in other.stderr or "this attempt stops here" in other.stderr
    assert stopped or other.process.returncode != 0, other.stderr[-500:]
    if other.process.returncode != 0:
        line = other.error_line()
        assert "another run" in line or "committed" in line, f"the loser must say it lost a race: {line}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 20, 1: 20}
    assert len(lake.log_entries()) == 1, "exactly one batch may be logged"
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 20, 1: 20}))


def test_replays_of_disjoint_ranges_at_once_each_land_once_in_one_output(
    outcome, lake, kafka_config, new_topic, spark_connect_remote
):
    # An Airflow backfill runs several intervals at once into the replay output: each plans the
    # same next entry of its log; the first to publish takes it, the others take the next ones.
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 60))
    base = scenario_args(lake, kafka_config, topic, "unused", spark_connect_remote)
    base = [a for a in base if a not in ("--group", "unused")]
    windows = [(0, 10), (10, 20), (20, 30)]
    runs = race(  # all three planned and staged before any of them publishes
        [
            CliRun(
                [*base, "--start-offsets", json.dumps({"0": a, "1": a}), "--end-offsets", json.dumps({"0": b, "1": b})],
                lake.env(),
                fail_point="before-log-entry:stop",
                command="replay",
            ).start()
            for a, b in windows
        ]
    )
    failed = [run.stderr.strip().splitlines()[-1:] for run in runs if run.process.returncode != 0]
    assert not failed, f"every replay must land: {failed}"
    moved = sum("it takes entry" in run.stderr for run in runs)
    assert moved >= 2, f"expected two replays to take a later entry than they planned, {moved} did"
    assert len(lake.log_entries()) == 3, f"expected 3 log entries, found {len(lake.log_entries())}"
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 30, 1: 30}))


@pytest.mark.parametrize("lake", ["parquet"], indirect=True)  # the Parquet layout's publish moves files
def test_a_replay_killed_after_its_log_entry_is_published_by_the_replay_that_takes_the_next_entry(
    outcome, lake, kafka_config, new_topic, spark_connect_remote
):
    # Replay A logs its entry and dies before publishing it; nothing would run it again (its Spark
    # retries spent). Replay B, which planned the same entry, takes the next one and finishes A's
    # publish on its way: every logged batch of the output is published.
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 20))
    base = [
        a
        for a in scenario_args(lake, kafka_config, topic, "unused", spark_connect_remote)
        if a not in ("--group", "unused")
    ]
    window = lambda a, b: ["--start-offsets", json.dumps({"0": a}), "--end-offsets", json.dumps({"0": b})]  # noqa: E731
    late = CliRun([*base, *window(10, 20)], lake.env(), fail_point="before-log-entry:stop", command="replay").start()
    late.wait_stopped()
    killed = CliRun([*base, *window(0, 10)], lake.env(), fail_point="before-publish:kill", command="replay").start()
    assert killed.finish().process.returncode == -9, "expected replay A killed between its log entry and publish"
    late.resume()
    assert late.finish().process.returncode == 0, f"replay B must land: {late.stderr.strip().splitlines()[-1:]}"
    assert "it takes entry 2" in late.stderr, f"expected replay B to take entry 2: {late.stderr[-500:]}"
    store = lake.store()
    for entry in lake.log_entries():
        store.check_published(entry)  # raises naming the batch whose files are not in place
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 20}))


def test_a_run_that_publishes_while_another_plans_makes_it_plan_again_not_a_group_mismatch(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)
    for first_id in (0, 20):  # batch 1 before the race; batch 2 for the fast run
        produce(kafka_config, topic, sample_records(2, 20, first_id=first_id))
        if first_id == 0:
            assert CliRun(args, lake.env()).start().finish().process.returncode == 0

    # The slow run read the log's newest entry (batch 1), then froze before reading the group.
    slow = CliRun(args, lake.env(), fail_point="after-log-tail:stop").start()
    slow.wait_stopped()
    fast = CliRun(args, lake.env()).start().finish()  # publishes batch 2 and commits the group meanwhile
    assert fast.process.returncode == 0, fast.stderr[-800:]
    produce(kafka_config, topic, sample_records(2, 10, first_id=40))
    slow.resume()
    slow.finish()

    assert slow.process.returncode == 0, f"the slow run must plan again, not fail: {slow.stderr[-800:]}"
    assert "while this run planned: planning again" in slow.stderr, slow.stderr[-800:]
    assert [e["seq"] for e in lake.log_entries()] == [1, 2, 3], "the slow run publishes the next batch"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 25, 1: 25}))


def test_upkeep_while_a_batch_is_about_to_commit_keeps_its_files_and_it_commits_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)
    for first_id in (0, 20):  # two batches of small files for upkeep to compact
        produce(kafka_config, topic, sample_records(2, 20, first_id=first_id))
        assert CliRun(args, lake.env()).start().finish().process.returncode == 0
    produce(kafka_config, topic, sample_records(2, 10, first_id=40))

    # The third batch's files are staged; its storage commit (log entry / table commit) is next.
    frozen = CliRun(args, lake.env(), fail_point="before-log-entry:stop").start()
    frozen.wait_stopped()
    upkeep = cli_runner.run(
        ["upkeep", *lake.cli_args(), "--retention-hours", "1", "--keep-batches", "1"], {**os.environ, **lake.env()}
    )
    assert upkeep.returncode == 0, upkeep.stderr[-800:]
    report = json.loads(upkeep.stdout.strip().splitlines()[-1])
    if lake.format == "delta":
        assert report["files_after"] < report["files_before"], f"expected compaction: {report}"
    frozen.resume()
    frozen.finish()

    assert frozen.process.returncode == 0, f"the batch must commit after upkeep: {frozen.stderr[-800:]}"
    assert [e["seq"] for e in lake.log_entries()] == [1, 2, 3]
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 25, 1: 25}))


@pytest.mark.usefixtures("airflow_db")
def test_an_airflow_retry_after_a_half_done_spark_task_replays_the_identical_plan(
    outcome, lake, kafka_proxy, kafka_config, new_topic, group_id, spark_connect_remote, monkeypatch
):
    """dag.test() of the shipped ingest DAG; the Spark task's first try loses the broker mid-read."""
    from airflow.dag_processing.dagbag import DagBag

    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 50))
    host, port = spark_connect_remote.removeprefix("sc://").split(":")
    connections = {
        "KAFKA_FAULTS": {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_config["bootstrap.servers"]}},
        "CONNECT_FAULTS": {"conn_type": "spark_connect", "host": host, "port": int(port)},
        "S3_FAULTS": aws_connection(lake),
    }
    for name, connection in connections.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{name}", json.dumps(connection))
    settings = {
        "KAFKA_BATCH_KAFKA_CONN_ID": "kafka_faults",
        "KAFKA_BATCH_SPARK_CONNECT_CONN_ID": "connect_faults",
        "KAFKA_BATCH_STORAGE_CONN_ID": "s3_faults",
        "KAFKA_BATCH_RETRY_DELAY_SECONDS": "1",
        "AIRFLOW_VAR_KAFKA_BATCH_TOPICS": topic,
        "AIRFLOW_VAR_KAFKA_BATCH_GROUP": group_id,
        "AIRFLOW_VAR_KAFKA_BATCH_FORMAT": lake.format,
        "AIRFLOW_VAR_KAFKA_BATCH_OUTPUT": lake.uri,
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    tries: list[int] = []

    def lose_the_broker_on_the_first_try(context) -> None:
        tries.append(context["ti"].try_number)
        if context["ti"].try_number == 1:
            kafka_proxy.go_dark()

    def broker_back(context) -> None:
        kafka_proxy.restore()
        spark_task.write_options = replace(spark_task.write_options, stall_timeout=60)  # the retry is not the fault

    dag = DagBag(str(DAGS)).dags["kafka_batch_ingest"]
    for task in dag.tasks:
        task.retries = 1 if task.task_id == SPARK_TASK else 0
    spark_task = dag.get_task(SPARK_TASK)
    spark_task.write_options = replace(spark_task.write_options, stall_timeout=3)
    spark_task.on_execute_callback = [lose_the_broker_on_the_first_try]
    spark_task.on_retry_callback = [broker_back]

    dag_run = dag.test()

    states = {ti.task_id: (str(ti.state), ti.try_number) for ti in dag_run.get_task_instances()}
    assert tries == [1, 2], f"the Spark task must have failed once and been retried: tries {tries}, {states}"
    assert {state for state, _ in states.values()} == {"success"}, states
    assert states["ingest.plan"][1] == 1, f"the plan task must not run again: {states}"
    [entry] = lake.log_entries()
    assert lake.store().plan_files() == [(entry["seq"], entry["batch_id"])], "one plan, and the batch is that plan's"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 25, 1: 25}))


def aws_connection(lake) -> dict:
    options = lake.storage_options
    return {
        "conn_type": "aws",
        "login": options["key"],
        "password": options["secret"],
        "extra": {"endpoint_url": lake.endpoint.endpoint_url, "region_name": lake.endpoint.region},
    }
