"""Logs that are not a plain run of records: transactions, and records deleted before they were read (items 7 and 9)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from kafka_batch_provider.core.planning import DataLossPolicy, PlanPolicy
from kafka_batch_provider.errors import PlanError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.spark.connect import connect_session
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records, wait_until_stable
from tests.faults.harness import expect_exactly_once, expect_nothing_new_visible, run_cli, scenario_args
from tests.integration.helpers import group_offsets, produce_committed_aborted_committed

pytestmark = pytest.mark.integration


def produce_transactions(kafka_config, topic: str, sizes: list[int], first_id: int = 0) -> None:
    """One committed transaction per size on partition 0; each ends with its control record."""
    producer = Producer({**kafka_config, "transactional.id": f"tx-{topic}-{first_id}"})
    producer.init_transactions(10)
    for size in sizes:
        producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, value=b"committed-%d" % (first_id + i), partition=0)
        first_id += size
        producer.commit_transaction(10)
    wait_until_stable(kafka_config, topic)  # Kafka writes the last marker just after the commit returns


def test_committed_transactions_with_control_records_inside_and_at_the_end_are_read_exactly_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=1)
    produce_transactions(kafka_config, topic, [3, 2])  # records 0-2, marker 3, records 4-5, marker 6 (the last)
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)

    first = run_cli(args, lake.env()).result()
    produce_transactions(kafka_config, topic, [2], first_id=5)  # records 7-8, marker 9
    second = run_cli(args, lake.env()).result()

    assert (first["records"], second["records"]) == (5, 2), (first, second)
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 10}, "the commit must step over the last marker"
    assert sum(KafkaOffsets(kafka_config).lag(group_id, [topic]).values()) == 0, "lag must end at zero"
    expect_exactly_once(outcome, lake, {(topic, 0, o) for o in (0, 1, 2, 4, 5, 7, 8)})


def test_aborted_transactions_are_never_ingested(
    outcome, lake, kafka_bootstrap_servers, kafka_broker_kind, group_id, spark_connect_remote
):
    if kafka_broker_kind == "tansu":
        pytest.skip(
            "aborted transactions need a real Kafka (the default broker, or KAFKA_BOOTSTRAP_SERVERS): the "
            "embedded broker (tansu, KAFKA_BATCH_TEST_BROKER=tansu) hands aborted records to read_committed consumers"
        )
    kafka_config = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = f"aborted-{group_id}"
    create_topics(kafka_config, {topic: 1})
    produce_committed_aborted_committed(kafka_config, topic)
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)
    result = run_cli(args, lake.env()).result()
    assert result["records"] == 4, result
    expect_exactly_once(outcome, lake, {(topic, 0, o) for o in (0, 1, 2, 6)})


class RetentionAt(KafkaOffsets):
    """The real broker's offsets, with the log start of partition 0 moved up as retention would.

    The embedded broker (tansu) cannot delete records (DeleteRecords is not implemented), so
    there the loss is made at the planning boundary: every other number is the broker's own.
    """

    def __init__(self, kafka_config, log_start: int) -> None:
        super().__init__(kafka_config, timeout=10)
        self.log_start = log_start

    def partition_offsets(self, group_id, topics, partitions=None):
        return [
            replace(s, log_start=max(s.log_start, self.log_start)) if s.partition == 0 else s
            for s in super().partition_offsets(group_id, topics, partitions)
        ]


@pytest.fixture
def deleted_before_read(lake, kafka_config, new_topic, group_id, spark_connect_remote, fault_broker):
    """A batch of offsets 0-2 ingested and committed, then 3-9 produced and 3-6 deleted: by DeleteRecords
    on Apache Kafka (the log start really moves), at the planning boundary on tansu (:class:`RetentionAt`)."""
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 3))
    run_cli(scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote), lake.env()).result()
    produce(kafka_config, topic, sample_records(1, 7, first_id=3))
    if fault_broker.kind == "tansu":
        return topic, RetentionAt(kafka_config, log_start=7)
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    [deleted] = admin.delete_records([KafkaTopicPartition(topic, 0, 7)], request_timeout=10).values()
    assert deleted.result().low_watermark == 7, "DeleteRecords must move the log start to 7"
    return topic, KafkaOffsets(kafka_config, timeout=10)


def test_records_deleted_before_they_were_read_fail_the_plan_naming_the_missing_range(
    outcome, lake, kafka_config, group_id, deleted_before_read
):
    topic, kafka = deleted_before_read
    store = lake.store()
    before = lake.keys()

    with pytest.raises(PlanError, match=rf"{topic}\[0\].*\[3, 7\)") as refused:
        plan_batch(kafka, store, group_id, [topic], PlanPolicy())

    assert "\n" not in str(refused.value), "the refusal must be one line"
    assert store.plan_files() == [(1, lake.log_entries()[0]["batch_id"])], "a refused plan must not be saved"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 3}
    expect_nothing_new_visible(lake, before)
    expect_exactly_once(outcome, lake, {(topic, 0, o) for o in range(3)})


def test_records_deleted_before_they_were_read_are_skipped_with_the_policy_and_the_gap_is_logged(
    outcome, lake, kafka_config, group_id, deleted_before_read, spark_connect_remote
):
    topic, kafka = deleted_before_read
    store = lake.store()

    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy(on_data_loss=DataLossPolicy.EARLIEST)).plan
    write_batch(plan, store, kafka.kafka_config, stage_with(connect_session(spark_connect_remote)))
    commit_batch(kafka, store, plan)

    entry = lake.log_entries()[-1]
    assert entry["gaps"] == [{"topic": topic, "partition": 0, "start": 3, "end": 7}], entry["gaps"]
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 10}
    assert Counter(o for _, _, o in lake.keys()) == Counter([0, 1, 2, 7, 8, 9]), "only the gap may be missing"
    expect_exactly_once(outcome, lake, {(topic, 0, o) for o in (0, 1, 2, 7, 8, 9)})
