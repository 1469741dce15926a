"""What only a real Kafka shows: logs shaped by transactions, deletion, retention, compaction and
topic changes, ingested exactly once (Apache Kafka, the suite's default broker; skipped on tansu).

* transactions committed and aborted, interleaved over several partitions, and one still open when
  a batch is planned: the batch stops at the last stable offset and the rest comes next run;
  ranges end on commit markers; ``read_uncommitted`` only when asked;
* the log start moved by DeleteRecords and by retention really deleting segments: refused in one
  line, or skipped with the gap logged; lag health says DATA_LOSS;
* a compacted topic whose cleaner really ran: offset gaps inside a planned range;
* partitions added between runs, a topic deleted and recreated with more partitions.

The oracle for what should land is a plain consumer of the same isolation level (Kafka's own answer).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, ResourceType

from kafka_batch_provider.core.lag_health import LagStatus
from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import DataLossPolicy, PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import PlanError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.spark.connect import write_through_connect
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.lag import lag_report
from kafka_batch_provider.steps.plan import PlanOutcome, plan_batch
from kafka_batch_provider.testing.producers import Record, create_topics, produce, wait_until_stable
from tests.integration.helpers import Output, TableOutput, dataset_keys, group_offsets, read_dataset
from tests.integration.test_cli import assert_one_line_error, cli, last_json
from tests.integration.test_output_log import recreate_topic

pytestmark = pytest.mark.integration

#: A read that stalls (waits for offsets that never come: a marker counted as a record, an open
#: transaction) fails after this instead of the default two minutes.
STALL_SECONDS = 15.0


@pytest.fixture(autouse=True)
def real_kafka(kafka_broker_kind: str) -> None:
    if kafka_broker_kind == "tansu":
        pytest.skip(
            "needs a real Kafka (the default broker, or KAFKA_BOOTSTRAP_SERVERS): the embedded broker (tansu, "
            "KAFKA_BATCH_TEST_BROKER=tansu) hands aborted records to read_committed readers, reports no last "
            "stable offset below the high watermark, and has no DeleteRecords, retention, compaction or "
            "CreatePartitions"
        )


@pytest.fixture(params=["parquet", "delta"])
def lake(request: pytest.FixtureRequest, tmp_path) -> Output:
    """The Parquet layout and a table format, on a local disk."""
    return Output(str(tmp_path / "lake")) if request.param == "parquet" else TableOutput(str(tmp_path / "table"))


# -- helpers ---------------------------------------------------------------------------------------


def ingest(
    kafka_config: Mapping[str, Any],
    output: Output,
    group_id: str,
    topics: Sequence[str],
    remote: str,
    policy: PlanPolicy = PlanPolicy(),
) -> tuple[PlanOutcome, dict[str, Any] | None]:
    """plan -> write (Spark Connect) -> commit, in-process; returns the plan step's outcome and the log entry."""
    kafka = KafkaOffsets(dict(kafka_config), timeout=10)
    store = output.store()
    try:
        outcome = plan_batch(kafka, store, group_id, topics, policy)
        if not outcome.plan.ranges:
            return outcome, None
        if outcome.plan.has_data:
            options = WriteOptions(stall_timeout=STALL_SECONDS)
            write_through_connect(remote, outcome.plan, store, kafka.kafka_config, options)
        commit_batch(kafka, store, outcome.plan)
        return outcome, store.entry_of(outcome.plan)
    finally:
        kafka.close()


def ends(kafka_config: Mapping[str, Any], topic: str, partitions: int, isolation: str) -> dict[int, int]:
    """Each partition's end as a reader of ``isolation`` sees it (the last stable offset, or the high watermark)."""
    kafka = KafkaOffsets({**kafka_config, "isolation.level": isolation}, timeout=10)
    found = kafka.log_end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: offset for tp, offset in found.items()}


def delivered(
    kafka_config: Mapping[str, Any], topic: str, partitions: int, isolation: str = "read_committed", timeout=30
) -> dict[tuple[int, int], bytes | None]:
    """``{(partition, offset): value}`` of every record a plain consumer of ``isolation`` is handed, from each
    partition's start to its end (for that isolation level): Kafka's own answer to what a batch must land."""
    until = ends(kafka_config, topic, partitions, isolation)
    consumer = Consumer(
        {**kafka_config, "group.id": "oracle", "enable.auto.commit": False, "isolation.level": isolation}
    )
    found: dict[tuple[int, int], bytes | None] = {}
    try:
        consumer.assign([KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while True:
            positions = {t.partition: t.offset for t in consumer.position(consumer.assignment())}
            if all(positions.get(p, -1) >= end for p, end in until.items() if end > 0):
                return found
            assert time.monotonic() < deadline, f"a {isolation} consumer of {topic} did not reach {until} in {timeout}s"
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is None and message.offset() < until[message.partition()]:
                    found[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()


def landed(output: Output) -> dict[tuple[int, int], bytes | None]:
    """``{(partition, offset): value}`` the output's readers see; every offset must be there once."""
    table = read_dataset(output, ["partition", "offset", "value"])
    rows = table.to_pylist() if table is not None else []
    keys = [(r["partition"], r["offset"]) for r in rows]
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    assert not doubled, f"expected every offset once in the output, found these more than once: {doubled[:5]}"
    return {(r["partition"], r["offset"]): r["value"] for r in rows}


def expect_landed(output: Output, expected: Mapping[tuple[int, int], bytes | None]) -> None:
    found = landed(output)
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(found) & set(expected) if found[k] != expected[k])
    assert not (missing or extra or wrong), (
        f"expected {len(expected)} records, found {len(found)}: missing {missing[:5]}, unexpected {extra[:5]}, "
        f"other values at {wrong[:5]}"
    )


def transactional(kafka_config: Mapping[str, Any], name: str) -> Producer:
    producer = Producer({**kafka_config, "transactional.id": name})
    producer.init_transactions(10)
    return producer


def send(producer: Producer, topic: str, tag: str, partitions: Sequence[int], per_partition: int) -> set[bytes]:
    """``per_partition`` records tagged ``tag`` into each of ``partitions``, flushed (in the log before
    anything produced after); returns their values."""
    values = set()
    for p in partitions:
        for i in range(per_partition):
            value = f"{tag}-p{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            values.add(value)
    producer.flush(10)
    return values


def broker_ms(kafka_config: Mapping[str, Any], name: str) -> int:
    """A broker setting in milliseconds (the test broker's are small; an external Kafka's may not be)."""
    admin = AdminClient(dict(kafka_config))
    broker = ConfigResource(ResourceType.BROKER, str(next(iter(admin.list_topics(timeout=10).brokers))))
    return int(admin.describe_configs([broker], request_timeout=10)[broker].result()[name].value)


# -- transactions ----------------------------------------------------------------------------------


def test_transactions_committed_aborted_and_open_over_partitions_are_ingested_exactly_once(
    lake, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=3)
    a, b = transactional(kafka_config, f"a-{topic}"), transactional(kafka_config, f"b-{topic}")
    everywhere = [0, 1, 2]
    # Committed and aborted records interleave in every partition: A's, B's, A's again, then the markers.
    a.begin_transaction()
    b.begin_transaction()
    committed = send(a, topic, "a1", everywhere, 2)
    aborted = send(b, topic, "b1", everywhere, 2)
    committed |= send(a, topic, "a1x", everywhere, 1)
    a.commit_transaction(10)
    b.abort_transaction(10)
    a.begin_transaction()
    committed |= send(a, topic, "a2", everywhere, 1)
    a.commit_transaction(10)
    wait_until_stable(kafka_config, topic, everywhere)  # each partition now ends on A's commit marker
    # B opens a transaction on partitions 0 and 1; A commits records after it everywhere.
    b.begin_transaction()
    still_open = send(b, topic, "b3", [0, 1], 2)
    a.begin_transaction()
    late = send(a, topic, "a3", everywhere, 1)
    a.commit_transaction(10)
    wait_until_stable(kafka_config, topic, [2])  # partition 2 has no open transaction: A's marker ends it
    stable, high = ends(kafka_config, topic, 3, "read_committed"), ends(kafka_config, topic, 3, "read_uncommitted")
    assert stable[0] < high[0] and stable[1] < high[1] and stable[2] == high[2], (
        f"expected the open transaction to hold the last stable offset of partitions 0 and 1 below the high "
        f"watermark, found stable {stable}, high {high}"
    )
    first_view = delivered(kafka_config, topic, 3)  # what read_committed hands out now, up to the stable offsets

    first, entry = ingest(kafka_config, lake, group_id, [topic], spark_connect_remote)

    planned = {r.partition: r.end for r in first.plan.ranges}
    assert planned == stable, f"expected the batch to stop at the last stable offsets {stable}, planned {planned}"
    assert group_offsets(kafka_config, group_id, topic, 3) == stable
    assert set(first_view.values()) <= committed | late and not set(first_view.values()) & (aborted | still_open)
    expect_landed(lake, first_view)
    assert entry["rows"] == len(first_view), f"expected {len(first_view)} rows logged, found {entry['rows']}"
    marker = (2, high[2] - 1)  # partition 2's range ends on A's commit marker: an offset that is never a row
    assert marker not in first_view and marker not in landed(lake), f"offset {marker} is a marker, not a record"

    b.commit_transaction(10)
    wait_until_stable(kafka_config, topic, everywhere)
    second, _ = ingest(kafka_config, lake, group_id, [topic], spark_connect_remote)

    final = ends(kafka_config, topic, 3, "read_committed")
    starts = {r.partition: r.start for r in second.plan.ranges}
    assert starts == stable, f"expected the next batch to start where the first stopped, {stable}, found {starts}"
    assert group_offsets(kafka_config, group_id, topic, 3) == final
    everything = delivered(kafka_config, topic, 3)
    assert set(everything.values()) == committed | late | still_open, "Kafka's read_committed view itself"
    expect_landed(lake, everything)
    lag = KafkaOffsets(kafka_config).lag(group_id, [topic])
    assert set(lag.values()) == {0}, f"expected no lag once every marker is committed over, found {lag}"


def test_read_uncommitted_is_only_used_when_asked_and_then_lands_aborted_and_open_records(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=2)
    producer = transactional(kafka_config, f"tx-{topic}")
    producer.begin_transaction()
    committed = send(producer, topic, "committed", [0, 1], 2)
    producer.commit_transaction(10)
    producer.begin_transaction()
    aborted = send(producer, topic, "aborted", [0, 1], 2)
    producer.abort_transaction(10)
    wait_until_stable(kafka_config, topic, [0, 1])
    producer.begin_transaction()
    still_open = send(producer, topic, "open", [0], 1)
    high = ends(kafka_config, topic, 2, "read_uncommitted")
    base = ["run", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--spark-remote"]
    base += [spark_connect_remote, "--timeout", "10"]

    by_default = Output(str(tmp_path / "default"))
    default = last_json(cli(*base, "--group", f"{group_id}-rc", "--output", by_default.uri))
    asked = Output(str(tmp_path / "uncommitted"))
    uncommitted = last_json(
        cli(*base, "--group", group_id, "--output", asked.uri, "--kafka-config", "isolation.level=read_uncommitted")
    )
    producer.abort_transaction(10)

    values = {o: v for o, v in landed(by_default).items()}
    assert set(values.values()) == committed and default["records"] == 4, (
        f"expected the default (read_committed) run to land the 4 committed records only, found {default}"
    )
    store = BatchStore(asked.uri)
    [(seq, batch_id)] = store.plan_files()
    plan = store.load_plan(seq, batch_id)
    assert plan.isolation_level == "read_uncommitted", plan.isolation_level
    assert {r.partition: r.end for r in plan.ranges} == high, (
        f"expected read_uncommitted to plan up to the high watermarks {high}, found {plan.ranges}"
    )
    assert set(landed(asked).values()) == committed | aborted | still_open and uncommitted["records"] == 9, (
        f"expected the read_uncommitted run to land the committed, aborted and open records (9), found {uncommitted}"
    )


# -- the log start moved: DeleteRecords and retention ----------------------------------------------


def wait_until_log_start(kafka_config: Mapping[str, Any], topic: str, partition: int, at_least: int) -> int:
    """Until the partition's log start has moved to ``at_least``: retention deletes segments on its own
    clock, every ``log.retention.check.interval.ms`` (a second on the test broker)."""
    timeout = 30 + broker_ms(kafka_config, "log.retention.check.interval.ms") / 1000
    kafka, tp = KafkaOffsets(dict(kafka_config), timeout=10), TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout
    while (start := kafka.log_start_offsets([tp])[tp]) < at_least:
        assert time.monotonic() < deadline, (
            f"expected retention to move the log start of {tp} to {at_least} within {timeout:g}s, found {start}"
        )
        time.sleep(0.2)
    return start


def test_records_removed_by_delete_records_are_refused_in_one_line_or_skipped_with_the_gap_logged(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [Record(p, b"first-%d-%d" % (p, i)) for p in (0, 1) for i in range(5)])
    output = Output(str(tmp_path / "lake"))
    ingest(kafka_config, output, group_id, [topic], spark_connect_remote)
    produce(kafka_config, topic, [Record(p, b"second-%d-%d" % (p, i)) for p in (0, 1) for i in range(5)])
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    [deleted] = admin.delete_records([KafkaTopicPartition(topic, 0, 8)], request_timeout=10).values()
    assert deleted.result().low_watermark == 8, "DeleteRecords must move partition 0's log start to 8"
    flags = ["--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id]
    flags += ["--output", output.uri, "--timeout", "10"]

    lag = cli("lag", *flags, "--check")
    refused = cli("run", *flags, "--spark-remote", spark_connect_remote)

    report = json.loads(lag.stdout.strip().splitlines()[-1])
    assert lag.returncode == LagStatus.DATA_LOSS.exit_code and report["status"] == "DATA_LOSS", (
        f"expected kafka-batch lag --check to exit {LagStatus.DATA_LOSS.exit_code} (DATA_LOSS), "
        f"found {lag.returncode}: {report['status']}"
    )
    statuses = {p["partition"]: (p["status"], p["reason"]) for p in report["partitions"]}
    assert statuses[0][0] == "DATA_LOSS" and "[5, 8)" in statuses[0][1] and statuses[1][0] != "DATA_LOSS", statuses
    assert_one_line_error(refused, f"{topic}[0]: committed offset 5 is below the log start 8")
    assert "offsets [5, 8) were deleted" in refused.stderr and "--on-data-loss=earliest" in refused.stderr
    store = BatchStore(output.uri)
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 5, 1: 5} and len(store.plan_files()) == 1, (
        "a refused plan must change nothing: no plan saved, the group where it was"
    )

    skipped = last_json(cli("run", *flags, "--spark-remote", spark_connect_remote, "--on-data-loss", "earliest"))

    gap = {"topic": topic, "partition": 0, "start": 5, "end": 8}
    assert skipped["records"] == 7 and store.log.entry(2)["gaps"] == [gap], (
        f"expected 7 records (8-9 of partition 0, 5-9 of partition 1) and the gap {gap} logged, found {skipped}"
    )
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    after = lag_report(KafkaOffsets(kafka_config), group_id, [topic], store)
    assert after.status is LagStatus.OK, f"expected OK once the gap is skipped, found {after.message()}"
    expected = {(topic, 0, o) for o in (0, 1, 2, 3, 4, 8, 9)} | {(topic, 1, o) for o in range(10)}
    found = dataset_keys(output)
    assert set(found) == expected and set(found.values()) == {1}, (
        f"expected each surviving offset once, found missing {sorted(expected - set(found))}, "
        f"unexpected {sorted(set(found) - expected)}, doubled {sorted(k for k, n in found.items() if n > 1)}"
    )


def test_records_expired_by_retention_are_data_loss_refused_or_skipped_with_the_gap_logged(
    kafka_config, group_id, tmp_path, spark_connect_remote
):
    topic = f"retention-{group_id[-6:]}"
    # Records stamped an hour ago outlive a 10-minute retention only in the active segment; a record of
    # now, more than segment.ms later, rolls it, and the broker's retention check (every second) deletes it.
    create_topics(kafka_config, {topic: 1}, topic_config={"retention.ms": 600_000, "segment.ms": 100})
    table = TableOutput(str(tmp_path / "table"))
    first, _ = ingest(kafka_config, table, group_id, [topic], spark_connect_remote)  # empty: the group starts at 0
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 0} and not first.plan.has_data
    hour_ago = int(time.time() * 1000) - 3_600_000
    produce(kafka_config, topic, [Record(0, b"expired-%d" % i, timestamp_ms=hour_ago) for i in range(10)])
    produce(kafka_config, topic, [Record(0, b"kept")])
    assert wait_until_log_start(kafka_config, topic, 0, 10) == 10, "retention deleted more than the old segment"

    report = lag_report(KafkaOffsets(kafka_config), group_id, [topic], table.store())
    assert report.status is LagStatus.DATA_LOSS and "[0, 10) were deleted" in report.message(), report.message()
    with pytest.raises(PlanError) as refused:
        plan_batch(KafkaOffsets(kafka_config), table.store(), group_id, [topic], PlanPolicy())
    assert "offsets [0, 10) were deleted" in str(refused.value) and "on_data_loss='earliest'" in str(refused.value)

    skipped, entry = ingest(
        kafka_config, table, group_id, [topic], spark_connect_remote, PlanPolicy(on_data_loss=DataLossPolicy.EARLIEST)
    )

    assert entry["gaps"] == [{"topic": topic, "partition": 0, "start": 0, "end": 10}], entry["gaps"]
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 11}
    expect_landed(table, {(0, 10): b"kept"})


# -- compaction ------------------------------------------------------------------------------------


def test_a_compacted_topic_is_read_to_the_planned_end_through_the_offsets_the_cleaner_removed(
    kafka_config, group_id, tmp_path, spark_connect_remote
):
    topic = f"compacted-{group_id[-6:]}"
    compacted = {"cleanup.policy": "compact", "segment.ms": 100, "min.cleanable.dirty.ratio": 0.01}
    create_topics(kafka_config, {topic: 1}, topic_config=compacted)
    produce(kafka_config, topic, [Record(0, b"v%d" % i, key=b"k%d" % (i % 4)) for i in range(40)])
    output = Output(str(tmp_path / "lake"))
    kafka = KafkaOffsets(kafka_config, timeout=10)
    plan = plan_batch(kafka, output.store(), group_id, [topic], PlanPolicy()).plan  # [0, 40): before the cleaner ran
    # One more record, stamped later than segment.ms after the first: the segment rolls and the cleaner
    # (every log.cleaner.backoff.ms, 500 ms on the test broker) compacts it; the active segment is never cleaned.
    produce(kafka_config, topic, [Record(0, b"roll", key=b"roll", timestamp_ms=int(time.time() * 1000) + 1_000)])
    timeout = 30 + broker_ms(kafka_config, "log.cleaner.backoff.ms") / 1000
    deadline = time.monotonic() + timeout
    while len(survivors := delivered(kafka_config, topic, 1)) == 41:
        assert time.monotonic() < deadline, f"expected the log cleaner to compact {topic} within {timeout:g}s"
        time.sleep(0.2)
    in_range = {k: v for k, v in survivors.items() if k[1] < 40}
    assert len(in_range) < 40 and (0, 39) in in_range, f"expected gaps inside [0, 40), found {sorted(in_range)}"

    write_through_connect(
        spark_connect_remote, plan, output.store(), kafka.kafka_config, WriteOptions(stall_timeout=15)
    )
    commit_batch(kafka, output.store(), plan)

    entry = output.store().entry_of(plan)
    assert (entry["rows"], entry["ranges"][0]["rows"]) == (len(in_range), len(in_range)), (
        f"expected the write check to count the {len(in_range)} records delivered in [0, 40), found {entry}"
    )
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 40}, "the planned end is committed, not a count"
    expect_landed(output, in_range)
    ingest(kafka_config, output, group_id, [topic], spark_connect_remote)
    expect_landed(output, survivors)


# -- the topic changes between runs ----------------------------------------------------------------


def test_partitions_added_between_runs_start_at_earliest(
    kafka_config, new_topic, group_id, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=2)
    lake = Output(str(tmp_path / "lake"))
    produce(kafka_config, topic, [Record(p, b"before-%d-%d" % (p, i)) for p in (0, 1) for i in range(3)])
    ingest(kafka_config, lake, group_id, [topic], spark_connect_remote)
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    admin.create_partitions([NewPartitions(topic, 4)], request_timeout=10)[topic].result()
    kafka, deadline = KafkaOffsets(kafka_config, timeout=10), time.monotonic() + 30
    while len(kafka.topic_partitions([topic])) < 4:  # the new partitions reach the metadata a moment later
        assert time.monotonic() < deadline, f"{topic} did not show 4 partitions within 30s"
        time.sleep(0.1)
    produce(kafka_config, topic, [Record(p, b"after-%d-%d" % (p, i)) for p in range(4) for i in range(2)])

    second, _ = ingest(kafka_config, lake, group_id, [topic], spark_connect_remote)

    ranges = {r.partition: (r.start, r.end) for r in second.plan.ranges}
    assert ranges == {0: (3, 5), 1: (3, 5), 2: (0, 2), 3: (0, 2)}, f"new partitions must start at 0, found {ranges}"
    assert group_offsets(kafka_config, group_id, topic, 4) == {0: 5, 1: 5, 2: 2, 3: 2}
    expect_landed(lake, delivered(kafka_config, topic, 4))


def test_a_topic_recreated_with_more_partitions_is_ingested_from_its_start_once(
    kafka_config, group_id, tmp_path, spark_connect_remote
):
    topic = f"recreated-{group_id[-6:]}"
    create_topics(kafka_config, {topic: 1})
    produce(kafka_config, topic, [Record(0, b"old-%d" % i) for i in range(6)])
    table = TableOutput(str(tmp_path / "table"))
    ingest(kafka_config, table, group_id, [topic], spark_connect_remote)
    recreate_topic(kafka_config, topic, partitions=2)
    produce(kafka_config, topic, [Record(p, b"new-%d-%d" % (p, i)) for p in (0, 1) for i in range(2)])

    second, entry = ingest(kafka_config, table, group_id, [topic], spark_connect_remote)

    assert any("was recreated (new topic id)" in note for note in second.notes), second.notes
    ranges = {r.partition: (r.start, r.end) for r in second.plan.ranges}
    assert ranges == {0: (0, 2), 1: (0, 2)}, f"expected the new topic read from its start, found {ranges}"
    first_entry = table.store().log.entry(1)
    assert entry["topic_ids"] != first_entry["topic_ids"], "each entry must carry the topic id it read"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 2, 1: 2}
    values = sorted(read_dataset(table, ["value"]).column("value").to_pylist())
    expected = sorted([b"old-%d" % i for i in range(6)] + [b"new-%d-%d" % (p, i) for p in (0, 1) for i in range(2)])
    assert values == expected, f"expected the old topic's 6 and the new one's 4 records once each, found {values}"
