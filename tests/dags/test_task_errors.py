"""A bad Kafka connection fails a task at once (no retry can fix it), in every task that reads it,
and the deferred lag sensor raises the class its trigger met (real Airflow connections from
AIRFLOW_CONN_* variables; no broker is contacted)."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowFailException

from kafka_batch_provider.errors import ConfigError, StorageAccessError
from kafka_batch_provider.operators.output import BatchOutput

pytestmark = pytest.mark.check  # in make check's tier

BAD = {"bootstrap.servers": "127.0.0.1:1", "enable.auto.commit": "true"}


def build(kind: str, output: BatchOutput):
    from kafka_batch_provider.operators.health import KafkaLagHealthOperator
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator

    if kind == "plan":
        return KafkaOffsetPlanOperator(task_id="plan", topics="t", group_id="g", output=output, kafka_config_id="bad")
    return KafkaLagHealthOperator(task_id="health", topics="t", group_id="g", kafka_config_id="bad")


@pytest.mark.parametrize("kind", ["plan", "health"])
def test_a_refused_kafka_connection_fails_the_task_at_once(kind, monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_BAD", json.dumps({"conn_type": "kafka", "extra": BAD}))
    task = build(kind, BatchOutput(output_path=str(tmp_path / "lake")))
    with pytest.raises(Exception) as raised:
        task.execute({})
    assert isinstance(raised.value, AirflowFailException), (
        f"expected AirflowFailException (no retry) from {kind}, found {type(raised.value).__name__}: {raised.value}"
    )
    assert "enable.auto.commit" in str(raised.value), f"expected the setting named, found {raised.value}"
    assert not (tmp_path / "lake" / "_plans").exists(), "a refused task must not leave a plan behind"


@pytest.mark.parametrize("error", [ConfigError, StorageAccessError])
def test_the_deferred_sensor_raises_the_class_its_trigger_met(error):
    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    sensor = KafkaLagSensor(task_id="wait", group_id="g", topics="t")
    event = {"status": "error", "message": "refused", "error": error.__name__}
    with pytest.raises(error, match="lag sensor stopped waiting: refused"):
        sensor.execute_complete({}, event)


REGISTRY_SECRET = "registry-pw-5e1f9"


@pytest.mark.parametrize(
    "host", [f"http:/ingest:{REGISTRY_SECRET}@127.0.0.1", f"http:///ingest:{REGISTRY_SECRET}@127.0.0.1"]
)
def test_a_registry_connection_host_with_credentials_fails_the_plan_at_once_without_them(
    host, monkeypatch, tmp_path, caplog
):
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator

    connection = {"conn_type": "schema_registry", "host": host, "port": 8081}
    monkeypatch.setenv("AIRFLOW_CONN_REGISTRY", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA", json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "x:1"}}))
    task = KafkaOffsetPlanOperator(
        task_id="plan",
        topics="t",
        group_id="g",
        output=BatchOutput(output_path=str(tmp_path / "lake")),
        kafka_config_id="kafka",
        value_format="avro",
        schema_registry_conn_id="registry",
    )
    with pytest.raises(Exception) as raised:
        task.execute({})
    assert isinstance(raised.value, AirflowFailException), f"expected no retry, found {type(raised.value).__name__}"
    assert "carries credentials" in str(raised.value), f"expected the credentials refusal, found {raised.value}"
    shown = f"{raised.value}\n{caplog.text}"
    assert REGISTRY_SECRET not in shown and "ingest" not in str(raised.value), f"the credentials were echoed: {shown}"
    assert not (tmp_path / "lake" / "_plans").exists(), "a refused task must not leave a plan behind"


def test_the_lag_health_check_is_skipped_in_a_backfill_run_whatever_the_group_looks_like(tmp_path):
    # A backfill run replays an interval: a live group at STOP or STALL must not fail that good replay.
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowSkipException

    from kafka_batch_provider.operators.health import KafkaLagHealthOperator

    task = KafkaLagHealthOperator(task_id="health", group_id="g", topics="t", kafka_config_id="no-such-connection")
    with pytest.raises(AirflowSkipException, match="backfill run"):
        task.execute({"dag_run": SimpleNamespace(run_type="backfill")})
    with pytest.raises(Exception) as scheduled:  # a scheduled run does look: here, at a connection that is missing
        task.execute({"dag_run": SimpleNamespace(run_type="scheduled")})
    assert not isinstance(scheduled.value, AirflowSkipException), "only backfill runs skip the check"
