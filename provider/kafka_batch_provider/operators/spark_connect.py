"""``KafkaSparkConnectBatchOperator``: the read and write steps on a Spark Connect server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from kafka_batch_provider.core.file_sizing import DEFAULT_TARGET_FILE_MB
from kafka_batch_provider.core.write_options import (
    DEFAULT_MAX_OFFSETS_PER_TASK,
    DEFAULT_READER,
    DEFAULT_STALL_TIMEOUT,
    WriteOptions,
    check_table_per_topic,
)
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.hooks.schema_registry import registry_conn_for, registry_settings
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.lineage import BatchFacts, BatchLineage, planned_task_facts
from kafka_batch_provider.operators.output import BatchOutput, connections_of
from kafka_batch_provider.operators.spark import (
    batch_result,
    planned_batch,
    shippable,
    tables_to_write,
    written_tables,
)
from kafka_batch_provider.operators.tables import is_per_topic
from kafka_batch_provider.operators.xcom import pull_summary
from kafka_batch_provider.output.formats import open_store


class KafkaSparkConnectBatchOperator(BatchLineage, BaseOperator):
    """Write the batch planned by ``plan_task_id`` through a ``spark_connect`` connection.

    The sibling of :class:`~kafka_batch_provider.operators.spark.KafkaSparkBatchOperator` for a
    long-running Spark Connect server: this task is the driver (it checks what the tasks wrote
    and appends the batch to the output's log), the server runs the tasks, and no JVM starts
    per batch. Same plan, manifest and guarantees. The server's Python workers need this
    package (the same version); a missing one fails the task in one line. The Kafka settings
    and storage credentials reach the tasks inside the pickled reader and writer, never as a
    session conf or source option. Skips when the plan has nothing to read.

    :param plan_task_id: task id of the plan operator (inside a task group: ``group.plan``).
    :param conn_id: the ``spark_connect`` connection (apache-airflow-providers-apache-spark):
        host and port of the server, and optionally a token (``password``) and user.
    :param max_tasks: read with at most this many Spark tasks: the partitions are packed into them by
        their offsets, a large one split over several (default: as many as the files' size asks).
    :param target_file_mb: files are rolled at about this size; a small batch writes one file per
        partition-date (default 128). The other write options (``value_format``, ``keep_raw_value``, ``on_bad_record``,
        ``schema_registry_conn_id``, ...) are the spark-submit operator's.
    :param output: the same :class:`~kafka_batch_provider.operators.output.BatchOutput` as the
        plan task's: its connections open the output; the format and location come from the plan.
    """

    template_fields: Sequence[str] = ("plan_task_id",)
    ui_color = "#fdf2e0"

    def __init__(
        self,
        *,
        plan_task_id: str,
        conn_id: str = "spark_connect_default",
        kafka_config_id: str = "kafka_default",
        reader: str = DEFAULT_READER,
        value_format: str = "bytes",
        value_schema: str | None = None,
        max_offsets_per_task: int = DEFAULT_MAX_OFFSETS_PER_TASK,
        max_tasks: int | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        target_file_mb: int = DEFAULT_TARGET_FILE_MB,
        output: BatchOutput | None = None,
        keep_raw_value: bool = False,
        schema_registry_conn_id: str | None = None,
        on_bad_record: str = "fail",
        key_format: str = "bytes",
        emit_empty_batches: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id
        self.conn_id = conn_id
        self.kafka_config_id = kafka_config_id
        self.batch_output = connections_of(output)
        # Checked here, so a bad option is a DAG import error rather than a failed run.
        self.write_options = WriteOptions(
            reader,
            value_format,
            value_schema,
            max_offsets_per_task,
            stall_timeout,
            target_file_mb,
            keep_raw_value,
            on_bad_record,
            key_format,
            max_tasks,
        )
        if self.batch_output.per_topic:  # a DAG import error, not a failed run after planning
            check_table_per_topic(self.write_options)
        self.schema_registry_conn_id = registry_conn_for(value_format, schema_registry_conn_id, key_format)
        self.emit_empty_batches = emit_empty_batches

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from kafka_batch_provider.spark.connect import remote_address, write_through_connect

        self._running: tuple[str, str] | None = None
        if is_per_topic(pull_summary(context, self.plan_task_id, "write")):
            return self.write_tables(context)
        _, spec, plan = planned_batch(context, self.plan_task_id, self.batch_output)
        with task_errors():
            kafka_config = shippable(KafkaOffsetsHook(self.kafka_config_id).kafka_config)
            registry = registry_settings(self.schema_registry_conn_id)
            remote = SparkConnectHook(self.conn_id).get_connection_url()
            self.log.info(
                "batch %s: %d range(s), up to %d offsets, through Spark Connect at %s",
                plan.batch_id,
                len(plan.readable_ranges),
                plan.planned_offsets,
                remote_address(remote),  # without the token
            )
            self._running = (remote, plan.batch_id)
            self._session_id: str | None = None
            try:
                write_through_connect(
                    remote,
                    plan,
                    open_store(spec, create=False),
                    kafka_config,
                    self.write_options,
                    self.log.info,
                    on_session=self._remember_session,
                    registry=registry,
                )
            finally:
                self._running = None
        with task_errors():
            return batch_result(spec, plan, self, context)

    def write_tables(self, context: Any) -> dict[str, Any]:
        """A table per topic: every table with records in one job on the server."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from kafka_batch_provider.spark.connect import remote_address, run_on_connect
        from kafka_batch_provider.spark.ingest import stage_tables_with
        from kafka_batch_provider.steps.tables import write_tables

        _, _, tables, kafka_config, registry = tables_to_write(self, context)
        with task_errors():
            remote = SparkConnectHook(self.conn_id).get_connection_url()
            name = f"{len(tables)}-tables-{tables[0].plan.batch_id}"
            self.log.info("%d table(s) in one job through Spark Connect at %s", len(tables), remote_address(remote))

            def job(spark: Any) -> Any:
                stage = stage_tables_with(spark, registry)
                return write_tables(tables, kafka_config, stage, self.write_options, self.log.info)

            self._running, self._session_id = (remote, name), None
            try:
                run_on_connect(remote, name, job, on_session=self._remember_session)
            finally:
                self._running = None
            return written_tables(tables)

    def batch_facts(self, task_instance: Any) -> BatchFacts:
        """For OpenLineage (:mod:`~kafka_batch_provider.operators.lineage`): the plan, then the written entry."""
        return planned_task_facts(self, task_instance, wrote=True)

    def _remember_session(self, session_id: str) -> None:
        self._session_id = session_id

    def on_kill(self) -> None:
        """A killed task stops its Spark job on the server, so a retry does not race it: in the
        session the batch runs in, even when the shared session's time bucket has moved on."""
        running = getattr(self, "_running", None)
        if running:
            from kafka_batch_provider.spark.connect import interrupt_batch

            interrupt_batch(*running, session_id=getattr(self, "_session_id", None))
