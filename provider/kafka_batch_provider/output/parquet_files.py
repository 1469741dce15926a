"""Parquet files written with pyarrow, rolled at a target size: what a Spark task writes for a
batch (:mod:`kafka_batch_provider.spark.task_writer`) and what upkeep writes for a compaction
(:mod:`kafka_batch_provider.output.parquet_compaction`). Pure pyarrow on a :class:`Location`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.file_sizing import DEFAULT_TARGET_FILE_MB, MB

#: A row group is written once this many bytes of Arrow batches are waiting (or the file
#: closes). The reader hands over small batches (they stay in the CPU's cache: ~35 % less
#: CPU than 50,000-message batches); readers of the files want large row groups. 16 MB, not 32:
#: a worker holds the waiting batches and the encoded group at once (~100 MB less peak memory
#: with the reader's smaller fetches, at the same speed: kafka/config.py READER_DEFAULTS).
ROW_GROUP_BYTES = 16 * 1024 * 1024
DEFAULT_TARGET_BYTES = DEFAULT_TARGET_FILE_MB * MB


class PartFiles:
    """The Parquet files one task writes: one (one per date when partitioned by date), rolled
    to a next one when a file reaches ``target_bytes``."""

    def __init__(
        self,
        location: Any,
        staging: str,
        stem: str,
        compression: str,
        row_group_bytes: int = ROW_GROUP_BYTES,
        target_bytes: int = DEFAULT_TARGET_BYTES,
    ) -> None:
        self.location, self.staging, self.stem, self.compression = location, staging, stem, compression
        # A file can only be rolled between row groups: never let one outgrow the target.
        self.row_group_bytes = min(row_group_bytes, target_bytes)
        self.target_bytes = target_bytes
        self.open: dict[str | None, tuple[Any, Any]] = {}
        self.rows: dict[str | None, int] = {}
        self.names: dict[str | None, str] = {}
        self.waiting: dict[str | None, list[pa.RecordBatch]] = {}
        self.waiting_bytes = 0
        self.rolled: dict[str | None, int] = {}
        self.done: list[tuple[str | None, str, int]] = []  # (date, name, rows) of rolled files
        self.size_before: dict[str | None, int] = {}  # each open file's size before its last row group

    def write(self, date: str | None, batch: pa.RecordBatch) -> None:
        if batch.nbytes > self.row_group_bytes and batch.num_rows > 1:
            # Larger than a row group: in pieces of half one, so that row groups stay near their
            # size (two pieces fill one) and a file can roll within the batch.
            step = max(1, batch.num_rows * self.row_group_bytes // (2 * batch.nbytes))
            for first in range(0, batch.num_rows, step):
                self.write_piece(date, batch.slice(first, step))
        else:
            self.write_piece(date, batch)

    def write_piece(self, date: str | None, batch: pa.RecordBatch) -> None:
        if date not in self.open:
            self.start_file(date, batch.schema)
        self.waiting[date].append(batch)
        self.waiting_bytes += batch.nbytes
        self.rows[date] += batch.num_rows
        if self.waiting_bytes >= self.row_group_bytes:
            # Counted over all files: a task spanning many small dates never holds them all.
            for waiting_date in list(self.waiting):
                self.write_row_group(waiting_date)
                if self.full(waiting_date):
                    self.roll(waiting_date)

    def full(self, date: str | None) -> bool:
        """Whether the date's file should end here: one more row group like the last would
        overshoot the target by more than stopping now falls short of it."""
        written = self.open[date][0].tell()
        last_group = written - self.size_before.get(date, 0)
        self.size_before[date] = written
        return written + last_group / 2 >= self.target_bytes

    def start_file(self, date: str | None, schema: pa.Schema) -> None:
        # The date is in the name only to tell files apart: tables keep partition values in
        # their own metadata, never in paths.
        number = self.rolled.get(date, 0)
        stem = f"{self.stem}-{number}" if number else self.stem
        name = f"{stem}.{date}.parquet" if date else f"{stem}.parquet"
        stream = self.location.write_stream(f"{self.staging}/{name}")
        self.open[date] = (stream, pq.ParquetWriter(stream, schema, compression=self.compression))
        self.names[date], self.rows[date], self.waiting[date] = name, 0, []

    def roll(self, date: str | None) -> None:
        """Close the date's file at its target size; its next rows go into a new one."""
        stream, _ = self.open[date]
        try:
            self.finish_file(date)
        finally:
            stream.close()
        self.done.append((date, self.names[date], self.rows[date]))
        del self.open[date], self.names[date], self.rows[date], self.waiting[date], self.size_before[date]
        self.rolled[date] = self.rolled.get(date, 0) + 1

    def write_row_group(self, date: str | None) -> None:
        """The waiting batches of one file as one row group."""
        waiting = self.waiting[date]
        if waiting:
            table = pa.Table.from_batches(waiting)
            self.open[date][1].write_table(table, row_group_size=table.num_rows)
            self.waiting_bytes -= sum(batch.nbytes for batch in waiting)
            waiting.clear()

    def close(self, finish: bool = True) -> None:
        """Close every file, each even when another fails; with ``finish`` write what waits and
        make the bytes durable first (after a failed attempt nothing more is written)."""
        with contextlib.ExitStack() as closing:
            for date, (stream, writer) in self.open.items():
                closing.callback(stream.close)
                if finish:
                    closing.callback(self.finish_file, date)
                else:
                    closing.callback(writer.close)
        self.open.clear()
        for waiting in self.waiting.values():
            waiting.clear()
        self.waiting_bytes = 0

    def finish_file(self, date: str | None) -> None:
        stream, writer = self.open[date]
        try:
            self.write_row_group(date)
        finally:
            writer.close()
        if self.location.is_local:  # the Kafka commit will rely on these bytes being on disk
            stream.flush()
            os.fsync(stream.fileno())

    @property
    def files(self) -> list[tuple[str | None, str, int]]:
        """``(date, name, rows)`` of every file written, rolled ones included."""
        return self.done + [(date, name, self.rows[date]) for date, name in self.names.items()]

    def report(self) -> list[dict[str, Any]]:
        files = self.files
        if not files:
            return []
        sizes = self.location.file_sizes(self.staging)
        return [
            {"name": name, "bytes": sizes.get(name, -1), "rows": rows} | ({"partition": {"date": date}} if date else {})
            for date, name, rows in sorted(files, key=lambda file: file[1])
        ]
