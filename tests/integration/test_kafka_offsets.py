"""KafkaOffsets against a real Kafka-protocol broker over TCP."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.dev.local_servers import free_port
from kafka_batch_provider.errors import CommitConflictError, ConfigError, KafkaUnavailableError, PlanError
from kafka_batch_provider.kafka import client
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import Record, broker_supports_offsets_for_times, produce, wait_until_stable

pytestmark = [pytest.mark.integration, pytest.mark.check]  # check: in make check's tier


def fill(config, topic, counts: dict[int, int], timestamp_ms=None) -> None:
    produce(
        config,
        topic,
        [Record(p, b"v%d" % i, timestamp_ms=timestamp_ms) for p, n in counts.items() for i in range(n)],
    )


def test_log_offsets_and_committed_offsets_of_a_new_group(kafka_config, new_topic, group_id):
    topic = new_topic(partitions=3)
    fill(kafka_config, topic, {0: 5, 1: 2})
    kafka = KafkaOffsets(kafka_config, timeout=10)
    states = {s.partition: s for s in kafka.partition_offsets(group_id, [topic])}
    assert [(s.committed, s.log_start, s.log_end) for s in states.values()] == [
        (None, 0, 5),
        (None, 0, 2),
        (None, 0, 0),
    ]
    assert kafka.lag(group_id, [topic]) == {
        TopicPartition(topic, 0): 5,
        TopicPartition(topic, 1): 2,
        TopicPartition(topic, 2): 0,
    }


def test_offsets_of_more_partitions_than_one_request_holds_come_back_whole(
    kafka_config, new_topic, group_id, monkeypatch
):
    """Thousands of partitions are asked for in several requests (librdkafka's cost per request
    grows with its partitions squared); every partition's answer must still come back."""
    monkeypatch.setattr(client, "REQUEST_PARTITIONS", 3)
    topic = new_topic(partitions=8)
    fill(kafka_config, topic, {p: p + 1 for p in range(8)})
    kafka = KafkaOffsets(kafka_config, timeout=10)
    tps = [TopicPartition(topic, p) for p in range(8)]
    kafka.commit(group_id, {tp: None for tp in tps}, {tp: tp.partition for tp in tps})
    found = {s.partition: (s.committed, s.log_start, s.log_end) for s in kafka.partition_offsets(group_id, [topic])}
    expected = {p: (p, 0, p + 1) for p in range(8)}
    assert found == expected, f"expected (committed, start, end) per partition {expected}, found {found}"


def test_partition_subset_and_unknown_names_are_checked(kafka_config, new_topic):
    topic = new_topic(partitions=3)
    kafka = KafkaOffsets(kafka_config, timeout=10)
    assert kafka.topic_partitions([topic], [2, 0]) == [TopicPartition(topic, 0), TopicPartition(topic, 2)]
    with pytest.raises(PlanError, match=r"has no partition\(s\) \[5\]"):
        kafka.topic_partitions([topic], [5])
    with pytest.raises(PlanError, match=r"unknown topic\(s\) 'no-such-topic-x'"):
        kafka.topic_partitions(["no-such-topic-x"])
    # Asking about an unknown topic must not create it.
    assert "no-such-topic-x" not in kafka.admin.list_topics(timeout=10).topics


def test_commit_is_compare_and_set_synchronous_and_read_back(kafka_config, new_topic, group_id):
    topic = new_topic(partitions=2)
    fill(kafka_config, topic, {0: 10, 1: 10})
    kafka = KafkaOffsets(kafka_config, timeout=10)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    committed = kafka.commit(group_id, {tp0: None, tp1: None}, {tp0: 4, tp1: 10}, metadata="b-1")
    assert committed == {tp0: 4, tp1: 10}
    assert kafka.committed_offsets(group_id, [tp0, tp1]) == {tp0: 4, tp1: 10}

    # The group is at 4, not at the 0 this caller expects: nothing is committed.
    with pytest.raises(CommitConflictError, match=rf"{topic}\[0\]: committed 4, plan expected 0"):
        kafka.commit(group_id, {tp0: 0, tp1: 10}, {tp0: 9, tp1: 10})
    assert kafka.committed_offsets(group_id, [tp0, tp1]) == {tp0: 4, tp1: 10}


def test_end_offset_honours_isolation_level_with_transactions(kafka_config, new_topic):
    topic = new_topic(partitions=1)
    producer = Producer({**kafka_config, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"%d" % i, partition=0)
    producer.commit_transaction(10)
    wait_until_stable(kafka_config, topic)  # Kafka writes the commit marker just after the commit returns
    tp = TopicPartition(topic, 0)
    committed_view = KafkaOffsets(kafka_config, timeout=10).log_end_offsets([tp])[tp]
    uncommitted_view = KafkaOffsets({**kafka_config, "isolation.level": "read_uncommitted"}, 10).log_end_offsets([tp])[
        tp
    ]
    # 3 records + the commit marker: the end is past the marker for both once committed.
    assert committed_view == 4 and uncommitted_view == 4


def test_offsets_for_times_maps_timestamps_to_offsets(kafka_config, new_topic):
    if not broker_supports_offsets_for_times(kafka_config, new_topic(partitions=1, prefix="probe")):
        pytest.skip(
            "this broker does not implement ListOffsets by timestamp (tansu's memory storage answers 0); "
            "Apache Kafka, the default test broker (or KAFKA_BOOTSTRAP_SERVERS), covers it"
        )
    topic = new_topic(partitions=1)
    base = int(time.time() * 1000) - 3_600_000
    for k in range(3):  # three bursts, one minute apart
        fill(kafka_config, topic, {0: 2}, timestamp_ms=base + k * 60_000)
    kafka = KafkaOffsets(kafka_config, timeout=10)
    tp = TopicPartition(topic, 0)
    assert kafka.offsets_for_times([tp], base - 1)[tp] == 0
    assert kafka.offsets_for_times([tp], base + 1)[tp] == 2
    assert kafka.offsets_for_times([tp], base + 60_000)[tp] == 2
    assert kafka.offsets_for_times([tp], base + 120_001)[tp] == 6


def test_broker_down_is_one_clear_line():
    kafka = KafkaOffsets({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, timeout=2)
    with pytest.raises(KafkaUnavailableError) as err:
        kafka.topic_partitions(["t"])
    assert "did not answer list_topics within 2s" in str(err.value)
    assert "\n" not in str(err.value)


def test_auto_commit_config_is_refused_before_any_io():
    kafka = KafkaOffsets({"bootstrap.servers": "127.0.0.1:1", "enable.auto.commit": "true"})
    with pytest.raises(ConfigError, match="enable.auto.commit=true is not allowed"):
        kafka.topic_partitions(["t"])


@pytest.mark.parametrize(
    "setting, expected",
    [
        ({"no.such.setting": "1"}, 'No such configuration property: "no.such.setting"'),
        ({"socket.timeout.ms": "soon"}, 'Invalid value for configuration property "socket.timeout.ms"'),
    ],
)
def test_a_setting_librdkafka_refuses_is_a_config_error_not_an_outage(kafka_config, setting, expected):
    # A KafkaUnavailableError would be retried by Airflow; no retry fixes a bad setting.
    with pytest.raises(ConfigError) as refused:
        KafkaOffsets({**kafka_config, **setting}, timeout=5).topic_partitions([])
    assert expected in str(refused.value), f"expected {expected!r} in {refused.value}"
