"""The ``kafka_batch`` PySpark data source: bounded Kafka reads with no JVM connector.

For notebooks and jobs of your own (the ingestion itself maps the plan's slices directly,
see :mod:`kafka_batch_provider.spark.slice_reader`, which spares the data source's lookup and
planning processes and keeps the Kafka settings out of the query plan)::

    spark.dataSource.register(KafkaBatchDataSource)
    df = (spark.read.format("kafka_batch")
          .option("ranges", ranges_json(plan.readable_ranges))
          .option("kafka.bootstrap.servers", "...")
          .load())

Options use the vocabulary of Spark's own Kafka source: librdkafka settings are passed as
``kafka.<key>`` options (Spark redacts option values whose keys match ``spark.redaction.regex``;
set it to :data:`~kafka_batch_provider.kafka.config.SECRET_KEY_PATTERN` for SASL settings).
Each range is split into slices of at most ``maxOffsetsPerTask`` offsets, one Spark task each.
``reader`` is ``native`` (the default) or ``python`` (:mod:`kafka_batch_provider.spark.native_consumer`).

With ``receipts=true`` the schema gains a ``_receipt`` column, as the ingestion's reader has
(see :func:`~kafka_batch_provider.spark.slice_reader.read_slice`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.task_packing import slices_for
from kafka_batch_provider.core.write_options import (
    DEFAULT_MAX_OFFSETS_PER_TASK,
    DEFAULT_READER,
    DEFAULT_STALL_TIMEOUT,
    PYTHON_WORKER_READERS,
)
from kafka_batch_provider.spark.slice_reader import KAFKA_SCHEMA_DDL, read_slice
from kafka_batch_provider.spark.task_writer import RECEIPT_COLUMN


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
        if wants_receipts(self.options):
            return f"{KAFKA_SCHEMA_DDL}, {RECEIPT_COLUMN} string"
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
        self.batch_size = int(options["messagesPerBatch"]) if "messagesPerBatch" in options else None
        self.stall_timeout = float(options.get("stallTimeoutSeconds", DEFAULT_STALL_TIMEOUT))
        self.receipts = wants_receipts(options)
        self.reader = options.get("reader", DEFAULT_READER)
        if self.reader not in PYTHON_WORKER_READERS:
            raise ValueError(f"reader must be one of {', '.join(PYTHON_WORKER_READERS)}, got {self.reader!r}")

    def partitions(self) -> list[KafkaRangePartition]:
        return [
            KafkaRangePartition(piece.topic, piece.partition, piece.start, piece.end)
            for piece in slices_for(self.ranges, self.max_offsets_per_task, None)
        ]

    def read(self, partition: KafkaRangePartition) -> Iterator:
        piece = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        yield from read_slice(self.kafka_config, piece, self.batch_size, self.stall_timeout, self.receipts, self.reader)


def wants_receipts(options: Mapping[str, str]) -> bool:
    return str(options.get("receipts", "false")).lower() == "true"
