"""Which Spark task reads which slices of a plan: bounded, balanced by offsets. Pure, no I/O.

A batch of 500 topics of 3 partitions is 1,500 partitions. Spark's own Kafka source gives each
one a task (``minPartitions`` can only split partitions further, ``maxRecordsPerPartition``
only caps a task's size), so such a batch runs 1,500 tasks of a few records each: their start-up
dominates and every task writes its own small files. Here the plan's slices are packed into at
most ``max_tasks`` tasks instead:

1. a partition with more offsets than a task's fair share (``offsets / max_tasks``) is split over
   several slices by offsets, so one hot partition does not keep one task busy while the rest idle;
2. the slices go, largest first, to the task with the fewest offsets so far (the greedy
   longest-processing-time rule: no task ends up with more than 4/3 of the best split);
3. each task reads its slices in topic, partition and offset order.

How many tasks a batch uses at all is :func:`kafka_batch_provider.core.file_sizing.writing_tasks`'
choice (few for a small batch, so it writes few files); ``max_tasks`` bounds it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.planning import split_range
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

#: A task's slices, by their index in the batch's slices.
Pack = tuple[int, ...]


def check_max_tasks(value: object) -> int | None:
    """``value`` when it is ``None`` or a whole number >= 1, else one line."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{Setting('max_tasks')} must be a positive integer, got {value!r}", setting=Setting("max_tasks")
        )
    return value


def slices_for(ranges: Sequence[OffsetRange], max_offsets_per_task: int, max_tasks: int | None) -> list[OffsetRange]:
    """The non-empty slices of ``ranges``: at most ``max_offsets_per_task`` offsets each and, with
    ``max_tasks``, at most a task's fair share of the batch (a hot partition spreads over tasks).

    The share is the batch over the tasks it can use: ``max_tasks``, or fewer when there are fewer
    slices (3 partitions under ``max_tasks=1000`` stay 3 slices, not 1,000 of 3 offsets).
    """
    pieces = [piece for r in ranges for piece in split_range(r, max_offsets_per_task) if piece.size > 0]
    if max_tasks is None or not pieces:
        return pieces
    share = max(1, math.ceil(sum(p.size for p in pieces) / min(max_tasks, len(pieces))))
    return [part for piece in pieces for part in split_range(piece, share)]


def pack(slices: Sequence[OffsetRange], tasks: int) -> tuple[Pack, ...]:
    """``slices`` (by index) packed into at most ``tasks`` tasks with about equal offsets each.

    Every slice is in exactly one task; no task is empty; each task's slices are in topic,
    partition and offset order.
    """
    if tasks < 1:
        raise ConfigError(f"a batch needs at least one task, got {tasks}")
    count = min(tasks, len(slices))
    if count == 0:
        return ()
    loads = [(0, task) for task in range(count)]  # (offsets so far, task): the least loaded pops first
    chosen: list[list[int]] = [[] for _ in range(count)]
    by_size = sorted(range(len(slices)), key=lambda i: (-slices[i].size, i))
    for index in by_size:
        load, task = heapq.heappop(loads)
        chosen[task].append(index)
        heapq.heappush(loads, (load + slices[index].size, task))
    order = [(s.topic, s.partition, s.start) for s in slices]
    return tuple(tuple(sorted(members, key=lambda i: order[i])) for members in chosen)


def task_offsets(slices: Sequence[OffsetRange], packs: Sequence[Pack]) -> list[int]:
    """How many offsets each task reads."""
    return [sum(slices[i].size for i in members) for members in packs]
