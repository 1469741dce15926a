"""``KafkaLagSensor``: start an ingestion when there is enough to do."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from kafka_batch_provider.core.topic_patterns import topics_or_pattern
from kafka_batch_provider.core.validation import positive_seconds
from kafka_batch_provider.errors import KafkaUnavailableError, error_named
from kafka_batch_provider.operators.output import OUTPUT_TEMPLATE_FIELDS, BatchOutput, TemplatedOutput
from kafka_batch_provider.operators.runs import is_backfill
from kafka_batch_provider.operators.xcom import as_list
from kafka_batch_provider.triggers.lag import KafkaLagTrigger, check_lag


class KafkaLagSensor(TemplatedOutput, BaseSensorOperator):
    """Succeeds when the group's total lag over ``topics`` is at least ``min_lag`` records, or
    when the oldest unconsumed record is older than ``max_data_age`` (so a quiet topic still
    gets ingested). Lag is isolation-aware (records between the committed offset and the end).

    The usual sensor options work: ``mode="poke"`` or ``"reschedule"``, ``poke_interval``,
    ``timeout``, ``soft_fail=True`` (a run with nothing to do is skipped, not failed; Kafka
    errors still fail). Runs of type backfill do not wait: they replay history.
    ``deferrable=True`` hands the waiting to :class:`KafkaLagTrigger` in the triggerer.

    :param group_id: the consumer group (templated).
    :param topics: topics to watch (templated; list or comma-separated string).
    :param topic_pattern: instead of ``topics``, a regular expression: the topics it matches at
        each look (whole names, never Kafka's own ``__`` topics).
    :param min_lag: records of lag that are enough to start.
    :param max_data_age: a ``timedelta`` or seconds; ``None`` disables the age rule.
    :param output: the ingestion's :class:`~kafka_batch_provider.operators.output.BatchOutput`
        (optional; templated parts rendered): where the group has no committed offset
        (deleted, expired), its offset log gives the position, so the lag is what the next batch
        would really read; an Iceberg table that does not exist yet has no log to consult.
    """

    template_fields: Sequence[str] = ("group_id", "topics", "topic_pattern", *OUTPUT_TEMPLATE_FIELDS)
    ui_color = "#f0eefd"

    def __init__(
        self,
        *,
        group_id: str,
        topics: Sequence[str] | str | None = None,
        kafka_config_id: str = "kafka_default",
        min_lag: int = 1,
        max_data_age: timedelta | float | None = None,
        deferrable: bool = False,
        kafka_timeout: float = 30.0,
        output: BatchOutput | None = None,
        topic_pattern: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if min_lag < 1:
            raise ValueError(f"min_lag must be at least 1, got {min_lag}")
        self.group_id = group_id
        self.topics = topics
        self.topic_pattern = topics_or_pattern(topics, topic_pattern)
        self.kafka_config_id = kafka_config_id
        self.min_lag = min_lag
        self.max_data_age_seconds = (
            max_data_age.total_seconds() if isinstance(max_data_age, timedelta) else max_data_age
        )
        self.deferrable = deferrable
        self.kafka_timeout = positive_seconds("kafka_timeout", kafka_timeout)
        self.keep_output(output)
        if self.batch_output.given:  # the output is optional here
            self.batch_output.check()

    def _check(self) -> tuple[bool, str, int]:
        # Errors stay plain exceptions: a sensor with soft_fail turns Airflow's fail
        # exceptions into skips, and a bad topic or an unreachable broker must fail the run.
        ready, reason, total, _ = check_lag(
            self.kafka_config_id,
            self.group_id,
            as_list(self.topics) if self.topics is not None else [],
            self.min_lag,
            self.max_data_age_seconds,
            self.kafka_timeout,
            self.output_dict(),
            topic_pattern=self.topic_pattern,
        )
        return ready, reason, total

    def output_dict(self) -> dict[str, Any] | None:
        output = self.batch_output
        return output.to_dict() if output.given else None

    def poke(self, context: Any) -> PokeReturnValue:
        ready, reason, total = self._check()
        self.log.info("group %s: %s", self.group_id, reason)
        return PokeReturnValue(is_done=ready, xcom_value={"total_lag": total, "reason": reason})

    def execute(self, context: Any) -> Any:
        if is_backfill(context):
            # A backfill replays history: the group's current lag says nothing about it.
            self.log.info("backfill run: not waiting for lag")
            return {"total_lag": None, "reason": "backfill run"}
        if not self.deferrable:
            return super().execute(context)
        ready, reason, total = self._check()  # no deferral when there is already enough to do
        self.log.info("group %s: %s", self.group_id, reason)
        if ready:
            return {"total_lag": total, "reason": reason}
        self.defer(
            trigger=KafkaLagTrigger(
                group_id=self.group_id,
                topics=as_list(self.topics) if self.topics is not None else [],
                topic_pattern=self.topic_pattern,
                kafka_config_id=self.kafka_config_id,
                min_lag=self.min_lag,
                max_data_age_seconds=self.max_data_age_seconds,
                poke_interval=self.poke_interval,
                kafka_timeout=self.kafka_timeout,
                output=self.output_dict(),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "ready":
            # Our own class, never an AirflowException: soft_fail would turn it into a skip, and a
            # bad connection must fail the run, not skip it. So a sensor's errors are retried.
            error = error_named(str(event.get("error", ""))) or KafkaUnavailableError
            raise error(f"lag sensor stopped waiting: {event.get('message', event)}")
        self.log.info("group %s: %s", self.group_id, event["reason"])
        return {"total_lag": event["total_lag"], "reason": event["reason"]}
