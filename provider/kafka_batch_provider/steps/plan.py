"""The plan step, and the reconciliation and repair that come before it.

The output's offset log (:mod:`kafka_batch_provider.output.offset_log`) is the truth about what was
ingested; the group's committed offsets mirror it, so lag tools, sensors and operators see
progress. These are the functions the command line and the Airflow operators call; Kafka and
storage details live in :mod:`kafka_batch_provider.kafka.client` and
:mod:`kafka_batch_provider.output.store`.

Plan step (:func:`plan_batch`):

1. finish publishing the log's newest batch if a crash cut its publish short;
2. reconcile the group with the log (:mod:`kafka_batch_provider.core.reconcile`): equal, missing
   (resume from the log), one batch behind (repair), unknown partitions, or a mismatch
   (refused unless ``--on-group-mismatch`` says otherwise);
3. repair: the newest batch's Kafka commit did not happen, or only partly: commit it now,
   without reading again;
4. reuse a pending plan for the next log entry when it still starts where a new plan would
   (a retry replays the same ranges into the same batch);
5. else plan the next batch (every chosen partition, idle ones too) and persist it before
   anything is read.

The commit step is :mod:`kafka_batch_provider.steps.commit`; a repair (3) calls it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kafka_batch_provider.core.group_owner import adopted_group, another_output
from kafka_batch_provider.core.listing import listed
from kafka_batch_provider.core.manifest import log_position, plan_of_entry
from kafka_batch_provider.core.merging import DEBEZIUM, MERGED_BATCH_RECORDS
from kafka_batch_provider.core.merging import MERGE_PLAN_KEY as MERGE_KEY
from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.core.plan import INCREMENTAL, OffsetPlan
from kafka_batch_provider.core.planning import LogSlot, PlanPolicy, plan_incremental, select_partitions
from kafka_batch_provider.core.reader_schema import planned_formats
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy, Reconciliation, reconcile
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.core.topic_patterns import (
    PATTERN_PLAN_KEY,
    TopicChanges,
    compile_pattern,
    matching,
    topic_changes,
    topics_or_pattern,
)
from kafka_batch_provider.errors import ConfigError, GroupMismatchError, LogConflictError, ManifestError, PlanError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore, utc_now
from kafka_batch_provider.steps.commit import Progress, commit_batch
from kafka_batch_provider.steps.transaction_edges import at_transaction_edges

log = logging.getLogger(__name__)


@dataclass
class PlanOutcome:
    """What the plan step did.

    :param plan: the plan to run next (``plan.ranges`` empty: nothing to do).
    :param reused: the plan is a pending one from an earlier, unfinished run.
    :param repaired: batch ids whose Kafka commit was finished while repairing.
    :param notes: what the reconciliation of the group with the output decided, line by line.
    :param repaired_entries: those batches' log entries (announced as their commit would have).
    """

    plan: OffsetPlan
    reused: bool = False
    repaired: list[str] = field(default_factory=list)
    plan_path: str | None = None
    notes: list[str] = field(default_factory=list)
    repaired_entries: list[dict[str, Any]] = field(default_factory=list)


def plan_batch(
    kafka: KafkaOffsets,
    store: BatchStore,
    group_id: str,
    topics: Sequence[str],
    policy: PlanPolicy,
    partitions: Sequence[int] | None = None,
    progress: Progress = log.info,
    on_group_mismatch: GroupMismatchPolicy = GroupMismatchPolicy.FAIL,
    reader_schema: ReaderSchemaPin | None = None,
    adopt_group: bool = False,
    topic_pattern: str | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> PlanOutcome:
    """Plan step: reconcile the group with the output, repair, then plan and persist the next batch.

    Everything that can refuse the request (bad topics, a mismatched group, data loss, a
    pending plan that can no longer be read, a reader schema the registry does not have) is
    checked before anything changes.

    :param reader_schema: for values in a schema registry format, what pins the batch's reader
        schema (:class:`~kafka_batch_provider.registry.reader_schema.ReaderSchemaRequest`); the
        plan records it, and a pending plan is reused only when it was planned in the same format.
    :param adopt_group: a new output may start from a group another output committed
        (:mod:`~kafka_batch_provider.core.group_owner`); its first batch records the adoption.
    :param topic_pattern: instead of ``topics``, a regular expression resolved against the cluster's
        topics at every attempt (:mod:`~kafka_batch_provider.core.topic_patterns`).
    :param recorded: facts the plan and its log entry record (a table per topic: what the pattern found).
    """
    topics_or_pattern(list(topics) or None, topic_pattern)
    policy = merged_bound(policy, store)
    pattern = compile_pattern(topic_pattern) if topic_pattern is not None else None
    if not group_id:
        raise ConfigError(f"a consumer group is required ({Setting('group_id')})", setting=Setting("group_id"))
    checked: list[bool] = []  # decide() may run again (the log moved, a repair): Kafka is asked once

    def decide(tail: dict[str, Any] | None, pending: list[OffsetPlan]) -> Decided:
        if not checked:  # a refused login, certificate or group first, before anything changes
            kafka.check_may_commit(group_id)
            checked.append(True)
        names, states, changes = chosen_topics(kafka, group_id, topics, pattern, tail, policy)
        topic_ids = kafka.topic_ids(names) if names else {}
        slot = LogSlot((tail["seq"] if tail else 0) + 1, tail["batch_id"] if tail else None, topic_ids)
        # A new output meeting a group another output committed: refused unless adopted on purpose.
        adopted = adopted_group(group_id, states, store.data.uri, adopt_group) if tail is None else None
        decision = reconcile_group(kafka, store, group_id, states, partitions, tail, slot.topic_ids, on_group_mismatch)
        if adopted is not None:
            note = f"group {group_id!r} adopted from output {adopted.output} (its batch {adopted.batch_id})"
            decision = replace(decision, notes=(*decision.notes, note))
        fresh = plan_incremental(
            group_id,
            names,
            states,
            policy,
            kafka.isolation_level,
            utc_now(),
            partitions,
            slot=slot,
            checkpoints=decision.checkpoints,
            accepted_gaps=decision.gaps,
            new_topics=changes.new if changes else (),
        )
        if adopted is not None:
            fresh = replace(fresh, extra={**fresh.extra, "adopted": adopted.to_dict()})
        if recorded:
            fresh = replace(fresh, extra={**fresh.extra, **recorded})
        if changes is not None:
            fresh = replace(fresh, extra={**fresh.extra, PATTERN_PLAN_KEY: changes.to_dict()})
            decision = replace(decision, notes=(*decision.notes, *changes.lines()))
        starting_alike = [p for p in pending if same_start(p, fresh, partitions) and fits(p, policy, store)]
        refuse_another_format(starting_alike, reader_schema)
        reusable = next(iter(starting_alike), None)
        if reusable is not None:
            check_readable(kafka, store, reusable)
        return decision, fresh, reusable

    tail, pending, plan_files, (decision, fresh, reusable) = decide_on_a_still_log(store, group_id, decide, progress)
    fresh = with_reader_schema(fresh, reader_schema, reusable)
    # Only now, with the request accepted, does anything change.
    if tail is not None:
        store.publish(tail)  # finishes a publish cut short
    drop_stale_plans(store, progress, plan_files, tail["seq"] if tail else 0)
    notes = list(decision.notes)
    for note in notes:
        progress(note)
    repaired: list[str] = []
    repaired_entries: list[dict[str, Any]] = []
    if decision.repair:
        progress(
            f"batch {tail['batch_id']} (output log entry {tail['seq']}) was written but its Kafka commit did not "
            "finish: committing it without reading again"
        )
        commit_batch(kafka, store, plan_for_entry(store, tail), progress, committed_by="plan")
        repaired.append(tail["batch_id"])
        repaired_entries.append(tail)
        tail, pending, plan_files, (decision, fresh, reusable) = decide_on_a_still_log(
            store, group_id, decide, progress, again=True
        )
        fresh = with_reader_schema(fresh, reader_schema, reusable)

    if reusable is not None:
        progress(f"batch {reusable.batch_id} was planned but not written: running the same plan again")
        return PlanOutcome(reusable, True, repaired, store.plan_uri(reusable), notes, repaired_entries)
    for other in pending:
        progress(
            f"pending batch {other.batch_id} no longer starts where the group and the output stand; "
            "it is left unpublished and a new plan takes its place"
        )
    if not fresh.ranges:
        found = ", ".join(fresh.topics) or f"no topic: {topic_pattern!r} matches none on {kafka.bootstrap_servers}"
        progress(f"group {group_id}: no new data on {found}")
        return PlanOutcome(fresh, repaired=repaired, notes=notes, repaired_entries=repaired_entries)
    if fresh.bounded and (store.merge or {}).get("change_format") == DEBEZIUM:
        fresh, edges = at_transaction_edges(kafka, fresh, formats_wanted(reader_schema).get("value"), progress)
        notes.extend(edges)
    fresh = with_merge(fresh, store)
    path = store.save_plan(fresh)
    progress(
        f"batch {fresh.batch_id}: planned {len(fresh.readable_ranges)} partition(s) with data, "
        f"up to {fresh.planned_offsets} offsets, as output log entry {fresh.seq}"
        + (" (bounded; more remains)" if fresh.bounded else "")
    )
    return PlanOutcome(fresh, repaired=repaired, plan_path=path, notes=notes, repaired_entries=repaired_entries)


def chosen_topics(
    kafka: KafkaOffsets,
    group_id: str,
    topics: Sequence[str],
    pattern: re.Pattern[str] | None,
    tail: dict[str, Any] | None,
    policy: PlanPolicy,
) -> tuple[list[str], list[PartitionOffsets], TopicChanges | None]:
    """The topics this batch reads (the pattern's, resolved now), their partitions' offsets, and
    with a pattern what came and left since the log's newest entry."""
    if pattern is None:
        return list(topics), kafka.partition_offsets(group_id, topics), None  # unknown topics fail here
    existing = kafka.topic_names()
    names = matching(pattern, existing)
    states = kafka.partition_offsets(group_id, names) if names else []
    uncommitted = {s.topic for s in states} - {s.topic for s in states if s.committed is not None}
    previous = sorted({r["topic"] for r in tail["ranges"]}) if tail else None
    start = policy.new_topic_start.value
    return names, states, topic_changes(pattern.pattern, names, previous, existing, uncommitted, start)


class ReaderSchemaPin(Protocol):
    """Pins the reader schemas of a batch (the registry's answers, or a configuration error):
    a :class:`~kafka_batch_provider.registry.reader_schema.ReaderSchemaRequest` (one part) or
    :class:`~kafka_batch_provider.registry.reader_schema.ReaderSchemas` (values and keys)."""

    @property
    def formats(self) -> Mapping[str, str]: ...

    def pins(self, topics: Sequence[str]) -> dict[str, Any]: ...


def formats_wanted(reader_schema: ReaderSchemaPin | None) -> dict[str, str]:
    return dict(reader_schema.formats) if reader_schema else {}


def same_format(pending: OffsetPlan, reader_schema: ReaderSchemaPin | None) -> bool:
    """A pending plan decodes as this run asks: values and keys both without a registry format, or
    both in the same one (a plan with nothing to read decodes nothing, so any format goes)."""
    return not pending.has_data or planned_formats(pending.extra) == formats_wanted(reader_schema)


def in_words(formats: Mapping[str, str]) -> str:
    return " and ".join(f"{part}s as {fmt}" for part, fmt in sorted(formats.items(), reverse=True))


def refuse_another_format(pending: Sequence[OffsetPlan], reader_schema: ReaderSchemaPin | None) -> None:
    """A pending plan for the same ranges, planned in another value (or key) format, would be
    replaced by a plan of the same batch id: its retry (or an attempt still running) would write
    the batch the other way. Refused before anything changes."""
    for plan in pending:
        if not same_format(plan, reader_schema):
            recorded, wanted = planned_formats(plan.extra), formats_wanted(reader_schema)
            planned = f"with {in_words(recorded)}" if recorded else "without a schema registry format"
            asked = f"with {in_words(wanted)}" if wanted else "without one"
            differs = "value" if recorded.get("value") != wanted.get("value") else "key"
            raise ConfigError(
                f"pending batch {plan.batch_id} was planned {planned}, this run plans {asked}: finish it with "
                f"the value and key formats it was planned with, or discard it first (kafka-batch discard --plan ...)",
                setting=Setting(f"{differs}_format"),
            )


def with_reader_schema(
    fresh: OffsetPlan, reader_schema: ReaderSchemaPin | None, reusable: OffsetPlan | None
) -> OffsetPlan:
    """The fresh plan with its reader schemas recorded, when it will be saved and has records to decode."""
    if reader_schema is None or reusable is not None or not fresh.has_data:
        return fresh
    return replace(fresh, extra={**fresh.extra, **reader_schema.pins(fresh.topics)})


def with_merge(plan: OffsetPlan, store: BatchStore) -> OffsetPlan:
    """The plan with how its batch becomes rows, when the output merges: the write step follows
    it (``kafka-batch write --plan`` needs no ``--mode``) and refuses a run asking otherwise."""
    merge = store.merge
    return replace(plan, extra={**plan.extra, MERGE_KEY: merge}) if merge and MERGE_KEY not in plan.extra else plan


Decided = tuple[Reconciliation, OffsetPlan, "OffsetPlan | None"]
#: How often the plan step starts over when other runs keep publishing while it plans.
PLAN_ATTEMPTS = 5


def decide_on_a_still_log(
    store: BatchStore,
    group_id: str,
    decide: Callable[[dict[str, Any] | None, list[OffsetPlan]], Decided],
    progress: Progress,
    again: bool = False,
) -> tuple[dict[str, Any] | None, list[OffsetPlan], list[tuple[int, str]], Decided]:
    """Read the log's newest entry and the plan files, and decide from them and the group, until
    the log held still meanwhile.

    The log and the group are read at different moments: a run that publishes a batch and
    commits the group in between makes the group look ahead of the log, a phantom mismatch.
    A decision (or refusal) counts only when the log's newest entry was the same afterwards;
    when it moved, another run published first, and the plan starts over from its batch.

    :param again: a second decision in the same plan step (after a repair).
    """
    for attempt in range(PLAN_ATTEMPTS):
        tail = store.log.tail()
        if attempt == 0 and not again:  # a run frozen here by a test goes on through its later reads
            fail_point("after-log-tail")
        seq = tail["seq"] if tail else 0
        files = store.plan_files()
        pending = store.plans_after(seq, files)
        refuse_foreign_output(store, INCREMENTAL, group_id, tail, pending)
        try:
            decided = decide(tail, pending)
        except GroupMismatchError:
            if store.log.tail_seq() == seq:
                raise
        else:
            if store.log.tail_seq() == seq:
                return tail, pending, files, decided
        progress(f"another run published output log entry {seq + 1} while this run planned: planning again from it")
    raise LogConflictError(
        f"other runs published {PLAN_ATTEMPTS} batches to {store.root} while this run planned; "
        "run it again once they are done"
    )


def reconcile_group(
    kafka: KafkaOffsets,
    store: BatchStore,
    group_id: str,
    states: list[PartitionOffsets],
    partitions: Sequence[int] | None,
    tail: dict[str, Any] | None,
    topic_ids: dict[str, str],
    on_group_mismatch: GroupMismatchPolicy,
) -> Reconciliation:
    """The reconciliation of the chosen partitions' group offsets with the log's newest entry.

    While the newest batch's Kafka commit is not recorded, its partitions outside this run's
    choice (another partition subset, another topic) decide too whether that commit can be
    finished now: a later entry would leave it unfinishable on its own. They change nothing
    else of this run's plan.
    """
    position = None
    if tail is not None:
        position = log_position(tail, store.commit_recorded(tail))
    chosen = select_partitions(states, partitions)
    elsewhere = another_output(chosen, store.data.uri)
    decision = reconcile(group_id, chosen, position, topic_ids, on_group_mismatch, elsewhere)
    chosen_tps = {s.tp for s in chosen}
    missing = {tp for tp in (position.unfinished if position else {}) if tp not in chosen_tps}
    if not missing:
        return decision
    other_topics = sorted({tp.topic for tp in missing} - {s.topic for s in states})
    try:
        others = kafka.partition_offsets(group_id, other_topics) if other_topics else []
        other_ids = kafka.topic_ids(other_topics) if other_topics else {}
    except PlanError:  # a topic of that batch is gone: its commit cannot be finished
        return replace(decision, repair=False)
    extra = [s for s in [*states, *others] if s.tp in missing]
    whole = reconcile(group_id, chosen + extra, position, {**topic_ids, **other_ids}, on_group_mismatch, elsewhere)
    return replace(decision, repair=whole.repair)


def plan_for_entry(store: BatchStore, entry: dict[str, Any]) -> OffsetPlan:
    """The plan of a logged batch: its file, or (when the file is gone) rebuilt from the entry."""
    try:
        return store.load_plan(int(entry["seq"]), str(entry["batch_id"]))
    except (ManifestError, ConfigError):  # gone or damaged: the entry says all a commit needs
        return plan_of_entry(entry)


def merged_bound(policy: PlanPolicy, store: BatchStore) -> PlanPolicy:
    """A merged batch is read back and reduced in the driver's memory: without ``max_records`` it
    holds at most :data:`~kafka_batch_provider.core.merging.MERGED_BATCH_RECORDS` records."""
    if store.merge is None or policy.max_records is not None:
        return policy
    return replace(policy, max_records=MERGED_BATCH_RECORDS)


def fits(pending: OffsetPlan, policy: PlanPolicy, store: BatchStore) -> bool:
    """A pending plan of a merged output larger than a batch may be (one planned before the bound,
    one whose write ran out of memory) is planned again, bounded, never replayed into the same end."""
    return store.merge is None or policy.max_records is None or pending.planned_offsets <= policy.max_records


def same_start(pending: OffsetPlan, fresh: OffsetPlan, partitions: Sequence[int] | None) -> bool:
    """A pending plan is replayed only for the same request and while it starts where a new plan would
    (a pattern that found another topic since makes a new plan)."""
    wanted = sorted(partitions) if partitions is not None else None
    if pending.mode != INCREMENTAL or pending.topics != fresh.topics or pending.extra.get("partitions") != wanted:
        return False
    if pattern_of(pending) != pattern_of(fresh):
        return False
    if (pending.seq, pending.previous, pending.topic_ids) != (fresh.seq, fresh.previous, fresh.topic_ids):
        return False
    starts = {(r.tp, r.start, r.expected_committed) for r in pending.ranges}
    return bool(fresh.ranges) and starts == {(r.tp, r.start, r.expected_committed) for r in fresh.ranges}


def pattern_of(plan: OffsetPlan) -> str | None:
    return (plan.extra.get(PATTERN_PLAN_KEY) or {}).get("pattern")


def check_readable(kafka: KafkaOffsets, store: BatchStore, plan: OffsetPlan) -> None:
    """A pending plan is replayed only while its offsets still exist."""
    log_starts = kafka.log_start_offsets([r.tp for r in plan.readable_ranges])
    gone = [r for r in plan.readable_ranges if r.start < log_starts[r.tp]]
    if gone:
        missing = listed(f"{r.tp} [{r.start}, {log_starts[r.tp]})" for r in gone)
        fix = Setting("on_data_loss", "earliest")
        raise PlanError(
            f"pending batch {plan.batch_id} can no longer be read: offsets {missing} were deleted before it was "
            f"written; remove it with kafka-batch discard --plan {store.plan_uri(plan)}, then plan again with "
            f"{fix} to skip them",
            setting=fix,
            partition=gone[0].tp,
            offsets=(gone[0].start, log_starts[gone[0].tp]),
        )


def drop_stale_plans(
    store: BatchStore,
    progress: Progress = log.info,
    files: list[tuple[int, str]] | None = None,
    tail_seq: int | None = None,
) -> None:
    """Remove plans that lost their log entry to another batch: they can never be published.

    :param files: the plan files, :param tail_seq: the log's newest entry, when the caller
        has them already (each costs a listing or a read on an object store).
    """
    tail_seq = store.log.tail_seq() if tail_seq is None else tail_seq
    by_seq: dict[int, list[str]] = {}
    for seq, batch_id in store.plan_files() if files is None else files:
        if seq <= tail_seq:
            by_seq.setdefault(seq, []).append(batch_id)
    for seq, batch_ids in by_seq.items():
        if len(batch_ids) < 2:
            continue
        entry = store.log.entry(seq)
        winner = entry["batch_id"] if entry else None
        for batch_id in batch_ids:
            if batch_id != winner:
                store.remove_unpublished_plan_file(seq, batch_id)
                progress(
                    f"batch {batch_id} lost output log entry {seq} to batch {winner}: "
                    "its plan and staged files are removed"
                )


def refuse_foreign_output(
    store: BatchStore, mode: str, group_id: str | None, tail: dict[str, Any] | None, pending: Sequence[OffsetPlan]
) -> None:
    """One output, one kind of batch and one group: readers would otherwise see offsets twice."""
    found = [(tail["mode"], tail.get("group_id"), tail["batch_id"], "")] if tail else []
    found += [
        (
            p.mode,
            p.group_id,
            p.batch_id,
            f" (a pending plan: remove it with kafka-batch discard --plan {store.plan_uri(p)})",
        )
        for p in pending
    ]
    for other_mode, other_group, batch_id, remedy in found:
        if other_mode != mode:
            raise PlanError(
                f"output {store.root} holds {other_mode} batches (e.g. {batch_id}{remedy}); "
                f"{mode} batches need an output of their own, or readers would see those offsets twice"
            )
        if mode == INCREMENTAL and other_group != group_id:
            raise PlanError(
                f"output {store.root} is the output of group {other_group!r} (e.g. batch {batch_id}{remedy}), not "
                f"of {group_id!r}: each group needs an output of its own"
            )
