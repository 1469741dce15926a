"""A topic pattern against Apache Kafka: resolved at every plan, new topics and deleted ones recorded."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from kafka_batch_provider.core.planning import NewPartitionPolicy, PlanPolicy
from kafka_batch_provider.core.topic_patterns import PATTERN_PLAN_KEY
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import Record, create_topics, produce
from tests.integration.helpers import Output, group_offsets, read_dataset, run_batch

pytestmark = pytest.mark.integration


def fill(kafka_config: dict, topic: str, counts: dict[int, int]) -> None:
    records = [Record(p, b"%s-%d" % (topic.encode(), i)) for p, n in counts.items() for i in range(n)]
    produce(kafka_config, topic, records)


def delete_topic(kafka_config: dict, topic: str) -> None:
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    admin.delete_topics([topic], operation_timeout=10)[topic].result()
    deadline = time.monotonic() + 30
    while topic in KafkaOffsets(kafka_config, timeout=10).topic_names():  # deletion lands asynchronously
        assert time.monotonic() < deadline, f"topic {topic} still listed 30 s after its deletion"
        time.sleep(0.5)


def rows_per_topic(lake) -> dict[str, int]:
    table = read_dataset(Output(str(lake)), ["topic"])
    found: dict[str, int] = {}
    for topic in table.column("topic").to_pylist():
        found[topic] = found.get(topic, 0) + 1
    return found


def test_a_pattern_finds_new_topics_at_the_next_plan_and_records_those_that_came_and_left(
    spark, kafka_config, group_id, tmp_path
):
    prefix = f"pat{uuid.uuid4().hex[:8]}"
    orders, payments, elsewhere = f"{prefix}.orders", f"{prefix}.payments", f"other{prefix}.orders"
    create_topics(kafka_config, {orders: 2, payments: 1, elsewhere: 1})
    fill(kafka_config, orders, {0: 4, 1: 3})
    fill(kafka_config, payments, {0: 5})
    fill(kafka_config, elsewhere, {0: 2})
    pattern = re.escape(prefix) + r"\..*"
    lake = tmp_path / "lake"
    said: list[str] = []

    first, _ = run_batch(spark, kafka_config, lake, group_id, [], topic_pattern=pattern, progress=said.append)
    assert first.plan.topics == (orders, payments), f"expected the pattern's two topics, found {first.plan.topics}"
    assert rows_per_topic(lake) == {orders: 7, payments: 5}, f"found {rows_per_topic(lake)}"
    entry = Output(str(lake)).store().log.tail()
    assert entry[PATTERN_PLAN_KEY] == {"pattern": pattern, "new": {}, "left": {}}, entry.get(PATTERN_PLAN_KEY)

    # A topic created since: in the very next plan (no metadata refresh to wait for), from its start.
    invoices, refunds = f"{prefix}.invoices", f"{prefix}.refunds"
    create_topics(kafka_config, {invoices: 1})
    fill(kafka_config, invoices, {0: 6})
    fill(kafka_config, orders, {0: 1})
    second, _ = run_batch(spark, kafka_config, lake, group_id, [], topic_pattern=pattern, progress=said.append)
    assert second.plan.topics == (invoices, orders, payments), second.plan.topics
    assert rows_per_topic(lake) == {orders: 8, payments: 5, invoices: 6}, f"found {rows_per_topic(lake)}"
    entry = Output(str(lake)).store().log.tail()
    assert entry[PATTERN_PLAN_KEY]["new"] == {invoices: "earliest"}, entry[PATTERN_PLAN_KEY]

    # --new-topic-start latest: a new topic's records before the plan are left, the group starts at its end.
    create_topics(kafka_config, {refunds: 1})
    fill(kafka_config, refunds, {0: 3})
    delete_topic(kafka_config, payments)
    latest = PlanPolicy(new_topic_start=NewPartitionPolicy.LATEST)
    third, committed = run_batch(
        spark, kafka_config, lake, group_id, [], latest, topic_pattern=pattern, progress=said.append
    )
    assert third.plan.topics == (invoices, orders, refunds), third.plan.topics
    entry = Output(str(lake)).store().log.tail()
    assert entry[PATTERN_PLAN_KEY]["new"] == {refunds: "latest"}, entry[PATTERN_PLAN_KEY]
    assert entry[PATTERN_PLAN_KEY]["left"] == {payments: "deleted"}, entry[PATTERN_PLAN_KEY]
    assert group_offsets(kafka_config, group_id, refunds, 1) == {0: 3}, "refunds should be committed at its end"
    assert rows_per_topic(lake) == {orders: 8, payments: 5, invoices: 6}, f"found {rows_per_topic(lake)}"
    left_lines = [line for line in said if payments in line]
    gone = f"topic {payments!r} of the previous batch no longer exists: it leaves the plan"
    assert left_lines == [f"{gone} (its offsets stay in the output's log)"], f"expected one line, found {left_lines}"
    assert not any(elsewhere in line for line in said), "a topic the pattern does not match whole was named"
