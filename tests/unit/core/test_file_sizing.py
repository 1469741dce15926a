"""How many tasks write a batch: near the target file size, one per slice when nothing is known."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.file_sizing import MB, bytes_per_offset, check_target_file_mb, writing_tasks
from kafka_batch_provider.errors import ConfigError


def entry(files_bytes: list[int], ranges: list[tuple[int, int]]) -> dict:
    return {
        "files": [{"name": f"f{i}", "bytes": b, "rows": 1} for i, b in enumerate(files_bytes)],
        "ranges": [{"topic": "t", "partition": p, "start": s, "end": e} for p, (s, e) in enumerate(ranges)],
    }


def test_bytes_per_offset_comes_from_the_entrys_files_and_ranges():
    assert bytes_per_offset(entry([600, 400], [(0, 10), (5, 15)])) == 50.0


@pytest.mark.parametrize("found", [None, {}, entry([], [(0, 10)]), entry([100], []), entry([100], [(5, 5)])], ids=str)
def test_an_entry_without_files_or_offsets_tells_nothing(found):
    assert bytes_per_offset(found) is None, f"expected no estimate from {found}"


@pytest.mark.parametrize(
    ("slices", "offsets", "per_offset", "parallelism", "expected"),
    [
        (200, 2_000, 100.0, 8, 1),  # 200 KB in 200 slices: one task, one file per date
        (200, 2_000_000, 100.0, None, 200),  # 200 MB, parallelism unknown: every slice reads at once
        (200, 2_000_000, 100.0, 8, 8),  # 200 MB: never fewer tasks than the cluster reads with
        (200, 20_000_000, 100.0, 8, 15),  # 2 GB: a task per ~128 MB
        (4, 100_000_000, 100.0, 8, 4),  # 10 GB in 4 slices: never more tasks than slices (they roll files)
        (0, 0, 100.0, 8, 1),
        (7, 1_000, None, 8, 7),  # nothing written yet: one task per slice
        (0, 0, None, None, 1),
    ],
)
def test_writing_tasks(slices, offsets, per_offset, parallelism, expected):
    found = writing_tasks(slices, offsets, per_offset, 128 * MB, parallelism)
    assert found == expected, (
        f"{slices} slices, {offsets} offsets at {per_offset} B: expected {expected}, found {found}"
    )


@pytest.mark.parametrize("value", [0, -1, 4097, 1.5, True, "64"])
def test_a_target_outside_1_to_4096_mb_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match=r"target.file.mb must be between 1 and 4096 \(MB\)") as caught:
        check_target_file_mb(value)
    assert "\n" not in str(caught.value)
