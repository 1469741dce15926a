"""Planning: offsets in, plan out. Pure functions, no I/O.

Like Spark's ``KafkaOffsetRangeCalculator``, everything here works on numbers the Kafka
client already fetched (:class:`~kafka_batch_provider.core.offsets.PartitionOffsets`), so each
policy can be tested without a broker.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from kafka_batch_provider.core.offsets import OffsetGap, OffsetRange, PartitionOffsets, TopicPartition
from kafka_batch_provider.core.plan import INCREMENTAL, REPLAY, OffsetPlan, batch_id_for
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError, PlanError


class NewPartitionPolicy(str, Enum):
    """Where to start a partition the group has never committed."""

    EARLIEST = "earliest"  # default: starting at latest would silently drop what is there
    LATEST = "latest"
    ERROR = "error"


class DataLossPolicy(str, Enum):
    """What to do when the committed offset is below the log start (retention deleted data)."""

    FAIL = "fail"  # default: loss is loud
    EARLIEST = "earliest"  # skip to the log start and record the gap in the plan


@dataclass(frozen=True)
class PlanPolicy:
    """Policies and bounds for an incremental plan.

    :param max_records_per_partition: at most this many offsets per partition per batch.
    :param max_records: at most this many offsets per batch, shared fairly between partitions.
    """

    new_partitions: NewPartitionPolicy = NewPartitionPolicy.EARLIEST
    #: where a topic a pattern meets after the output's first batch starts (core/topic_patterns.py)
    new_topic_start: NewPartitionPolicy = NewPartitionPolicy.EARLIEST
    on_data_loss: DataLossPolicy = DataLossPolicy.FAIL
    max_records_per_partition: int | None = None
    max_records: int | None = None

    def __post_init__(self) -> None:
        if self.new_topic_start is NewPartitionPolicy.ERROR:  # a pattern is there to take new topics in
            fix = Setting("new_topic_start")
            raise ConfigError(f"{fix} must be earliest or latest, got 'error'", setting=fix)
        for name in ("max_records_per_partition", "max_records"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{Setting(name)} must be a positive integer, got {value}", setting=Setting(name))


def start_offset(
    state: PartitionOffsets, policy: PlanPolicy, source: str = "committed offset"
) -> tuple[int, OffsetGap | None]:
    """Where the next batch of one partition starts, and the gap skipped to get there (if any).

    :param source: what ``state.committed`` is, for messages: the group's committed offset or
        the output's log position.
    """
    if state.committed is not None and state.committed > state.log_end:
        raise PlanError(
            f"{state.tp}: {source} {state.committed} is beyond the end offset {state.log_end}; the topic may have "
            "been recreated (on a broker without topic ids), truncated by an unclean leader election, or the "
            "group points at another cluster",
            partition=state.tp,
            offsets=(state.log_end, state.committed),
        )
    if state.committed is None:
        if policy.new_partitions is NewPartitionPolicy.ERROR:
            fix = Setting("new_partitions", NewPartitionPolicy.EARLIEST.value)
            raise PlanError(
                f"{state.tp}: the group has no committed offset and {Setting('new_partitions', 'error')}; "
                f"use {fix} or {Setting('new_partitions', NewPartitionPolicy.LATEST.value)}",
                setting=fix,
                partition=state.tp,
            )
        if policy.new_partitions is NewPartitionPolicy.LATEST:
            return state.log_end, None
        return state.log_start, None
    if state.committed < state.log_start:
        missing = f"[{state.committed}, {state.log_start})"
        if policy.on_data_loss is DataLossPolicy.FAIL:
            fix = Setting("on_data_loss", DataLossPolicy.EARLIEST.value)
            raise PlanError(
                f"{state.tp}: {source} {state.committed} is below the log start {state.log_start}: "
                f"offsets {missing} were deleted before they were ingested; "
                f"rerun with {fix} to skip them (the gap is recorded in the plan)",
                setting=fix,
                partition=state.tp,
                offsets=(state.committed, state.log_start),
            )
        return state.log_start, OffsetGap(state.topic, state.partition, state.committed, state.log_start)
    return state.committed, None


def fair_shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Split ``budget`` offsets over partitions holding ``sizes`` offsets (water-filling).

    Every partition gets up to the same level, the highest whose total fits the budget, so a
    small partition gets all it has and the larger ones share the rest evenly. The few
    offsets left below one level go one each to the largest backlogs, so even a budget smaller
    than the number of partitions always moves the partition that is furthest behind.
    """
    if budget >= sum(sizes):
        return list(sizes)
    low, high = 0, max(sizes, default=0)
    while low < high:  # the highest level whose total fits
        mid = (low + high + 1) // 2
        if sum(min(size, mid) for size in sizes) <= budget:
            low = mid
        else:
            high = mid - 1
    shares = [min(size, low) for size in sizes]
    left = budget - sum(shares)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        if left == 0:
            break
        if sizes[i] > shares[i]:
            shares[i] += 1
            left -= 1
    return shares


def apply_bounds(ranges: Sequence[OffsetRange], policy: PlanPolicy) -> list[OffsetRange]:
    """Shorten ranges to the per-partition and per-batch bounds (ends move down, starts stay)."""
    ends = [r.end for r in ranges]
    if policy.max_records_per_partition is not None:
        ends = [min(end, r.start + policy.max_records_per_partition) for r, end in zip(ranges, ends)]
    if policy.max_records is not None:
        shares = fair_shares([end - r.start for r, end in zip(ranges, ends)], policy.max_records)
        ends = [r.start + share for r, share in zip(ranges, shares)]
    return [OffsetRange(r.topic, r.partition, r.start, end, r.expected_committed) for r, end in zip(ranges, ends)]


def select_partitions(states: Sequence[PartitionOffsets], partitions: Sequence[int] | None) -> list[PartitionOffsets]:
    """The states of the chosen partitions (all when ``partitions`` is None); unknown ones are an error."""
    if partitions is None:
        return list(states)
    wanted = set(partitions)
    for topic in sorted({s.topic for s in states}):
        existing = {s.partition for s in states if s.topic == topic}
        if wanted - existing:
            raise PlanError(f"topic {topic!r} has no partition(s) {sorted(wanted - existing)} (it has {len(existing)})")
    return [s for s in states if s.partition in wanted]


def snapshot(states: Iterable[PartitionOffsets]) -> dict[str, list[int | None]]:
    """``{"topic:partition": [committed, log_start, log_end]}``: what lag health reads back later."""
    return {s.tp.key: [s.committed, s.log_start, s.log_end] for s in states}


@dataclass(frozen=True)
class LogSlot:
    """The entry of the output's offset log a new plan will occupy.

    :param seq: its sequence number (the log's newest entry + 1).
    :param previous: the batch id of the log's newest entry (``None`` for an empty log).
    :param topic_ids: the broker's current topic ids (empty when it has none).
    """

    seq: int = 1
    previous: str | None = None
    topic_ids: Mapping[str, str] = field(default_factory=dict)


def plan_incremental(
    group_id: str,
    topics: Sequence[str],
    states: Iterable[PartitionOffsets],
    policy: PlanPolicy,
    isolation_level: str,
    created_at: str,
    partitions: Sequence[int] | None = None,
    slot: LogSlot = LogSlot(),
    checkpoints: Mapping[TopicPartition, int | None] | None = None,
    accepted_gaps: Sequence[OffsetGap] = (),
    new_topics: Collection[str] = (),
) -> OffsetPlan:
    """The next batch for a group: from each partition's checkpoint to the current end, bounded.

    :param states: every partition of the topics, with the group's committed offsets (the
        plan keeps them all as a snapshot for lag health); ``partitions`` chooses which of
        them this batch covers.
    :param checkpoints: where each partition stands according to the reconciliation of the
        group with the output's offset log (:mod:`kafka_batch_provider.core.reconcile`); a
        partition missing here starts from the group's committed offset.
    :param accepted_gaps: offsets skipped by the reconciliation policy, recorded in the plan.
    :param new_topics: topics a pattern met since the output's previous batch: their partitions
        the group never committed start as ``policy.new_topic_start`` says.

    Every chosen partition is in the plan (idle ones with an empty range), so the commit
    refreshes every committed offset. A plan without work (nothing to read, no gap, no group
    offset to move) has no ranges: there is nothing to do.
    """
    states = list(states)
    checkpoints = checkpoints or {}
    candidates: list[OffsetRange] = []
    gaps: list[OffsetGap] = list(accepted_gaps)
    for state in sorted(select_partitions(states, partitions), key=lambda s: (s.topic, s.partition)):
        checkpoint = checkpoints.get(state.tp, state.committed)
        source = "committed offset" if checkpoint == state.committed else "the output's offset log position"
        chosen_policy = replace(policy, new_partitions=policy.new_topic_start) if state.topic in new_topics else policy
        start, gap = start_offset(replace(state, committed=checkpoint), chosen_policy, source)
        candidates.append(OffsetRange(state.topic, state.partition, start, state.log_end, state.committed))
        if gap is not None:
            gaps.append(gap)
    bounded = tuple(apply_bounds(candidates, policy))
    more_remains = sum(r.size for r in bounded) < sum(r.size for r in candidates)
    topic_ids = {t: slot.topic_ids[t] for t in topics if t in slot.topic_ids}
    plan = OffsetPlan(
        batch_id="",
        mode=INCREMENTAL,
        group_id=group_id,
        topics=tuple(topics),
        isolation_level=isolation_level,
        ranges=bounded,
        seq=slot.seq,
        previous=slot.previous,
        topic_ids=topic_ids,
        gaps=tuple(gaps),
        bounded=more_remains,
        created_at=created_at,
        extra={"snapshot": snapshot(states), "partitions": sorted(partitions) if partitions is not None else None},
    )
    if not plan.has_work:
        plan = replace(plan, ranges=(), gaps=())
    return replace(plan, batch_id=batch_id_for(INCREMENTAL, group_id, slot.seq, topic_ids, plan.ranges))


def plan_replay(
    requested: Iterable[OffsetRange],
    states: Iterable[PartitionOffsets],
    isolation_level: str,
    created_at: str,
    group_id: str | None = None,
    slot: LogSlot = LogSlot(),
    on_data_loss: DataLossPolicy = DataLossPolicy.FAIL,
    lost: Iterable[OffsetGap] = (),
) -> OffsetPlan:
    """A replay (backfill) of explicit ranges; checked against the log, never committed.

    :param requested: ranges asked for; each must end within the log, and start within it unless
        ``on_data_loss`` is ``earliest``: offsets below the log start (deleted by retention or
        DeleteRecords) are then skipped and recorded as the plan's gaps, as a batch's are.
    :param lost: offsets found gone by other means (a replay by time reaching below the log
        start), refused or recorded by the same policy.
    """
    by_tp = {s.tp: s for s in states}
    ranges: list[OffsetRange] = []
    gaps: list[OffsetGap] = list(lost)
    for r in sorted(requested, key=lambda r: (r.topic, r.partition)):
        state = by_tp.get(r.tp)
        if state is None:
            raise PlanError(f"{r.tp} does not exist")
        if r.start < state.log_start and r.end > r.start:
            gaps.append(OffsetGap(r.topic, r.partition, r.start, min(state.log_start, r.end)))
            r = OffsetRange(r.topic, r.partition, min(state.log_start, r.end), r.end)
        if r.end > state.log_end:
            raise PlanError(f"{r.tp}: end offset {r.end} is beyond the end offset {state.log_end}")
        if r.size > 0:
            ranges.append(OffsetRange(r.topic, r.partition, r.start, r.end, None))
    if gaps and on_data_loss is DataLossPolicy.FAIL:
        gap, more = gaps[0], f" (and {len(gaps) - 1} more partition(s))" if len(gaps) > 1 else ""
        fix = Setting("on_data_loss", DataLossPolicy.EARLIEST.value)
        raise PlanError(
            f"replay of {gap.topic}[{gap.partition}]: offsets [{gap.start}, {gap.end}) were deleted (retention or "
            f"DeleteRecords) and its range reaches into them{more}; nothing was planned; replay what is left with "
            f"{fix}, which records the gap",
            setting=fix,
            partition=TopicPartition(gap.topic, gap.partition),
            offsets=(gap.start, gap.end),
        )
    final = tuple(ranges)
    topics = sorted({r.topic for r in final})
    topic_ids = {t: slot.topic_ids[t] for t in topics if t in slot.topic_ids}
    return OffsetPlan(
        batch_id=batch_id_for(REPLAY, group_id, slot.seq, topic_ids, final),
        mode=REPLAY,
        group_id=group_id,
        topics=tuple(topics),
        isolation_level=isolation_level,
        ranges=final,
        seq=slot.seq,
        previous=slot.previous,
        topic_ids=topic_ids,
        gaps=tuple(sorted(gaps, key=lambda g: (g.topic, g.partition))),
        created_at=created_at,
    )


def split_range(r: OffsetRange, max_offsets_per_task: int) -> list[OffsetRange]:
    """Slices of at most ``max_offsets_per_task`` offsets, so one large partition uses several tasks."""
    if max_offsets_per_task < 1:
        raise ConfigError(f"max offsets per task must be positive, got {max_offsets_per_task}")
    pieces = max(1, math.ceil(r.size / max_offsets_per_task))
    step = math.ceil(r.size / pieces) if r.size else 0
    bounds = [min(r.start + k * step, r.end) for k in range(pieces)] + [r.end]
    return [OffsetRange(r.topic, r.partition, lo, hi, r.expected_committed) for lo, hi in zip(bounds, bounds[1:])]
