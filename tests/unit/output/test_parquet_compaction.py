"""The Parquet layout's compaction on a local disk, with batches written straight into the layout
(no broker, no Spark): runs of small folders merged, a compaction cut short finished by the next
upkeep, and readers that follow the log seeing every offset once throughout."""

from __future__ import annotations

import os
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kafka_batch_provider.output.parquet_compaction as parquet_compaction
from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.steps.upkeep import upkeep

SCHEMA = "struct<topic:string,partition:int,offset:bigint,value:binary>"


class Layout:
    """A Parquet layout whose batches (one file each) are written here, logged like real ones."""

    def __init__(self, root) -> None:
        self.root, self.end = str(root), 0

    def store(self) -> BatchStore:
        return BatchStore(self.root)

    def add_batch(self, seq: int, rows: int = 10, value_bytes: int = 100) -> None:
        batch_id, noise = f"b{seq:04d}", random.Random(seq)
        folder = os.path.join(self.root, f"batch_id={batch_id}")
        os.makedirs(folder)
        table = pa.table(
            {
                "topic": ["t"] * rows,
                "partition": pa.array([0] * rows, pa.int32()),
                "offset": pa.array(range(self.end, self.end + rows), pa.int64()),
                "value": [noise.randbytes(value_bytes) for _ in range(rows)],
            }
        )
        pq.write_table(table, os.path.join(folder, "part-0.parquet"))
        size = os.path.getsize(os.path.join(folder, "part-0.parquet"))
        entry = {
            "seq": seq, "batch_id": batch_id, "mode": "incremental", "rows": rows, "schema": SCHEMA,
            "ranges": [{"topic": "t", "partition": 0, "start": self.end, "end": self.end + rows}],
            "offsets": {"t:0": self.end + rows}, "files": [{"name": "part-0.parquet", "bytes": size, "rows": rows}],
            "staging": f"_staging/{batch_id}.0.sealed", "location": f"batch_id={batch_id}",
        }  # fmt: skip
        assert self.store().log.append(entry)
        self.end += rows

    def folders(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root) if n.startswith("batch_id="))

    def upkeep(self, **settings) -> UpkeepReport:
        return upkeep(self.store(), UpkeepSettings(target_file_mb=1, **settings), progress=lambda line: None)

    def assert_log_readers_see_every_offset_once(self) -> None:
        seen = Counter()
        for path in self.store().sink.readable_files():
            seen.update(pq.read_table(path, columns=["offset"]).column("offset").to_pylist())
        twice = sorted(o for o, n in seen.items() if n > 1)
        missing = sorted(set(range(self.end)) - set(seen))
        assert not twice and not missing, (
            f"expected offsets 0..{self.end - 1} once: twice {twice[:5]}, missing {missing[:5]}"
        )


@pytest.fixture
def layout(tmp_path) -> Layout:
    return Layout(tmp_path / "lake")


def test_upkeep_after_every_batch_still_merges_the_small_batches(layout):
    for seq in range(1, 8):
        layout.add_batch(seq)
        layout.upkeep()
    folders = layout.folders()
    assert len(folders) == 2 and folders[0] == "batch_id=b0007" and "compaction-" in folders[1], (
        f"expected batches 1-6 in one compaction beside the newest batch, found {folders}"
    )
    layout.assert_log_readers_see_every_offset_once()


def test_a_compaction_cut_short_under_a_newer_record_is_finished_and_readers_never_miss_a_row(layout, monkeypatch):
    for seq in range(1, 4):
        layout.add_batch(seq, value_bytes=70_000)  # ~700 KB each: two make a folder above the 1 MB target

    class Killed(BaseException):
        pass

    def kill(point: str) -> None:
        if point == "compaction-after-record":
            raise Killed

    monkeypatch.setattr(parquet_compaction, "fail_point", kill)
    with pytest.raises(Killed):
        layout.store().sink.compactions.compact(
            UpkeepSettings(target_file_mb=1), UpkeepReport("parquet", layout.root, False), lambda line: None
        )
    layout.assert_log_readers_see_every_offset_once()  # the record's files, still staged
    monkeypatch.setattr(parquet_compaction, "fail_point", lambda point: None)
    layout.add_batch(4)
    # A second upkeep, whose start (finishing what it found) came before the first one recorded:
    # it compacts on top, and must finish the first one's compaction before anything else.
    racing = UpkeepReport("parquet", layout.root, False)
    layout.store().sink.compactions.compact(UpkeepSettings(target_file_mb=1), racing, lambda line: None)
    report = layout.upkeep(retention_hours=1)
    assert not [f for f in layout.folders() if f in ("batch_id=b0001", "batch_id=b0002")], (
        f"expected the compacted batches' folders removed by the next upkeep, found {layout.folders()}"
    )
    assert racing.removed_files + report.removed_files >= 2, f"expected the replaced files counted: {racing}, {report}"
    layout.assert_log_readers_see_every_offset_once()
    layout.add_batch(5)
    layout.add_batch(6)
    layout.upkeep(retention_hours=1)
    layout.assert_log_readers_see_every_offset_once()
    staged = os.listdir(os.path.join(layout.root, "_staging")) if os.path.isdir(f"{layout.root}/_staging") else []
    assert not [s for s in staged if s.startswith("compaction-")], f"expected no compaction left staged: {staged}"
