"""The write step inside each Spark task: Arrow batches in, one Parquet file and a report out.

Used as ``df.mapInArrow(TaskWriter(...), REPORT_SCHEMA).collect()``: every task writes the
rows of its input partition with pyarrow to one file in the batch's staging folder, on any
filesystem fsspec reaches (so a cluster needs no Hadoop connector for S3, GCS or Azure), and
yields one JSON report: the file, its rows and bytes, per Kafka partition the rows and offset
and timestamp bounds it wrote, and the reader's receipts (what the reading task read, see
:mod:`kafka_batch_provider.spark.source`). ``collect()`` brings the reports of the successful
task attempts to the driver, which checks them before anything is published
(:mod:`kafka_batch_provider.write_check`). Files of failed attempts are never reported and
never published.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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

    # mapInArrow names the function after __name__ in plans and the UI: keep it plain.
    __name__ = "kafka_batch_write_parquet"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        from kafka_batch_provider.storage import Location, fsync_dir

        context = TaskContext.get()
        task = f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
        name = f"part-{task}-{uuid.uuid4().hex[:8]}.parquet"
        location = Location(self.output, self.storage_options)
        receipts: list[dict[str, Any]] = []
        written = WrittenStats()
        writer = stream = None
        try:
            for batch in batches:
                batch, batch_receipts = split_receipts(batch)
                receipts.extend(batch_receipts)
                if batch.num_rows == 0:
                    continue
                if writer is None:
                    stream = location.write_stream(f"{self.staging}/{name}")
                    writer = pq.ParquetWriter(stream, batch.schema, compression=self.compression)
                writer.write_batch(batch)
                written.add(batch)
        finally:
            if writer is not None:
                writer.close()
            if stream is not None:
                if location.is_local:  # the Kafka commit will rely on these bytes being on disk
                    stream.flush()
                    os.fsync(stream.fileno())
                stream.close()
        files = []
        if writer is not None:
            if location.is_local:
                fsync_dir(location.path(self.staging))
            size = location.file_sizes(self.staging).get(name, -1)
            files.append({"name": name, "bytes": size, "rows": written.rows})
        report = {"files": files, "written": written.to_list(), "receipts": receipts}
        yield pa.RecordBatch.from_pylist([{"report": json.dumps(report)}])


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
