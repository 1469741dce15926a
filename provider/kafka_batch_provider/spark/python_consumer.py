"""The ``python`` reader's consumer: confluent-kafka's messages, their columns built from Python lists.

One :class:`~kafka_batch_provider.spark.kafka_reader.RangeConsumer`; the range reader's loop
(:func:`~kafka_batch_provider.spark.kafka_reader.read_range`) drives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.kafka.config import reader_consumer_config
from kafka_batch_provider.spark.kafka_columns import HEADER_TYPE, kafka_batch


def messages_to_batch(messages: list, topic: str, partition: int) -> pa.RecordBatch:
    """Arrow columns for messages of one partition, built in bulk from plain lists.

    One pass per column is several times faster than one loop appending to many lists, and
    ``map`` over the unbound method ~6 % faster than a list comprehension (measured on fresh
    messages: ~2.2 µs per record in all, half of it ``headers()`` and ``timestamp()``, which
    build Python objects on their first call); Arrow converts each list in C.
    """
    timestamps = list(map(Message.timestamp, messages))
    return kafka_batch(
        topic,
        partition,
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        # Kafka timestamps are milliseconds; Spark's are microseconds. -1 means "none".
        pa.array([ts * 1000 if ts >= 0 else None for _, ts in timestamps], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        ),
        pa.array([kind for kind, _ in timestamps], pa.int32()),
        # headers() is None without headers: a null, as Spark's Kafka source gives.
        pa.array(list(map(Message.headers, messages)), HEADER_TYPE),
    )


class PythonRangeConsumer:
    """confluent-kafka's ``Consumer`` assigned to ``offset_range`` from its start."""

    name = "python"

    def __init__(self, kafka_config: Mapping[str, Any], offset_range: OffsetRange) -> None:
        self.topic, self.partition = offset_range.topic, offset_range.partition
        self._consumer = Consumer(reader_consumer_config(kafka_config))
        self._consumer.assign([KafkaTopicPartition(self.topic, self.partition, offset_range.start)])

    def consume(self, n: int, timeout: float, end: int) -> tuple[pa.RecordBatch | None, list[KafkaError]]:
        good, errors = [], []
        for m in self._consumer.consume(n, timeout=timeout):
            error = m.error()
            if error is None:
                good.append(m)
            else:
                errors.append(error)
        if good and good[-1].offset() >= end:
            # The fetch ran past the planned end: keep only offsets inside the range.
            good = [m for m in good if m.offset() < end]
        return (messages_to_batch(good, self.topic, self.partition) if good else None), errors

    def position(self) -> int:
        return self._consumer.position([KafkaTopicPartition(self.topic, self.partition)])[0].offset

    def close(self) -> None:
        self._consumer.close()
