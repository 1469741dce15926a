"""The write step inside each Spark task: Arrow batches in, one Parquet file and a report out.

Used as ``df.mapInArrow(TaskWriter(...), REPORT_SCHEMA).collect()``: every task writes the
rows of its input partition with pyarrow to one file (one per date with ``partition_by="date"``)
in the batch's staging folder, on any
filesystem fsspec reaches (so a cluster needs no Hadoop connector for S3, GCS or Azure), and
yields one JSON report: the file, its rows and bytes, per Kafka partition the rows and offset
and timestamp bounds it wrote, and the reader's receipts (what the reading task read, see
:mod:`kafka_batch_provider.spark.slice_reader`). Dead letters (records whose value could not be
decoded, :mod:`kafka_batch_provider.decoding.dead_letters`) go to files of their own in the
staging folder's ``_dead_letters/``, reported beside the data files. ``collect()`` brings the reports of the successful
task attempts to the driver, which checks them before anything is published
(:mod:`kafka_batch_provider.core.write_check`). Files of failed attempts are never reported and
never published.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.decoding.dead_letters import DeadLetterBatch
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.output.dead_letter_files import staged_dead_letters
from kafka_batch_provider.output.parquet_files import DEFAULT_TARGET_BYTES, PartFiles

#: The column carrying the reader's receipts (one row per read slice; null on record rows).
RECEIPT_COLUMN = "_receipt"
#: What each task returns.
REPORT_SCHEMA = "report string"


@dataclass(frozen=True)
class TaskWriter:
    """The function each Spark task runs (picklable; storage options are never shown).

    :param output: the output location (a local path or a URI).
    :param staging: the batch's staging folder, relative to the output.
    :param storage_options: fsspec options for the output's filesystem.
    """

    output: str
    staging: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    compression: str = "snappy"
    #: ``"date"``: one file per UTC date of the Kafka timestamp (tables partition by it)
    partition_by: str | None = None
    #: a file is rolled to a next one once it holds about this many bytes
    target_bytes: int = DEFAULT_TARGET_BYTES

    # mapInArrow names the function after __name__ in plans and the UI: keep it plain.
    __name__ = "kafka_batch_write_parquet"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        from kafka_batch_provider import __version__
        from kafka_batch_provider.output.location import Location, fsync_dir

        context = TaskContext.get()
        task = f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
        location = Location(self.output, self.storage_options)
        receipts: list[dict[str, Any]] = []
        files = PartFiles(
            location,
            self.staging,
            f"part-{task}-{uuid.uuid4().hex[:8]}",
            self.compression,
            target_bytes=self.target_bytes,
        )
        written = WrittenStats()
        dead_letters = PartFiles(
            location, staged_dead_letters(self.staging), files.stem, self.compression, target_bytes=self.target_bytes
        )
        dead = WrittenStats()
        try:
            for batch in batches:
                if isinstance(batch, DeadLetterBatch):
                    dead_letters.write(None, batch.rows)
                    dead.add(batch.rows)
                    fail_point("writing-dead-letters")
                    continue
                batch, batch_receipts = split_receipts(batch)
                receipts.extend(batch_receipts)
                if batch.num_rows == 0:
                    continue
                for date, part in split_by_date(batch) if self.partition_by == "date" else [(None, batch)]:
                    files.write(date, part)
                written.add(batch)
        except BaseException:
            # The attempt failed: its files are never reported, so never published. Close them
            # without writing what waits, and let the original error decide the retry.
            for part_files in (files, dead_letters):
                with contextlib.suppress(Exception):
                    part_files.close(finish=False)
            raise
        else:
            files.close()
            dead_letters.close()
        finally:
            release_memory()
        for part_files in (files, dead_letters):
            if part_files.files and location.is_local:
                fsync_dir(location.path(part_files.staging))
        report = {
            "files": files.report(),
            "written": written.to_list(),
            "dead_letter_files": dead_letters.report(),
            "dead_letters": dead.to_list(),
            "receipts": receipts,
            "version": __version__,  # the driver refuses reports of another version
        }
        yield pa.RecordBatch.from_pylist([{"report": json.dumps(report)}])


@functools.cache
def freeze_imports() -> None:
    """Take what this worker holds at its first task's start (its imports: pyspark, pyarrow, this
    package) out of the garbage collector's sight, once per process.

    pyspark's daemon runs ``gc.collect()`` after every task of a reused worker; a full collection
    walks every object of those imports each time (~20 % of a warm batch's worker CPU, measured
    with py-spy). Frozen, each collection walks only what the tasks made since. Objects that live
    as long as the process lose nothing by it.
    """
    gc.freeze()


def release_memory() -> None:
    """Hand the task's freed buffers back to the system: Spark reuses this worker for the next
    task, which would otherwise start on top of this one's high-water mark."""
    pa.default_memory_pool().release_unused()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)  # librdkafka's and Python's freed blocks
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim


def split_by_date(batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
    """The batch's rows grouped by the UTC date of their Kafka timestamp (``YYYY-MM-DD``)."""
    days = pc.strftime(pc.cast(batch.column("timestamp"), pa.timestamp("us", tz="UTC")), format="%Y-%m-%d")
    values = pc.unique(days).to_pylist()
    if len(values) == 1:
        return [(values[0], batch)]
    return [(day, batch.filter(pc.is_null(days) if day is None else pc.equal(days, day))) for day in values]


def split_receipts(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list[dict[str, Any]]]:
    """The record rows without the receipt column, and the receipts found in the batch."""
    if RECEIPT_COLUMN not in batch.schema.names:
        return batch, []
    column = batch.column(RECEIPT_COLUMN)
    is_receipt = pc.is_valid(column)
    receipts = [json.loads(text) for text in column.filter(is_receipt).to_pylist()]
    records = batch.filter(pc.invert(is_receipt)) if receipts else batch
    return records.drop_columns([RECEIPT_COLUMN]), receipts


class WrittenStats:
    """Rows, offset and timestamp bounds per Kafka partition, of the rows a task wrote."""

    def __init__(self) -> None:
        self.rows = 0
        self.by_partition: dict[tuple[str, int], dict[str, Any]] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        grouped = (
            pa.Table.from_batches([batch])
            .group_by(["topic", "partition"])
            .aggregate([("offset", "count"), ("offset", "min"), ("offset", "max"), ("timestamp", "min_max")])
        )
        for row in grouped.to_pylist():
            key = (row["topic"], int(row["partition"]))
            stamps = row["timestamp_min_max"]
            entry = self.by_partition.setdefault(
                key, {"topic": key[0], "partition": key[1], "rows": 0, "min_offset": None, "max_offset": None}
            )
            entry["rows"] += int(row["offset_count"])
            entry["min_offset"] = smaller(entry["min_offset"], row["offset_min"])
            entry["max_offset"] = larger(entry["max_offset"], row["offset_max"])
            entry["min_timestamp"] = smaller(entry.get("min_timestamp"), micros(stamps["min"]))
            entry["max_timestamp"] = larger(entry.get("max_timestamp"), micros(stamps["max"]))

    def to_list(self) -> list[dict[str, Any]]:
        return list(self.by_partition.values())


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(moment: datetime | None) -> int | None:
    """Epoch microseconds, exactly (JSON-friendly; Spark's timestamps arrive as aware datetimes)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - EPOCH) // timedelta(microseconds=1)


def smaller(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def larger(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)
