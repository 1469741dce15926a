"""``KafkaLagHealthOperator``: alert when ingestion falls behind (the last task of an ingestion)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from kafka_batch_provider.core.lag_health import HealthPolicy, LagStatus
from kafka_batch_provider.core.topic_patterns import topics_or_pattern
from kafka_batch_provider.core.validation import positive_seconds, share
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.metrics import send_health_metrics
from kafka_batch_provider.operators.output import (
    OUTPUT_TEMPLATE_FIELDS,
    BatchOutput,
    TemplatedOutput,
    open_existing_output,
)
from kafka_batch_provider.operators.runs import is_backfill
from kafka_batch_provider.operators.xcom import as_list
from kafka_batch_provider.steps.lag import lag_report, topics_to_watch

#: WARN (lag growing) is logged, not failed: the batch itself went fine.
DEFAULT_FAIL_ON = frozenset(s for s in LagStatus if s not in (LagStatus.OK, LagStatus.WARN))


class KafkaLagHealthOperator(TemplatedOutput, BaseOperator):
    """Judge the group's lag per partition and for the group; fail on the statuses in ``fail_on``.

    Statuses: OK, WARN, STALL, STOP, REWIND, RETENTION_RISK, DATA_LOSS (see
    :mod:`kafka_batch_provider.core.lag_health`). The window of recent batches comes from the
    output's plans and commit records. The failure message names the partitions, their numbers
    and status; the full report is pushed to XCom either way. Skipped in a backfill run: it
    replays an interval and leaves the group alone, whose health is the scheduled runs' business.

    :param output: the ingestion's :class:`~kafka_batch_provider.operators.output.BatchOutput`:
        its offset log stands in where the group has no offset, and its batch history enables
        the trend statuses; without it only DATA_LOSS and RETENTION_RISK are judged.
    :param stop_after: STOP when lag > 0 and nothing was committed for this long (e.g. three
        schedule intervals); ``None`` disables STOP.
    :param dead_letter_share: DEAD_LETTERS when more than this fraction of a partition's records in
        the newest batch were set aside as dead letters.
    :param fail_on: statuses that fail the task (default: all but OK and WARN).
    """

    template_fields: Sequence[str] = ("group_id", "topics", "topic_pattern", *OUTPUT_TEMPLATE_FIELDS)
    ui_color = "#fdeeee"

    def __init__(
        self,
        *,
        group_id: str,
        topics: Sequence[str] | str | None = None,
        output: BatchOutput | None = None,
        topic_pattern: str | None = None,
        kafka_config_id: str = "kafka_default",
        window: int = 5,
        stop_after: timedelta | None = None,
        retention_risk: float = 0.8,
        dead_letter_share: float = 0.01,
        fail_on: Iterable[LagStatus | str] = DEFAULT_FAIL_ON,
        kafka_timeout: float = 30.0,
        trigger_rule: str = "none_failed",
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.group_id = group_id
        self.topics = topics
        self.topic_pattern = topics_or_pattern(topics, topic_pattern)
        self.keep_output(output)
        self.kafka_config_id = kafka_config_id
        if self.batch_output.given:  # the output is optional here
            self.batch_output.check()
        share("dead_letter_share", dead_letter_share)
        self.policy = HealthPolicy(
            window=window, stop_after=stop_after, retention_risk=retention_risk, dead_letter_share=dead_letter_share
        )
        self.fail_on = frozenset(LagStatus(s) for s in fail_on)
        self.kafka_timeout = positive_seconds("kafka_timeout", kafka_timeout)

    def execute(self, context: Any) -> dict[str, Any]:
        if is_backfill(context):  # a backfill run replays an interval: the live group is not its business
            raise AirflowSkipException("backfill run: the group's lag health is checked by the scheduled runs")
        with task_errors():  # the connection's config is checked here: a bad one fails at once
            kafka = KafkaOffsetsHook(self.kafka_config_id, timeout=self.kafka_timeout).get_conn
            store = open_existing_output(self.batch_output)
            topics = topics_to_watch(kafka, as_list(self.topics) if self.topics is not None else [], self.topic_pattern)
            report = lag_report(kafka, self.group_id, topics, store, self.policy)
        for p in report.partitions:
            self.log.info("%s lag %d: %s (%s)", p.state.tp, p.state.lag, p.status.value, p.reason)
        for note in report.notes:
            self.log.info("note: %s", note)
        send_health_metrics(report.to_dict(), store.root if store else "-")
        if report.problems(self.fail_on):
            raise AirflowFailException(report.message(self.fail_on))
        if report.status is not LagStatus.OK:
            self.log.warning(report.message())
        return report.to_dict()
