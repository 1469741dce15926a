"""How many files a batch writes: near a target size, not one per Spark task. Pure, no I/O.

Each writing task writes one file per partition-date and rolls to a new one when a file
reaches the target size (:mod:`kafka_batch_provider.spark.task_writer`). So the number of
writing tasks decides how many small files a batch leaves: a batch of 200 partitions with a
few records each read by 200 tasks would write 200 tiny files. The slices of a batch are
therefore grouped into as few tasks as its expected size needs (never fewer than the cluster
reads with in parallel), estimated from the bytes per offset of the output's recent batches
(the offset log has both); without one (the first batch), every slice keeps its task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

DEFAULT_TARGET_FILE_MB = 128
MAX_TARGET_FILE_MB = 4096
MB = 1024 * 1024


def check_target_file_mb(value: int) -> int:
    """``value`` when it is a whole number of MB in [1, MAX_TARGET_FILE_MB], else one line."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TARGET_FILE_MB:
        raise ConfigError(
            f"{Setting('target_file_mb')} must be between 1 and {MAX_TARGET_FILE_MB} (MB), got {value!r}",
            setting=Setting("target_file_mb"),
        )
    return value


def bytes_per_offset(entry: Mapping[str, Any] | None) -> float | None:
    """What one offset of ``entry``'s ranges cost in its Parquet files (``None``: nothing to go by)."""
    if not entry:
        return None
    written = sum(int(f.get("bytes", 0)) for f in entry.get("files") or [])
    offsets = sum(int(r["end"]) - int(r["start"]) for r in entry.get("ranges") or [])
    if written <= 0 or offsets <= 0:
        return None
    return written / offsets


def writing_tasks(
    slices: int, offsets: int, per_offset: float | None, target_bytes: int, parallelism: int | None = None
) -> int:
    """How many tasks read and write a batch of ``offsets`` offsets in ``slices`` slices.

    A batch expected below ``target_bytes`` gets one task (one file per partition-date). A
    larger one gets enough tasks that each writes about ``target_bytes``, but never fewer than
    the cluster's ``parallelism`` (reading and writing share the tasks: fewer tasks would read
    Kafka slower), nor more than there are slices. ``per_offset`` unknown (nothing written yet),
    or a large batch on a cluster of unknown ``parallelism``: one task per slice.
    """
    if per_offset is None or slices <= 1:
        return max(slices, 1)
    expected = offsets * per_offset
    if expected < target_bytes:
        return 1
    if parallelism is None:
        return slices
    return min(slices, max(math.ceil(expected / target_bytes), parallelism))
