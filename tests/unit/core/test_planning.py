"""Planning is pure: numbers in, plan out. Each policy and bound, without a broker."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.offsets import OffsetGap, OffsetRange, PartitionOffsets, TopicPartition
from kafka_batch_provider.core.plan import INCREMENTAL, REPLAY, OffsetPlan
from kafka_batch_provider.core.planning import (
    DataLossPolicy,
    LogSlot,
    NewPartitionPolicy,
    PlanPolicy,
    apply_bounds,
    fair_shares,
    plan_incremental,
    plan_replay,
    split_range,
    start_offset,
)
from kafka_batch_provider.core.settings import FLAGS_WORDING, KEYWORDS, Setting, worded
from kafka_batch_provider.errors import ConfigError, PlanError

NOW = "2026-01-01T00:00:00.000+00:00"


def state(committed, start, end, topic="t", partition=0) -> PartitionOffsets:
    return PartitionOffsets(topic, partition, committed, start, end)


def plan(states, policy=PlanPolicy(), group="g") -> OffsetPlan:
    return plan_incremental(group, sorted({s.topic for s in states}), states, policy, "read_committed", NOW)


def test_committed_partition_starts_at_its_committed_offset():
    assert start_offset(state(40, 0, 100), PlanPolicy()) == (40, None)


@pytest.mark.parametrize(
    "policy, expected",
    [(NewPartitionPolicy.EARLIEST, 10), (NewPartitionPolicy.LATEST, 100)],
)
def test_new_partition_policy_chooses_the_start(policy, expected):
    assert start_offset(state(None, 10, 100), PlanPolicy(new_partitions=policy)) == (expected, None)


def test_new_partition_policy_error_names_the_partition():
    with pytest.raises(PlanError, match=r"t\[0\]: the group has no committed offset"):
        start_offset(state(None, 0, 5), PlanPolicy(new_partitions=NewPartitionPolicy.ERROR))


@pytest.mark.parametrize(
    "wording, advice", [(KEYWORDS, "on_data_loss='earliest'"), (FLAGS_WORDING, "--on-data-loss=earliest")]
)
def test_data_loss_fails_by_default_naming_topic_partition_and_missing_range(wording, advice):
    with worded(wording), pytest.raises(PlanError) as err:
        start_offset(state(5, 100, 150, topic="orders", partition=3), PlanPolicy())
    message = str(err.value)
    assert "orders[3]" in message and "[5, 100)" in message and f"rerun with {advice} to skip" in message, (
        f"expected the partition, the missing range and the advice {advice!r}, found {message!r}"
    )
    found = (err.value.partition, err.value.offsets, err.value.setting)
    expected = (TopicPartition("orders", 3), (5, 100), Setting("on_data_loss", "earliest"))
    assert found == expected, f"expected the fields {expected}, found {found}"


def test_data_loss_policy_earliest_skips_to_log_start_and_records_the_gap():
    assert start_offset(state(5, 100, 150), PlanPolicy(on_data_loss=DataLossPolicy.EARLIEST)) == (
        100,
        OffsetGap("t", 0, 5, 100),
    )


def test_committed_beyond_end_is_an_error():
    with pytest.raises(PlanError, match=r"committed offset 120 is beyond the end offset 100"):
        start_offset(state(120, 0, 100), PlanPolicy())


def test_committed_equal_to_end_means_nothing_to_do():
    result = plan([state(100, 0, 100)])
    assert result.ranges == () and not result.has_data


def test_plan_holds_every_partition_idle_ones_too_and_expects_current_committed():
    result = plan(
        [
            state(10, 0, 30, partition=0),
            state(30, 0, 30, partition=1),  # caught up: committed again so its offset never expires
            state(None, 0, 0, partition=2),  # new and empty: committed so the group knows it
        ]
    )
    assert [(r.partition, r.start, r.end, r.expected_committed) for r in result.ranges] == [
        (0, 10, 30, 10),
        (1, 30, 30, 30),
        (2, 0, 0, None),
    ]
    assert [r.partition for r in result.readable_ranges] == [0]
    assert result.planned_offsets == 20
    assert result.mode == INCREMENTAL and result.group_id == "g"


def test_a_plan_without_work_has_no_ranges():
    result = plan([state(30, 0, 30, partition=0), state(7, 7, 7, partition=1)])
    assert result.ranges == () and not result.has_work


def test_checkpoints_from_the_output_log_replace_the_group_and_the_group_stays_expected():
    states = [state(None, 0, 30, partition=0), state(12, 0, 30, partition=1)]
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    result = plan_incremental("g", ["t"], states, PlanPolicy(), "read_committed", "now", checkpoints={tp0: 20, tp1: 12})
    assert [(r.start, r.end, r.expected_committed) for r in result.ranges] == [(20, 30, None), (12, 30, 12)]


def test_batch_id_depends_on_log_entry_and_topic_ids_so_a_recreated_topic_never_reuses_one():
    states = [state(None, 0, 5)]
    ids = {
        plan_incremental(
            "g", ["t"], states, PlanPolicy(), "read_committed", "now", slot=LogSlot(seq, None, topic_ids)
        ).batch_id
        for seq, topic_ids in [(1, {}), (2, {}), (1, {"t": "id-a"}), (1, {"t": "id-b"})]
    }
    assert len(ids) == 4, f"expected 4 distinct batch ids, got {ids}"
    again = plan_incremental("g", ["t"], states, PlanPolicy(), "read_committed", "x", slot=LogSlot(2, None, {}))
    assert again.batch_id in ids, "the same slot, topics and ranges must give the same id"


def test_accepted_gaps_are_recorded_in_the_plan():
    gap = OffsetGap("t", 0, 10, 15)
    result = plan_incremental(
        "g",
        ["t"],
        [state(15, 0, 15)],
        PlanPolicy(),
        "read_committed",
        "now",
        checkpoints={TopicPartition("t", 0): 15},
        accepted_gaps=[gap],
    )
    assert result.gaps == (gap,) and result.ranges == (OffsetRange("t", 0, 15, 15, 15),)


def test_data_loss_gap_is_in_the_plan_and_the_range_expects_the_old_offset():
    result = plan([state(5, 100, 150)], PlanPolicy(on_data_loss=DataLossPolicy.EARLIEST))
    assert result.gaps == (OffsetGap("t", 0, 5, 100),)
    assert result.ranges[0] == OffsetRange("t", 0, 100, 150, 5)


def test_fair_shares_give_small_partitions_all_and_share_the_rest():
    assert fair_shares([5, 100, 100], 65) == [5, 30, 30]
    assert fair_shares([0, 10, 10], 7) == [0, 4, 3]
    assert fair_shares([3, 3], 100) == [3, 3]
    assert sum(fair_shares([1000] * 7, 10)) == 10


def test_tiny_budget_still_makes_progress():
    assert sum(fair_shares([50, 50, 50], 1)) == 1


def test_tiny_budget_never_starves_the_largest_backlog():
    assert fair_shares([1000, 5, 5], 2) == [1, 1, 0]
    sizes = [50, 50, 50]
    for _ in range(6):  # budget below the partition count: the largest backlog moves each time
        shares = fair_shares(sizes, 1)
        sizes = [size - share for size, share in zip(sizes, shares)]
    assert sizes == [48, 48, 48], "the one offset per batch must rotate over the partitions"


def test_bounds_move_ends_down_never_starts():
    ranges = [OffsetRange("t", 0, 10, 110, 10), OffsetRange("t", 1, 0, 20, 0)]
    bounded = apply_bounds(ranges, PlanPolicy(max_records_per_partition=50))
    assert [(r.start, r.end) for r in bounded] == [(10, 60), (0, 20)]
    bounded = apply_bounds(ranges, PlanPolicy(max_records=30))
    assert [(r.start, r.end) for r in bounded] == [(10, 25), (0, 15)]


def test_bounded_plan_is_marked_bounded_and_the_next_plan_continues():
    first = plan([state(0, 0, 100)], PlanPolicy(max_records=40))
    assert first.bounded and first.summary()["bounded"] and first.ranges[0].end == 40
    second = plan([state(40, 0, 100)], PlanPolicy(max_records=40))
    assert second.ranges[0].start == 40 and second.ranges[0].end == 80


@pytest.mark.parametrize("field", ["max_records", "max_records_per_partition"])
def test_non_positive_bounds_are_refused(field):
    with pytest.raises(ConfigError, match="must be a positive integer"):
        PlanPolicy(**{field: 0})


def test_batch_id_is_deterministic_and_depends_on_ranges_and_group():
    a = plan([state(0, 0, 10)])
    assert plan([state(0, 0, 10)]).batch_id == a.batch_id
    assert plan([state(0, 0, 11)]).batch_id != a.batch_id
    assert plan([state(0, 0, 10)], group="other").batch_id != a.batch_id
    assert a.batch_id.startswith("b-")


def test_replay_plan_checks_bounds_and_never_expects_a_commit():
    states = [state(0, 10, 100)]
    replay = plan_replay([OffsetRange("t", 0, 20, 50)], states, "read_committed", NOW)
    assert replay.mode == REPLAY and not replay.commits_group
    assert replay.ranges == (OffsetRange("t", 0, 20, 50, None),)
    with pytest.raises(PlanError, match=r"offsets \[5, 10\) were deleted .* on_data_loss='earliest'"):
        plan_replay([OffsetRange("t", 0, 5, 50)], states, "read_committed", NOW)
    kept = plan_replay(
        [OffsetRange("t", 0, 5, 50)], states, "read_committed", NOW, on_data_loss=DataLossPolicy.EARLIEST
    )
    assert kept.ranges == (OffsetRange("t", 0, 10, 50, None),), f"what is left is replayed: {kept.ranges}"
    assert kept.gaps == (OffsetGap("t", 0, 5, 10),), f"the deleted offsets are the plan's gap: {kept.gaps}"
    with pytest.raises(PlanError, match=r"end offset 150 is beyond the end offset 100"):
        plan_replay([OffsetRange("t", 0, 20, 150)], states, "read_committed", NOW)
    with pytest.raises(PlanError, match=r"t\[7\] does not exist"):
        plan_replay([OffsetRange("t", 7, 0, 1)], states, "read_committed", NOW)


def test_end_before_start_is_not_a_range():
    with pytest.raises(ValueError, match=r"invalid offset range t\[0\] \[10, 5\)"):
        OffsetRange("t", 0, 10, 5)


@pytest.mark.parametrize(
    "size, per_task, expected_pieces",
    [(0, 10, 1), (10, 10, 1), (11, 10, 2), (1000, 300, 4), (7, 1, 7)],
)
def test_split_range_covers_the_range_exactly_with_bounded_pieces(size, per_task, expected_pieces):
    r = OffsetRange("t", 0, 100, 100 + size, 100)
    pieces = split_range(r, per_task)
    assert len(pieces) == expected_pieces
    assert pieces[0].start == r.start and pieces[-1].end == r.end
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
    assert all(p.size <= per_task for p in pieces)


def test_plan_json_round_trip_and_tamper_detection():
    original = plan([state(3, 0, 30, partition=0), state(None, 0, 5, partition=1)])
    assert OffsetPlan.from_json(original.to_json()) == original
    tampered = original.to_dict()
    tampered["ranges"][0]["end"] = 31
    with pytest.raises(ConfigError, match="does not match its ranges"):
        OffsetPlan.from_dict(tampered)
    with pytest.raises(ConfigError, match="not valid JSON"):
        OffsetPlan.from_json("{not json")


def test_a_checkpoint_from_the_output_log_is_named_as_such_when_it_is_beyond_the_end():
    states = [state(None, 0, 6)]
    with pytest.raises(PlanError, match=r"the output's offset log position 10 is beyond the end offset 6"):
        plan_incremental("g", ["t"], states, PlanPolicy(), "read_committed", NOW, checkpoints={states[0].tp: 10})


@pytest.mark.parametrize("text", ["[1, 2, 3]", '"a plan"', "42", "null"])
def test_a_plan_file_that_is_not_a_json_object_is_one_line(text):
    with pytest.raises(ConfigError, match="plan file is malformed: a JSON object was expected"):
        OffsetPlan.from_json(text)
