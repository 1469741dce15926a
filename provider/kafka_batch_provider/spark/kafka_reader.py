"""Read one offset range with librdkafka and yield Arrow record batches.

This is the inside of a Spark task (see :mod:`kafka_batch_provider.spark.source`) but has no
Spark in it, so it can be tested and benchmarked alone. One loop serves both readers; what
differs is the consumer (:class:`RangeConsumer`): the ``native`` reader's builds the Arrow columns
in C (:mod:`~kafka_batch_provider.spark.native_consumer`), the ``python`` reader's from
confluent-kafka's messages (:mod:`~kafka_batch_provider.spark.python_consumer`).

Why it looks the way it does:

* It stops when the consumer *position* reaches the range end, never after counting
  messages: transaction markers, aborted records and compaction leave offsets that are never
  delivered, so counting would wait forever for records that do not exist.
* ``auto.offset.reset=error``: if the start offset is gone, fail instead of silently
  jumping to another offset.
* Per-message Python work dominated the python reader's cost (each message touched once, the
  Arrow arrays built in bulk from plain lists); the native reader has none (3.6x, docs/performance.md).
* ``consume(n, timeout=1.0)``: a short timeout keeps a tight loop; 5 s was measured 4x slower.
* ``n`` is bounded by bytes as well as by count: with 64 KB values, 10,000 messages would be
  640 MB in one Arrow batch. The first call asks for few messages, later ones for as many as
  fit :data:`MAX_BATCH_BYTES` at the sizes seen so far, so a worker's memory stays flat; the
  count (:data:`BATCH_MESSAGES`) is small enough for the messages to stay in the CPU's cache.
* librdkafka's prefetch refills without its default 1 s backoff (see :data:`READER_DEFAULTS`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import pyarrow as pa
from confluent_kafka import KafkaError

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.core.write_options import DEFAULT_READER
from kafka_batch_provider.errors import ReadFailedError, ReadStalledError
from kafka_batch_provider.kafka.errors import READER_GROUP_ERRORS, is_transient
from kafka_batch_provider.spark.kafka_columns import HEADER_TYPE, KAFKA_ARROW_SCHEMA

__all__ = ["HEADER_TYPE", "KAFKA_ARROW_SCHEMA", "RangeConsumer", "ReadStats", "read_range"]

#: Arrow batches stay around this size (keys + values), whatever the record size.
MAX_BATCH_BYTES = 8 * 1024 * 1024
#: Messages per ``consume`` call, and so per Arrow batch: 10,000 keep the messages in the CPU's
#: cache while their columns are built (~35 % less CPU than 50,000, measured); the task writer
#: joins the batches into large row groups.
BATCH_MESSAGES = 10_000
#: Messages asked for before any size is known.
FIRST_BATCH_MESSAGES = 500


class RangeConsumer(Protocol):
    """One partition's reading consumer, assigned from its range's start: one module per
    implementation (``python_consumer``: confluent-kafka's messages; ``native_consumer``: Arrow
    columns built in C). :func:`read_range` owns the loop around it: positions, stalls, errors."""

    #: the reader it is (``native``, ``python``), as the receipts report it
    name: str

    def consume(self, n: int, timeout: float, end: int) -> tuple[pa.RecordBatch | None, list[KafkaError]]:
        """Up to ``n`` messages, waiting at most ``timeout`` s: the records below ``end`` as one
        batch (None: none), and the errors librdkafka delivered among them."""

    def position(self) -> int:
        """The partition's next offset to fetch (librdkafka's position)."""

    def close(self) -> None: ...


def range_consumer(
    reader: str, kafka_config: Mapping[str, Any], offset_range: OffsetRange
) -> tuple[RangeConsumer, str]:
    """The ``reader``'s consumer of ``offset_range``, and why the python one reads instead where the
    native one cannot here (``""``: it reads as asked; said once in the task's log, ``native_consumer.fallback``)."""
    reason = ""
    if reader == "native":
        from kafka_batch_provider.spark import native_consumer

        reason = native_consumer.why_not(kafka_config) or ""
        if not reason:
            return native_consumer.NativeRangeConsumer(kafka_config, offset_range), ""
        native_consumer.fallback(reason)
    from kafka_batch_provider.spark.python_consumer import PythonRangeConsumer

    return PythonRangeConsumer(kafka_config, offset_range), reason


@dataclass
class ReadStats:
    """What one read of ``[start, end)`` delivered, counted where it was read.

    :param position: the consumer position reached (``end`` once the read completed).
    :param transient_errors: outage errors (broker away, leader moving) read through.
    :param rows: records delivered; ``first_offset`` / ``last_offset`` bound them.
    :param reader: whose consumer read (``native`` or ``python``: the python reader where the
        native one does not load); empty for a range with nothing to read.
    :param not_native: why the python reader read where the native one was asked for.
    """

    topic: str
    partition: int
    start: int
    end: int
    position: int
    rows: int = 0
    transient_errors: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    reader: str = ""
    not_native: str = ""

    def count(self, batch: pa.RecordBatch) -> None:
        offsets = batch.column("offset")
        self.rows += batch.num_rows
        if self.first_offset is None:
            self.first_offset = offsets[0].as_py()
        self.last_offset = offsets[-1].as_py()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def messages_per_batch(batch: pa.RecordBatch, batch_size: int) -> int:
    """How many messages of the sizes in ``batch`` fit :data:`MAX_BATCH_BYTES` (at most ``batch_size``)."""
    payload = batch.column("key").nbytes + batch.column("value").nbytes
    per_message = max(1, payload // max(1, batch.num_rows))
    return max(1, min(batch_size, MAX_BATCH_BYTES // per_message))


def read_range(
    kafka_config: Mapping[str, Any],
    offset_range: OffsetRange,
    batch_size: int = BATCH_MESSAGES,
    poll_timeout: float = 1.0,
    stall_timeout: float = 120.0,
    stats: ReadStats | None = None,
    reader: str = DEFAULT_READER,
) -> Iterator[pa.RecordBatch]:
    """Yield every record of ``[start, end)`` of one partition, as Arrow batches.

    :param batch_size: messages asked from librdkafka per ``consume`` call (and so the
        largest Arrow batch).
    :param stall_timeout: seconds without progress before the read fails: the range was
        planned from offsets the broker reported, so a missing tail means the data is gone
        or the broker is unreachable, and waiting forever would hide it. Transient errors
        (broker away, leader moving) are read through until then; others fail at once.
    :param stats: filled in while reading (rows, first and last offset, position reached).
    :param reader: ``python`` (confluent-kafka's messages) or ``native`` (kafka_batch_native).
    :raises ReadStalledError: no progress for ``stall_timeout`` (transient: a retry may pass).
    :raises ReadFailedError: the broker answered with an error no retry changes.
    """
    topic, partition, start, end = offset_range.topic, offset_range.partition, offset_range.start, offset_range.end
    stats = stats if stats is not None else ReadStats(topic, partition, start, end, start)
    if start >= end:
        stats.position = end
        return
    consumer, stats.not_native = range_consumer(reader, kafka_config, offset_range)
    stats.reader = consumer.name
    position = start
    try:
        last_progress = time.monotonic()
        last_error = ""
        wanted = min(batch_size, FIRST_BATCH_MESSAGES)
        while position < end:
            # Never ask for more than the range can hold: consume() waits the whole timeout
            # for a count it cannot reach, which would add a poll timeout to every range.
            batch, errors = consumer.consume(min(wanted, end - position), poll_timeout, end)
            for error in errors:
                if error.code() == KafkaError._PARTITION_EOF or error.code() in READER_GROUP_ERRORS:
                    continue
                elif is_transient(error):
                    # The broker is away or its leader moving: librdkafka reconnects by itself;
                    # the stall timeout below bounds how long an outage may last.
                    stats.transient_errors += 1
                    last_error = error.str()
                else:
                    raise ReadFailedError(
                        f"{topic}[{partition}]: reading [{start}, {end}) failed at offset {position}: {error.str()}",
                        partition=offset_range.tp,
                        offsets=(start, end),
                    )
            # The position also moves over offsets that deliver nothing (control records).
            new_position = consumer.position()
            if batch is not None:
                stats.count(batch)
                wanted = messages_per_batch(batch, batch_size)
                new_position = max(new_position, stats.last_offset + 1)
                yield batch
            if new_position > position:
                position = stats.position = min(new_position, end)
                last_progress, last_error = time.monotonic(), ""
            elif time.monotonic() - last_progress > stall_timeout:
                cause = f"last error: {last_error}" if last_error else "records deleted, or broker unreachable"
                raise ReadStalledError(
                    f"{topic}[{partition}]: reading [{start}, {end}) stopped at offset {position}: "
                    f"no progress for {stall_timeout:g}s ({cause})",
                    setting=Setting("stall_timeout"),
                    partition=offset_range.tp,
                    offsets=(start, end),
                )
    finally:
        consumer.close()
