"""Checks against Kafka that a plan still holds, made before its batch becomes visible (write)
and before its offsets are committed (commit)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafka_batch_provider.core.listing import listed
from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.errors import CommitConflictError, PlanError
from kafka_batch_provider.kafka.client import KafkaOffsets


def check_same_topics(kafka: KafkaOffsets, plan: OffsetPlan) -> None:
    """The plan's topics are still the ones it was planned on (not deleted and recreated since).

    Offsets of a recreated topic name other records: publishing or committing them under the
    old topic's plan would mislead the next plan step into reading them again.
    """
    changed_topics(kafka, [plan])


def changed_topics(kafka: KafkaOffsets, plans: Sequence[OffsetPlan], raises: bool = True) -> list[OffsetPlan]:
    """The plans whose topics were deleted and recreated since they were planned (their ids asked
    for in one request); with ``raises``, the first such plan's one line instead."""
    planned = {topic for plan in plans for topic in plan.topic_ids}
    if not planned:
        return []
    current = kafka.topic_ids(sorted(planned))
    found = []
    for plan in plans:
        changed = sorted(t for t, topic_id in plan.topic_ids.items() if current.get(t) not in (None, topic_id))
        if changed and raises:
            raise PlanError(
                f"topic(s) {', '.join(map(repr, changed))} were deleted and recreated since batch {plan.batch_id} was "
                "planned: nothing of it is published or committed; plan again"
            )
        if changed:
            found.append(plan)
    return found


def check_group_unmoved(kafka: KafkaOffsets, plan: OffsetPlan) -> None:
    """The group is still where the plan expects it (or already at its ends)."""
    conflict = group_moved(plan, kafka.committed_offsets(plan.group_id, [r.tp for r in plan.ranges]))
    if conflict is not None:
        raise conflict


def group_moved(plan: OffsetPlan, current: Mapping[TopicPartition, int | None]) -> CommitConflictError | None:
    """The one line for a plan whose group offsets (``current``) are neither where it expects them
    nor at its ends; ``None`` when they are."""
    moved = [r for r in plan.ranges if current.get(r.tp) not in (r.expected_committed, r.end)]
    if not moved:
        return None
    details = listed(f"{r.tp}: committed {current.get(r.tp)}, plan expected {r.expected_committed}" for r in moved)
    return CommitConflictError(
        f"group {plan.group_id!r} moved since batch {plan.batch_id} was planned ({details}); nothing was "
        "committed or recorded; the next plan step reconciles the group with the output"
    )
