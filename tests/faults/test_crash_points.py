"""The process dies between the steps; the output's own log is damaged or lost (items 2 and 8)."""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.output.tables import MANIFEST_KEY
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.harness import (
    expect_exactly_once,
    expect_nothing_new_visible,
    run_cli,
    scenario_args,
)
from tests.integration.helpers import group_offsets, offsets_of

pytestmark = pytest.mark.integration


def test_a_crash_after_the_storage_commit_is_finished_by_the_next_run_without_reading_again(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)

    crashed = run_cli(args, lake.env(), fail_point="after-log-entry:kill")

    assert crashed.killed, f"expected the run killed at its fail point, got exit {crashed.process.returncode}"
    [entry] = lake.log_entries()
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "the Kafka commit must not have run"
    batches = lake.batches()

    finished = run_cli(args, lake.env()).result()

    assert finished["repaired"] == [entry["batch_id"]], f"the next run must finish the commit: {finished}"
    assert finished["skipped"] and "spark_seconds" not in finished["timings"], (
        f"with nothing new, the next run must not start Spark (it would read Kafka again): {finished}"
    )
    assert lake.batches() == batches, "the batch was written again"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 20, 1: 20}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 20, 1: 20}))


def test_a_crash_after_planning_replays_the_same_plan(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)

    crashed = run_cli(args, lake.env(), fail_point="after-plan:kill")
    assert crashed.killed, f"expected the run killed at its fail point, got exit {crashed.process.returncode}"
    produce(kafka_config, topic, sample_records(2, 6, first_id=20))  # arrives before the retry
    retried = run_cli(args, lake.env()).result()

    assert retried["reused"] and retried["records"] == 20, f"the retry must replay the saved plan: {retried}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 10, 1: 10}))


def test_a_lost_storage_commit_of_an_uncommitted_batch_is_written_again_once(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 15))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)
    run_cli(args, lake.env()).result()
    produce(kafka_config, topic, sample_records(1, 10, first_id=15))
    assert run_cli(args, lake.env(), fail_point="after-log-entry:kill").killed
    first, second = lake.log_entries()
    lose_the_storage_commit(lake, second)  # its files stay behind, and are visible in the Parquet layout
    assert [e["seq"] for e in lake.log_entries()] == [first["seq"]], "the entry was not lost"

    retried = run_cli(args, lake.env()).result()

    assert retried["batch_id"] == second["batch_id"] and retried["records"] == 10, (
        f"the retry must write the same batch again: {retried}"
    )
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 25}
    assert [e["batch_id"] for e in lake.log_entries()] == [first["batch_id"], second["batch_id"]]
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 25}))


def test_a_log_entry_that_does_not_match_its_plan_is_refused_and_nothing_is_committed(
    outcome, lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 12))
    args = scenario_args(lake, kafka_config, topic, group_id, spark_connect_remote)
    assert run_cli(args, lake.env(), fail_point="after-log-entry:kill").killed
    [entry] = lake.log_entries()
    before = lake.keys()
    tamper_with_the_storage_commit(lake, entry)

    refused = run_cli(args, lake.env())

    line = refused.error_line()
    assert entry["batch_id"] in line, f"the line must name the batch: {line}"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}, "a mismatched batch must never be committed"
    expect_nothing_new_visible(lake, before)
    # The files are all there, once: the refusal is about the log entry, not the data.
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 12}))


def storage_commit_of(lake, entry) -> str:
    """The object that makes ``entry`` part of the output: its log entry, or its Delta commit."""
    if lake.format == "delta":
        return f"_delta_log/{int(entry['table_version']):020d}.json"
    return f"_log/{int(entry['seq']):020d}.json"


def lose_the_storage_commit(lake, entry) -> None:
    """Delete the batch's log entry (or Delta commit), as a storage rollback or a careless hand would."""
    location = lake.table_location()
    location.fs.rm_file(location.path(storage_commit_of(lake, entry)))
    if lake.format == "parquet" and location.exists("_log/_tail.json"):
        location.fs.rm_file(location.path("_log/_tail.json"))  # the hint would name the lost entry


def tamper_with_the_storage_commit(lake, entry) -> None:
    """Move the first range's end in the batch's log entry (or Delta commit's manifest) one offset back."""
    location = lake.table_location()
    path = location.path(storage_commit_of(lake, entry))
    if lake.format == "parquet":
        manifest = json.loads(location.fs.cat_file(path))
        shift_first_end(manifest)
        location.fs.pipe_file(path, json.dumps(manifest).encode())
        return
    lines = []
    for line in location.fs.cat_file(path).decode().splitlines():
        action = json.loads(line)
        info = action.get("commitInfo", {})
        if MANIFEST_KEY in info:
            manifest = json.loads(info[MANIFEST_KEY])
            shift_first_end(manifest)
            info[MANIFEST_KEY] = json.dumps(manifest)
        lines.append(json.dumps(action))
    location.fs.pipe_file(path, "\n".join(lines).encode())


def shift_first_end(manifest: dict) -> None:
    first = manifest["ranges"][0]
    first["end"] -= 1
    manifest["offsets"][f"{first['topic']}:{first['partition']}"] = first["end"]
