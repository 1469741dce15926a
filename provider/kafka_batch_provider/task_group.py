"""One call that wires an ingestion into a DAG: lag sensor -> plan -> Spark write -> commit -> lag health."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import TaskGroup

from kafka_batch_provider.core.file_sizing import DEFAULT_TARGET_FILE_MB
from kafka_batch_provider.core.write_options import DEFAULT_READER
from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
from kafka_batch_provider.operators.health import KafkaLagHealthOperator
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator
from kafka_batch_provider.operators.spark_connect import KafkaSparkConnectBatchOperator
from kafka_batch_provider.sensors.lag import KafkaLagSensor
from kafka_batch_provider.spark.submit import DEFAULT_APPLICATION


def kafka_batch_ingest_group(
    *,
    topics: Sequence[str] | str | None = None,
    consumer_group: str,
    output: BatchOutput,
    topic_pattern: str | None = None,
    new_topic_start: str = "earliest",
    max_tasks: int | None = None,
    group_id: str = "kafka_ingest",
    kafka_config_id: str = "kafka_default",
    spark_conn_id: str = "spark_default",
    spark_connect_conn_id: str | None = None,
    on_group_mismatch: str = "fail",
    adopt_group: bool = False,
    partitions: Sequence[int] | str | None = None,
    new_partitions: str = "earliest",
    on_data_loss: str = "fail",
    max_records_per_partition: int | None = None,
    max_records: int | None = None,
    replay_output_path: str | None = None,
    replay_table: str | None = None,
    reader: str = DEFAULT_READER,
    value_format: str = "bytes",
    value_schema: str | None = None,
    value_subject: str | None = None,
    value_schema_version: int | None = None,
    key_format: str = "bytes",
    key_subject: str | None = None,
    key_schema_version: int | None = None,
    keep_raw_value: bool = False,
    schema_registry_conn_id: str | None = None,
    on_bad_record: str = "fail",
    dead_letter_share: float = 0.01,
    target_file_mb: int = DEFAULT_TARGET_FILE_MB,
    spark_conf: Mapping[str, Any] | None = None,
    application: str = DEFAULT_APPLICATION,
    wait_for_data: bool = True,
    min_lag: int = 1,
    max_data_age: timedelta | None = timedelta(hours=1),
    sensor_timeout: timedelta = timedelta(minutes=10),
    sensor_poke_interval: timedelta = timedelta(minutes=1),
    sensor_mode: str = "reschedule",
    deferrable: bool = False,
    check_health: bool = True,
    health_window: int = 5,
    stop_after: timedelta | None = timedelta(minutes=45),
    retries: int = 2,
    retry_delay: timedelta = timedelta(minutes=2),
    bootstrap_servers: str | None = None,
    emit_asset_events: bool = True,
    emit_empty_batches: bool = False,
    **task_kwargs: Any,
) -> TaskGroup:
    """Create the task group ``<group_id>``: ``wait_for_data`` -> ``plan`` -> ``spark_write``
    -> ``commit`` -> ``lag_health``.

    Call it inside a ``with DAG(...)`` block. ``output`` is one
    :class:`~kafka_batch_provider.operators.output.BatchOutput`, handed to every task:
    ``output_format`` ``parquet`` (default), ``delta`` (the table at ``output_path``, a local
    path or a URI such as ``s3://bucket/lake``) or ``iceberg`` (``table``, ``NAMESPACE.NAME``,
    in the catalog whose properties are the extra of ``catalog_conn_id``), ``partition_by="date"``
    for tables, ``storage_conn_id`` for the files' ``aws`` / ``google_cloud_platform`` / ``wasb``
    connection (default: the filesystem's own credentials). ``topics``, ``consumer_group`` and
    the output's format, path, table and partitioning may be Jinja templates.
    ``topic_pattern`` instead of ``topics`` ingests every topic the regular expression matches at
    each run (a new one starts as ``new_topic_start`` says); with ``{topic}`` in the output's path
    or table each topic goes to its own table, in one Spark job, with one asset event per table
    (:mod:`~kafka_batch_provider.operators.tables`). ``max_tasks`` bounds the Spark job's tasks.
    ``on_group_mismatch`` says what the
    plan step does when the group disagrees with the output's offset log; ``adopt_group`` lets a
    new output start from a group another output committed (refused otherwise: a group feeds one output). The sensor
    (reschedule mode, soft fail) skips the run when fewer than ``min_lag`` records arrive
    within ``sensor_timeout`` and nothing has waited longer than ``max_data_age``. The health
    check fails on STALL, STOP, REWIND, RETENTION_RISK and DATA_LOSS (STOP after ``stop_after``
    without a commit while lag > 0).
    ``spark_write`` writes files of about ``target_file_mb`` (a small batch: one file per
    partition-date) and runs spark-submit through the ``spark`` connection ``spark_conn_id``, or,
    when ``spark_connect_conn_id`` names a ``spark_connect`` connection, sends the batch to
    that Spark Connect server (no JVM start per batch; ``spark_conf`` and ``application``
    then do not apply: the server has its own settings).
    ``value_format="avro"`` (or ``protobuf``, ``json-schema``) turns the values' fields into typed
    columns: the plan pins the reader schema (the latest version of ``value_subject``, default ``<topic>-value``, or
    ``value_schema_version``) from the ``schema_registry`` connection ``schema_registry_conn_id``;
    ``keep_raw_value`` keeps the bytes as well; ``on_bad_record="dead-letter"`` sets records that
    cannot be decoded aside as the batch's dead letters (the health check says DEAD_LETTERS when
    more than ``dead_letter_share`` of a partition's records in the newest batch were).
    ``key_format`` reads the keys the same way (``string`` adds ``key_string``; a registry format
    turns ``key`` into the decoded key, pinned from ``key_subject``, default ``<topic>-key``, or
    ``key_schema_version``).
    Every task retries ``retries`` times: a retried Spark task replays the same plan, and a
    failed run's plan is picked up by the next run. Extra keyword arguments go to every task.

    Assets (``emit_asset_events``, default on): each committed batch is an asset event on the
    output's asset (``s3://bucket/path``, ``file:///path``, ``iceberg://catalog/ns/table``), added
    by the commit task (a backfill run's replay: by ``spark_write``, on the replay output's asset)
    through the alias ``kafka-batch:<consumer_group>``, with the batch's facts in its extra; a
    batch that wrote nothing emits none unless ``emit_empty_batches``. With ``bootstrap_servers``
    (the Kafka connection is not opened when the DAG is parsed) the topics are the plan task's
    inlets, ``kafka://host:port/topic``.
    """
    from kafka_batch_provider.operators.assets import batch_alias, topic_assets

    templated_group = "{{" in consumer_group
    outlets = [batch_alias(group_id if templated_group else consumer_group)] if emit_asset_events else []
    common = {"retries": retries, "retry_delay": retry_delay, **task_kwargs}
    common = {**common, "output": output}  # every task gets the one output value
    with TaskGroup(group_id=group_id, tooltip=f"Kafka -> {output.table or output.output_path}") as group:
        sensor = None
        if wait_for_data:
            sensor = KafkaLagSensor(
                task_id="wait_for_data",
                group_id=consumer_group,
                topics=topics,
                topic_pattern=topic_pattern,
                kafka_config_id=kafka_config_id,
                min_lag=min_lag,
                max_data_age=max_data_age,
                timeout=sensor_timeout.total_seconds(),
                poke_interval=sensor_poke_interval.total_seconds(),
                mode=sensor_mode,
                deferrable=deferrable,
                soft_fail=True,
                **common,
            )
        plan = KafkaOffsetPlanOperator(
            task_id="plan",
            topics=topics,
            topic_pattern=topic_pattern,
            group_id=consumer_group,
            kafka_config_id=kafka_config_id,
            partitions=partitions,
            new_partitions=new_partitions,
            new_topic_start=new_topic_start,
            on_data_loss=on_data_loss,
            max_records_per_partition=max_records_per_partition,
            max_records=max_records,
            replay_output_path=replay_output_path,
            replay_table=replay_table,
            on_group_mismatch=on_group_mismatch,
            adopt_group=adopt_group,
            value_format=value_format,
            value_subject=value_subject,
            value_schema_version=value_schema_version,
            key_format=key_format,
            key_subject=key_subject,
            key_schema_version=key_schema_version,
            schema_registry_conn_id=schema_registry_conn_id,
            inlets=topic_assets(bootstrap_servers, topics) if emit_asset_events and topics is not None else [],
            outlets=outlets,  # a batch whose commit this plan finishes is announced here
            emit_empty_batches=emit_empty_batches,
            **common,
        )
        spark_step = {
            "task_id": "spark_write",
            "plan_task_id": plan.task_id,
            "kafka_config_id": kafka_config_id,
            "reader": reader,
            "value_format": value_format,
            "value_schema": value_schema,
            "key_format": key_format,
            "keep_raw_value": keep_raw_value,
            "schema_registry_conn_id": schema_registry_conn_id,
            "on_bad_record": on_bad_record,
            "target_file_mb": target_file_mb,
            "max_tasks": max_tasks,
            "outlets": outlets,  # a backfill run's replay is announced here (it commits no group)
            "emit_empty_batches": emit_empty_batches,
            **common,
        }
        if spark_connect_conn_id:
            write = KafkaSparkConnectBatchOperator(conn_id=spark_connect_conn_id, **spark_step)
        else:
            write = KafkaSparkBatchOperator(
                conn_id=spark_conn_id,
                conf=dict(spark_conf or {"spark.log.level": "WARN"}),
                application=application,
                **spark_step,
            )
        commit = KafkaOffsetCommitOperator(
            task_id="commit",
            plan_task_id=plan.task_id,
            kafka_config_id=kafka_config_id,
            outlets=outlets,
            emit_empty_batches=emit_empty_batches,
            **common,
        )
        steps = [plan, write, commit]
        if sensor is not None:
            steps.insert(0, sensor)
        if check_health:
            steps.append(
                KafkaLagHealthOperator(
                    task_id="lag_health",
                    group_id=consumer_group,
                    topics=topics,
                    topic_pattern=topic_pattern,
                    kafka_config_id=kafka_config_id,
                    window=health_window,
                    stop_after=stop_after,
                    dead_letter_share=dead_letter_share,
                    **common,
                )
            )
        for upstream, downstream in zip(steps, steps[1:]):
            upstream >> downstream
    return group
