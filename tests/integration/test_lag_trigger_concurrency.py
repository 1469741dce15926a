"""KafkaLagTrigger shares the triggerer's event loop: its Kafka calls must block neither the
loop nor the other triggers' checks."""

from __future__ import annotations

import asyncio
import json

import pytest

from kafka_batch_provider.dev.local_servers import free_port
from kafka_batch_provider.testing.producers import produce, sample_records

pytestmark = pytest.mark.integration

TICK = 0.05


def test_a_trigger_waiting_on_a_dead_broker_blocks_neither_the_loop_nor_another_trigger(
    kafka_bootstrap_servers, kafka_config, new_topic, group_id, monkeypatch
):
    from kafka_batch_provider.triggers.lag import KafkaLagTrigger

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_LIVE",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEAD",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{free_port()}"}}),
    )
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 3))
    # Each check of this one blocks in librdkafka until its timeout: nothing answers.
    stuck = KafkaLagTrigger("g", ["t"], kafka_config_id="kafka_dead", kafka_timeout=4)
    ready = KafkaLagTrigger(group_id, [topic], kafka_config_id="kafka_live", min_lag=3, kafka_timeout=10)

    async def scenario() -> tuple[int, bool, dict]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(TICK)
                ticks += 1

        clock = asyncio.create_task(ticker())
        await asyncio.sleep(TICK)
        stuck_event = asyncio.create_task(stuck.run().__anext__())
        await asyncio.sleep(0.2)  # the stuck trigger's check is under way
        ready_event = await ready.run().__anext__()
        stuck_still_waiting = not stuck_event.done()
        ticks_before = ticks
        await stuck_event
        clock.cancel()
        return ticks - ticks_before, stuck_still_waiting, ready_event.payload

    ticks, stuck_still_waiting, payload = asyncio.run(scenario())
    assert payload["status"] == "ready" and payload["total_lag"] == 3, f"expected a ready event, got {payload}"
    assert stuck_still_waiting, (
        "the ready trigger fired only after the stuck trigger's check ended: their Kafka calls share one thread"
    )
    # The stuck check lasts its 4 s timeout: a free loop ticks about 80 times meanwhile, a blocked one not at all.
    assert ticks >= 10, f"expected the loop to keep ticking during the stuck check, counted {ticks} tick(s)"
