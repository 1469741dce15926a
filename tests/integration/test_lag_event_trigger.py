"""The asset watcher's ``KafkaLagEventTrigger`` against the real broker and a real output: it fires
on lag, not again for lag already fired for or planned by a running batch, and again when a
fired-for run never took it."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.testing.producers import produce, sample_records

pytestmark = pytest.mark.integration

#: How long a check that no event comes waits: many polls at POKE seconds each.
QUIET = 2.5
POKE = 0.2


@pytest.fixture
def kafka_connection(kafka_bootstrap_servers, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers}}),
    )


class Events:
    """The trigger's event stream, one event at a time, with deadlines."""

    def __init__(self, trigger) -> None:
        self.stream = trigger.run()
        self.pending: asyncio.Future | None = None

    async def next(self, timeout: float = 30.0):
        self.pending = self.pending or asyncio.ensure_future(self.stream.__anext__())
        event = await asyncio.wait_for(asyncio.shield(self.pending), timeout)
        self.pending = None
        return event.payload

    async def none_within(self, seconds: float = QUIET) -> dict | None:
        """``None`` when no event comes within ``seconds`` (the event otherwise)."""
        try:
            return await self.next(seconds)
        except TimeoutError:
            return None

    async def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await self.pending
        await self.stream.aclose()


def test_the_lag_trigger_fires_once_per_lag_and_again_only_for_lag_no_batch_is_taking(
    kafka_connection, kafka_config, new_topic, group_id, tmp_path
):
    from kafka_batch_provider.triggers.lag import KafkaLagEventTrigger

    topic = new_topic(partitions=1)
    output = BatchOutput(output_path=str(tmp_path / "lake"))

    def trigger(in_flight: float) -> KafkaLagEventTrigger:
        made = KafkaLagEventTrigger(group_id, [topic], min_records=3, poke_interval=POKE, output=output.to_dict())
        made.in_flight_seconds = in_flight
        return made

    async def scenario() -> None:
        await asyncio.to_thread(produce, kafka_config, topic, sample_records(1, 3))
        events = Events(trigger(in_flight=60))
        try:
            first = await events.next()
            assert (first["lag"], first["ends"]) == (3, {f"{topic}:0": 3}), first
            assert await events.none_within() is None, "lag already fired for must not fire again"
            await asyncio.to_thread(produce, kafka_config, topic, sample_records(1, 2, first_id=3))
            assert await events.none_within() is None, "2 new records are fewer than min_records"
            await asyncio.to_thread(produce, kafka_config, topic, sample_records(1, 1, first_id=5))
            second = await events.next()
            assert second["ends"] == {f"{topic}:0": 6}, f"3 records beyond the first event must fire: {second}"
        finally:
            await events.close()

        # A batch planned by a running run: a trigger that knows nothing (a restarted triggerer)
        # does not fire for it, until the plan is older than in_flight (its run failed).
        await asyncio.to_thread(
            plan_batch, KafkaOffsets(kafka_config, timeout=10), BatchStore(output.output_path), group_id, [topic],
            PlanPolicy(),
        )  # fmt: skip
        restarted = Events(trigger(in_flight=60))
        try:
            assert await restarted.none_within() is None, "the pending plan takes all 6 records"
        finally:
            await restarted.close()
        expired = Events(trigger(in_flight=0.5))
        try:
            again = await expired.next()
            assert again["lag"] == 6, f"a plan older than in_flight is a failed run's: fire for it, got {again}"
        finally:
            await expired.close()

    asyncio.run(scenario())


def test_one_watcher_follows_a_whole_pattern_and_a_topic_created_after_it_started(
    kafka_config, kafka_connection, group_id
):
    import re
    import uuid

    from kafka_batch_provider.testing.producers import create_topics
    from kafka_batch_provider.triggers.lag import KafkaLagEventTrigger

    prefix = f"watch{uuid.uuid4().hex[:8]}"
    create_topics(kafka_config, {f"{prefix}.a": 1})
    trigger = KafkaLagEventTrigger(
        group_id, topic_pattern=re.escape(prefix) + r"\..*", min_records=4, poke_interval=POKE
    )
    assert trigger.serialize()[1]["topic_pattern"] == trigger.topic_pattern, "the pattern must survive the triggerer"

    async def scenario() -> None:
        events = Events(trigger)
        try:
            await asyncio.to_thread(produce, kafka_config, f"{prefix}.a", sample_records(1, 2))
            assert await events.none_within() is None, "2 records of lag should not fire at min_records=4"
            await asyncio.to_thread(create_topics, kafka_config, {f"{prefix}.b": 1})  # after the watcher started
            await asyncio.to_thread(produce, kafka_config, f"{prefix}.b", sample_records(1, 2))
            fired = await events.next()
            assert fired["lag"] == 4 and fired["topic_pattern"] == trigger.topic_pattern, fired
            assert sorted(fired["ends"]) == [f"{prefix}.a:0", f"{prefix}.b:0"], fired["ends"]
        finally:
            await events.close()

    asyncio.run(scenario())
