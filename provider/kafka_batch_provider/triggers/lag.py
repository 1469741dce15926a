"""Lag, watched in the triggerer: ``KafkaLagTrigger`` (the lag sensor's waiting, no worker slot
held) and ``KafkaLagEventTrigger`` (an asset watcher's: ingestion fired by lag, no cron)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from kafka_batch_provider.core.lag_health import ready_to_ingest
from kafka_batch_provider.core.topic_patterns import topics_or_pattern
from kafka_batch_provider.errors import ConfigError, KafkaBatchError


def check_lag(
    kafka_config_id: str,
    group_id: str,
    topics: Sequence[str],
    min_lag: int,
    max_data_age_seconds: float | None,
    kafka_timeout: float,
    output: Mapping[str, Any] | None = None,
    in_flight_seconds: float | None = None,
    fired: Mapping[str, int] | None = None,
    topic_pattern: str | None = None,
) -> tuple[bool, str, int, dict[str, int]]:
    """One look at the group's lag: (ready, why, total lag, each partition's end offset). Blocking:
    Kafka and storage I/O.

    With an output (``BatchOutput.to_dict()``: a path, or a table for Iceberg), the output's
    offset log gives the position where the group has none. With ``in_flight_seconds`` the
    offsets a running batch is taking do not count: its pending plan's (or its logged but not yet
    committed batch's), and ``fired`` (``topic:partition`` -> end offset an event was fired for).
    With ``topic_pattern`` the topics are the ones it matches at this look (one watcher per pattern).
    """
    from kafka_batch_provider.core.offsets import TopicPartition
    from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
    from kafka_batch_provider.operators.output import BatchOutput, open_existing_output
    from kafka_batch_provider.steps.lag import partition_lags, taken_offsets, topics_to_watch

    store = open_existing_output(BatchOutput(**output)) if output else None
    taken: dict[TopicPartition, int] = {}
    if in_flight_seconds is not None:
        now = datetime.now(timezone.utc)
        taken = taken_offsets(store, group_id, now, timedelta(seconds=in_flight_seconds))
        for key, end in (fired or {}).items():
            tp = TopicPartition.from_key(key)
            taken[tp] = max(taken.get(tp, 0), int(end))
    kafka = KafkaOffsetsHook(kafka_config_id, timeout=kafka_timeout).get_conn
    try:
        watched = topics_to_watch(kafka, topics, topic_pattern)
        states = partition_lags(kafka, group_id, watched, max_data_age_seconds is not None, store, taken)
    finally:
        kafka.close()
    max_age = None if max_data_age_seconds is None else timedelta(seconds=max_data_age_seconds)
    ready, reason = ready_to_ingest(states, min_lag, max_age, datetime.now(timezone.utc))
    return ready, reason, sum(s.lag for s in states), {s.tp.key: s.log_end for s in states}


def serialized(trigger: BaseTrigger, signature: inspect.Signature) -> tuple[str, dict[str, Any]]:
    """A trigger as the triggerer rebuilds it: its class path and every argument of its
    ``__init__``, each kept as an attribute of the same name."""
    names = [n for n, p in signature.parameters.items() if n != "self" and p.kind is not p.VAR_KEYWORD]
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}", {n: getattr(trigger, n) for n in names}


#: What earlier builds serialized of the output, one argument each (now one ``output`` dict).
EARLIER_OUTPUT_ARGUMENTS = (
    "output_path",
    "output_format",
    "table",
    "partition_by",
    "storage_conn_id",
    "catalog_conn_id",
    "catalog_properties",
)


def with_earlier_arguments(
    trigger: str, output: Mapping[str, Any] | None, earlier: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The ``output`` of a trigger a deferred task of an earlier build serialized (the triggerer
    rebuilds it from the database after an upgrade): its output's parts as one dict.

    :raises ConfigError: an argument no build of ours serialized (one line: what to do).
    """
    unknown = sorted(set(earlier) - set(EARLIER_OUTPUT_ARGUMENTS))
    if unknown:
        raise ConfigError(
            f"{trigger} cannot take argument(s) {', '.join(unknown)}: it was deferred by another version of "
            "airflow-provider-kafka-batch; clear the deferred task so that it defers again with this version"
        )
    parts = {k: v for k, v in earlier.items() if v is not None}
    if not parts.get("output_path") and not parts.get("table"):  # a sensor without an output: its defaults only
        return dict(output) if output else None
    return {**parts, **dict(output or {})}


class KafkaLagTrigger(BaseTrigger):
    """Fires once the group's lag on ``topics`` is at least ``min_lag``, or its oldest
    unconsumed record is older than ``max_data_age_seconds``. Checks every ``poke_interval``
    seconds; a Kafka error ends the wait with an ``error`` event (the sensor then fails and
    Airflow's retries apply). Only connection ids are serialized: the triggerer reads the
    connections itself. The arguments an earlier build serialized are taken too
    (:func:`with_earlier_arguments`), so a sensor deferred before an upgrade goes on waiting.
    """

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str] = (),
        kafka_config_id: str = "kafka_default",
        min_lag: int = 1,
        max_data_age_seconds: float | None = None,
        poke_interval: float = 60.0,
        kafka_timeout: float = 30.0,
        output: Mapping[str, Any] | None = None,
        topic_pattern: str | None = None,
        **earlier: Any,
    ) -> None:
        super().__init__()
        self.group_id = group_id
        self.topics = list(topics)
        self.topic_pattern = topics_or_pattern(self.topics or None, topic_pattern)
        self.kafka_config_id = kafka_config_id
        self.min_lag = min_lag
        self.max_data_age_seconds = max_data_age_seconds
        self.poke_interval = poke_interval
        self.kafka_timeout = kafka_timeout
        # BatchOutput.to_dict(): connection ids and non-secret properties (checked by the sensor).
        self.output = with_earlier_arguments(type(self).__name__, output, earlier)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return serialized(self, inspect.signature(KafkaLagTrigger.__init__))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Kafka and storage calls block for up to kafka_timeout: run them in a thread of their own.
        # thread_sensitive=True (the default) would queue every trigger's check on one shared
        # thread, so a broker that is slow to answer would stall the other triggers' checks.
        check = sync_to_async(check_lag, thread_sensitive=False)
        while True:
            try:
                ready, reason, total, _ = await check(
                    self.kafka_config_id,
                    self.group_id,
                    self.topics,
                    self.min_lag,
                    self.max_data_age_seconds,
                    self.kafka_timeout,
                    self.output,
                    topic_pattern=self.topic_pattern,
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


class KafkaLagEventTrigger(BaseEventTrigger):
    """An asset watcher's trigger: an event whenever the group's lag on ``topics`` (or the topics
    ``topic_pattern`` matches at each look: one watcher for a pattern of any size) reaches
    ``min_records``, or its oldest unconsumed record is older than ``max_age_seconds``. It commits
    nothing and reads no record (it asks Kafka for offsets and one timestamp per partition), so the
    ingestion that the event starts sees every record.

    Bursts: lag a running batch is already taking does not fire again. That is the lag up to the
    ends an event was fired for, and up to the ends of the output's pending plan, for
    ``in_flight_seconds`` (then a run that failed is fired for again). Events that come while a run
    is going coalesce into at most one queued run (Airflow keeps one queued request per asset and
    DAG; the DAG has ``max_active_runs=1``), and the protocol makes an extra run harmless anyway.
    Checks every ``poke_interval`` seconds; a Kafka error is logged and the next check retries.
    """

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str] = (),
        kafka_config_id: str = "kafka_default",
        min_records: int = 1,
        max_age_seconds: float | None = None,
        poke_interval: float = 5.0,
        kafka_timeout: float = 30.0,
        output: Mapping[str, Any] | None = None,
        in_flight_seconds: float = 900.0,
        topic_pattern: str | None = None,
        **earlier: Any,
    ) -> None:
        super().__init__()
        self.group_id = group_id
        self.topics = list(topics)
        self.topic_pattern = topics_or_pattern(self.topics or None, topic_pattern)
        self.kafka_config_id = kafka_config_id
        self.min_records = min_records
        self.max_age_seconds = max_age_seconds
        self.poke_interval = poke_interval
        self.kafka_timeout = kafka_timeout
        self.output = with_earlier_arguments(type(self).__name__, output, earlier)
        self.in_flight_seconds = in_flight_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return serialized(self, inspect.signature(KafkaLagEventTrigger.__init__))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        check = sync_to_async(check_lag, thread_sensitive=False)
        fired: dict[str, int] = {}  # the ends the last event was fired for
        fired_at = 0.0
        loop = asyncio.get_running_loop()
        while True:
            if fired and loop.time() - fired_at > self.in_flight_seconds:
                fired = {}  # the run it started never took them: fire again
            try:
                ready, reason, total, ends = await check(
                    self.kafka_config_id,
                    self.group_id,
                    self.topics,
                    self.min_records,
                    self.max_age_seconds,
                    self.kafka_timeout,
                    self.output,
                    self.in_flight_seconds,
                    fired,
                    self.topic_pattern,
                )
            except KafkaBatchError as exc:  # an event trigger has nobody to fail: say it, and look again
                self.log.warning("group %s: lag not known (%s)", self.group_id, exc)
                ready = False
            if ready:
                self.log.info("group %s: %s: firing", self.group_id, reason)
                fired, fired_at = ends, loop.time()
                found = {"group_id": self.group_id, "topics": self.topics, "reason": reason, "lag": total, "ends": ends}
                yield TriggerEvent({**found, **({"topic_pattern": self.topic_pattern} if self.topic_pattern else {})})
            await asyncio.sleep(self.poke_interval)
