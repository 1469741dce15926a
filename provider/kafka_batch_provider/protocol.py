"""The plan and commit steps, and the repair that joins them.

These are the functions the command line and the Airflow operators call; they hold no
Kafka or Spark details of their own (see :mod:`kafka_batch_provider.kafka_offsets` and
:mod:`kafka_batch_provider.spark.ingest`).

Repair after a crash, done by the plan step before it plans anything new. A pending plan is
one that was persisted but never committed:

* manifest present, every partition at its start or its end -> the write finished (and the
  commit may have started): finish the commit now, without reading again;
* no manifest, group at the plan's starts -> reuse the plan, so the retry reads the same
  ranges into the same batch location (after checking that they still exist and that the
  run asks for the same topics and partitions);
* anything else -> somebody else moved the group: fail loudly, change nothing.
  ``kafka-batch discard`` removes such a batch (data, manifest, plan) once it is understood.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kafka_batch_provider.batch_store import BatchStore, utc_now
from kafka_batch_provider.errors import CommitConflictError, ConfigError, PlanError
from kafka_batch_provider.kafka_offsets import KafkaOffsets
from kafka_batch_provider.manifest import verify_manifest
from kafka_batch_provider.plan import INCREMENTAL, OffsetPlan
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
    result = {tp.key: offset for tp, offset in committed.items()}
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
        in_flight = all(current.get(r.tp) in (r.expected_committed, r.end) for r in plan.ranges)
        written = store.has_manifest(plan.batch_id) or not plan.has_data
        if written and in_flight:
            progress(
                f"batch {plan.batch_id} was written but its commit did not finish: committing it without reading again"
            )
            commit_batch(kafka, store, plan, progress)
            repaired.append(plan.batch_id)
        elif at_start and not written:
            progress(f"batch {plan.batch_id} was planned but not written: running the same plan again")
            return plan, repaired
        else:
            details = ", ".join(
                f"{r.tp}: committed {current.get(r.tp)}, plan [{r.expected_committed} -> {r.end}]" for r in plan.ranges
            )
            raise CommitConflictError(
                f"pending batch {plan.batch_id} no longer matches group {group_id!r} ({details}); "
                "someone else moved the group: inspect it, then remove the batch with "
                f"kafka-batch discard --plan {store.plan_path(plan.batch_id)}"
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
    refuse_mixed_output(store, INCREMENTAL)
    pending, repaired = reconcile_pending(kafka, store, group_id, progress)
    if pending is not None:
        check_reusable(kafka, store, pending, topics, partitions)
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


def check_reusable(
    kafka: KafkaOffsets,
    store: BatchStore,
    plan: OffsetPlan,
    topics: Sequence[str],
    partitions: Sequence[int] | None,
) -> None:
    """A pending plan is replayed only for the same request, and only while its offsets exist."""
    discard = f"kafka-batch discard --plan {store.plan_path(plan.batch_id)}"
    planned_partitions = plan.extra.get("partitions")
    wanted_partitions = sorted(partitions) if partitions is not None else None
    if list(plan.topics) != list(topics) or planned_partitions != wanted_partitions:
        raise PlanError(
            f"pending batch {plan.batch_id} was planned for topics {list(plan.topics)} and partitions "
            f"{planned_partitions or 'all'}, not {list(topics)} and {wanted_partitions or 'all'}: "
            f"run with those to finish it, or remove it with {discard}"
        )
    log_starts = kafka.log_start_offsets([r.tp for r in plan.readable_ranges])
    gone = [r for r in plan.readable_ranges if r.start < log_starts[r.tp]]
    if gone:
        missing = ", ".join(f"{r.tp} [{r.start}, {log_starts[r.tp]})" for r in gone)
        raise PlanError(
            f"pending batch {plan.batch_id} can no longer be read: offsets {missing} were deleted before it was "
            f"written; remove it with {discard}, then plan again with --on-data-loss=earliest to skip them"
        )


def refuse_mixed_output(store: BatchStore, mode: str) -> None:
    """Incremental batches and replays never share an output: readers would see offsets twice."""
    other = next((p for p in store.plans() if p.mode != mode), None)
    if other is not None:
        raise PlanError(
            f"output {store.root} holds {other.mode} batches (e.g. {other.batch_id}); "
            f"{mode} batches need an output of their own, or readers would see those offsets twice"
        )


def discard_batch(kafka: KafkaOffsets, store: BatchStore, plan: OffsetPlan, progress: Progress = log.info) -> None:
    """Remove an uncommitted batch: manifest first (the storage commit point), then data, then plan.

    Refused once any of its offsets is committed: then the batch must be finished, not removed.
    """
    if store.commit_record(plan.batch_id) is not None:
        raise CommitConflictError(f"batch {plan.batch_id} is committed; committed batches are never discarded")
    if plan.commits_group and plan.group_id:
        current = kafka.committed_offsets(plan.group_id, [r.tp for r in plan.ranges])
        moved = [r for r in plan.ranges if current.get(r.tp) == r.end]
        if moved:
            raise CommitConflictError(
                f"batch {plan.batch_id} is partly committed ({', '.join(str(r.tp) for r in moved)} at its end): "
                f"finish it with kafka-batch commit --plan {store.plan_path(plan.batch_id)} instead"
            )
    store.remove_batch(plan.batch_id)
    progress(f"batch {plan.batch_id} discarded (manifest, data and plan removed)")
