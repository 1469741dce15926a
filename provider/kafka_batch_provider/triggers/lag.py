"""``KafkaLagTrigger``: the lag sensor's waiting, done in the triggerer (no worker slot held)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from kafka_batch_provider.core.lag_health import ready_to_ingest
from kafka_batch_provider.errors import KafkaBatchError


def check_lag(
    kafka_config_id: str,
    group_id: str,
    topics: Sequence[str],
    min_lag: int,
    max_data_age_seconds: float | None,
    kafka_timeout: float,
    output: Mapping[str, Any] | None = None,
) -> tuple[bool, str, int]:
    """One look at the group's lag: (ready, why, total lag). Blocking: Kafka and storage I/O.

    With an output (``BatchOutput.to_dict()``: a path, or a table for Iceberg), the output's
    offset log gives the position where the group has none.
    """
    from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
    from kafka_batch_provider.operators.output import BatchOutput, open_existing_output
    from kafka_batch_provider.steps.lag import partition_lags

    store = open_existing_output(BatchOutput(**output)) if output else None
    kafka = KafkaOffsetsHook(kafka_config_id, timeout=kafka_timeout).get_conn
    try:
        states = partition_lags(kafka, group_id, list(topics), max_data_age_seconds is not None, store)
    finally:
        kafka.close()
    max_age = None if max_data_age_seconds is None else timedelta(seconds=max_data_age_seconds)
    ready, reason = ready_to_ingest(states, min_lag, max_age, datetime.now(timezone.utc))
    return ready, reason, sum(s.lag for s in states)


class KafkaLagTrigger(BaseTrigger):
    """Fires once the group's lag on ``topics`` is at least ``min_lag``, or its oldest
    unconsumed record is older than ``max_data_age_seconds``. Checks every ``poke_interval``
    seconds; a Kafka error ends the wait with an ``error`` event (the sensor then fails and
    Airflow's retries apply). Only connection ids are serialized: the triggerer reads the
    connections itself.
    """

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str],
        kafka_config_id: str = "kafka_default",
        min_lag: int = 1,
        max_data_age_seconds: float | None = None,
        poke_interval: float = 60.0,
        kafka_timeout: float = 30.0,
        output: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.group_id = group_id
        self.topics = list(topics)
        self.kafka_config_id = kafka_config_id
        self.min_lag = min_lag
        self.max_data_age_seconds = max_data_age_seconds
        self.poke_interval = poke_interval
        self.kafka_timeout = kafka_timeout
        # BatchOutput.to_dict(): connection ids and non-secret properties (checked by the sensor).
        self.output = dict(output) if output else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "group_id": self.group_id,
                "topics": self.topics,
                "kafka_config_id": self.kafka_config_id,
                "min_lag": self.min_lag,
                "max_data_age_seconds": self.max_data_age_seconds,
                "poke_interval": self.poke_interval,
                "kafka_timeout": self.kafka_timeout,
                "output": self.output,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Kafka and storage calls block for up to kafka_timeout: run them in a thread of their own.
        # thread_sensitive=True (the default) would queue every trigger's check on one shared
        # thread, so a broker that is slow to answer would stall the other triggers' checks.
        check = sync_to_async(check_lag, thread_sensitive=False)
        while True:
            try:
                ready, reason, total = await check(
                    self.kafka_config_id,
                    self.group_id,
                    self.topics,
                    self.min_lag,
                    self.max_data_age_seconds,
                    self.kafka_timeout,
                    self.output,
                )
            except KafkaBatchError as exc:
                # The class travels by name, so the sensor raises the same one (errors.py decides).
                yield TriggerEvent({"status": "error", "message": str(exc), "error": type(exc).__name__})
                return
            self.log.info("group %s: %s", self.group_id, reason)
            if ready:
                yield TriggerEvent({"status": "ready", "reason": reason, "total_lag": total})
                return
            await asyncio.sleep(self.poke_interval)
