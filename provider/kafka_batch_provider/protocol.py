"""The plan and commit steps, and the repair that joins them.

These are the functions the command line and the Airflow operators call; they hold no
Kafka or Spark details of their own (see :mod:`kafka_batch_provider.kafka_offsets` and
:mod:`kafka_batch_provider.spark.ingest`).

Repair after a crash, done by the plan step before it plans anything new. A pending plan is
one that was persisted but never committed:

* group still at the plan's starts, manifest present -> the write finished: commit it now,
  without reading again;
* group still at the plan's starts, no manifest -> reuse the plan, so the retry reads the
  same ranges into the same batch location;
* group already at the plan's ends, manifest present -> the Kafka commit happened but its
  record did not: record it;
* anything else -> somebody else moved the group: fail loudly, change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.batch_store import BatchStore, utc_now
from kafka_batch_provider.errors import CommitConflictError, ConfigError, KafkaBatchError
from kafka_batch_provider.kafka_offsets import KafkaOffsets
from kafka_batch_provider.manifest import verify_manifest
from kafka_batch_provider.offsets import TopicPartition
from kafka_batch_provider.plan import OffsetPlan
from kafka_batch_provider.planning import PlanPolicy, plan_incremental

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass
class PlanOutcome:
    """What the plan step did.

    :param plan: the plan to run next (``plan.ranges`` empty: nothing to do).
    :param reused: the plan is a pending one from an earlier, unfinished run.
    :param repaired: batch ids that were committed (or recorded) while repairing.
    """

    plan: OffsetPlan
    reused: bool = False
    repaired: list[str] = field(default_factory=list)
    plan_path: str | None = None


def _key(tp: TopicPartition) -> str:
    return f"{tp.topic}:{tp.partition}"


def commit_batch(
    kafka: KafkaOffsets, store: BatchStore, plan: OffsetPlan, progress: Progress = log.info
) -> dict[str, int]:
    """Commit step: verify the manifest against the plan, then compare-and-set commit the ends.

    Idempotent: a batch whose commit is recorded is not committed again.

    :returns: committed offsets as ``{"topic:partition": offset}``.
    """
    if not plan.commits_group or not plan.group_id:
        raise ConfigError(f"batch {plan.batch_id} is a {plan.mode} plan; replays never commit the group")
    record = store.commit_record(plan.batch_id)
    if record is not None:
        progress(f"batch {plan.batch_id} was already committed at {record['committed_at']}")
        return record["committed"]
    rows = 0
    if plan.has_data:
        manifest = store.load_manifest(plan.batch_id)
        verify_manifest(plan, manifest)
        rows = int(manifest["rows"])
    committed = kafka.commit(plan.group_id, plan.expected_committed(), plan.end_offsets(), metadata=plan.batch_id)
    result = {_key(tp): offset for tp, offset in committed.items()}
    store.record_commit(plan, result, rows)
    progress(f"batch {plan.batch_id}: committed {len(result)} partition(s) of group {plan.group_id} ({rows} rows)")
    return result


def reconcile_pending(
    kafka: KafkaOffsets, store: BatchStore, group_id: str, progress: Progress = log.info
) -> tuple[OffsetPlan | None, list[str]]:
    """Finish or reuse the group's pending batches (see the module docstring).

    :returns: the pending plan to run again (or ``None``), and the batch ids repaired.
    """
    repaired: list[str] = []
    for plan in store.pending_plans(group_id):
        tps = [r.tp for r in plan.ranges]
        current = kafka.committed_offsets(group_id, tps)
        at_start = all(current.get(r.tp) == r.expected_committed for r in plan.ranges)
        at_end = all(current.get(r.tp) == r.end for r in plan.ranges)
        written = store.has_manifest(plan.batch_id) or not plan.has_data
        if at_start and written:
            progress(f"batch {plan.batch_id} was written but not committed: committing it without reading again")
            commit_batch(kafka, store, plan, progress)
            repaired.append(plan.batch_id)
        elif at_start:
            progress(f"batch {plan.batch_id} was planned but not written: running the same plan again")
            return plan, repaired
        elif at_end and written:
            progress(f"batch {plan.batch_id} was committed but not recorded: recording the commit")
            rows = int(store.load_manifest(plan.batch_id)["rows"]) if plan.has_data else 0
            store.record_commit(plan, {_key(tp): off for tp, off in plan.end_offsets().items()}, rows, recovered=True)
            repaired.append(plan.batch_id)
        else:
            details = ", ".join(
                f"{r.tp}: committed {current.get(r.tp)}, plan [{r.expected_committed} -> {r.end}]" for r in plan.ranges
            )
            raise CommitConflictError(
                f"pending batch {plan.batch_id} no longer matches group {group_id!r} ({details}); "
                "someone else moved the group: inspect it, then delete "
                f"{store.plan_path(plan.batch_id)} to discard the batch"
            )
    return None, repaired


def plan_batch(
    kafka: KafkaOffsets,
    store: BatchStore,
    group_id: str,
    topics: Sequence[str],
    policy: PlanPolicy,
    partitions: Sequence[int] | None = None,
    progress: Progress = log.info,
) -> PlanOutcome:
    """Plan step: repair pending batches, then plan the next batch and persist it before any read."""
    if not topics:
        raise ConfigError("at least one topic is required (--topic)")
    if not group_id:
        raise ConfigError("a consumer group is required (--group)")
    pending, repaired = reconcile_pending(kafka, store, group_id, progress)
    if pending is not None:
        return PlanOutcome(pending, reused=True, repaired=repaired, plan_path=str(store.plan_path(pending.batch_id)))
    states = kafka.partition_offsets(group_id, topics)  # all partitions: the plan keeps a snapshot
    plan = plan_incremental(group_id, topics, states, policy, kafka.isolation_level, utc_now(), partitions)
    if not plan.ranges:
        progress(f"group {group_id}: no new data on {', '.join(topics)}")
        return PlanOutcome(plan, repaired=repaired)
    path = store.save_plan(plan)
    progress(
        f"batch {plan.batch_id}: planned {len(plan.ranges)} partition(s), up to {plan.planned_offsets} offsets"
        + (" (bounded; more remains)" if plan.truncated else "")
    )
    return PlanOutcome(plan, repaired=repaired, plan_path=str(path))


def result_line(plan: OffsetPlan, **extra: Any) -> dict[str, Any]:
    """The JSON object every command prints last."""
    return {**plan.summary(), **extra}


__all__ = ["PlanOutcome", "commit_batch", "plan_batch", "reconcile_pending", "result_line", "KafkaBatchError"]
