"""Reconciling the consumer group with the output's offset log. Pure: numbers in, decision out.

The output's offset log is the truth about what was ingested; the group's committed offsets
mirror it for lag tools. Before planning, each partition's group offset is compared with
the log's position (where the newest log entry left that partition):

=============================================  ===============================================
the group, for one partition                    what the plan step does
=============================================  ===============================================
equal to the log                                plan from there (``AGREE``)
the log does not know the partition, or its     the group decides, as before there was a log;
topic was recreated (another topic id)          without a group offset the new-partition policy
                                                (``UNKNOWN``)
missing (deleted group, expired offsets)        resume from the log; the batch's commit restores
                                                the group (``RESUME``)
where the newest batch started or ended, and     finish that commit first, without reading
that batch's Kafka commit is not recorded       again (``REPAIR``)
anywhere else (moved by hand or another tool,   refuse, naming both positions; the flag
or a second writer)                             ``--on-group-mismatch`` resolves it
                                                (``MISMATCH``)
=============================================  ===============================================

``--on-group-mismatch=output`` resumes from the log (the commit then moves the group back or
forward to it); ``=group`` accepts a group that is *ahead* of the log and records the skipped
offsets as a gap. A group *behind* the log is never accepted: those offsets are already in the
output, and reading them again would duplicate them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from kafka_batch_provider.core.group_owner import GroupCommit
from kafka_batch_provider.core.listing import listed
from kafka_batch_provider.core.offsets import OffsetGap, PartitionOffsets, TopicPartition
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import GroupMismatchError


class GroupMismatchPolicy(str, Enum):
    """What to do when the group's offset is neither the log's position nor explained by a crash."""

    FAIL = "fail"  # default: refuse loudly, change nothing
    OUTPUT = "output"  # resume from the output's log
    GROUP = "group"  # accept a group that is ahead of the log; the skipped offsets become a gap


class Verdict(str, Enum):
    AGREE = "agree"
    UNKNOWN = "unknown"
    RESUME = "resume"
    REPAIR = "repair"
    MISMATCH = "mismatch"


@dataclass(frozen=True)
class LogPosition:
    """Where the output's offset log stands: what its newest entry says.

    :param offsets: per partition, the offset after the newest entry that covers it.
    :param topic_ids: the broker's topic ids when those offsets were written.
    :param unfinished: the newest batch's partitions as ``tp -> (group offset it expected,
        its end)``, when that batch's Kafka commit is not recorded; empty otherwise.
    """

    seq: int
    batch_id: str
    offsets: Mapping[TopicPartition, int]
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    unfinished: Mapping[TopicPartition, tuple[int | None, int]] = field(default_factory=dict)

    def knows(self, tp: TopicPartition, topic_ids: Mapping[str, str]) -> bool:
        """The log holds an offset for ``tp`` of the *same* topic (not one deleted and recreated)."""
        if tp not in self.offsets:
            return False
        then, now = self.topic_ids.get(tp.topic), topic_ids.get(tp.topic)
        return then is None or now is None or then == now


@dataclass(frozen=True)
class Reconciliation:
    """The decision per partition.

    :param checkpoints: where each partition's next batch starts, before the data-loss and
        new-partition policies apply (``None``: no offset anywhere, a new partition).
    :param gaps: offsets skipped by ``--on-group-mismatch=group``.
    :param repair: the newest batch's Kafka commit must be finished before planning.
    :param notes: one line per decision worth telling the user.
    """

    verdicts: dict[TopicPartition, Verdict]
    checkpoints: dict[TopicPartition, int | None]
    gaps: tuple[OffsetGap, ...] = ()
    repair: bool = False
    notes: tuple[str, ...] = ()


def reconcile(
    group_id: str,
    states: Sequence[PartitionOffsets],
    log: LogPosition | None,
    topic_ids: Mapping[str, str],
    policy: GroupMismatchPolicy = GroupMismatchPolicy.FAIL,
    committed_by: GroupCommit | None = None,
) -> Reconciliation:
    """Compare the group (``states[i].committed``) with the log, partition by partition.

    :param topic_ids: the broker's current topic ids (empty when it has none).
    :param committed_by: another output's commit the group carries, if any: a mismatch is then
        that output's doing, and its records must not be accepted as a gap of this one.
    :raises GroupMismatchError: for ``MISMATCH`` partitions the policy does not resolve; one
        line naming every such partition, both positions and the flag that resolves it.
    """
    verdicts: dict[TopicPartition, Verdict] = {}
    checkpoints: dict[TopicPartition, int | None] = {}
    gaps: list[OffsetGap] = []
    notes: list[str] = []
    refused: list[tuple[PartitionOffsets, int]] = []
    for state in states:
        tp, group = state.tp, state.committed
        if log is None or not log.knows(tp, topic_ids):
            if log is not None and tp in log.offsets:
                notes.append(
                    f"{tp}: topic {tp.topic!r} was recreated (new topic id); "
                    "the output's offsets for it no longer apply"
                )
            verdicts[tp], checkpoints[tp] = Verdict.UNKNOWN, group
            continue
        logged = log.offsets[tp]
        checkpoints[tp] = logged
        if tp in log.unfinished and group in log.unfinished[tp]:
            # At the newest batch's start or (a commit cut short) already at its end: finish
            # that commit and record it, so no batch is left without its commit record.
            verdicts[tp] = Verdict.REPAIR
        elif group is None:
            verdicts[tp] = Verdict.RESUME
            notes.append(
                f"{tp}: group {group_id!r} has no committed offset; resuming from the output's log at {logged}"
            )
        elif group == logged:
            verdicts[tp] = Verdict.AGREE
        else:
            verdicts[tp] = Verdict.MISMATCH
            if policy is GroupMismatchPolicy.OUTPUT:
                notes.append(
                    f"{tp}: group at {group}, output at {logged}: resuming from the output "
                    f"({Setting('on_group_mismatch', 'output')})"
                )
            elif policy is GroupMismatchPolicy.GROUP and group > logged:
                checkpoints[tp] = group
                gaps.append(OffsetGap(tp.topic, tp.partition, logged, group))
                notes.append(
                    f"{tp}: group at {group}, output at {logged}: accepting the group "
                    f"({Setting('on_group_mismatch', 'group')}); "
                    f"offsets [{logged}, {group}) are recorded as a gap"
                )
            else:
                refused.append((state, logged))
    if refused:
        raise GroupMismatchError(
            mismatch_message(group_id, refused, log, policy, committed_by),
            setting=Setting("on_group_mismatch", GroupMismatchPolicy.OUTPUT.value),
            partition=refused[0][0].tp if len(refused) == 1 else None,
        )
    # The newest batch's commit compares-and-sets every one of its partitions: it can only be
    # finished when each is at that batch's start or end. Otherwise (a partition resolved by the
    # policy, or a group deleted since) the next batch's commit moves them all instead.
    unfinished = [tp for tp in (log.unfinished if log else {}) if tp in verdicts]
    repair = bool(unfinished) and all(verdicts[tp] is Verdict.REPAIR for tp in unfinished)
    return Reconciliation(verdicts, checkpoints, tuple(gaps), repair, tuple(notes))


def mismatch_message(
    group_id: str,
    refused: Sequence[tuple[PartitionOffsets, int]],
    log: LogPosition | None,
    policy: GroupMismatchPolicy,
    committed_by: GroupCommit | None = None,
) -> str:
    where = listed(f"{s.tp}: group at {s.committed}, output at {logged}" for s, logged in refused)
    behind = [s for s, logged in refused if s.committed is not None and s.committed < logged]
    entry = f" (output log entry {log.seq}, batch {log.batch_id})" if log else ""
    output, group = Setting("on_group_mismatch", "output"), Setting("on_group_mismatch", "group")
    fixes = f"rerun with {output} to resume from the output (its commit moves the group there)"
    if len(behind) < len(refused):
        fixes += f", or {group} to accept the group where it is ahead (the skipped offsets are recorded as a gap)"
    if behind and policy is GroupMismatchPolicy.GROUP:
        fixes = (
            "the group is behind the output there, and those offsets are already in it, so it cannot be accepted; "
            f"rerun with {output}"
        )
    if committed_by is not None:  # accepting the group would record another output's records as lost here
        fixes = (
            f"another output, {committed_by.output}, committed the group last (batch {committed_by.batch_id}): a "
            f"group feeds one output; run that output instead, or once it is retired rerun with {output}"
        )
    return f"group {group_id!r} disagrees with the output's offset log{entry}: {where}; nothing was changed; {fixes}"
