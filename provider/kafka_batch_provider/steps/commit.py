"""The commit step: the batch must be the plan's entry in the output's log and its files must be
in place; then its end offsets are committed synchronously with compare-and-set, and the commit
is recorded. Also :func:`discard_batch`, which removes a batch that never reached the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_batch_provider.core.group_owner import commit_metadata
from kafka_batch_provider.core.manifest import dead_letter_count, dead_letters_by_partition, verify_manifest
from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.errors import CommitConflictError, ConfigError, ManifestError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.steps.guards import check_same_topics
from kafka_batch_provider.steps.write import record_without_data

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def commit_batch(
    kafka: KafkaOffsets,
    store: BatchStore,
    plan: OffsetPlan,
    progress: Progress = log.info,
    committed_by: str = "commit",
) -> dict[str, int]:
    """Commit step: check the batch's log entry and files, then compare-and-set commit its ends.

    Idempotent: a batch whose commit is recorded is not committed again. A plan with nothing
    to read has no Spark step: its log entry is created here.

    :param committed_by: who commits, recorded beside it (``plan``: a later plan step finishing it).
    :returns: committed offsets as ``{"topic:partition": offset}``.
    """
    ready = ready_to_commit(kafka, store, plan, progress)
    if not isinstance(ready, CommitReady):
        return ready
    check_same_topics(kafka, plan)
    committed = kafka.commit(plan.group_id, plan.expected_committed(), plan.end_offsets(), metadata=ready.metadata)
    return record_committed(ready, committed, progress, committed_by)


@dataclass(frozen=True)
class CommitReady:
    """A batch checked for its Kafka commit: in the log, its files in place, the log's newest."""

    store: BatchStore
    plan: OffsetPlan
    entry: dict[str, Any]

    @property
    def metadata(self) -> str:
        # Beside the offsets: the batch and the output they mirror (a group feeds one output).
        return commit_metadata(self.plan.batch_id, self.store.data.uri)


def ready_to_commit(
    kafka: KafkaOffsets, store: BatchStore, plan: OffsetPlan, progress: Progress = log.info
) -> CommitReady | dict[str, int]:
    """The checks before a batch's Kafka commit; a batch whose commit is recorded already: its offsets."""
    if not plan.commits_group or not plan.group_id:
        raise ConfigError(f"batch {plan.batch_id} is a {plan.mode} plan; replays never commit the group")
    record = store.commit_record(plan.seq, plan.batch_id)
    if record is not None:
        progress(f"batch {plan.batch_id} was already committed at {record['committed_at']}")
        return record["committed"]
    entry = store.entry_of(plan)
    if entry is None:
        if plan.has_data:
            raise ManifestError(
                f"batch {plan.batch_id} is not in the output log of {store.root} (entry {plan.seq} is free): "
                "run the write step first; its offsets are not committed"
            )
        entry = record_without_data(kafka, store, plan)
    verify_manifest(plan, entry)
    store.publish(entry)  # finishes a publish cut short
    store.check_published(entry)
    newest = store.log.tail_seq()
    if newest > plan.seq:
        raise CommitConflictError(
            f"batch {plan.batch_id} (output log entry {plan.seq}) is followed by entry {newest}: its offsets are no "
            "longer committed on their own; the next plan step reconciles the group with the output"
        )
    return CommitReady(store, plan, entry)


def record_committed(
    ready: CommitReady,
    committed: Mapping[TopicPartition, int],
    progress: Progress = log.info,
    committed_by: str = "commit",
) -> dict[str, int]:
    """Record a batch's Kafka commit beside its output (``committed``: at least its partitions')."""
    plan, entry = ready.plan, ready.entry
    result = {tp.key: committed[tp] for tp in sorted(plan.end_offsets())}
    ready.store.record_commit(plan, result, int(entry["rows"]), dead_letters_by_partition(entry), committed_by)
    letters = dead_letter_count(entry)
    progress(
        f"batch {plan.batch_id}: committed {len(result)} partition(s) of group {plan.group_id} ({entry['rows']} rows"
        f"{f', {letters} dead letters' if letters else ''})"
    )
    return result


def discard_batch(store: BatchStore, plan: OffsetPlan, progress: Progress = log.info) -> None:
    """Remove a batch that is not in the output log: its staged files, then its plan.

    Refused for a logged batch: the log is append-only, and the next plan step finishes it.
    """
    store.remove_unpublished(plan)
    progress(f"batch {plan.batch_id} discarded (staged files and plan removed)")
