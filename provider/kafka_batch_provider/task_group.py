"""One call that wires an ingestion into a DAG: plan -> Spark write -> commit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping, Sequence

from airflow.sdk import TaskGroup

from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator
from kafka_batch_provider.spark.submit import DEFAULT_APPLICATION


def kafka_batch_ingest_group(
    *,
    topics: Sequence[str] | str,
    consumer_group: str,
    output_path: str,
    group_id: str = "kafka_ingest",
    kafka_config_id: str = "kafka_default",
    spark_conn_id: str = "spark_default",
    partitions: Sequence[int] | str | None = None,
    new_partitions: str = "earliest",
    on_data_loss: str = "fail",
    max_records_per_partition: int | None = None,
    max_records: int | None = None,
    replay_output_path: str | None = None,
    reader: str = "python",
    value_format: str = "bytes",
    value_schema: str | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    application: str = DEFAULT_APPLICATION,
    retries: int = 2,
    retry_delay: timedelta = timedelta(minutes=2),
    **task_kwargs: Any,
) -> TaskGroup:
    """Create the task group ``<group_id>`` with tasks ``plan``, ``spark_write`` and ``commit``.

    Call it inside a ``with DAG(...)`` block. ``topics``, ``consumer_group`` and
    ``output_path`` may be Jinja templates. Every task retries ``retries`` times: a retried
    Spark task replays the same plan, and a failed run's plan is picked up by the next run.
    Extra keyword arguments go to every task (``pool``, ``queue``, ...).
    """
    common = {"retries": retries, "retry_delay": retry_delay, **task_kwargs}
    with TaskGroup(group_id=group_id, tooltip=f"Kafka -> {output_path}") as group:
        plan = KafkaOffsetPlanOperator(
            task_id="plan",
            topics=topics,
            group_id=consumer_group,
            output_path=output_path,
            kafka_config_id=kafka_config_id,
            partitions=partitions,
            new_partitions=new_partitions,
            on_data_loss=on_data_loss,
            max_records_per_partition=max_records_per_partition,
            max_records=max_records,
            replay_output_path=replay_output_path,
            **common,
        )
        write = KafkaSparkBatchOperator(
            task_id="spark_write",
            plan_task_id=plan.task_id,
            kafka_config_id=kafka_config_id,
            conn_id=spark_conn_id,
            reader=reader,
            value_format=value_format,
            value_schema=value_schema,
            conf=dict(spark_conf or {"spark.log.level": "WARN"}),
            application=application,
            **common,
        )
        commit = KafkaOffsetCommitOperator(
            task_id="commit", plan_task_id=plan.task_id, kafka_config_id=kafka_config_id, **common
        )
        plan >> write >> commit
    return group
