"""The ``python`` reader as Spark runs it: tasks reading runs of the plan's slices, no data source.

``spark.range(n, numPartitions=t).mapInArrow(SliceReader(...))`` gives each of ``t`` tasks a
run of slice ids, and the task reads those slices of the plan, one after the other, with
confluent-kafka
(:func:`~kafka_batch_provider.spark.kafka_reader.read_range`). Compared with a PySpark data
source this saves, per batch, the Python processes Spark starts to look data sources up, to
create the source and to plan its partitions; and the Kafka settings (secrets included)
travel inside the pickled function, never as source options that a query plan, the Spark UI
or a Spark Connect server's log could print.

:class:`ReadAndWrite` runs the reader and the task writers in the same Python worker, so the
records never cross to the JVM and back (~40 % of a batch's time, measured in ``make bench``)
unless Spark has work to do between them (``--value-format json`` parses with Spark's own
``from_json``).

Receipts: every slice ends with one extra row whose ``_receipt`` column says what the task
read (slice, position reached, rows, first and last offset); the writer strips it and reports
it, so the driver compares what was read with what was written, task by task.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.write_options import DEFAULT_READER
from kafka_batch_provider.spark.task_writer import RECEIPT_COLUMN, freeze_imports, release_memory

#: Spark's Kafka source schema, as DDL.
KAFKA_SCHEMA_DDL = (
    # timestamp_ltz, not timestamp: a session's spark.sql.timestampType must not change it.
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp_ltz, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)


def read_slice(
    kafka_config: Mapping[str, Any],
    piece: OffsetRange,
    batch_size: int | None,
    stall_timeout: float,
    receipts: bool,
    reader: str,
) -> Iterator[pa.RecordBatch]:
    """The records of one slice as Arrow batches, and with ``receipts`` a last row saying what was read.

    :param reader: ``native`` or ``python`` (:func:`~kafka_batch_provider.spark.kafka_reader.range_consumer`).
    """
    from kafka_batch_provider.spark.kafka_reader import BATCH_MESSAGES, KAFKA_ARROW_SCHEMA, ReadStats, read_range

    stats = ReadStats(piece.topic, piece.partition, piece.start, piece.end, piece.start)
    batch_size = batch_size or BATCH_MESSAGES
    batches = read_range(kafka_config, piece, batch_size, stall_timeout=stall_timeout, stats=stats, reader=reader)
    try:
        if not receipts:
            yield from batches
            return
        for batch in batches:
            yield batch.append_column(RECEIPT_COLUMN, pa.nulls(batch.num_rows, pa.string()))
    finally:
        release_memory()  # also where the reader runs in a worker of its own (json, the data source)
    receipt = {name: [None] for name in KAFKA_ARROW_SCHEMA.names}
    receipt.update(topic=[piece.topic], partition=[piece.partition], **{RECEIPT_COLUMN: [json.dumps(stats.to_dict())]})
    yield pa.RecordBatch.from_pydict(receipt, schema=KAFKA_ARROW_SCHEMA.append(pa.field(RECEIPT_COLUMN, pa.string())))


@dataclass(frozen=True)
class SliceReader:
    """The function each reading task runs on its slice ids (picklable; the config is never shown).

    :param slices: the plan's slices.
    :param kafka_config: librdkafka settings of the reading consumers.
    :param packs: the slices (by index) each Spark task reads, one after the other
        (:func:`kafka_batch_provider.core.task_packing.pack`); empty: a task per slice.
    """

    slices: tuple[OffsetRange, ...]
    kafka_config: Mapping[str, Any] = field(repr=False)
    reader: str = DEFAULT_READER  # native or python: whose consumer reads (kafka_reader.range_consumer)
    batch_size: int | None = None  # None: the reader's own (kafka_reader.BATCH_MESSAGES)
    stall_timeout: float = 120.0
    receipts: bool = True
    packs: tuple[tuple[int, ...], ...] = ()

    # mapInArrow names the function after __name__ in plans and the UI: keep it plain.
    __name__ = "kafka_batch_read"

    @property
    def schema_ddl(self) -> str:
        return f"{KAFKA_SCHEMA_DDL}, {RECEIPT_COLUMN} string" if self.receipts else KAFKA_SCHEMA_DDL

    def slice_ids(self, spark: Any) -> Any:
        """One row and one Spark partition per task (a pack's index, or a slice's when there are no
        packs): the DataFrame the reading tasks map."""
        count = len(self.packs) or len(self.slices)
        return spark.range(0, count, 1, max(count, 1))

    def frame(self, spark: Any) -> Any:
        """A DataFrame of the slices' records (and receipts), in the schema of Spark's Kafka source."""
        return self.slice_ids(spark).mapInArrow(self, self.schema_ddl)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for index in self.packs[task] if self.packs else (task,):
                    yield from read_slice(
                        self.kafka_config,
                        self.slices[index],
                        self.batch_size,
                        self.stall_timeout,
                        self.receipts,
                        self.reader,
                    )


def string_columns(value_format: str, key_format: str = "bytes") -> list[pa.Field]:
    """The columns :func:`decode_in_arrow` adds: ``value_string``, ``key_string``."""
    formats = (("value", value_format), ("key", key_format))
    return [pa.field(f"{part}_string", pa.string()) for part, fmt in formats if fmt == "string"]


def decode_in_arrow(batch: pa.RecordBatch, value_format: str, key_format: str = "bytes") -> pa.RecordBatch:
    """``value_string`` (``key_string``) as Spark's ``make_valid_utf8(CAST(value AS STRING))`` gives it."""
    for added in string_columns(value_format, key_format):
        batch = batch.append_column(added, valid_utf8(batch.column(added.name.removesuffix("_string"))))
    return batch


def valid_utf8(values: pa.Array) -> pa.Array:
    """The bytes as strings; sequences that are not UTF-8 become U+FFFD (a Parquet string
    column that is not UTF-8 breaks its readers). Valid batches, the usual case, are not copied."""
    text = values.view(pa.string())
    try:
        text.validate(full=True)
        return text
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()], pa.string())


#: The route of every slice when a batch goes to one output.
ANY_TOPIC = "*"


@dataclass(frozen=True)
class Route:
    """Where one output's records go in a task: its writer, after its decoding.

    :param writer: the output's :class:`~kafka_batch_provider.spark.task_writer.TaskWriter`.
    :param decoding: values or keys in a schema registry format: the output's
        :class:`~kafka_batch_provider.spark.value_decoding.ValueDecoding`.
    """

    writer: Any
    decoding: Any = None


@dataclass(frozen=True)
class ReadAndWrite:
    """Reader and task writers in one Python worker (every value format but ``json``).

    Each task reads its slices and hands each topic's records to the route of that topic (one
    table per topic, :mod:`kafka_batch_provider.steps.tables`) or, for one output, all of them to
    the route :data:`ANY_TOPIC`. Each route's writer reports on its own, tagged ``route``.

    :param reader: the :class:`SliceReader` (with receipts).
    :param routes: ``{topic or ANY_TOPIC: Route}``.
    """

    reader: SliceReader
    routes: Mapping[str, Route]
    value_format: str = "bytes"
    key_format: str = "bytes"

    __name__ = "kafka_batch_read_write_parquet"

    def route_of(self, index: int) -> str:
        topic = self.reader.slices[index].topic
        return topic if topic in self.routes else ANY_TOPIC

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        reader = self.reader
        for batch in batches:
            for task in batch.column(0).to_pylist():
                members = reader.packs[task] if reader.packs else (task,)
                for key, run in itertools.groupby(members, key=self.route_of):
                    route = self.routes[key]
                    read = (
                        b
                        for index in run
                        for b in read_slice(
                            reader.kafka_config,
                            reader.slices[index],
                            reader.batch_size,
                            reader.stall_timeout,
                            True,
                            reader.reader,
                        )
                    )
                    decoded = (decode_in_arrow(b, self.value_format, self.key_format) for b in read)
                    reports = route.writer(route.decoding(decoded) if route.decoding is not None else decoded)
                    yield from (tagged(report, key) for report in reports)


def tagged(report: pa.RecordBatch, route: str) -> pa.RecordBatch:
    """The writer's report rows with the route they are of."""
    texts = [json.dumps({**json.loads(text), "route": route}) for text in report.column(0).to_pylist()]
    return pa.RecordBatch.from_arrays([pa.array(texts, pa.string())], schema=report.schema)
