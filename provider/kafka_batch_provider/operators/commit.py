"""``KafkaOffsetCommitOperator``: the commit step, the last task of an ingestion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from kafka_batch_provider.core.manifest import recorded_dead_letters
from kafka_batch_provider.core.validation import positive_seconds
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.operators.assets import emit_batch_event
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.lineage import BatchFacts, BatchLineage, planned_task_facts
from kafka_batch_provider.operators.metrics import send_airflow_metrics
from kafka_batch_provider.operators.output import BatchOutput, connections_of, open_output
from kafka_batch_provider.operators.tables import announce_tables, failures_of, is_per_topic, planned_tables
from kafka_batch_provider.operators.xcom import load_plan, pull_summary
from kafka_batch_provider.steps.commit import commit_batch


class KafkaOffsetCommitOperator(BatchLineage, BaseOperator):
    """Check the batch's entry in the output's offset log and its files, then commit its end offsets.

    Synchronous and compare-and-set (the group must still be at the plan's starts); every
    partition's error is checked and the result read back. The output (format, path or
    table) comes from the plan's XCom. Skips for an empty plan, a dry
    run and replays (they never commit the group). Runs after a skipped Spark task (trigger
    rule ``none_failed``): a plan with nothing to read, e.g. a new empty partition, is
    recorded in the log here and committed. Pushes the committed offsets.

    With an :class:`~airflow.sdk.AssetAlias` among its ``outlets`` (the task group adds one), the
    committed batch becomes an asset event on the output's asset, its facts in the event's extra
    (:mod:`kafka_batch_provider.operators.assets`); a batch that wrote nothing emits none unless
    ``emit_empty_batches``.

    :param plan_task_id: task id of the plan operator.
    :param kafka_config_id: the ``kafka`` connection the plan used.
    :param output: the same :class:`~kafka_batch_provider.operators.output.BatchOutput` as the
        plan task's: its connections open the output; the format and location come from the plan.
    """

    template_fields: Sequence[str] = ("plan_task_id",)
    ui_color = "#e9f7ec"

    def __init__(
        self,
        *,
        plan_task_id: str,
        kafka_config_id: str = "kafka_default",
        output: BatchOutput | None = None,
        kafka_timeout: float = 30.0,
        trigger_rule: str = "none_failed",
        emit_empty_batches: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.emit_empty_batches = emit_empty_batches
        self.plan_task_id = plan_task_id
        self.kafka_config_id = kafka_config_id
        self.batch_output = connections_of(output)
        self.kafka_timeout = positive_seconds("kafka_timeout", kafka_timeout)

    def execute(self, context: Any) -> dict[str, Any]:
        summary = pull_summary(context, self.plan_task_id, "commit")
        if is_per_topic(summary):
            return self.commit_tables(context, summary)
        output = self.batch_output.planned(summary)
        with task_errors():
            spec, store = open_output(output, create=False)
            plan = load_plan(summary, store)
        if not plan.commits_group:
            raise AirflowSkipException(f"batch {plan.batch_id} is a {plan.mode}: the group's offsets are not touched")
        with task_errors():  # the connection's config is checked here: a bad one fails at once
            kafka = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout).get_conn
            committed = commit_batch(kafka, store, plan, progress=self.log.info)
        record = store.commit_record(plan.seq, plan.batch_id) or {}
        with task_errors():
            entry = store.entry_of(plan)
            self.lineage_entry = entry  # for OpenLineage's COMPLETE event
            if record.get("committed_by") == "plan":
                # A later run's plan task finished this commit and announced the batch (this task is
                # a cleared one of a failed run): one event per batch.
                self.log.info("batch %s was committed and announced by a later plan task: no event", plan.batch_id)
                event = None
            else:
                event = entry and emit_batch_event(
                    self, context, entry, spec.describe(), False, self.emit_empty_batches, spec.catalog_properties
                )
                if entry:
                    send_airflow_metrics(kafka, plan, entry, spec.table or spec.output or "")
        return {
            "batch_id": plan.batch_id,
            "committed": committed,
            "rows": record.get("rows", 0),
            "dead_letters": recorded_dead_letters(record),
            "asset_event": event or None,
        }

    def commit_tables(self, context: Any, summary: dict[str, Any]) -> dict[str, Any]:
        """A table per topic: every table checked, their offsets committed in one request, one asset
        event per table (:mod:`~kafka_batch_provider.operators.tables`)."""
        from kafka_batch_provider.steps.tables import commit_tables, tables_failed

        with task_errors():
            spec = self.batch_output.planned(summary).spec()
            tables = planned_tables(summary, spec, "commit", readable=False, failed_ok=True)
            kafka = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout).get_conn
            done = commit_tables(kafka, tables, progress=self.log.info)
            committed = [t for t in tables if t.topic in done.committed]
            # The committed tables are announced before the others' failures fail the task.
            events = announce_tables(self, context, kafka, spec, committed, self.emit_empty_batches)
            failures = {**failures_of(summary), **done.failures}
            if failures:
                raise tables_failed(failures, len(summary.get("tables", {})) + len(failures_of(summary)))
        rows = {t.topic: (t.store.commit_record(t.plan.seq, t.plan.batch_id) or {}).get("rows", 0) for t in tables}
        return {"committed": done.committed, "rows": rows, "asset_events": events}

    def batch_facts(self, task_instance: Any) -> BatchFacts:
        """For OpenLineage (:mod:`~kafka_batch_provider.operators.lineage`): the committed batch."""
        return planned_task_facts(self, task_instance, wrote=False)
