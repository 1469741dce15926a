"""``KafkaOffsetCommitOperator``: the commit step, the last task of an ingestion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from kafka_batch_provider.batch_store import BatchStore
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.hooks.storage import storage_options_from_connection
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.xcom import pull_plan
from kafka_batch_provider.protocol import commit_batch


class KafkaOffsetCommitOperator(BaseOperator):
    """Check the batch's entry in the output's offset log and its files, then commit its end offsets.

    Synchronous and compare-and-set (the group must still be at the plan's starts); every
    partition's error is checked and the result read back. Skips for an empty plan, a dry
    run and replays (they never commit the group). Runs after a skipped Spark task (trigger
    rule ``none_failed``): a plan with nothing to read, e.g. a new empty partition, is
    recorded in the log here and committed. Pushes the committed offsets.

    :param plan_task_id: task id of the plan operator.
    :param kafka_config_id: the ``kafka`` connection the plan used.
    :param storage_conn_id: the output's storage connection (as for the plan operator).
    """

    template_fields: Sequence[str] = ("plan_task_id",)
    ui_color = "#e9f7ec"

    def __init__(
        self,
        *,
        plan_task_id: str,
        kafka_config_id: str = "kafka_default",
        storage_conn_id: str | None = None,
        kafka_timeout: float = 30.0,
        trigger_rule: str = "none_failed",
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.plan_task_id = plan_task_id
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        self.kafka_timeout = kafka_timeout

    def execute(self, context: Any) -> dict[str, Any]:
        with task_errors():
            storage_options = storage_options_from_connection(self.storage_conn_id)
            summary, plan = pull_plan(context, self.plan_task_id, "commit", storage_options)
        if not plan.commits_group:
            raise AirflowSkipException(f"batch {plan.batch_id} is a {plan.mode}: the group's offsets are not touched")
        hook = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout)
        store = BatchStore(summary["output_path"], storage_options)
        with task_errors():
            committed = commit_batch(hook, store, plan, progress=self.log.info)
        record = store.commit_record(plan.seq, plan.batch_id) or {}
        return {"batch_id": plan.batch_id, "committed": committed, "rows": record.get("rows", 0)}
