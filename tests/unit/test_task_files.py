"""How a Spark task lays out its Parquet file: the reader's small Arrow batches become large row
groups (no Spark needed: :class:`PartFiles` is plain pyarrow)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.spark.task_writer import PartFiles
from kafka_batch_provider.storage import Location


def batch(first: int, rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"offset": list(range(first, first + rows)), "value": [b"x" * 100] * rows})


def test_small_batches_are_joined_into_row_groups_of_the_target_size(tmp_path):
    size = batch(0, 1_000).nbytes
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00000-0", "snappy", row_group_bytes=3 * size)
    for index in range(10):
        files.write(None, batch(index * 1_000, 1_000))
    files.close()
    parquet = pq.ParquetFile(tmp_path / "_staging" / "part-00000-0.parquet")
    groups = [parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)]
    assert groups == [3_000, 3_000, 3_000, 1_000], f"expected three full row groups and the rest, found {groups}"
    offsets = parquet.read().column("offset").to_pylist()
    assert offsets == list(range(10_000)), "expected every row once, in order"
    assert files.rows == {None: 10_000}, f"expected 10,000 rows reported, found {files.rows}"


def test_each_dated_file_gets_its_own_row_groups(tmp_path):
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00001-0", "snappy", row_group_bytes=1 << 30)
    files.write("2026-11-22", batch(0, 10))
    files.write("2026-11-23", batch(10, 5))
    files.write("2026-11-22", batch(15, 10))
    files.close()
    found = {
        day: pq.read_table(tmp_path / "_staging" / f"part-00001-0.{day}.parquet").column("offset").to_pylist()
        for day in ("2026-11-22", "2026-11-23")
    }
    assert found == {"2026-11-22": list(range(10)) + list(range(15, 25)), "2026-11-23": list(range(10, 15))}, found
