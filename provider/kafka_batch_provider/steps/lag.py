"""Gather what lag health judges: the partitions now (Kafka) and the recent batches (the output).

The judging itself is pure: :mod:`kafka_batch_provider.core.lag_health`. Where the group has no
committed offset (deleted, or expired on an idle partition) but the output's offset log knows
the partition, the log's position stands in: the output is the truth, and the next batch
resumes from there and restores the group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from kafka_batch_provider.core.lag_health import (
    BatchPoint,
    HealthPolicy,
    HealthReport,
    PartitionLag,
    beyond_taken,
    evaluate,
)
from kafka_batch_provider.core.manifest import log_position
from kafka_batch_provider.core.offsets import PartitionOffsets, TopicPartition
from kafka_batch_provider.core.plan import INCREMENTAL
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore


def output_positions(store: BatchStore | None, kafka: KafkaOffsets, topics: Sequence[str]) -> dict[TopicPartition, int]:
    """Where the output's offset log stands per partition (empty without an output or a log).

    A newest batch whose Kafka commit is not recorded yet stands at its start, not its end: its
    commit is still to do (the next plan finishes it), so its records count as lag and a sensor
    lets the run that repairs it go on instead of skipping it as idle.
    """
    tail = store.log.tail() if store is not None else None
    if tail is None:
        return {}
    position = log_position(tail, store.commit_recorded(tail))
    offsets = dict(position.offsets)
    for tp, (expected_committed, _) in position.unfinished.items():
        if expected_committed is None:
            offsets.pop(tp, None)  # the group had no offset there: it starts at the log start
        else:
            offsets[tp] = expected_committed
    topic_ids = kafka.topic_ids(topics)
    return {tp: offset for tp, offset in offsets.items() if position.knows(tp, topic_ids)}


def topics_to_watch(kafka: KafkaOffsets, topics: Sequence[str], topic_pattern: str | None = None) -> list[str]:
    """``topics``, or the topics ``topic_pattern`` matches now (:mod:`kafka_batch_provider.core.topic_patterns`):
    what a lag check watches, a table per topic plans, a backfill of a pattern replays."""
    if topic_pattern is None:
        return list(topics)
    from kafka_batch_provider.core.topic_patterns import compile_pattern, matching

    return matching(compile_pattern(topic_pattern), kafka.topic_names())


def partition_lags(
    kafka: KafkaOffsets,
    group_id: str,
    topics: Sequence[str],
    with_ages: bool = True,
    store: BatchStore | None = None,
    taken: Mapping[TopicPartition, int] | None = None,
) -> list[PartitionLag]:
    """Committed, log start, end (isolation-aware), age of the oldest unconsumed record, retention
    (no topics, as a pattern that matches none: no partitions).

    :param store: the ingestion's output; its log's position stands in where the group has no offset.
    :param taken: offsets a running batch is already taking (:func:`taken_offsets`), counted as consumed.
    """
    if not topics:
        return []
    logged = output_positions(store, kafka, topics)
    states = [
        replace(s, committed=logged[s.tp]) if s.committed is None and s.tp in logged else s
        for s in kafka.partition_offsets(group_id, topics)
    ]
    states = beyond_taken(states, taken or {})
    retention = kafka.topic_retention_ms(topics) if with_ages else {}
    stamps = kafka.first_record_timestamps({s.tp: s.position for s in states if s.lag > 0}) if with_ages else {}
    return [
        PartitionLag(
            s.topic,
            s.partition,
            s.committed,
            s.log_start,
            s.log_end,
            oldest_unconsumed_ms=stamps.get(s.tp),
            retention_ms=retention.get(s.topic),
        )
        for s in states
    ]


def taken_offsets(
    store: BatchStore | None, group_id: str, now: datetime, in_flight: timedelta
) -> dict[TopicPartition, int]:
    """The ends a running batch of ``group_id`` is taking: its pending plan (planned less than
    ``in_flight`` ago and not yet in the log), or its logged batch whose Kafka commit is still to
    come. An older pending plan belongs to a run that failed: its records count as lag again."""
    if store is None:
        return {}
    tail = store.log.tail()
    taken: dict[TopicPartition, int] = {}
    if tail is not None and tail.get("mode") == INCREMENTAL and tail.get("group_id") == group_id:
        written = datetime.fromisoformat(tail["written_at"]) if tail.get("written_at") else None
        recorded = store.commit_recorded(tail)
        # A batch whose commit is missing after in_flight belongs to a run that failed: the next
        # run's plan finishes its commit, so it counts as lag again and that run is fired.
        if recorded or written is None or now - written <= in_flight:
            for r in tail.get("ranges") or ():
                taken[TopicPartition(r["topic"], int(r["partition"]))] = int(r["end"])
    for plan in store.plans_after(int(tail["seq"]) if tail else 0):
        created = datetime.fromisoformat(plan.created_at) if plan.created_at else None
        if plan.mode != INCREMENTAL or plan.group_id != group_id or created is None or now - created > in_flight:
            continue
        for r in plan.ranges:
            taken[r.tp] = max(taken.get(r.tp, 0), r.end)
    return taken


def batch_history(store: BatchStore, group_id: str, last: int | None = None) -> list[BatchPoint]:
    """The group's committed incremental batches, oldest first, from commit records and plan snapshots.

    :param last: only the newest ``last`` batches (the window), so a long history is not read.
    """
    points = []
    for record in store.commit_records(group_id, last=last):
        plan = store.load_plan(int(record["seq"]), record["batch_id"])
        snap = {TopicPartition.from_key(k): v for k, v in plan.extra.get("snapshot", {}).items()}
        committed: dict[TopicPartition, int | None] = {tp: c for tp, (c, _, _) in snap.items()}
        committed.update({TopicPartition.from_key(k): v for k, v in record["committed"].items()})
        lag_at_plan = {tp: PartitionOffsets(tp.topic, tp.partition, *offsets).lag for tp, offsets in snap.items()}
        points.append(
            BatchPoint(
                batch_id=record["batch_id"],
                committed_at=datetime.fromisoformat(record["committed_at"]),
                committed=committed,
                lag_at_plan=lag_at_plan,
                dead_letters={
                    TopicPartition.from_key(k): (int(dead), int(rows))
                    for k, (dead, rows) in record.get("dead_letters", {}).items()
                },
            )
        )
    return points


def lag_report(
    kafka: KafkaOffsets,
    group_id: str,
    topics: Sequence[str],
    store: BatchStore | None = None,
    policy: HealthPolicy = HealthPolicy(),
    now: datetime | None = None,
) -> HealthReport:
    """Lag and health of ``group_id`` on ``topics``; without an output only the statuses that need no history."""
    states = partition_lags(kafka, group_id, topics, store=store)
    history = batch_history(store, group_id, last=policy.window + 1) if store is not None else []
    notes = (
        []
        if store is not None
        else [f"no {Setting('output_path')}: WARN, STALL, STOP and REWIND need the batch history and were not judged"]
    )
    unknown = sorted({s.topic for s in states if s.retention_ms is None})
    if unknown:
        notes.append(f"retention.ms unknown for {', '.join(unknown)}: RETENTION_RISK not judged there")
    return evaluate(group_id, states, history, policy, now or datetime.now(timezone.utc), notes)
