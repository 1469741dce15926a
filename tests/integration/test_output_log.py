"""The output keeps the offsets: exactly-once that survives lost, moved and raced group offsets.

Each test reproduces one way the group's offsets alone used to fail (issue "The output keeps
the offsets") on the real broker and real Spark, with the output on a local disk and on the
S3-protocol server, and checks it is handled now.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from kafka_batch_provider.core.manifest import data_dir_name
from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import CommitConflictError, LogConflictError, ManifestError, WriteCheckError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.spark.ingest import stage_batch, stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import publish_staged, write_batch
from kafka_batch_provider.testing.producers import Record, create_topics, produce, sample_records, wait_until_stable
from tests.integration.helpers import (
    Output,
    assert_exactly_once,
    dataset_keys,
    group_offsets,
    offsets_of,
    race_two_writes,
    run_batch,
    write_without_commit,
)
from tests.integration.test_cli import assert_one_line_error, cli

pytestmark = pytest.mark.integration


def delete_group(kafka_config: dict, group_id: str) -> None:
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    admin.delete_consumer_groups([group_id], request_timeout=10)[group_id].result()


def recreate_topic(kafka_config: dict, topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again under the same name (a new topic id, offsets from 0)."""
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    admin.delete_topics([topic], operation_timeout=10)[topic].result()
    deadline = time.monotonic() + 30
    while True:  # deletion is asynchronous: "topic already exists" until it lands
        try:
            create_topics(kafka_config, {topic: partitions})
            return
        except Exception:  # noqa: BLE001
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def snapshot(output) -> dict[str, int]:
    """Every file of the output (log, plans, data, commit records) with its size."""
    fs, root = output.location.fs, output.location.root
    if not fs.exists(root):
        return {}
    return {path.removeprefix(root): info["size"] for path, info in fs.find(root, detail=True).items()}


def test_deleted_group_resumes_from_the_output_without_reading_again(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    run_batch(spark, kafka_config, output, group_id, [topic])
    delete_group(kafka_config, group_id)  # or Kafka expired its offsets
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    produce(kafka_config, topic, sample_records(2, 6, first_id=20))

    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])

    assert [(r.start, r.end) for r in outcome.plan.readable_ranges] == [(10, 13), (10, 13)], (
        "the batch must start where the output stands, not at the log start"
    )
    assert any("resuming from the output's log at 10" in note for note in outcome.notes), outcome.notes
    assert committed == {f"{topic}:0": 13, f"{topic}:1": 13}, "the commit restores the group"
    assert_exactly_once(output, offsets_of(topic, {0: 13, 1: 13}))

    delete_group(kafka_config, group_id)  # again, and this time nothing new arrives
    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert outcome.plan.readable_ranges == () and committed == {f"{topic}:0": 13, f"{topic}:1": 13}
    assert_exactly_once(output, offsets_of(topic, {0: 13, 1: 13}))


def test_every_batch_commits_every_partition_so_idle_offsets_never_expire(
    spark, kafka_config, new_topic, group_id, output
):
    topic = new_topic(partitions=3)
    produce(kafka_config, topic, [Record(p, b"x") for p in (0, 1) for _ in range(4)])
    _, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert committed == {f"{topic}:0": 4, f"{topic}:1": 4, f"{topic}:2": 0}
    produce(kafka_config, topic, [Record(0, b"y")])
    _, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert committed == {f"{topic}:0": 5, f"{topic}:1": 4, f"{topic}:2": 0}, "idle partitions are committed too"
    # Kafka expires the offsets of partitions with no commit for offsets.retention.minutes;
    # the broker here cannot expire single partitions, so the whole group goes.
    delete_group(kafka_config, group_id)
    produce(kafka_config, topic, [Record(0, b"z")])
    run_batch(spark, kafka_config, output, group_id, [topic])
    assert group_offsets(kafka_config, group_id, topic, 3) == {0: 6, 1: 4, 2: 0}
    assert_exactly_once(output, offsets_of(topic, {0: 6, 1: 4}))


def plan_by_hand(kafka_config, output, group_id, topic, tmp_path):
    """``kafka-batch plan`` as a user runs it (storage credentials in a file, not on the command line)."""
    args = ["plan", "--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic", topic]
    args += ["--group", group_id, "--output", output.uri]
    env = {}
    if output.storage_options:
        options = tmp_path / "storage-options.json"
        options.write_text(json.dumps(output.storage_options))
        env["KAFKA_BATCH_STORAGE_OPTIONS_FILE"] = str(options)
    return cli(*args, env=env)


@pytest.mark.parametrize("moved", ["back", "ahead"])
def test_group_moved_by_hand_is_refused_with_one_line_and_the_flag_resolves_it(
    spark, kafka_config, new_topic, group_id, output, moved, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    run_batch(spark, kafka_config, output, group_id, [topic])
    produce(kafka_config, topic, sample_records(1, 5, first_id=10))
    tp = TopicPartition(topic, 0)
    target = 4 if moved == "back" else 12
    KafkaOffsets(kafka_config).commit(group_id, {tp: 10}, {tp: target})  # someone moves the group
    before = snapshot(output)

    refused = plan_by_hand(kafka_config, output, group_id, topic, tmp_path)

    assert_one_line_error(refused, f"{topic}[0]: group at {target}, output at 10")
    assert "--on-group-mismatch=output" in refused.stderr and refused.returncode == 4
    assert ("--on-group-mismatch=group" in refused.stderr) == (moved == "ahead"), refused.stderr
    assert snapshot(output) == before, "a refused plan step must change nothing in the output"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: target}, "nor the group"

    policy = GroupMismatchPolicy.OUTPUT if moved == "back" else GroupMismatchPolicy.GROUP
    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic], on_group_mismatch=policy)

    assert committed == {f"{topic}:0": 15}
    if moved == "back":
        assert [(r.start, r.end) for r in outcome.plan.ranges] == [(10, 15)], "resumed from the output, no re-read"
        assert_exactly_once(output, offsets_of(topic, {0: 15}))
    else:
        assert [g.to_dict() for g in outcome.plan.gaps] == [{"topic": topic, "partition": 0, "start": 10, "end": 12}]
        assert output.store().log.tail()["gaps"] == [g.to_dict() for g in outcome.plan.gaps], "the gap is in the log"
        assert_exactly_once(output, offsets_of(topic, {0: 10}) | {(topic, 0, 12), (topic, 0, 13), (topic, 0, 14)})


def test_two_plan_steps_at_once_publish_exactly_one_batch(spark, kafka_config, new_topic, group_id, output):
    # The DAG and a hand-run CLI plan the same output at the same time with different requests:
    # two different batches for the same log entry.
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    store = output.store()
    dag = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy()).plan
    by_hand = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy(), partitions=[0]).plan
    assert dag.seq == by_hand.seq and dag.batch_id != by_hand.batch_id

    won, lost = race_two_writes(spark, kafka_config, output, dag, by_hand)
    with pytest.raises(LogConflictError, match="another run published first"):
        commit_batch(KafkaOffsets(kafka_config), store, lost)
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "the loser commits nothing"
    commit_batch(KafkaOffsets(kafka_config), store, won)
    expected = {0: 20, 1: 20} if won is dag else {0: 20}
    assert_exactly_once(output, offsets_of(topic, expected))

    rest, _ = run_batch(spark, kafka_config, output, group_id, [topic])  # the next run: the loser's plan is gone
    assert (lost.seq, lost.batch_id) not in store.plan_files()
    assert_exactly_once(output, offsets_of(topic, {0: 20, 1: 20}))
    assert rest.plan.seq == 2 or rest.plan.ranges == ()


def test_two_full_runs_racing_leave_every_offset_exactly_once(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=2)
    errors: list[str] = []
    for round_ in range(2):
        produce(kafka_config, topic, sample_records(2, 30, first_id=30 * round_))
        barrier = threading.Barrier(2)

        def race(barrier=barrier):
            barrier.wait()
            try:
                run_batch(spark, kafka_config, output, group_id, [topic])
            except Exception as exc:  # noqa: BLE001 - every failure is checked below
                errors.append(exc)

        threads = [threading.Thread(target=race) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    run_batch(spark, kafka_config, output, group_id, [topic])  # whoever lost: the next run finishes
    unexpected = [e for e in errors if not isinstance(e, (LogConflictError, CommitConflictError))]
    assert not unexpected, f"a losing run may only fail with a log or commit conflict, got {unexpected!r}"
    assert all("\n" not in str(e) for e in errors), errors
    assert_exactly_once(output, offsets_of(topic, {0: 30, 1: 30}))
    log = list(output.store().log.entries())
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 30, 1: 30}
    assert log[-1]["offsets"] == {f"{topic}:0": 30, f"{topic}:1": 30}
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1)), "one batch per log entry, no holes"


def test_files_that_vanish_before_publish_are_refused_and_offsets_stay(
    spark, kafka_config, new_topic, group_id, output
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy()).plan
    staged = stage_batch(spark, plan, store, kafka_config)
    # The executors wrote where the driver cannot see (e.g. a local path on a cluster):
    store.location.delete_tree(staged.staging)

    with pytest.raises(WriteCheckError, match="cannot find 2 of the 2 file"):
        publish_staged(store, plan, staged, WriteOptions())

    assert store.log.entry(plan.seq) is None and dataset_keys(output) == {}
    with pytest.raises(ManifestError, match="not in the output log"):
        commit_batch(kafka, store, plan)
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    run_batch(spark, kafka_config, output, group_id, [topic])  # the retry writes it properly
    assert_exactly_once(output, offsets_of(topic, {0: 10, 1: 10}))


def test_a_logged_batch_whose_files_are_gone_is_never_committed(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = write_without_commit(spark, kafka_config, output, group_id, [topic])
    store.location.delete_tree(data_dir_name(plan.batch_id))  # someone deletes the data before the commit

    with pytest.raises(ManifestError, match="missing or changed|neither published nor staged"):
        commit_batch(kafka, store, plan)
    with pytest.raises(ManifestError, match="neither published nor staged.*the output lost data"):
        plan_batch(kafka, store, group_id, [topic], PlanPolicy())
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}


def test_a_recreated_topic_is_ingested_and_committed_under_new_batch_ids(spark, kafka_config, group_id, output):
    topic = f"recreated-{group_id[-6:]}"
    create_topics(kafka_config, {topic: 1})
    produce(kafka_config, topic, [Record(0, b"old-%d" % i) for i in range(4)])
    first, _ = run_batch(spark, kafka_config, output, group_id, [topic])
    recreate_topic(kafka_config, topic)
    produce(kafka_config, topic, [Record(0, b"new-%d" % i) for i in range(4)])

    second, committed = run_batch(spark, kafka_config, output, group_id, [topic])

    assert [(r.start, r.end) for r in second.plan.ranges] == [(0, 4)], "the same ranges as the first batch"
    assert second.plan.batch_id != first.plan.batch_id, "but never the same batch id"
    assert committed == {f"{topic}:0": 4}
    entries = list(output.store().log.entries())
    assert [e["rows"] for e in entries] == [4, 4] and entries[0]["topic_ids"] != entries[1]["topic_ids"]
    third, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert third.plan.ranges == () and committed == {}, "the new topic's records are not read twice"


# -- found by review: each was a way to lose, double or get stuck ---------------------------------


def test_a_run_over_other_partitions_still_finishes_the_newest_batchs_commit(
    spark, kafka_config, new_topic, group_id, output
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    first = write_without_commit(spark, kafka_config, output, group_id, [topic], partitions=[1])

    outcome, _ = run_batch(spark, kafka_config, output, group_id, [topic], partitions=[0])

    assert outcome.repaired == [first.batch_id], "the newest batch's commit is finished before anything else"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    run_batch(spark, kafka_config, output, group_id, [topic])  # and the whole topic goes on from there
    assert_exactly_once(output, offsets_of(topic, {0: 10, 1: 10}))


def test_a_topic_recreated_between_plan_and_write_is_never_published(spark, kafka_config, group_id, output):
    from kafka_batch_provider.errors import PlanError

    topic = f"recreated-mid-{group_id[-6:]}"
    create_topics(kafka_config, {topic: 1})
    produce(kafka_config, topic, [Record(0, b"old-%d" % i) for i in range(4)])
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy()).plan
    recreate_topic(kafka_config, topic)
    produce(kafka_config, topic, [Record(0, b"new-%d" % i) for i in range(4)])

    with pytest.raises(PlanError, match="deleted and recreated since batch"):
        write_batch(plan, store, kafka_config, stage_with(spark))

    assert store.log.entry(plan.seq) is None and dataset_keys(output) == {}
    run_batch(spark, kafka_config, output, group_id, [topic])  # the next run ingests the new topic once
    assert_exactly_once(output, offsets_of(topic, {0: 4}))


def test_a_replay_whose_publish_was_cut_short_is_finished_by_the_next_replay_plan(
    spark, kafka_config, new_topic, output, monkeypatch
):
    from kafka_batch_provider.output.store import BatchStore
    from kafka_batch_provider.steps.replay import plan_replay_batch

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 20))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = plan_replay_batch(kafka, store, [topic], start_offsets={0: 5}, end_offsets={0: 15}).plan
    publish = BatchStore.publish

    def crash(self, entry):
        raise OSError("the process died while publishing")

    monkeypatch.setattr(BatchStore, "publish", crash)
    with pytest.raises(OSError, match="died while publishing"):
        write_batch(plan, store, kafka_config, stage_with(spark))
    monkeypatch.setattr(BatchStore, "publish", publish)
    assert store.log.entry(1)["batch_id"] == plan.batch_id and dataset_keys(output) == {}

    again = plan_replay_batch(kafka, store, [topic], start_offsets={0: 5}, end_offsets={0: 15})

    assert again.notes == [f"already replayed as batch {plan.batch_id}"]
    assert_exactly_once(output, {(topic, 0, o) for o in range(5, 15)})


def test_a_replay_of_a_recreated_topic_is_not_taken_for_the_old_topics_replay(spark, kafka_config, group_id, output):
    from kafka_batch_provider.errors import PlanError
    from kafka_batch_provider.steps.replay import plan_replay_batch

    topic = f"replayed-{group_id[-6:]}"
    create_topics(kafka_config, {topic: 1})
    produce(kafka_config, topic, [Record(0, b"old-%d" % i) for i in range(10)])
    store = output.store()
    first = plan_replay_batch(KafkaOffsets(kafka_config), store, [topic], start_offsets={0: 2}, end_offsets={0: 8})
    write_batch(first.plan, store, kafka_config, stage_with(spark))
    recreate_topic(kafka_config, topic)
    produce(kafka_config, topic, [Record(0, b"new-%d" % i) for i in range(10)])

    # The same offsets of the new topic are other records: never "already replayed".
    with pytest.raises(PlanError) as refused:
        plan_replay_batch(KafkaOffsets(kafka_config), store, [topic], start_offsets={0: 2}, end_offsets={0: 8})

    message = str(refused.value)
    assert f"of batch {first.plan.batch_id} (it read the topic before it was deleted and recreated" in message, (
        f"expected the overlap with the old topic's replay named, found {message!r}"
    )
    assert [e["batch_id"] for e in store.log.entries()] == [first.plan.batch_id], "a refused replay changes nothing"
    elsewhere = Output(output.uri.rstrip("/") + "-elsewhere", output.storage_options).store()
    fresh = plan_replay_batch(KafkaOffsets(kafka_config), elsewhere, [topic], start_offsets={0: 2}, end_offsets={0: 8})
    assert [(r.start, r.end) for r in fresh.plan.ranges] == [(2, 8)] and not fresh.notes, (
        f"expected the new topic's offsets [2, 8) planned in another output, found {fresh.plan.ranges} {fresh.notes}"
    )


def test_a_damaged_plan_file_names_itself_and_discard_removes_it(kafka_config, new_topic, group_id, local_output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    store = local_output.store()
    damaged = store.location.path("_plans", "00000000000000000001-b-0123456789abcdef0123.json")
    store.location.put_atomic("_plans/00000000000000000001-b-0123456789abcdef0123.json", b'{"format_version": 2')

    refused = cli(
        "plan", "--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic", topic, "--group", group_id,
        "--output", local_output.uri,
    )  # fmt: skip
    assert_one_line_error(refused, f"plan file {damaged} cannot be used")
    assert "kafka-batch discard --plan" in refused.stderr
    removed = cli("discard", "--plan", damaged)
    assert removed.returncode == 0, removed.stderr
    assert store.plan_files() == []
    planned = cli(
        "plan", "--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic", topic, "--group", group_id,
        "--output", local_output.uri,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr


def test_a_batch_of_only_transaction_markers_is_logged_without_files(spark, kafka_config, new_topic, group_id, output):
    from confluent_kafka import Producer

    topic = new_topic(partitions=1)
    producer = Producer({**kafka_config, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"only", partition=0)
    producer.commit_transaction(10)  # offset 0 and its commit marker at 1
    wait_until_stable(kafka_config, topic)  # written by Kafka just after the commit returns
    run_batch(spark, kafka_config, output, group_id, [topic], PlanPolicy(max_records=1))  # reads [0, 1)

    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])  # [1, 2): the marker alone

    assert [(r.start, r.end) for r in outcome.plan.readable_ranges] == [(1, 2)]
    assert committed == {f"{topic}:0": 2}
    entry = output.store().log.tail()
    assert (entry["rows"], entry["files"], entry["location"]) == (0, [], None)
    assert_exactly_once(output, {(topic, 0, 0)})


def test_a_logged_batch_whose_plan_file_is_damaged_is_still_repaired(spark, kafka_config, new_topic, group_id, output):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    kafka = KafkaOffsets(kafka_config)
    store = output.store()
    plan = write_without_commit(spark, kafka_config, output, group_id, [topic])  # ... and its plan file is damaged
    store.location.put_atomic(f"_plans/{plan.seq:020d}-{plan.batch_id}.json", b"{")

    outcome = plan_batch(kafka, store, group_id, [topic], PlanPolicy())

    assert outcome.repaired == [plan.batch_id], "the log entry says all the commit needs"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 10}


def test_a_group_feeds_one_output_a_new_output_adopts_it_only_on_purpose_and_the_old_one_is_told_who_took_it(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, group_id, tmp_path
):
    from kafka_batch_provider.output.store import BatchStore
    from tests.integration.test_cli import last_json

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    first, second = tmp_path / "lake-a", tmp_path / "lake-b"
    common = ["run", "--topic", topic, "--group", group_id, "--bootstrap-servers", kafka_bootstrap_servers]
    common += ["--spark-remote", spark_connect_remote]
    assert last_json(cli(*common, "--output", str(first)))["records"] == 5

    produce(kafka_config, topic, sample_records(1, 3, first_id=5))
    refused = cli(*common, "--output", str(second))
    first_uri, second_uri = BatchStore(str(first)).data.uri, BatchStore(str(second)).data.uri
    assert_one_line_error(refused, f"was last committed by another output, {first_uri}")
    assert "--adopt-group" in refused.stderr and second_uri in refused.stderr, refused.stderr
    assert not second.exists() or not list(second.rglob("*.json")), "a refused run left files in the new output"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 5}, "a refused run moved the group"

    adopted = last_json(cli(*common, "--output", str(second), "--adopt-group"))
    assert adopted["records"] == 3, f"the adopting output starts at the group's offsets: {adopted}"
    entry = BatchStore(str(second)).log.entry(1)
    assert entry["adopted"]["output"] == first_uri, f"the first entry records the adoption: {entry.get('adopted')}"

    produce(kafka_config, topic, sample_records(1, 2, first_id=8))
    told = cli(*common, "--output", str(first))
    assert_one_line_error(told, f"another output, {second_uri}, committed the group last")
    assert "on-group-mismatch=group" not in told.stderr, "accepting the group would record B's records as lost in A"
