"""Lag sensor, trigger and health against the real broker; statuses from real produce/ingest/commit steps."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest

from kafka_batch_provider.core.lag_health import HealthPolicy, LagStatus
from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.steps.lag import lag_report
from kafka_batch_provider.testing.producers import Record, produce, sample_records
from tests.integration.helpers import run_batch
from tests.integration.test_cli import cli, last_json

pytestmark = [pytest.mark.integration, pytest.mark.check]  # check: in make check's tier


@pytest.fixture
def kafka_connection(kafka_bootstrap_servers, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers}}),
    )


def lag_check(bootstrap: str, group: str, topic: str, output, *extra: str):
    return cli(
        "lag",
        "--bootstrap-servers",
        bootstrap,
        "--group",
        group,
        "--topic",
        topic,
        "--output",
        str(output),
        "--check",
        *extra,
    )


# -- the sensor and its trigger ------------------------------------------------------------


def test_sensor_waits_below_min_lag_and_fires_at_it(kafka_connection, kafka_config, new_topic, group_id):
    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    topic = new_topic(partitions=2)
    sensor = KafkaLagSensor(task_id="wait", group_id=group_id, topics=topic, min_lag=10)
    produce(kafka_config, topic, sample_records(2, 9))
    below = sensor.poke({})
    assert below.is_done is False and below.xcom_value["total_lag"] == 9
    produce(kafka_config, topic, sample_records(2, 1, first_id=9))
    above = sensor.poke({})
    assert above.is_done is True and above.xcom_value["total_lag"] == 10


def test_max_data_age_fires_on_a_quiet_topic(kafka_connection, kafka_config, new_topic, group_id):
    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    topic = new_topic(partitions=1)
    two_hours_ago = int((time.time() - 7200) * 1000)
    produce(kafka_config, topic, [Record(0, b"lonely", timestamp_ms=two_hours_ago)])
    patient = KafkaLagSensor(task_id="a", group_id=group_id, topics=[topic], min_lag=1000)
    assert patient.poke({}).is_done is False, "one record is below min_lag and no age rule is set"
    aged = KafkaLagSensor(task_id="b", group_id=group_id, topics=[topic], min_lag=1000, max_data_age=timedelta(hours=1))
    result = aged.poke({})
    assert result.is_done is True and "max_data_age" in result.xcom_value["reason"]


def test_deferrable_sensor_hands_the_wait_to_a_trigger_that_round_trips_and_fires(
    kafka_connection, kafka_config, new_topic, group_id
):
    from airflow.sdk.exceptions import TaskDeferred

    from kafka_batch_provider.sensors.lag import KafkaLagSensor
    from kafka_batch_provider.triggers.lag import KafkaLagTrigger

    topic = new_topic(partitions=1)
    sensor = KafkaLagSensor(
        task_id="wait", group_id=group_id, topics=[topic], min_lag=3, deferrable=True, poke_interval=0.5, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    classpath, kwargs = trigger.serialize()
    assert classpath == "kafka_batch_provider.triggers.lag.KafkaLagTrigger"
    rebuilt = KafkaLagTrigger(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert deferred.value.method_name == "execute_complete"

    async def wait_for_event():
        events = rebuilt.run()
        task = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(1.5)
        assert not task.done(), "the trigger must keep waiting while the lag is below min_lag"
        await asyncio.to_thread(produce, kafka_config, topic, sample_records(1, 3))
        return await asyncio.wait_for(task, timeout=30)

    event = asyncio.run(wait_for_event())
    assert event.payload["status"] == "ready" and event.payload["total_lag"] == 3
    assert sensor.execute_complete({}, event.payload)["total_lag"] == 3


def test_trigger_reports_an_unreachable_broker_as_an_error_event(monkeypatch):
    from kafka_batch_provider.dev.local_servers import free_port
    from kafka_batch_provider.triggers.lag import KafkaLagTrigger

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DOWN",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{free_port()}"}}),
    )
    trigger = KafkaLagTrigger("g", ["t"], kafka_config_id="kafka_down", kafka_timeout=1)
    event = asyncio.run(trigger.run().__anext__())
    assert event.payload["status"] == "error" and "did not answer" in event.payload["message"]


def test_sensor_fails_on_kafka_errors_even_with_soft_fail_and_never_waits_in_backfill_runs(kafka_connection, group_id):
    from types import SimpleNamespace

    from kafka_batch_provider.errors import PlanError
    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    sensor = KafkaLagSensor(task_id="wait", group_id=group_id, topics=["no-such-topic-x"], soft_fail=True, timeout=5)
    with pytest.raises(PlanError, match="unknown topic"):  # a skip here would hide a broken DAG
        sensor.execute({})
    backfill = {"dag_run": SimpleNamespace(run_type="backfill")}
    assert sensor.execute(backfill) == {"total_lag": None, "reason": "backfill run"}


# -- health statuses from real sequences -----------------------------------------------------


def test_caught_up_group_is_ok_and_lag_check_exits_zero(
    spark, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    run_batch(spark, kafka_config, tmp_path, group_id, [topic])
    report = lag_report(KafkaOffsets(kafka_config), group_id, [topic], BatchStore(tmp_path))
    assert report.status is LagStatus.OK and report.total_lag == 0
    result = lag_check(kafka_bootstrap_servers, group_id, topic, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "total" in result.stdout and json.loads(result.stdout.strip().splitlines()[-1])["status"] == "OK"


def test_lag_growing_across_bounded_batches_is_warn(
    spark, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    policy = PlanPolicy(max_records=5)
    for i in range(3):  # 10 arrive per batch, 5 are read: lag 10 -> 15 -> 20 -> 25
        produce(kafka_config, topic, sample_records(1, 10, first_id=10 * i))
        run_batch(spark, kafka_config, tmp_path, group_id, [topic], policy)
    produce(kafka_config, topic, sample_records(1, 10, first_id=30))
    report = lag_report(KafkaOffsets(kafka_config), group_id, [topic], BatchStore(tmp_path))
    assert report.status is LagStatus.WARN, report.message()
    assert "10 -> 15 -> 20 -> 25" in report.message()
    assert lag_check(kafka_bootstrap_servers, group_id, topic, tmp_path).returncode == 10


def test_partition_left_behind_across_batches_is_a_stall(
    spark, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    for i in range(2):  # batches read only partition 0; partition 1 keeps its data
        produce(kafka_config, topic, sample_records(2, 10, first_id=10 * i))
        run_batch(spark, kafka_config, tmp_path, group_id, [topic], partitions=[0])
    report = lag_report(KafkaOffsets(kafka_config), group_id, [topic], BatchStore(tmp_path))
    statuses = {p.state.partition: p.status for p in report.partitions}
    assert statuses == {0: LagStatus.OK, 1: LagStatus.STALL}, report.message()
    assert f"{topic}[1] STALL" in report.message()
    result = lag_check(kafka_bootstrap_servers, group_id, topic, tmp_path)
    assert result.returncode == 11 and f"{topic}[1] STALL" in result.stderr


def test_no_commit_for_too_long_with_lag_is_stop(
    spark, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    run_batch(spark, kafka_config, tmp_path, group_id, [topic])
    produce(kafka_config, topic, sample_records(1, 5, first_id=5))
    time.sleep(1.5)
    policy = HealthPolicy(stop_after=timedelta(seconds=1))
    report = lag_report(KafkaOffsets(kafka_config), group_id, [topic], BatchStore(tmp_path), policy)
    assert report.status is LagStatus.STOP, report.message()
    assert lag_check(kafka_bootstrap_servers, group_id, topic, tmp_path, "--stop-after", "1").returncode == 12


def test_group_moved_back_by_hand_is_a_rewind(
    spark, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    run_batch(spark, kafka_config, tmp_path, group_id, [topic])
    kafka = KafkaOffsets(kafka_config)
    tp = TopicPartition(topic, 0)
    kafka.commit(group_id, {tp: 10}, {tp: 4})  # an operator resets the group by hand
    report = lag_report(kafka, group_id, [topic], BatchStore(tmp_path))
    assert report.status is LagStatus.REWIND and "committed offset 4 is below 10" in report.message()
    assert lag_check(kafka_bootstrap_servers, group_id, topic, tmp_path).returncode == 13


def test_records_close_to_expiry_are_a_retention_risk(kafka_config, kafka_bootstrap_servers, group_id, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"retention-risk-{group_id[-6:]}"
    admin = AdminClient(kafka_config)
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "600000"})])[topic].result(10)
    # Records stamped 9 of the topic's 10 minutes ago: past the 80% risk line at once, and
    # deleted by a real Kafka's retention only a minute from now (the checks take seconds).
    stamp = int(time.time() * 1000) - 540_000
    produce(kafka_config, topic, sample_records(1, 4, timestamp_ms=stamp))
    report = lag_report(KafkaOffsets(kafka_config), group_id, [topic], BatchStore(tmp_path))
    assert report.status is LagStatus.RETENTION_RISK, report.message()
    assert lag_check(kafka_bootstrap_servers, group_id, topic, tmp_path).returncode == 14


def test_lag_command_prints_a_table_and_bad_flags_are_one_line(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 6))
    result = cli("lag", "--bootstrap-servers", kafka_bootstrap_servers, "--group", group_id, "--topic", topic)
    report = last_json(result)
    assert report["total_lag"] == 6 and [p["lag"] for p in report["partitions"]] == [3, 3]
    assert "oldest unconsumed" in result.stdout and "note: no --output" in result.stdout
    bad = cli(
        "lag", "--bootstrap-servers", kafka_bootstrap_servers, "--group", group_id, "--topic", topic, "--window", "0"
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--window" in bad.stderr


def test_lag_uses_the_output_log_where_the_group_has_no_offsets(
    spark, kafka_config, kafka_connection, new_topic, group_id, tmp_path
):
    from confluent_kafka.admin import AdminClient

    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    run_batch(spark, kafka_config, tmp_path, group_id, [topic])
    admin = AdminClient(kafka_config)
    admin.delete_consumer_groups([group_id], request_timeout=10)[group_id].result()  # or expired
    produce(kafka_config, topic, sample_records(2, 4, first_id=20))

    without_output = lag_report(KafkaOffsets(kafka_config), group_id, [topic])
    with_output = lag_report(KafkaOffsets(kafka_config), group_id, [topic], BatchStore(tmp_path))

    assert without_output.total_lag == 24, "the group alone says everything is unread"
    assert with_output.total_lag == 4, "the output's log says only the new records are"
    assert {p.state.committed for p in with_output.partitions} == {10}
    assert with_output.status is LagStatus.OK, with_output.message()
    sensor = KafkaLagSensor(
        task_id="wait", group_id=group_id, topics=topic, min_lag=5, output=BatchOutput(output_path=str(tmp_path))
    )
    result = sensor.poke({})
    assert not result.is_done and result.xcom_value["total_lag"] == 4, (
        f"the sensor must wait for 5 records, not fire on 24: {result.xcom_value}"
    )


def test_the_hook_hands_out_the_offsets_client_of_its_connection(kafka_connection, kafka_config, new_topic, group_id):
    from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
    from kafka_batch_provider.kafka.client import KafkaOffsets

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 3))
    hook = KafkaOffsetsHook("kafka_default", timeout=7)
    client = hook.get_conn
    assert isinstance(client, KafkaOffsets) and client is hook.get_conn, (
        f"expected get_conn to hand out one KafkaOffsets per hook, found {client!r}"
    )
    assert client.bootstrap_servers == kafka_config["bootstrap.servers"] and client.timeout == 7
    try:
        lags = client.lag(group_id, [topic])
    finally:
        hook.close()
    assert list(lags.values()) == [3], f"expected a lag of 3 records through the connection's client, found {lags}"
