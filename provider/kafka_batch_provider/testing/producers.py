"""Producing test and demo data, the way the embedded broker needs it.

Why a helper: tansu (the embedded broker) answers ListOffsets "latest" with the base offset
of the last record batch + 1, so when a partition's last batch holds several records it
under-reports the end offset (real Kafka is right; Fetch responses are right too). Ending each
burst with a flush and then the last record of each partition in a batch of its own makes the
reported end exact on both. Product code must not work around this; only producers do.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER


@dataclass(frozen=True)
class Record:
    partition: int
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)
    timestamp_ms: int | None = None


#: Partitions created by one request (:func:`create_topics`).
PARTITIONS_PER_REQUEST = 5_000


def create_topics(
    config: Mapping[str, Any],
    topics: Mapping[str, int],
    timeout: float = 30.0,
    topic_config: Mapping[str, Any] | None = None,
) -> None:
    """Create ``{name: partitions}`` topics (replication factor 1) and wait until they exist.

    :param topic_config: topic settings for each of them, e.g. ``{"max.message.bytes": ...}``
        for records over Kafka's 1 MiB default.
    """
    admin = AdminClient({**config, "logger": LIBRDKAFKA_LOGGER})
    settings = {key: str(value) for key, value in (topic_config or {}).items()}
    # Apache Kafka's controller refuses one operation of over 10,000 records ("excessively large
    # batch operation"): a larger topic is made in steps, then grown.
    for name, n in topics.items():  # the controller's cap is per request: one topic each
        first = NewTopic(name, min(n, PARTITIONS_PER_REQUEST), 1, config=settings)
        futures = admin.create_topics([first], request_timeout=timeout)
        for future in futures.values():
            future.result(timeout)
    for name, n in topics.items():
        for total in range(2 * PARTITIONS_PER_REQUEST, n + PARTITIONS_PER_REQUEST, PARTITIONS_PER_REQUEST):
            grown = admin.create_partitions([NewPartitions(name, min(total, n))], request_timeout=timeout)
            for future in grown.values():
                future.result(timeout)
    deadline = time.monotonic() + timeout  # until the metadata a new client gets shows every partition
    while (short := {name: n for name, n in topics.items() if partition_count(admin, name) < n}) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    if short:
        raise TimeoutError(f"topics {sorted(short)} did not show all their partitions within {timeout:g}s")


def partition_count(admin: AdminClient, topic: str) -> int:
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    return 0 if found is None or found.error is not None else len(found.partitions)


def produce(config: Mapping[str, Any], topic: str, records: Iterable[Record], linger_ms: int = 20) -> dict[int, int]:
    """Produce ``records`` as one burst; returns how many records went to each partition.

    Every record but each partition's last goes first, then a flush, then the last record
    of each partition alone in its batch (see the module docstring for why).
    """
    by_partition: dict[int, list[Record]] = defaultdict(list)
    for record in records:
        by_partition[record.partition].append(record)
    producer = Producer(
        {
            **config,
            "linger.ms": linger_ms,
            "batch.num.messages": 10_000,
            # A request retried on a loaded machine must not write its records twice.
            "enable.idempotence": True,
            "logger": LIBRDKAFKA_LOGGER,
        }
    )
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(err.str())

    def send(record: Record) -> None:
        kwargs: dict[str, Any] = {"partition": record.partition, "value": record.value, "key": record.key}
        if record.headers:
            kwargs["headers"] = list(record.headers)
        if record.timestamp_ms is not None:
            kwargs["timestamp"] = record.timestamp_ms
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery, **kwargs)
                return
            except BufferError:
                producer.poll(0.1)  # local queue full: let deliveries drain

    for partition_records in by_partition.values():
        for record in partition_records[:-1]:
            send(record)
    producer.flush()
    for partition_records in by_partition.values():
        send(partition_records[-1])
    producer.flush()
    if errors:
        raise RuntimeError(f"{len(errors)} record(s) not delivered to {topic}: {errors[0]}")
    return {p: len(rs) for p, rs in by_partition.items()}


def wait_until_stable(
    config: Mapping[str, Any], topic: str, partitions: Iterable[int] = (0,), timeout: float = 30.0
) -> dict[int, int]:
    """Wait until no transaction is open on ``partitions`` of ``topic``: the last stable offset
    (the ``read_committed`` end) equals the high watermark. Returns the end of each partition.

    Why: ``commit_transaction()`` and ``abort_transaction()`` return once the coordinator has
    logged the decision; it writes the markers into the partitions a moment later. Until then
    real Kafka's ``read_committed`` end stays before the transaction (tansu's does not), so a
    test that plans right after a commit must wait for the state it means to plan on.
    """
    import time

    from kafka_batch_provider.core.offsets import TopicPartition
    from kafka_batch_provider.kafka.client import KafkaOffsets

    tps = [TopicPartition(topic, p) for p in partitions]
    committed_view = KafkaOffsets({**config, "isolation.level": "read_committed"}, timeout=timeout)
    uncommitted_view = KafkaOffsets({**config, "isolation.level": "read_uncommitted"}, timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        stable, high = committed_view.log_end_offsets(tps), uncommitted_view.log_end_offsets(tps)
        if stable == high:
            return {tp.partition: end for tp, end in high.items()}
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: a transaction still open after {timeout:g}s (stable {stable}, high {high})")
        time.sleep(0.05)


def sample_records(
    partitions: int, count: int, value_size: int = 200, first_id: int = 0, timestamp_ms: int | None = None
) -> Iterable[Record]:
    """``count`` JSON-ish records spread round-robin over ``partitions``, ``value_size`` bytes each."""
    for i in range(first_id, first_id + count):
        body = b'{"id":%d,"payload":"' % i
        tail = b'"}'
        pad = max(value_size - len(body) - len(tail), 0)
        yield Record(
            partition=i % partitions,
            key=b"user-%d" % (i % 97),
            value=body + b"x" * pad + tail,
            headers=(("source", b"sample"),),
            timestamp_ms=timestamp_ms,
        )


def broker_supports_offsets_for_times(config: Mapping[str, Any], topic: str) -> bool:
    """Probe: does ListOffsets by timestamp work? (tansu's memory storage answers 0 always.)

    Produces two records one minute apart into ``topic`` (a fresh 1-partition topic) and asks
    for the second one's timestamp. They are stamped minutes ago, not years: a real Kafka's
    retention would delete records years old before the question is asked.
    """
    import time

    from kafka_batch_provider.core.offsets import TopicPartition
    from kafka_batch_provider.kafka.client import KafkaOffsets

    base = int(time.time() * 1000) - 180_000
    produce(config, topic, [Record(0, b"probe", timestamp_ms=base)])
    produce(config, topic, [Record(0, b"probe", timestamp_ms=base + 60_000)])
    tp = TopicPartition(topic, 0)
    return KafkaOffsets(dict(config), timeout=10).offsets_for_times([tp], base + 1)[tp] == 1
