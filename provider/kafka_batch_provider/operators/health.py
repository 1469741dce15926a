"""``KafkaLagHealthOperator``: alert when ingestion falls behind (the last task of an ingestion)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from kafka_batch_provider.core.lag_health import HealthPolicy, LagStatus
from kafka_batch_provider.core.validation import positive_seconds
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.output import OUTPUT_TEMPLATE_FIELDS, open_existing_output, output_args_of
from kafka_batch_provider.operators.xcom import as_list
from kafka_batch_provider.steps.lag import lag_report

#: WARN (lag growing) is logged, not failed: the batch itself went fine.
DEFAULT_FAIL_ON = frozenset(s for s in LagStatus if s not in (LagStatus.OK, LagStatus.WARN))


class KafkaLagHealthOperator(BaseOperator):
    """Judge the group's lag per partition and for the group; fail on the statuses in ``fail_on``.

    Statuses: OK, WARN, STALL, STOP, REWIND, RETENTION_RISK, DATA_LOSS (see
    :mod:`kafka_batch_provider.core.lag_health`). The window of recent batches comes from the
    output's plans and commit records. The failure message names the partitions, their numbers
    and status; the full report is pushed to XCom either way.

    :param output_path: the ingestion's output (path or URI): its offset log stands in where the
        group has no offset, and its batch history enables the trend statuses; without it only
        DATA_LOSS and RETENTION_RISK are judged.
    :param output_format: ``parquet``, ``delta`` or ``iceberg`` (with ``table`` and
        ``catalog_conn_id``, and ``catalog_properties``, ``partition_by``: as for the plan operator).
    :param storage_conn_id: the output's storage connection (as for the plan operator).
    :param stop_after: STOP when lag > 0 and nothing was committed for this long (e.g. three
        schedule intervals); ``None`` disables STOP.
    :param fail_on: statuses that fail the task (default: all but OK and WARN).
    """

    template_fields: Sequence[str] = ("group_id", "topics", *OUTPUT_TEMPLATE_FIELDS)
    ui_color = "#fdeeee"

    def __init__(
        self,
        *,
        group_id: str,
        topics: Sequence[str] | str,
        output_path: str | None = None,
        output_format: str = "parquet",
        table: str | None = None,
        catalog_conn_id: str | None = None,
        catalog_properties: dict[str, str] | None = None,
        partition_by: str | None = None,
        kafka_config_id: str = "kafka_default",
        storage_conn_id: str | None = None,
        window: int = 5,
        stop_after: timedelta | None = None,
        retention_risk: float = 0.8,
        fail_on: Iterable[LagStatus | str] = DEFAULT_FAIL_ON,
        kafka_timeout: float = 30.0,
        trigger_rule: str = "none_failed",
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.group_id = group_id
        self.topics = topics
        self.output_path = output_path
        self.output_format = output_format
        self.table = table
        self.catalog_conn_id = catalog_conn_id
        self.catalog_properties = catalog_properties
        self.partition_by = partition_by
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        if output_args_of(self).given:  # the output is optional here
            output_args_of(self).check()
        self.policy = HealthPolicy(window=window, stop_after=stop_after, retention_risk=retention_risk)
        self.fail_on = frozenset(LagStatus(s) for s in fail_on)
        self.kafka_timeout = positive_seconds("kafka_timeout", kafka_timeout)

    def execute(self, context: Any) -> dict[str, Any]:
        kafka = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout).get_conn
        with task_errors():
            store = open_existing_output(output_args_of(self))
            report = lag_report(kafka, self.group_id, as_list(self.topics), store, self.policy)
        for p in report.partitions:
            self.log.info("%s lag %d: %s (%s)", p.state.tp, p.state.lag, p.status.value, p.reason)
        for note in report.notes:
            self.log.info("note: %s", note)
        if report.problems(self.fail_on):
            raise AirflowFailException(report.message(self.fail_on))
        if report.status is not LagStatus.OK:
            self.log.warning(report.message())
        return report.to_dict()
