"""Reconciling the group with the output's offset log: each row of the decision table, without I/O."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.offsets import OffsetGap, PartitionOffsets, TopicPartition
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy, LogPosition, Verdict, reconcile
from kafka_batch_provider.core.settings import FLAGS_WORDING, Setting, worded
from kafka_batch_provider.errors import GroupMismatchError

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def group(*committed: int | None) -> list[PartitionOffsets]:
    return [PartitionOffsets("t", p, c, 0, 100) for p, c in enumerate(committed)]


def log(offsets: dict, unfinished: dict | None = None, topic_ids: dict | None = None) -> LogPosition:
    return LogPosition(7, "b-tail", offsets, topic_ids or {}, unfinished or {})


def test_group_equal_to_the_log_plans_from_there():
    result = reconcile("g", group(40, 50), log({TP0: 40, TP1: 50}), {})
    assert result.verdicts == {TP0: Verdict.AGREE, TP1: Verdict.AGREE}
    assert result.checkpoints == {TP0: 40, TP1: 50} and not result.repair and result.notes == ()


def test_deleted_group_resumes_from_the_log_and_says_so():
    result = reconcile("g", group(None, None), log({TP0: 40, TP1: 50}), {})
    assert result.verdicts == {TP0: Verdict.RESUME, TP1: Verdict.RESUME}
    assert result.checkpoints == {TP0: 40, TP1: 50}
    assert any("resuming from the output's log at 40" in n for n in result.notes), result.notes


def test_partitions_the_log_does_not_know_follow_the_group():
    result = reconcile("g", group(40, None), log({TP0: 40}), {})
    assert result.verdicts[TP1] is Verdict.UNKNOWN and result.checkpoints[TP1] is None
    assert reconcile("g", group(33), None, {}).checkpoints == {TP0: 33}, "no log at all: the group decides"


def test_a_recreated_topic_makes_the_logs_offsets_inapplicable():
    result = reconcile("g", group(None), log({TP0: 130}, topic_ids={"t": "old"}), {"t": "new"})
    assert result.verdicts[TP0] is Verdict.UNKNOWN and result.checkpoints[TP0] is None
    assert any("recreated" in n for n in result.notes)


def test_group_at_the_newest_batchs_start_without_its_commit_is_repaired():
    unfinished = {TP0: (30, 40), TP1: (45, 50)}
    result = reconcile("g", group(30, 50), log({TP0: 40, TP1: 50}, unfinished), {})  # partly applied commit
    assert result.repair and result.verdicts == {TP0: Verdict.REPAIR, TP1: Verdict.REPAIR}
    assert result.checkpoints == {TP0: 40, TP1: 50}


def test_a_repair_also_covers_a_deleted_group_that_the_newest_batch_had_resumed():
    result = reconcile("g", group(None), log({TP0: 40}, {TP0: (None, 40)}), {})
    assert result.repair and result.verdicts[TP0] is Verdict.REPAIR


@pytest.mark.parametrize("moved", [10, 60], ids=["back", "ahead"])
def test_group_moved_elsewhere_is_refused_naming_both_positions_and_the_flag(moved):
    with worded(FLAGS_WORDING), pytest.raises(GroupMismatchError) as err:
        reconcile("g", group(moved, 50), log({TP0: 40, TP1: 50}), {})
    message = str(err.value)
    assert f"t[0]: group at {moved}, output at 40" in message, message
    assert "--on-group-mismatch=output" in message and "nothing was changed" in message
    assert ("--on-group-mismatch=group" in message) == (moved > 40), message
    assert "\n" not in message
    assert (err.value.setting, err.value.partition) == (Setting("on_group_mismatch", "output"), TP0), (
        f"expected the fields on_group_mismatch='output' and {TP0}, found {err.value.setting}, {err.value.partition}"
    )


def test_the_operators_are_advised_in_their_keyword_arguments():
    with pytest.raises(GroupMismatchError) as err:
        reconcile("g", group(60, 50), log({TP0: 40, TP1: 50}), {})
    message = str(err.value)
    assert "rerun with on_group_mismatch='output'" in message and "or on_group_mismatch='group'" in message, message
    assert "--" not in message, f"expected no command-line flag in an operator's message, found {message!r}"


def test_output_policy_resumes_from_the_log_either_way():
    result = reconcile("g", group(10, 90), log({TP0: 40, TP1: 50}), {}, GroupMismatchPolicy.OUTPUT)
    assert result.checkpoints == {TP0: 40, TP1: 50} and result.gaps == ()


def test_group_policy_accepts_a_group_ahead_and_records_the_gap():
    result = reconcile("g", group(60), log({TP0: 40}), {}, GroupMismatchPolicy.GROUP)
    assert result.checkpoints == {TP0: 60}
    assert result.gaps == (OffsetGap("t", 0, 40, 60),)


def test_group_policy_never_accepts_a_group_behind_the_output():
    with pytest.raises(GroupMismatchError, match="behind the output .* cannot be accepted"):
        reconcile("g", group(10), log({TP0: 40}), {}, GroupMismatchPolicy.GROUP)


def test_no_repair_when_a_partition_of_the_newest_batch_was_moved_and_the_policy_resolves_it():
    unfinished = {TP0: (30, 40), TP1: (45, 50)}
    result = reconcile("g", group(30, 70), log({TP0: 40, TP1: 50}, unfinished), {}, GroupMismatchPolicy.OUTPUT)
    assert not result.repair, "its commit would fail on t[1]: the next batch's commit moves both instead"
    assert result.checkpoints == {TP0: 40, TP1: 50}


def test_a_refusal_over_thousands_of_partitions_names_a_few_and_counts_the_rest():
    partitions = 2_000
    moved = group(*([60] * partitions))
    with pytest.raises(GroupMismatchError) as err:
        reconcile("g", moved, log({TopicPartition("t", p): 40 for p in range(partitions)}), {})
    message = str(err.value)
    assert "t[0]: group at 60, output at 40" in message and "and 1,995 more" in message, message[:300]
    assert len(message) < 1_000, f"expected a short line whatever the partition count, found {len(message)} chars"
