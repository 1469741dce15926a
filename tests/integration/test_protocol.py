"""The four-step protocol end to end: real broker over TCP, real Spark local[2].

Each test is named after the guarantee it protects, and runs twice: with the output on a
local disk and on the S3-protocol server (the ``output`` fixture).
"""

from __future__ import annotations

import threading
import time

import pytest

from kafka_batch_provider.core.offsets import OffsetRange, TopicPartition
from kafka_batch_provider.core.plan import INCREMENTAL, OffsetPlan, batch_id_for
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import CommitConflictError, GroupMismatchError, PlanError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.spark.error_lines import task_error_kind
from kafka_batch_provider.spark.ingest import stage_batch, stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import Record, produce, sample_records
from tests.integration.helpers import (
    assert_exactly_once,
    dataset_keys,
    produce_committed_aborted_committed,
    read_dataset,
    run_batch,
    write_without_commit,
)

pytestmark = [pytest.mark.integration, pytest.mark.check]  # check: in make check's tier


def offsets_of(topic: str, counts: dict[int, tuple[int, int]]) -> set[tuple[str, int, int]]:
    """{partition: (first, end)} -> every (topic, partition, offset) in those ranges."""
    return {(topic, p, o) for p, (first, end) in counts.items() for o in range(first, end)}


def published_files(store, batch_id: str) -> dict[str, int]:
    """File names (unique per attempt) and sizes: unchanged names prove nothing was rewritten."""
    return store.sink.published_files(batch_id)


def test_first_run_ingests_every_partition_including_empty_and_never_committed_ones(
    spark, kafka_config, new_topic, group_id, output
):
    orders, users = new_topic(partitions=3), new_topic(partitions=1)
    produce(kafka_config, orders, sample_records(partitions=2, count=30))  # partition 2 stays empty
    produce(kafka_config, users, [Record(0, b'{"u":%d}' % i, key=b"k") for i in range(7)])

    outcome, committed = run_batch(spark, kafka_config, output, group_id, [orders, users])

    assert_exactly_once(output, offsets_of(orders, {0: (0, 15), 1: (0, 15)}) | offsets_of(users, {0: (0, 7)}))
    assert committed == {f"{orders}:0": 15, f"{orders}:1": 15, f"{orders}:2": 0, f"{users}:0": 7}
    kafka = KafkaOffsets(kafka_config)
    assert sum(kafka.lag(group_id, [orders, users]).values()) == 0
    entry = output.store().log.entry(1)
    assert entry["batch_id"] == outcome.plan.batch_id and entry["rows"] == 37
    assert {(r["topic"], r["partition"]): r["rows"] for r in entry["ranges"]} == {
        (orders, 0): 15,
        (orders, 1): 15,
        (orders, 2): 0,
        (users, 0): 7,
    }
    assert entry["offsets"] == committed, "the log says where the output stands: the committed offsets"


def test_output_has_the_kafka_source_schema_and_values_round_trip(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=1)
    produce(
        kafka_config,
        topic,
        [Record(0, b"v0", key=b"k0", headers=(("h", b"1"), ("h2", b"2"))), Record(0, None, key=None)],
    )
    run_batch(spark, kafka_config, output, group_id, [topic])
    table = read_dataset(output)
    assert table.column_names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
        "batch_id",
    ]
    assert str(table.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    assert (rows[0]["key"], rows[0]["value"]) == (b"k0", b"v0")
    assert [(h["key"], h["value"]) for h in rows[0]["headers"]] == [("h", b"1"), ("h2", b"2")]
    assert rows[1]["key"] is None and rows[1]["value"] is None and rows[1]["headers"] is None
    assert rows[0]["timestamp"] is not None and rows[0]["timestampType"] == 1  # producer CreateTime
    if output.location.is_local:  # Spark reads what pyarrow wrote, with the same schema
        df = spark.read.parquet(output.uri)
        assert df.schema.simpleString().startswith(
            "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        ), df.schema.simpleString()
        assert df.count() == 2


def test_second_run_reads_only_new_records(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    first, _ = run_batch(spark, kafka_config, output, group_id, [topic])
    produce(kafka_config, topic, sample_records(2, 6, first_id=20))

    second, committed = run_batch(spark, kafka_config, output, group_id, [topic])

    assert [(r.partition, r.start, r.end) for r in second.plan.ranges] == [(0, 10, 13), (1, 10, 13)]
    assert second.plan.batch_id != first.plan.batch_id and second.plan.seq == 2
    assert output.store().log.entry(2)["rows"] == 6
    assert committed == {f"{topic}:0": 13, f"{topic}:1": 13}
    assert_exactly_once(output, offsets_of(topic, {0: (0, 13), 1: (0, 13)}))
    third, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert third.plan.ranges == () and committed == {}, "no new data must give an empty plan"


def test_a_crashed_attempt_never_shows_and_a_logged_batch_is_never_written_again(
    spark, kafka_config, new_topic, group_id, output
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy()).plan
    expected = offsets_of(topic, {0: (0, 20), 1: (0, 20)})

    stage_batch(spark, plan, store, kafka_config)  # an attempt that dies before its log entry
    assert dataset_keys(output) == {}, "staged files are invisible to readers"
    write_batch(plan, store, kafka_config, stage_with(spark))  # the retry: a fresh staging folder
    assert_exactly_once(output, expected)
    files = published_files(store, plan.batch_id)
    again = write_batch(plan, store, kafka_config, stage_with(spark))
    assert again["batch_id"] == plan.batch_id and published_files(store, plan.batch_id) == files
    assert store.location.list_names("_staging") == [], "the crashed attempt's staged files are cleaned up"
    commit_batch(kafka, store, plan)
    assert_exactly_once(output, expected)


def test_crash_after_write_commits_without_rereading(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 10))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    crashed = write_without_commit(spark, kafka_config, output, group_id, [topic])
    # ... the process dies here: data and log entry are written, the group is not committed.
    files = published_files(store, crashed.batch_id)
    entry = store.log.entry(1)
    produce(kafka_config, topic, sample_records(2, 4, first_id=10))

    outcome = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy())

    assert outcome.repaired == [crashed.batch_id]
    assert kafka.committed_offsets(group_id, [TopicPartition(topic, 0), TopicPartition(topic, 1)]) == {
        TopicPartition(topic, 0): 5,
        TopicPartition(topic, 1): 5,
    }
    assert published_files(store, crashed.batch_id) == files, "the batch's files must not be rewritten"
    assert store.log.entry(1) == entry
    assert [(r.start, r.end) for r in outcome.plan.ranges] == [(5, 7), (5, 7)], "the next plan starts at the ends"


def test_crash_before_write_replays_the_same_plan(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    store = output.store()
    first = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy())
    produce(kafka_config, topic, sample_records(1, 5, first_id=5))  # arrives before the retry

    retry = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy())

    assert retry.reused and retry.plan == first.plan, "a retry must replay the same ranges"
    assert retry.plan.ranges[0].end == 5


def test_commit_is_refused_when_someone_else_moved_the_group(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy()).plan
    write_batch(plan, store, kafka_config, stage_with(spark))
    tp = TopicPartition(topic, 0)
    kafka.commit(group_id, {tp: None}, {tp: 3})  # another consumer of the same group

    with pytest.raises(CommitConflictError, match=rf"{topic}\[0\]: committed 3, plan expected None"):
        commit_batch(kafka, store, plan)

    assert kafka.committed_offsets(group_id, [tp]) == {tp: 3}
    assert store.commit_record(plan.seq, plan.batch_id) is None
    with pytest.raises(GroupMismatchError, match=rf"{topic}\[0\]: group at 3, output at 10"):
        plan_batch(kafka, store, group_id, [topic], PlanPolicy())


def test_committed_offset_beyond_the_end_fails_planning_and_writes_nothing(kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    kafka = KafkaOffsets(kafka_config)
    tp = TopicPartition(topic, 0)
    kafka.commit(group_id, {tp: None}, {tp: 100})

    with pytest.raises(PlanError, match=rf"{topic}\[0\]: committed offset 100 is beyond the end offset 10"):
        plan_batch(kafka, output.store(), group_id, [topic], PlanPolicy())

    assert output.store().plan_files() == []
    assert kafka.committed_offsets(group_id, [tp]) == {tp: 100}


def test_transaction_markers_are_skipped_and_lag_ends_at_zero(
    spark, kafka_config, kafka_broker_kind, new_topic, group_id, output
):
    topic = new_topic(partitions=1)
    produce_committed_aborted_committed(kafka_config, topic)

    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])

    assert committed == {f"{topic}:0": 8}, "the plan's end (past the last control record) is committed"
    assert sum(KafkaOffsets(kafka_config).lag(group_id, [topic]).values()) == 0
    values = {r["value"] for r in read_dataset(output, ["value"]).to_pylist()}
    assert {b"committed-0", b"committed-1", b"committed-2", b"committed-3"} <= values
    # Real Kafka filters the aborted record for read_committed readers; tansu delivers it
    # (design.md), so there only the committed records' presence and the markers' absence are
    # checked: offsets 3, 5 and 7 are control records and are never rows.
    offsets = {o for (_, _, o) in dataset_keys(output)}
    assert not offsets & {3, 5, 7}
    if kafka_broker_kind != "tansu":
        assert b"aborted" not in values and offsets == {0, 1, 2, 6}, sorted(offsets)
    assert output.store().log.entry(1)["rows"] == len(offsets)


def test_bounded_batches_drain_the_backlog_in_order(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 50))
    policy = PlanPolicy(max_records=30, max_records_per_partition=20)
    sizes = []
    for _ in range(4):
        outcome, _ = run_batch(spark, kafka_config, output, group_id, [topic], policy)
        sizes.append(outcome.plan.planned_offsets)
    assert sizes == [30, 20, 0, 0]
    assert_exactly_once(output, offsets_of(topic, {0: (0, 25), 1: (0, 25)}))


def test_large_ranges_are_split_into_several_spark_tasks(spark, kafka_config, new_topic):
    from kafka_batch_provider.core.planning import plan_replay
    from kafka_batch_provider.spark.ingest import read_plan

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 100))
    states = KafkaOffsets(kafka_config).partition_offsets(None, [topic])
    plan = plan_replay([OffsetRange(topic, 0, 10, 100)], states, "read_committed", "now")
    df = read_plan(spark, plan, kafka_config, WriteOptions(max_offsets_per_task=25))
    # The offsets each Spark partition (task) read: four slices of the 90 offsets.
    tasks: dict[int, list[int]] = {}
    for row in df.selectExpr("spark_partition_id() AS task", "offset").collect():
        tasks.setdefault(row["task"], []).append(row["offset"])
    slices = sorted((min(offsets), max(offsets) + 1, len(offsets)) for offsets in tasks.values())
    assert len(slices) == 4, f"expected four tasks of at most 25 offsets, got {slices}"
    assert all(end - start == count <= 25 for start, end, count in slices), f"expected contiguous slices: {slices}"
    assert [s[0] for s in slices[1:]] == [s[1] for s in slices[:-1]], f"expected slices end to end: {slices}"
    assert sorted(r["offset"] for r in df.select("offset").collect()) == list(range(10, 100))


def test_value_decoding_adds_columns_and_keeps_raw_bytes(spark, kafka_config, new_topic, group_id, output):
    import json

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [Record(0, json.dumps({"id": i, "name": f"n{i}"}).encode()) for i in range(3)])
    produce(kafka_config, topic, [Record(0, b"not json")])
    run_batch(spark, kafka_config, output, group_id, [topic], value_format="json", value_schema="id long, name string")
    rows = sorted(read_dataset(output).to_pylist(), key=lambda r: r["offset"])
    assert [(r["value_json"]["id"], r["value_json"]["name"]) for r in rows[:3]] == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert rows[3]["value"] == b"not json" and rows[3]["value_json"]["id"] is None


def test_a_range_that_cannot_be_completed_fails_naming_it_and_publishes_nothing(spark, kafka_config, new_topic, output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    ranges = (OffsetRange(topic, 0, 0, 8, None),)  # the log ends at 5
    plan = OffsetPlan(
        batch_id_for(INCREMENTAL, "g", 1, {}, ranges), INCREMENTAL, "g", (topic,), "read_committed", ranges
    )
    store = output.store()
    with pytest.raises(Exception) as err:
        write_batch(plan, store, kafka_config, stage_with(spark), WriteOptions(stall_timeout=2))
    # Raised in a Spark task: it reaches the driver as Spark's text, naming its class and range.
    found = str(err.value)
    assert (
        task_error_kind(found) == "ReadStalledError" and f"{topic}[0]: reading [0, 8) stopped at offset 5" in found
    ), f"expected a ReadStalledError naming {topic}[0] [0, 8) stopped at offset 5, found {found[-600:]}"
    assert store.sink.published_files(plan.batch_id) == {} and store.log.entry(1) is None


def test_readers_never_see_a_batch_twice_or_in_part(spark, kafka_config, new_topic, group_id, local_output):
    # Local disks publish by one rename: readers see all of a batch or none of it. (On an
    # object store a reader listing the folder mid-publish may see part of a batch: docs/formats.md.)
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 2000))
    observations: list[str] = []
    sizes_seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                seen = dataset_keys(local_output)
            except Exception as exc:  # a reader failing mid-publish is a broken guarantee too
                observations.append(f"reader failed: {exc!r}")
                continue
            sizes_seen.add(len(seen))
            if any(n > 1 for n in seen.values()):
                observations.append("duplicate")
            if len(seen) not in (0, 2000, 3000):
                observations.append(f"partial batch: {len(seen)} rows visible")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run_batch(spark, kafka_config, local_output, group_id, [topic])
        deadline = time.monotonic() + 30  # let the watcher see the first batch before the second lands
        while 2000 not in sizes_seen and not observations and time.monotonic() < deadline:
            time.sleep(0.05)
        produce(kafka_config, topic, sample_records(2, 1000, first_id=2000))
        run_batch(spark, kafka_config, local_output, group_id, [topic])
    finally:
        stop.set()
        watcher.join()
    assert observations == [], observations[:3]
    assert {0, 2000} <= sizes_seen, f"the watcher must have seen the states before and after: {sizes_seen}"
    assert_exactly_once(local_output, offsets_of(topic, {0: (0, 1500), 1: (0, 1500)}))


def test_replay_by_offsets_reads_only_the_named_partitions_and_never_touches_the_group(
    spark, kafka_config, new_topic, group_id, output
):
    from kafka_batch_provider.steps.replay import plan_replay_batch

    topic = new_topic(partitions=3)
    produce(kafka_config, topic, sample_records(3, 30))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    outcome = plan_replay_batch(kafka, store, [topic], start_offsets={0: 2}, end_offsets={0: 6, 2: 4})
    assert [(r.partition, r.start, r.end) for r in outcome.plan.ranges] == [(0, 2, 6), (2, 0, 4)]
    write_batch(outcome.plan, store, kafka_config, stage_with(spark))
    assert_exactly_once(output, {(topic, 0, o) for o in range(2, 6)} | {(topic, 2, o) for o in range(4)})
    with pytest.raises(Exception, match="replays never commit the group"):
        commit_batch(kafka, store, outcome.plan)
    again = plan_replay_batch(kafka, store, [topic], start_offsets={0: 2}, end_offsets={0: 6, 2: 4})
    assert again.plan.ranges == () and again.notes == [f"already replayed as batch {outcome.plan.batch_id}"]
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert set(kafka.committed_offsets(group_id, tps).values()) == {None}


def test_partly_applied_commit_is_finished_by_the_next_plan_step(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 10))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy()).plan
    write_batch(plan, store, kafka_config, stage_with(spark))
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    kafka.commit(group_id, {tp0: None}, {tp0: 5})  # the commit reached partition 0 only, then the task died

    outcome = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy())

    assert outcome.repaired == [plan.batch_id] and outcome.plan.ranges == ()
    assert kafka.committed_offsets(group_id, [tp0, tp1]) == {tp0: 5, tp1: 5}
    assert store.commit_record(plan.seq, plan.batch_id) is not None


def test_pending_plan_is_only_replayed_for_the_same_topics_and_partitions(kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 10))
    store = output.store()
    first = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy(), partitions=[0])
    other = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy())
    assert not other.reused and other.plan.batch_id != first.plan.batch_id, "another request plans anew"
    assert other.plan.seq == first.plan.seq, "both compete for the same log entry: only one can be published"
    again = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy(), partitions=[0])
    assert again.reused and again.plan == first.plan


def test_replays_never_share_an_output_with_ingestion_or_overlap(kafka_config, new_topic, group_id, tmp_path):
    from kafka_batch_provider.output.store import BatchStore
    from kafka_batch_provider.steps.replay import plan_replay_batch

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 20))
    kafka = KafkaOffsets(kafka_config)
    lake, replays = BatchStore(tmp_path / "lake"), BatchStore(tmp_path / "replays")
    plan_batch(kafka, lake, group_id, [topic], PlanPolicy())
    with pytest.raises(PlanError, match="holds incremental batches"):
        plan_replay_batch(kafka, lake, [topic], start_offsets={0: 0}, end_offsets={0: 5})
    plan_replay_batch(kafka, replays, [topic], start_offsets={0: 0}, end_offsets={0: 10})
    with pytest.raises(PlanError, match=r"overlaps .*\[0, 10\) of batch"):
        plan_replay_batch(kafka, replays, [topic], start_offsets={0: 5}, end_offsets={0: 15})
    with pytest.raises(PlanError, match="holds replay batches"):
        plan_batch(kafka, replays, group_id, [topic], PlanPolicy())
