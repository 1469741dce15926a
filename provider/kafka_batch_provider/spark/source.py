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

With ``receipts=true`` the schema gains a ``_receipt`` column: null on every record, and each
task ends its output with one extra row whose ``_receipt`` says what the task read (slice,
position reached, rows, first and last offset). The receipt travels with the data to the
writer in the same task, which strips it and reports it to the driver, so the driver can
compare what was read with what was written, task by task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kafka_batch_provider.offsets import OffsetRange
from kafka_batch_provider.spark.options import DEFAULT_MAX_OFFSETS_PER_TASK, DEFAULT_STALL_TIMEOUT
from kafka_batch_provider.spark.task_writer import RECEIPT_COLUMN

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
        self.batch_size = int(options.get("messagesPerBatch", 50_000))
        self.stall_timeout = float(options.get("stallTimeoutSeconds", DEFAULT_STALL_TIMEOUT))
        self.receipts = wants_receipts(options)

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
        import json

        import pyarrow as pa

        from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA, ReadStats, read_range

        piece = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        stats = ReadStats(piece.topic, piece.partition, piece.start, piece.end, piece.start)
        batches = read_range(
            self.kafka_config, piece, batch_size=self.batch_size, stall_timeout=self.stall_timeout, stats=stats
        )
        if not self.receipts:
            yield from batches
            return
        for batch in batches:
            yield batch.append_column(RECEIPT_COLUMN, pa.nulls(batch.num_rows, pa.string()))
        receipt = {name: [None] for name in KAFKA_ARROW_SCHEMA.names}
        receipt.update(
            topic=[piece.topic], partition=[piece.partition], **{RECEIPT_COLUMN: [json.dumps(stats.to_dict())]}
        )
        yield pa.RecordBatch.from_pydict(
            receipt, schema=KAFKA_ARROW_SCHEMA.append(pa.field(RECEIPT_COLUMN, pa.string()))
        )


def wants_receipts(options: Mapping[str, str]) -> bool:
    return str(options.get("receipts", "false")).lower() == "true"
