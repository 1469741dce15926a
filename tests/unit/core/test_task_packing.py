"""Packing a batch's slices into a bounded number of Spark tasks, balanced by offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.task_packing import check_max_tasks, pack, slices_for, task_offsets
from kafka_batch_provider.errors import ConfigError


def ranges_of(sizes: list[int]) -> list[OffsetRange]:
    return [OffsetRange(f"t{i // 3}", i % 3, 100, 100 + size, 100) for i, size in enumerate(sizes)]


def test_five_hundred_topics_of_three_partitions_are_a_few_dozen_equal_tasks():
    ranges = ranges_of([200] * 1500)
    slices = slices_for(ranges, max_offsets_per_task=1_000_000, max_tasks=25)
    packs = pack(slices, 25)
    assert len(packs) == 25, f"expected 25 tasks, found {len(packs)}"
    assert set(task_offsets(slices, packs)) == {12_000}, (
        f"expected 12,000 offsets a task, {task_offsets(slices, packs)}"
    )


def test_a_hot_partition_is_split_over_several_tasks_by_offsets():
    ranges = ranges_of([10_000] + [10] * 99)  # one hot partition beside 99 quiet ones: 10,990 offsets
    slices = slices_for(ranges, max_offsets_per_task=1_000_000, max_tasks=10)
    hot = [s for s in slices if (s.topic, s.partition) == ("t0", 0)]
    assert len(hot) == 10 and hot[0].start == 100 and hot[-1].end == 10_100, f"the hot partition's slices: {hot}"
    assert all(a.end == b.start for a, b in zip(hot, hot[1:])), "the hot partition's slices must be contiguous"
    loads = task_offsets(slices, pack(slices, 10))
    assert max(loads) <= 1_099 + 10, f"a task reads more than its share plus one quiet partition: {loads}"


def test_each_task_reads_its_slices_in_topic_partition_offset_order():
    slices = slices_for(ranges_of([50, 7, 300, 1, 90, 2]), 1_000_000, 3)
    for members in pack(slices, 3):
        keys = [(slices[i].topic, slices[i].partition, slices[i].start) for i in members]
        assert keys == sorted(keys), f"a task's slices out of order: {keys}"


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=5_000), min_size=1, max_size=200),
    max_tasks=st.integers(min_value=1, max_value=64),
    per_task=st.integers(min_value=1, max_value=4_000),
)
def test_every_offset_is_read_once_by_at_most_max_tasks_balanced_tasks(sizes, max_tasks, per_task):
    ranges = ranges_of(sizes)
    slices = slices_for(ranges, per_task, max_tasks)
    covered = sorted((s.topic, s.partition, o) for s in slices for o in range(s.start, s.end))
    expected = sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered == expected, "the slices must cover each planned offset exactly once"
    if not slices:
        return
    packs = pack(slices, max_tasks)
    indexes = sorted(i for members in packs for i in members)
    assert indexes == list(range(len(slices))), f"each slice in exactly one task, found {indexes}"
    assert 1 <= len(packs) <= max_tasks and all(packs), f"{len(packs)} tasks for max_tasks={max_tasks}"
    loads = task_offsets(slices, packs)
    # The greedy rule's bound: no task exceeds the average by more than the largest slice.
    bound = sum(loads) / len(packs) + max(s.size for s in slices)
    assert max(loads) <= bound, f"unbalanced: {loads} (bound {bound})"


@pytest.mark.parametrize("value", [0, -3, 2.5, "8", True])
def test_max_tasks_must_be_a_positive_integer(value):
    with pytest.raises(ConfigError, match="max_tasks must be a positive integer"):
        check_max_tasks(value)


def test_a_generous_max_tasks_does_not_cut_a_few_partitions_into_crumbs():
    slices = slices_for(ranges_of([1_000, 1_000, 1_000]), max_offsets_per_task=1_000_000, max_tasks=1_000)
    assert [s.size for s in slices] == [1_000, 1_000, 1_000], f"expected the 3 partitions whole, found {slices}"
