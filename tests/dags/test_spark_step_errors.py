"""A failed Spark step reaches the task log as the application's one error line, and an error
no retry can fix is not retried (real spark-submit, real broker, dag.test())."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

import pytest

from kafka_batch_provider.testing.producers import produce, sample_records

pytestmark = pytest.mark.integration

JVM_READER_LINE = (
    "the jvm reader (Spark's Java Kafka client) cannot take enable.ssl.certificate.verification=false "
    "(the Java client always verifies)"
)


def test_a_spark_step_configuration_error_fails_at_once_with_the_applications_line(
    airflow_db, kafka_bootstrap_servers, kafka_config, new_topic, monkeypatch, tmp_path, capfd
):
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk import DAG
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.plan import KafkaReplayPlanOperator
    from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        # librdkafka takes it (the plan step runs); Spark's Java client has no such setting.
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {"bootstrap.servers": kafka_bootstrap_servers, "enable.ssl.certificate.verification": "false"},
            }
        ),
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    # The JVM reader cannot take that setting: the Spark application refuses it, and a retry cannot help.
    with DAG("spark_step_errors", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        plan = KafkaReplayPlanOperator(
            task_id="plan",
            topics=topic,
            start_offsets={"0": 0},
            end_offsets={"0": 5},
            output=BatchOutput(output_path=str(tmp_path / "out")),
        )
        write = KafkaSparkBatchOperator(
            task_id="spark_write",
            plan_task_id="plan",
            reader="jvm",
            conf={"spark.log.level": "WARN"},
            retries=2,
            retry_delay=timedelta(0),
        )
        plan >> write

    # dag.test() runs DAGs the metadata DB knows: register this one as the dag-processor would.
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    dag_run = dag.test()
    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(TaskInstance.run_id == dag_run.run_id, TaskInstance.task_id == "spark_write")
        ).one()
    assert (str(ti.state), ti.try_number) == ("failed", 1), (
        f"expected the Spark step to fail at its first try (no retry for a configuration error), "
        f"found state {ti.state} at try {ti.try_number}"
    )
    logs = capfd.readouterr()
    failure = [line for line in (logs.out + logs.err).splitlines() if "AirflowFailException" in line]
    assert failure and JVM_READER_LINE in failure[-1], (
        f"expected the task's failure to be the application's line {JVM_READER_LINE!r}, found {failure[-1:]}"
    )
    assert "Cannot execute:" not in failure[-1], "the failure must not be the hook's command line and output tail"
