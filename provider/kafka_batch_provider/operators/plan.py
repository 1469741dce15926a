"""Plan operators: the first task of an ingestion (incremental) or of a replay (backfill)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from airflow.sdk import BaseOperator

from kafka_batch_provider.core.params import parse_bool
from kafka_batch_provider.core.planning import DataLossPolicy, NewPartitionPolicy, PlanPolicy
from kafka_batch_provider.core.reader_schema import check_schema_choice
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.topic_patterns import topics_or_pattern
from kafka_batch_provider.core.validation import check_group_id, check_topics, positive_seconds
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.operators.assets import emit_batch_event
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.lineage import BatchFacts, BatchLineage, plan_task_facts
from kafka_batch_provider.operators.output import (
    OUTPUT_TEMPLATE_FIELDS,
    BatchOutput,
    TemplatedOutput,
    is_template,
    open_output,
    replay_output_for,
)
from kafka_batch_provider.operators.runs import BACKFILL_RUN_TYPE, is_backfill, run_type_of
from kafka_batch_provider.operators.xcom import as_int_list, as_list, plan_xcom
from kafka_batch_provider.steps.lag import topics_to_watch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.replay import plan_replay_batch

__all__ = [
    "BACKFILL_RUN_TYPE",
    "KafkaOffsetPlanOperator",
    "KafkaReplayPlanOperator",
    "replay_output_for",  # lives in operators/output.py now; kept importable from here
    "run_type_of",  # lives in operators/runs.py now, with BACKFILL_RUN_TYPE; kept importable from here
]


class ValueSchemaChoice:
    """What a plan operator pins for values (and keys) in a schema registry format
    (``value_format='avro'``, ``key_format='avro'``): the reader schema of ``value_subject``
    (default ``<topic>-value``) at ``value_schema_version`` (default: the latest when the batch is
    planned), and of ``key_subject`` (``<topic>-key``) at ``key_schema_version``, from the
    ``schema_registry`` connection ``schema_registry_conn_id``. Checked when the DAG is parsed."""

    def keep_value_schema_choice(
        self,
        value_format: str,
        value_subject: str | None,
        value_schema_version: int | None,
        schema_registry_conn_id: str | None,
        key_format: str = "bytes",
        key_subject: str | None = None,
        key_schema_version: int | None = None,
    ) -> None:
        from kafka_batch_provider.core.write_options import check_key_format, check_value_format
        from kafka_batch_provider.hooks.schema_registry import registry_conn_for

        check_value_format(value_format)
        check_key_format(key_format, value_format)
        check_schema_choice(value_format, value_subject, value_schema_version)
        check_schema_choice(key_format, key_subject, key_schema_version, "key")
        self.value_format = value_format
        self.value_subject = value_subject
        self.value_schema_version = value_schema_version
        self.key_format = key_format
        self.key_subject = key_subject
        self.key_schema_version = key_schema_version
        self.schema_registry_conn_id = registry_conn_for(value_format, schema_registry_conn_id, key_format)

    @property
    def formats(self) -> dict[str, str]:
        """The value and key formats the batch is read with (a repeated replay must match them)."""
        return {"value_format": self.value_format, "key_format": self.key_format}

    def reader_schema_request(self, wait: float) -> Any:
        """What pins the batch's reader schemas (``None`` when neither values nor keys are in a registry format)."""
        if self.schema_registry_conn_id is None:  # only a registry format keeps one
            return None
        from kafka_batch_provider.core.reader_schema import REGISTRY_FORMATS
        from kafka_batch_provider.hooks.schema_registry import registry_settings
        from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest, ReaderSchemas

        settings = registry_settings(self.schema_registry_conn_id)
        return ReaderSchemas.of(
            *(
                ReaderSchemaRequest(fmt, settings, subject, version, wait, part)
                for part, fmt, subject, version in (
                    ("value", self.value_format, self.value_subject, self.value_schema_version),
                    ("key", self.key_format, self.key_subject, self.key_schema_version),
                )
                if fmt in REGISTRY_FORMATS
            )
        )


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class KafkaOffsetPlanOperator(ValueSchemaChoice, TemplatedOutput, BatchLineage, BaseOperator):
    """Reconcile the group with the output's offset log, then plan the next batch and persist it.

    Exactly as ``kafka-batch plan``: resumes from the output where the group lost its offsets,
    finishes a written batch whose Kafka commit did not happen, replays an unwritten pending
    plan, refuses a group moved by someone else (unless ``on_group_mismatch`` says otherwise).
    Pushes a small XCom: batch id, plan path, ranges, counts.

    A DAG run of type *backfill* (``airflow backfill create``) does not plan from the group:
    it maps its data interval to offsets with ``offsets_for_times`` and plans a replay into
    ``replay_output_path`` (``replay_table`` for Iceberg); the commit task then leaves the group alone.

    :param topics: topics to ingest (a list, or a comma-separated string from a template).
    :param topic_pattern: instead of ``topics``, a regular expression every topic's whole name is
        matched with at each plan (a new topic is in the next batch; Kafka's own ``__`` topics never
        match); a backfill run replays the topics it matches then.
    :param new_topic_start: where a topic the pattern meets after the output's first batch starts:
        ``earliest`` (default) or ``latest``; the log entry records it.
    :param group_id: consumer group whose committed offsets are the checkpoint.
    :param output: the :class:`~kafka_batch_provider.operators.output.BatchOutput`: ``parquet``
        (a folder of batches at ``output_path``: a local path or a URI such as ``s3://``,
        ``gs://``, ``abfs://``), ``delta`` (the table at ``output_path``) or ``iceberg``
        (``table`` in the catalog of ``catalog_conn_id``, whose extra holds the pyiceberg
        catalog properties), with ``partition_by="date"`` for tables and ``storage_conn_id``
        (an ``aws``, ``google_cloud_platform`` or ``wasb`` connection) for the files; the
        downstream tasks take the format and location from this task's XCom.
    :param kafka_config_id: a ``kafka`` connection (extra = librdkafka config JSON).
    :param on_group_mismatch: ``fail`` (default), ``output`` (resume from the output's log) or
        ``group`` (accept a group ahead of the log; the skipped offsets become a gap).
    :param adopt_group: a new output may start from a group another output committed (refused
        otherwise: a group feeds one output); its first log entry records the adoption.
    :param partitions: optional subset of partitions.
    :param new_partitions: ``earliest`` (default), ``latest`` or ``error``.
    :param on_data_loss: ``fail`` (default) or ``earliest`` (skip and record the gap).
    :param max_records_per_partition: bound per partition and batch (offsets).
    :param max_records: bound per batch (offsets), shared fairly between partitions.
    :param replay_output_path: output of backfill runs (default: ``<output_path>_replay``).
    :param replay_table: the Iceberg table of backfill runs (default: ``<table>_replay``).
    :param kafka_timeout: seconds to wait for any one broker request.
    :param value_format: the values' format; ``avro``, ``protobuf`` or ``json-schema`` (with
        ``schema_registry_conn_id``, a ``schema_registry`` connection) pins the batch's reader
        schema in its plan: the latest version of ``value_subject`` (default ``<topic>-value``)
        or ``value_schema_version``.
    :param key_format: the keys' format: ``bytes`` (default), ``string``, or a registry format,
        whose reader schema is pinned the same way (``key_subject``, default ``<topic>-key``;
        ``key_schema_version``).

    With an :class:`~airflow.sdk.AssetAlias` among its ``outlets`` (the task group adds the
    commit task's), a batch whose Kafka commit this task finishes (its commit task failed on every
    retry) becomes the asset event its commit would have made (``emit_empty_batches`` as there).
    """

    template_fields: Sequence[str] = (
        "topics",
        "topic_pattern",
        "group_id",
        *OUTPUT_TEMPLATE_FIELDS,
        "partitions",
        "replay_output_path",
        "replay_table",
    )
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        topics: Sequence[str] | str | None = None,
        group_id: str,
        output: BatchOutput,
        topic_pattern: str | None = None,
        kafka_config_id: str = "kafka_default",
        partitions: Sequence[int] | str | None = None,
        new_partitions: str = NewPartitionPolicy.EARLIEST.value,
        new_topic_start: str = NewPartitionPolicy.EARLIEST.value,
        on_data_loss: str = DataLossPolicy.FAIL.value,
        max_records_per_partition: int | None = None,
        max_records: int | None = None,
        replay_output_path: str | None = None,
        replay_table: str | None = None,
        on_group_mismatch: str = GroupMismatchPolicy.FAIL.value,
        kafka_timeout: float = 30.0,
        value_format: str = "bytes",
        value_subject: str | None = None,
        value_schema_version: int | None = None,
        schema_registry_conn_id: str | None = None,
        key_format: str = "bytes",
        key_subject: str | None = None,
        key_schema_version: int | None = None,
        emit_empty_batches: bool = False,
        adopt_group: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.keep_value_schema_choice(
            value_format,
            value_subject,
            value_schema_version,
            schema_registry_conn_id,
            key_format,
            key_subject,
            key_schema_version,
        )
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.group_id = group_id
        self.emit_empty_batches = emit_empty_batches
        self.adopt_group = parse_bool("adopt_group", adopt_group)
        self.keep_output(output)
        self.kafka_config_id = kafka_config_id
        self.on_group_mismatch = GroupMismatchPolicy(on_group_mismatch)
        self.partitions = partitions
        self.policy = PlanPolicy(
            new_partitions=NewPartitionPolicy(new_partitions),
            new_topic_start=NewPartitionPolicy(new_topic_start),
            on_data_loss=DataLossPolicy(on_data_loss),
            max_records_per_partition=max_records_per_partition,
            max_records=max_records,
        )
        self.replay_output_path = replay_output_path
        self.replay_table = replay_table
        self.kafka_timeout = positive_seconds("kafka_timeout", kafka_timeout)
        # Checked here, so a bad combination is a DAG import error rather than a failed run.
        topics_or_pattern(topics, topic_pattern)
        if topics is not None and not is_template(topics):
            check_topics(as_list(topics))
        if not is_template(group_id):
            check_group_id(group_id)
        output = self.batch_output
        output.check()
        replay_args = (self.output_format, self.output_path, self.table, self.replay_output_path, self.replay_table)
        if not any(is_template(v) for v in replay_args):
            output.replay(self.replay_output_path, self.replay_table).check()

    def output_of_run(self, context: Any) -> BatchOutput:
        """This run's output: the replay output for a backfill run (it must not touch the dataset)."""
        output = self.batch_output
        if is_backfill(context):
            return output.replay(self.replay_output_path, self.replay_table)
        return output

    def execute(self, context: Any) -> dict[str, Any]:
        with task_errors():  # the connection's config is checked here: a bad one fails at once
            kafka = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout).get_conn
            topics = check_topics(as_list(self.topics)) if self.topic_pattern is None else []
            partitions = as_int_list(self.partitions)
            check_group_id(self.group_id)
            request = self.reader_schema_request(self.kafka_timeout)  # before an Iceberg table may be created
            if self.batch_output.spec().per_topic:
                return self.plan_tables(context, kafka, topics, request)
            spec, store = open_output(self.output_of_run(context), create=True)
            if is_backfill(context):
                if self.topic_pattern is not None:  # the topics it matches now
                    topics = topics_to_watch(kafka, [], self.topic_pattern)
                start, end = context["data_interval_start"], context["data_interval_end"]
                self.log.info("backfill run: replaying %s .. %s of %s into %s", start, end, topics, store.root)
                outcome = plan_replay_batch(
                    kafka,
                    store,
                    topics,
                    partitions=partitions,
                    start_ms=epoch_ms(start),
                    end_ms=epoch_ms(end),
                    progress=self.log.info,
                    reader_schema=request,
                    on_data_loss=self.policy.on_data_loss,  # an interval retention ate into: as for a batch
                    formats=self.formats,
                )
            else:
                outcome = plan_batch(
                    kafka,
                    store,
                    self.group_id,
                    topics,
                    self.policy,
                    partitions,
                    progress=self.log.info,
                    on_group_mismatch=self.on_group_mismatch,
                    reader_schema=request,
                    adopt_group=self.adopt_group,
                    topic_pattern=self.topic_pattern,
                )
            # A batch whose commit this plan step finished is announced here, as its commit task
            # would have announced it (that task failed on every retry).
            events = [
                emit_batch_event(
                    self, context, entry, spec.describe(), False, self.emit_empty_batches, spec.catalog_properties
                )
                for entry in outcome.repaired_entries
            ]
        self.lineage_summary = plan_xcom(outcome, spec, store)
        if any(events):
            self.lineage_summary["repaired_events"] = [e for e in events if e]
        return self.lineage_summary

    def plan_tables(self, context: Any, kafka: Any, topics: list[str], request: Any) -> dict[str, Any]:
        """A table per topic (:mod:`~kafka_batch_provider.operators.tables`): each topic planned into its own."""
        from kafka_batch_provider.operators.tables import tables_xcom
        from kafka_batch_provider.steps.tables import plan_tables

        if is_backfill(context):
            raise ConfigError(
                "a backfill run replays into one output; a table per topic ({topic} in the output) is ingested by "
                "scheduled and manual runs only"
            )
        spec = self.batch_output.spec()
        planned = plan_tables(
            kafka,
            spec,
            self.group_id,
            topics,
            self.policy,
            self.log.info,
            self.on_group_mismatch,
            request,
            adopt_group=self.adopt_group,
            topic_pattern=self.topic_pattern,
            partitions=as_int_list(self.partitions),
        )
        for table in planned.tables:  # batches whose commit this plan finished: announced as theirs would be
            for entry in table.outcome.repaired_entries if table.outcome else []:
                emit_batch_event(
                    self, context, entry, table.spec.describe(), False, self.emit_empty_batches,
                    table.spec.catalog_properties,
                )  # fmt: skip
        self.lineage_summary = tables_xcom(planned, spec)
        return self.lineage_summary

    def batch_facts(self, task_instance: Any) -> BatchFacts:
        """For OpenLineage (:mod:`~kafka_batch_provider.operators.lineage`): the topics and the plan."""
        return plan_task_facts(self, task_instance)


class KafkaReplayPlanOperator(ValueSchemaChoice, TemplatedOutput, BatchLineage, BaseOperator):
    """Plan a replay of explicit offsets or a time range (the manual backfill); never commits.

    Give either ``start_offsets``/``end_offsets`` (``{partition: offset}``; the partitions
    named there are replayed unless ``partitions`` is given, and a chosen partition without a
    start or end starts at the log start or ends at the log end) or ``start_time``/``end_time``
    (ISO 8601 or datetimes; end exclusive, not in the future) or ``whole_topic=True`` (every
    offset of the chosen partitions: a replay without a range is refused rather than read
    everything). Semantic errors (end before start, unknown topic, offsets beyond the end)
    fail the task with one line, not retried.

    :param dry_run: plan and validate only; the plan is shown in the log and XCom and the
        Spark task is skipped.
    :param on_data_loss: the range reaches offsets already deleted (retention, DeleteRecords):
        ``fail`` (default, one line) or ``earliest`` (replay what is left; the deleted offsets are
        the batch's gaps, in its log entry, XCom and asset event).

    ``output`` is as for :class:`KafkaOffsetPlanOperator` (the replay writes there), and so are
    ``value_format``, ``value_subject``, ``value_schema_version`` and ``schema_registry_conn_id``.
    """

    template_fields: Sequence[str] = (
        "topics",
        *OUTPUT_TEMPLATE_FIELDS,
        "partitions",
        "start_offsets",
        "end_offsets",
        "start_time",
        "end_time",
        "whole_topic",
        "dry_run",
    )
    ui_color = "#fbf1e8"

    def __init__(
        self,
        *,
        topics: Sequence[str] | str,
        output: BatchOutput,
        kafka_config_id: str = "kafka_default",
        partitions: Sequence[int] | str | None = None,
        start_offsets: dict[Any, int] | None = None,
        end_offsets: dict[Any, int] | None = None,
        start_time: str | datetime | None = None,
        end_time: str | datetime | None = None,
        whole_topic: bool | str = False,
        dry_run: bool | str = False,
        kafka_timeout: float = 30.0,
        value_format: str = "bytes",
        value_subject: str | None = None,
        value_schema_version: int | None = None,
        schema_registry_conn_id: str | None = None,
        key_format: str = "bytes",
        key_subject: str | None = None,
        key_schema_version: int | None = None,
        on_data_loss: str = DataLossPolicy.FAIL.value,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.on_data_loss = DataLossPolicy(on_data_loss)
        self.keep_value_schema_choice(
            value_format,
            value_subject,
            value_schema_version,
            schema_registry_conn_id,
            key_format,
            key_subject,
            key_schema_version,
        )
        self.topics = topics
        self.keep_output(output)
        self.kafka_config_id = kafka_config_id
        self.partitions = partitions
        self.start_offsets = start_offsets
        self.end_offsets = end_offsets
        self.start_time = start_time
        self.end_time = end_time
        self.whole_topic = whole_topic
        self.dry_run = dry_run
        self.kafka_timeout = positive_seconds("kafka_timeout", kafka_timeout)
        # Checked here, so bad arguments are a DAG import error; templates are checked when the task runs.
        self.batch_output.check()
        if not is_template(topics):
            check_topics(as_list(topics))
        if not any(is_template(v) for v in (start_offsets, end_offsets, start_time, end_time, whole_topic)):
            self.replay_range(refuse_future=False)

    def replay_range(self, refuse_future: bool = True) -> dict[str, Any]:
        """The range arguments, parsed and checked (one way of choosing it, complete, in the past)."""
        from kafka_batch_provider.core.params import parse_bool, parse_offsets, parse_time
        from kafka_batch_provider.steps.replay import check_replay_range

        chosen = {
            "start_offsets": parse_offsets("start_offsets", self.start_offsets),
            "end_offsets": parse_offsets("end_offsets", self.end_offsets),
            "start_ms": parse_time("start_time", self.start_time),
            "end_ms": parse_time("end_time", self.end_time),
            "whole_topic": parse_bool("whole_topic", self.whole_topic),
        }
        check_replay_range(**chosen, refuse_future=refuse_future)
        return chosen

    def execute(self, context: Any) -> dict[str, Any]:

        with task_errors():
            dry_run = parse_bool("dry_run", self.dry_run)
            topics = check_topics(as_list(self.topics))
            chosen = self.replay_range()
            kafka = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout).get_conn
            # A dry run creates no Iceberg table: replaying into a new one is planned for real only.
            request = self.reader_schema_request(self.kafka_timeout)  # before an Iceberg table may be created
            spec, store = open_output(self.batch_output, create=not dry_run)
            outcome = plan_replay_batch(
                kafka,
                store,
                topics,
                partitions=as_int_list(self.partitions),
                dry_run=dry_run,
                progress=self.log.info,
                reader_schema=request,
                on_data_loss=self.on_data_loss,
                formats=self.formats,
                **chosen,
            )
        self.lineage_summary = plan_xcom(outcome, spec, store, dry_run=dry_run)
        return self.lineage_summary

    def batch_facts(self, task_instance: Any) -> BatchFacts:
        """For OpenLineage (:mod:`~kafka_batch_provider.operators.lineage`): the topics and the plan."""
        return plan_task_facts(self, task_instance)
