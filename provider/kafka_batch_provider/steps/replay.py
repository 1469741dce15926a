"""Replay (backfill) plans: an explicit offset or time range, read again, never committed.

Replays serve manual backfills from the Airflow UI and Airflow's own backfill runs of the
ingest DAG. They write to their own output (never the incremental dataset, which already
holds those offsets), each batch an entry of that output's log like any batch. Replaying a
range that is already there does nothing (and a retry finishes the same pending batch);
another replay overlapping it is refused. The consumer group is not touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from kafka_batch_provider.core.listing import listed
from kafka_batch_provider.core.offsets import OffsetGap, OffsetRange, TopicPartition
from kafka_batch_provider.core.plan import REPLAY
from kafka_batch_provider.core.planning import DataLossPolicy, LogSlot, plan_replay
from kafka_batch_provider.core.replays import by_incarnation, refuse_overlaps, same_ranges
from kafka_batch_provider.core.settings import Advice
from kafka_batch_provider.errors import ConfigError, PlanError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore, utc_now
from kafka_batch_provider.steps.plan import (
    PlanOutcome,
    ReaderSchemaPin,
    refuse_another_format,
    refuse_foreign_output,
    with_merge,
    with_reader_schema,
)

log = logging.getLogger(__name__)

WHOLE_TOPIC = Advice(keywords="whole_topic=true", flags="--whole-topic")


def replay_ranges(
    tps: Sequence[TopicPartition],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> list[OffsetRange]:
    """Pair start and end offsets per partition; an end before its start is an error."""
    ranges = []
    for tp in tps:
        start, end = starts[tp], ends[tp]
        if end < start:
            raise PlanError(f"{tp}: end offset {end} is before start offset {start}")
        ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges


def _per_partition(
    name: str, offsets: Mapping[int, int] | None, tps: Sequence[TopicPartition], default: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    offsets = dict(offsets or {})
    known = {tp.partition for tp in tps}
    unknown = sorted(set(offsets) - known)
    if unknown:
        raise PlanError(f"{name} names partition(s) {unknown} outside the chosen partitions {sorted(known)}")
    return {tp: int(offsets[tp.partition]) if tp.partition in offsets else default[tp] for tp in tps}


def refuse_another_decoding(store: BatchStore, done: Mapping[str, Any], formats: Mapping[str, str] | None) -> None:
    """A range replayed before, asked for again with other value or key formats: refused, not skipped."""
    recorded = {"value_format": "bytes", "key_format": "bytes", **(done.get("options") or {})}
    differs = [f"{k} {recorded[k]} there, {v} now" for k, v in (formats or {}).items() if recorded.get(k) != v]
    if differs:
        raise PlanError(
            f"this range is already replayed into {store.root} as batch {done['batch_id']}, read otherwise "
            f"({'; '.join(differs)}): a replay is never replaced; replay it into another output, or ask for it as "
            "it was written"
        )


def deleted_from_interval(
    kafka: KafkaOffsets,
    tps: Sequence[TopicPartition],
    starts: Mapping[TopicPartition, int],
    log_starts: Mapping[TopicPartition, int],
    start_ms: int,
) -> list[OffsetGap]:
    """The partitions whose deleted records may have been in an interval starting at ``start_ms``:
    records were deleted (the log starts above 0), the interval's first offset is the log start, and
    the oldest record left is younger than the interval's start. Which of the deleted offsets were
    in it is unknown, so the gap names them all (``[0, log start)``)."""
    reaching = {tp: log_starts[tp] for tp in tps if log_starts[tp] > 0 and starts[tp] <= log_starts[tp]}
    oldest = kafka.first_record_timestamps(reaching)
    return [
        OffsetGap(tp.topic, tp.partition, 0, log_starts[tp])
        for tp in reaching
        if oldest.get(tp, start_ms + 1) > start_ms  # no record left at all: the whole interval may be gone
    ]


def check_replay_range(
    start_offsets: Mapping[int, int] | None,
    end_offsets: Mapping[int, int] | None,
    start_ms: int | None,
    end_ms: int | None,
    whole_topic: bool,
    now_ms: int | None = None,
    refuse_future: bool = True,
) -> None:
    """Exactly one way of choosing the range, complete and in the past; pure, so operators
    check it when the DAG is parsed as well as when the task runs.

    :param refuse_future: ``False`` when the DAG is parsed: a window still open then may have
        closed by the time the task runs, and a DAG must not fail to import because of the clock.
    """
    by_time = start_ms is not None or end_ms is not None
    by_offset = start_offsets is not None or end_offsets is not None
    if by_time and by_offset:
        raise ConfigError("give either start/end offsets or start/end times, not both")
    if whole_topic and (by_time or by_offset):
        raise ConfigError("whole_topic replays everything: give it without start/end offsets or times")
    if not (by_time or by_offset or whole_topic):
        raise ConfigError(
            f"a replay needs a range: start/end offsets, start/end times, or {WHOLE_TOPIC} "
            "to replay every offset of the chosen partitions (the backfill DAG's Whole topic param)"
        )
    if by_time and (start_ms is None or end_ms is None):
        raise ConfigError("a replay by time needs both a start and an end time")
    if by_time and end_ms <= start_ms:  # type: ignore[operator]
        raise PlanError(f"end time {iso(end_ms)} is not after start time {iso(start_ms)}")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if refuse_future and by_time and end_ms > now_ms:  # type: ignore[operator]
        # Records of a window still open keep arriving: the replay would be silently short.
        raise PlanError(
            f"end time {iso(end_ms)} is in the future (now {iso(now_ms)}): the window is not complete yet; "
            "replay it once it has passed"
        )


def iso(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "None"
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def plan_replay_batch(
    kafka: KafkaOffsets,
    store: BatchStore,
    topics: Sequence[str],
    *,
    partitions: Sequence[int] | None = None,
    start_offsets: Mapping[int, int] | None = None,
    end_offsets: Mapping[int, int] | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    whole_topic: bool = False,
    dry_run: bool = False,
    progress: Callable[[str], None] = log.info,
    now_ms: int | None = None,
    reader_schema: ReaderSchemaPin | None = None,
    on_data_loss: DataLossPolicy = DataLossPolicy.FAIL,
    formats: Mapping[str, str] | None = None,
) -> PlanOutcome:
    """Plan a replay by offsets, by time, or of the whole topic.

    By offsets, the partitions are ``partitions`` or else those named in the offsets; a
    chosen partition without a start offset starts at the log start, one without an end
    offset ends at the log end.

    By time, the range is ``[first offset at or after start_ms, first offset at or after
    end_ms)``: exactly the records with ``start_ms <= timestamp < end_ms`` (for timestamps
    that grow with offsets, as producers' CreateTime usually does).

    ``whole_topic`` replays every chosen partition from its log start to its end: it must be
    asked for, because a replay without a range would otherwise read everything there is.

    A range that reaches below the log start (offsets deleted by retention or DeleteRecords; by
    time: an interval that starts before the oldest record left, where records were deleted) is
    refused by default; with ``on_data_loss`` ``earliest`` what is left is replayed and the
    deleted offsets are recorded as the batch's gaps (its log entry, XCom and asset event).

    A range already replayed into the output is not replayed again (nothing to do), unless asked
    for in other ``formats`` (``{"value_format": ..., "key_format": ...}`` as the run writes): that
    is refused in one line, as its batch would read otherwise than the output's.

    :param dry_run: plan and validate only; nothing is persisted.
    :param reader_schema: pins the reader schema of values in a schema registry format (as
        :func:`~kafka_batch_provider.steps.plan.plan_batch`).
    """
    check_replay_range(start_offsets, end_offsets, start_ms, end_ms, whole_topic, now_ms)
    by_offset = start_offsets is not None or end_offsets is not None
    by_time = start_ms is not None

    if by_offset and partitions is None:
        # Naming partitions in the offsets chooses them; the others are not replayed.
        partitions = sorted(set(start_offsets or {}) | set(end_offsets or {}))
    states = kafka.partition_offsets(None, topics, partitions)
    tps = [s.tp for s in states]
    log_starts = {s.tp: s.log_start for s in states}
    log_ends = {s.tp: s.log_end for s in states}
    lost: list[OffsetGap] = []
    if by_time:
        starts = kafka.offsets_for_times(tps, start_ms)  # type: ignore[arg-type]
        ends = kafka.offsets_for_times(tps, end_ms)  # type: ignore[arg-type]
        lost = deleted_from_interval(kafka, tps, starts, log_starts, start_ms)  # type: ignore[arg-type]
    else:
        starts = _per_partition("start offsets", start_offsets, tps, log_starts)
        ends = _per_partition("end offsets", end_offsets, tps, log_ends)
    tail = store.log.tail()
    tail_seq = tail["seq"] if tail else 0
    plan_files = store.plan_files()
    pending = store.plans_after(tail_seq, plan_files)
    refuse_foreign_output(store, REPLAY, None, tail, pending)
    slot = LogSlot(tail_seq + 1, tail["batch_id"] if tail else None, kafka.topic_ids(topics))
    plan = plan_replay(
        replay_ranges(tps, starts, ends),
        states,
        kafka.isolation_level,
        utc_now(),
        slot=slot,
        on_data_loss=on_data_loss,
        lost=lost,
    )
    for gap in plan.gaps:
        progress(
            f"replay: {gap.topic}[{gap.partition}] offsets [{gap.start}, {gap.end}) were deleted: recorded as a gap"
        )
    described = listed(str(r) for r in plan.ranges) or "nothing"
    entries = list(store.log.entries())
    # Only ranges of the topic the plan reads count as already replayed: a topic deleted and
    # recreated under its name has new records at the same offsets (and a new topic id).
    logged = [(e["batch_id"], *by_incarnation(e, plan.topic_ids)) for e in entries]
    done = next(
        (e for e, (_, ranges, _) in zip(entries, logged) if plan.ranges and same_ranges(ranges, plan.ranges)), None
    )
    if done is not None:
        refuse_another_decoding(store, done, formats)
        if not dry_run:
            store.publish(done)  # finishes its publish if a crash cut it short
        progress(f"replay of {described} is already in {store.root} as batch {done['batch_id']}: nothing to do")
        return PlanOutcome(replace(plan, ranges=()), notes=[f"already replayed as batch {done['batch_id']}"])
    # The same ranges of the same topics planned before and not logged: the same batch (a replay's
    # id leaves out the entry, which it may change while replays run at once), run again.
    alike = [store.load_plan(seq, bid) for seq, bid in plan_files if bid == plan.batch_id]
    refuse_another_format(alike, reader_schema)  # the same batch id, decoded another way: refused
    again = max(alike, key=lambda p: p.seq, default=None)
    recreated = " (it read the topic before it was deleted and recreated: another topic id)"
    others = (
        [(b, r, "", "") for b, r, _ in logged]
        + [(b, r, recreated, "") for b, _, r in logged if r]
        + [
            (
                p.batch_id,
                list(p.readable_ranges),
                "",
                f", or remove that batch with kafka-batch discard --plan {store.plan_uri(p)}",
            )
            for p in pending
            if p.batch_id != plan.batch_id
        ]
    )
    refuse_overlaps(store.root, plan, others)
    plan = with_reader_schema(plan, reader_schema, again)  # the registry is asked before anything changes
    if dry_run:
        progress(f"dry run: replay batch {plan.batch_id} would read {described}")
        return PlanOutcome(plan)
    if not plan.ranges:
        progress("replay: the chosen range holds no offsets")
        return PlanOutcome(plan)
    if again is not None:
        progress(f"replay batch {again.batch_id} was planned but not written: running the same plan again")
        return PlanOutcome(again, reused=True, plan_path=store.plan_uri(again))
    if tail is not None:
        store.publish(tail)  # finishes a publish cut short (replays have no commit step to do it)
    # No plan is dropped for having lost its entry: a replay running now takes the next one.
    plan = with_merge(plan, store)
    path = store.save_plan(plan)
    progress(f"replay batch {plan.batch_id}: planned {described} ({plan.planned_offsets} offsets)")
    return PlanOutcome(plan, plan_path=path)
