"""The manifest is the output log's entry: what a batch wrote, and where the output stands after it."""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.manifest import (
    build_manifest,
    dead_letter_count,
    dead_letters_by_partition,
    log_position,
    offsets_after,
    plan_of_entry,
    verify_manifest,
)
from kafka_batch_provider.core.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_batch_provider.core.plan import plan_batch_id
from kafka_batch_provider.core.planning import LogSlot, PlanPolicy, plan_incremental, plan_replay
from kafka_batch_provider.errors import ManifestError


def make_plan(slot=LogSlot(), states=None):
    states = states or [PartitionOffsets("t", 0, 0, 0, 10), PartitionOffsets("t", 1, 5, 0, 8)]
    return plan_incremental("g", ["t"], states, PlanPolicy(), "read_committed", "now", slot=slot)


def stats(rows0=10, rows1=3, max0=9):
    return [
        {"topic": "t", "partition": 0, "rows": rows0, "min_offset": 0, "max_offset": max0},
        {"topic": "t", "partition": 1, "rows": rows1, "min_offset": 5, "max_offset": 7},
    ]


def manifest_for(plan, partition_stats, previous=None):
    rows = sum(s["rows"] for s in partition_stats)
    files = [{"name": "part-0.parquet", "bytes": 100, "rows": rows}] if rows else []
    return build_manifest(plan, previous, partition_stats, files, staging="_staging/x", written_at="now")


def test_manifest_matching_the_plan_verifies_and_says_where_the_output_stands():
    plan = make_plan()
    manifest = manifest_for(plan, stats())
    verify_manifest(plan, manifest)
    assert manifest["rows"] == 13 and manifest["batch_id"] == plan.batch_id and manifest["seq"] == 1
    assert manifest["offsets"] == {"t:0": 10, "t:1": 8}
    assert manifest["previous"] is None and manifest["location"] == f"batch_id={plan.batch_id}"


def test_offsets_accumulate_from_the_previous_entry_for_partitions_this_batch_does_not_cover():
    first = manifest_for(make_plan(), stats())
    states = [PartitionOffsets("t", 0, 10, 0, 15), PartitionOffsets("t", 1, 8, 0, 8)]
    second_plan = plan_incremental(
        "g", ["t"], states, PlanPolicy(), "read_committed", "now", partitions=[0], slot=LogSlot(2, first["batch_id"])
    )
    second = manifest_for(
        second_plan, [{"topic": "t", "partition": 0, "rows": 5, "min_offset": 10, "max_offset": 14}], first
    )
    assert second["offsets"] == {"t:0": 15, "t:1": 8}, "t:1 keeps the first entry's offset"
    assert second["previous"] == {"seq": 1, "batch_id": first["batch_id"]}


def test_a_recreated_topic_drops_the_old_topics_offsets():
    previous = {
        "seq": 1,
        "batch_id": "b-1",
        "offsets": {"t:0": 130, "t:1": 120, "u:0": 7},
        "topic_ids": {"t": "old", "u": "u1"},
    }
    plan = make_plan(LogSlot(2, "b-1", {"t": "new"}), [PartitionOffsets("t", 0, None, 0, 4)])
    offsets, topic_ids = offsets_after(previous, plan)
    assert offsets == {"t:0": 4, "u:0": 7}, "t:1 of the old topic must not survive"
    assert topic_ids == {"t": "new", "u": "u1"}


def test_replay_entries_hold_no_position():
    states = [PartitionOffsets("t", 0, None, 0, 10)]
    replay = plan_replay([OffsetRange("t", 0, 2, 5)], states, "read_committed", "now")
    assert offsets_after(None, replay) == ({}, {})


def test_fewer_rows_than_offsets_is_fine_more_is_not():
    plan = make_plan()
    manifest_for(plan, stats(rows0=7))  # transaction markers, compaction
    with pytest.raises(ManifestError, match=r"11 rows and 0 dead letters written for 10 planned offsets"):
        manifest_for(plan, stats(rows0=11))


def test_offsets_outside_the_planned_range_are_refused():
    with pytest.raises(ManifestError, match=r"fall outside \[0, 10\)"):
        manifest_for(make_plan(), stats(max0=10))


def test_manifest_of_another_batch_entry_or_predecessor_or_ranges_is_refused():
    plan = make_plan()
    manifest = manifest_for(plan, stats())
    with pytest.raises(ManifestError, match="is batch 'b-other', not batch"):
        verify_manifest(plan, {**manifest, "batch_id": "b-other"})
    with pytest.raises(ManifestError, match="output log entry 2 is batch"):
        verify_manifest(plan, {**manifest, "seq": 2})
    with pytest.raises(ManifestError, match="follows batch 'b-x', the plan followed None"):
        verify_manifest(plan, {**manifest, "previous": {"seq": 0, "batch_id": "b-x"}})
    with pytest.raises(ManifestError, match="differ from the plan"):
        verify_manifest(plan, {**manifest, "ranges": manifest["ranges"][:1]})
    shifted = json.loads(json.dumps(manifest))
    shifted["ranges"][0]["end"] = 9
    with pytest.raises(ManifestError, match=r"manifest range \[0, 9\) differs from plan \[0, 10\)"):
        verify_manifest(plan, shifted)


def test_row_counts_of_files_and_ranges_must_agree():
    plan = make_plan()
    manifest = manifest_for(plan, stats())
    manifest["files"][0]["rows"] = 12
    with pytest.raises(ManifestError, match="row counts .* do not agree"):
        verify_manifest(plan, manifest)


def test_unplanned_partition_in_the_data_is_refused():
    bad = stats() + [{"topic": "t", "partition": 9, "rows": 1, "min_offset": 0, "max_offset": 0}]
    with pytest.raises(ManifestError, match="unplanned partitions"):
        manifest_for(make_plan(), bad)


def test_log_position_lists_the_unfinished_kafka_commit_only_while_it_is_not_recorded():
    manifest = manifest_for(make_plan(), stats())
    unfinished = log_position(manifest, kafka_commit_recorded=False)
    assert unfinished.unfinished == {TopicPartition("t", 0): (0, 10), TopicPartition("t", 1): (5, 8)}
    assert unfinished.offsets == {TopicPartition("t", 0): 10, TopicPartition("t", 1): 8}
    assert log_position(manifest, kafka_commit_recorded=True).unfinished == {}


def test_the_plan_of_an_entry_is_the_plan_it_was_written_for():
    plan = make_plan(LogSlot(3, "b-prev", {"t": "id"}))
    rebuilt = plan_of_entry(manifest_for(plan, stats(), {"seq": 2, "batch_id": "b-prev", "offsets": {}}))
    assert rebuilt.ranges == plan.ranges and rebuilt.seq == 3 and rebuilt.previous == "b-prev"
    assert plan_batch_id(rebuilt) == plan.batch_id


def test_dead_letters_are_counted_per_partition_and_must_add_up():
    plan = make_plan()
    partition_stats = [{**s, "dead_letters": d} for s, d in zip(stats(rows0=8), (2, 0))]
    letters = {
        "files": [{"name": "part-0.parquet", "bytes": 40, "rows": 2}],
        "staging": "_staging/x/_dead_letters",
        "location": "_dead_letters/batch_id=b",
    }
    rows = sum(s["rows"] for s in partition_stats)
    files = [{"name": "part-0.parquet", "bytes": 100, "rows": rows}]
    manifest = build_manifest(plan, None, partition_stats, files, staging="_staging/x", dead_letters=letters)
    assert manifest["dead_letters"]["rows"] == 2 and [r["dead_letters"] for r in manifest["ranges"]] == [2, 0]
    assert dead_letter_count(manifest) == 2 and dead_letters_by_partition(manifest) == {"t:0": [2, 8]}
    too_many = {**letters, "files": [{"name": "part-0.parquet", "bytes": 40, "rows": 3}]}
    with pytest.raises(ManifestError, match="dead-letter counts .* do not agree"):
        build_manifest(plan, None, partition_stats, files, staging="_staging/x", dead_letters=too_many)
    over = [{**partition_stats[0], "dead_letters": 3}, partition_stats[1]]
    with pytest.raises(ManifestError, match="8 rows and 3 dead letters written for 10 planned offsets"):
        build_manifest(plan, None, over, files, staging="_staging/x", dead_letters=too_many)
    assert dead_letter_count(manifest_for(plan, stats())) == 0 and "dead_letters" not in manifest_for(plan, stats())
