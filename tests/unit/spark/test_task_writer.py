"""How a Spark task lays out its Parquet file: the reader's small Arrow batches become large row
groups (no Spark needed: :class:`PartFiles` is plain pyarrow)."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.parquet_files import PartFiles


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


def test_many_small_dates_never_wait_beyond_the_row_group_size(tmp_path):
    size = batch(0, 100).nbytes
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00002-0", "snappy", row_group_bytes=5 * size)
    for day in range(1, 21):
        files.write(f"2026-10-{day:02d}", batch(day * 100, 100))
        assert files.waiting_bytes < 5 * size, f"day {day}: {files.waiting_bytes} bytes waiting, limit {5 * size}"
    files.close()
    rows = sum(pq.read_metadata(path).num_rows for path in (tmp_path / "_staging").glob("*.parquet"))
    assert rows == 2_000, f"expected every row written once, found {rows}"


def test_a_failed_attempt_closes_its_files_without_writing_what_waits(tmp_path):
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00003-0", "snappy", row_group_bytes=1 << 30)
    files.write("2026-11-22", batch(0, 10))
    files.write("2026-11-23", batch(10, 10))
    streams = [stream for stream, _ in files.open.values()]
    files.close(finish=False)
    assert all(stream.closed for stream in streams), "expected every file closed"
    assert files.waiting_bytes == 0 and not files.open, "expected nothing left waiting or open"


def random_batch(first: int, rows: int) -> pa.RecordBatch:
    """Values that do not compress, so a file's size follows its rows."""
    values = [random.Random(first + i).randbytes(100) for i in range(rows)]
    return pa.RecordBatch.from_pydict({"offset": list(range(first, first + rows)), "value": values})


def test_a_file_is_rolled_at_the_target_size_and_every_row_lands_once(tmp_path):
    size = random_batch(0, 1_000).nbytes  # ~110 KB
    target = 3 * size
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00004-0", "snappy", target_bytes=target)
    for index in range(20):
        files.write("2026-11-24", random_batch(index * 1_000, 1_000))
    files.close()
    report = files.report()
    names = sorted(f["name"] for f in report)
    assert len(names) > 3, f"expected ~2,200,000 bytes rolled into several files of ~{target}, found {names}"
    on_disk = sorted(p.name for p in (tmp_path / "_staging").glob("*.parquet"))
    assert names == on_disk, f"expected the report to name every file written: reported {names}, on disk {on_disk}"
    sizes = [f["bytes"] for f in report]
    assert all(s < 2 * target for s in sizes), f"expected files near {target} bytes, found {sizes}"
    offsets = sorted(
        o for name in on_disk for o in pq.read_table(tmp_path / "_staging" / name).column("offset").to_pylist()
    )
    assert offsets == list(range(20_000)), "expected every row once across the rolled files"
    assert sum(f["rows"] for f in report) == 20_000, f"expected the reported rows to add up to 20,000: {report}"
    assert all(f["partition"] == {"date": "2026-11-24"} for f in report), "expected every rolled file keeps its date"


def test_a_small_task_writes_one_file_per_date_whatever_the_target(tmp_path):
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00005-0", "snappy", target_bytes=1 << 20)
    for index in range(5):
        files.write("2026-11-23" if index % 2 else "2026-11-24", batch(index * 10, 10))
    files.close()
    names = sorted(f["name"] for f in files.report())
    assert names == ["part-00005-0.2026-11-23.parquet", "part-00005-0.2026-11-24.parquet"], names


def test_one_arrow_batch_larger_than_the_target_is_rolled_within(tmp_path):
    target = random_batch(0, 1_000).nbytes
    files = PartFiles(Location(str(tmp_path)), "_staging", "part-00006-0", "snappy", target_bytes=target)
    files.write(None, random_batch(0, 5_000))  # one reader batch of ~5 targets
    files.close()
    report = files.report()
    assert len(report) >= 4, f"expected one 5-target batch rolled into ~5 files, found {report}"
    assert sum(f["rows"] for f in report) == 5_000, f"expected 5,000 rows reported, found {report}"
