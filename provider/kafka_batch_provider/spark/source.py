"""The ``kafka_batch`` PySpark data source: bounded Kafka reads with no JVM connector.

Usage (what :mod:`kafka_batch_provider.spark.ingest` does)::

    spark.dataSource.register(KafkaBatchDataSource)
    df = (spark.read.format("kafka_batch")
          .option("ranges", ranges_json(plan.readable_ranges))
          .option("kafka.bootstrap.servers", "...")
          .load())

Options use the vocabulary of Spark's own Kafka source: librdkafka settings are passed as
``kafka.<key>`` options (Spark redacts option values whose keys look like secrets).
Each range is split into slices of at most ``maxOffsetsPerTask`` offsets, one Spark task each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kafka_batch_provider.offsets import OffsetRange
from kafka_batch_provider.spark.options import DEFAULT_MAX_OFFSETS_PER_TASK, DEFAULT_STALL_TIMEOUT

#: Spark's Kafka source schema, as DDL.
KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)


def ranges_json(ranges: Sequence[OffsetRange]) -> str:
    return json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges])


def parse_ranges(text: str) -> list[OffsetRange]:
    return [OffsetRange(str(t), int(p), int(s), int(e)) for t, p, s, e in json.loads(text)]


@dataclass
class KafkaRangePartition(InputPartition):
    """One Spark task: a slice ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)


class KafkaBatchDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka_batch"

    def schema(self) -> str:
        return KAFKA_SCHEMA_DDL

    def reader(self, schema) -> DataSourceReader:
        # Spark's options are case-insensitive (keys arrive lower-cased): keep the mapping.
        return KafkaBatchReader(self.options)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        if "ranges" not in options:
            raise ValueError("the kafka_batch source needs a 'ranges' option")
        self.ranges = parse_ranges(options["ranges"])
        self.kafka_config = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
        self.max_offsets_per_task = int(options.get("maxOffsetsPerTask", DEFAULT_MAX_OFFSETS_PER_TASK))
        self.batch_size = int(options.get("messagesPerBatch", 50_000))
        self.stall_timeout = float(options.get("stallTimeoutSeconds", DEFAULT_STALL_TIMEOUT))

    def partitions(self) -> list[KafkaRangePartition]:
        from kafka_batch_provider.planning import split_range

        return [
            KafkaRangePartition(piece.topic, piece.partition, piece.start, piece.end)
            for r in self.ranges
            for piece in split_range(r, self.max_offsets_per_task)
            if piece.size > 0
        ]

    def read(self, partition: KafkaRangePartition) -> Iterator:
        # Imported here: this runs in the executor's Python worker.
        from kafka_batch_provider.spark.kafka_reader import read_range

        yield from read_range(
            self.kafka_config,
            OffsetRange(partition.topic, partition.partition, partition.start, partition.end),
            batch_size=self.batch_size,
            stall_timeout=self.stall_timeout,
        )
