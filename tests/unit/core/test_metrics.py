"""A committed batch in numbers (pure): names, values and tags, and DogStatsD's line format."""

from __future__ import annotations

from kafka_batch_provider.core.metrics import COUNT, TIMING, Metric, batch_metrics, statsd_lines

ENTRY = {
    "batch_id": "b-1", "group_id": "ingest", "rows": 7,
    "ranges": [{"topic": "orders", "partition": 0, "start": 10, "end": 15, "rows": 5},
               {"topic": "orders", "partition": 1, "start": 0, "end": 1, "rows": 1},
               {"topic": "pay|ments", "partition": 0, "start": 3, "end": 5, "rows": 1}],
    "files": [{"name": "a", "bytes": 100, "rows": 4}, {"name": "b", "bytes": 50, "rows": 3}],
    "dead_letters": {"rows": 1}, "merged": {"upserts": 6, "deletes": 1},
    "timings": {"read_write_seconds": 1.5},
}  # fmt: skip


def test_a_batch_counts_records_and_offsets_per_topic_and_its_files_rows_and_seconds():
    found = {(m.name, m.tags.get("topic")): m for m in batch_metrics(ENTRY, "s3://lake/t", {"plan_seconds": 0.25})}
    assert found[("kafka_batch.records.read", "orders")].value == 6
    assert found[("kafka_batch.offsets.committed", "orders")].value == 6
    assert found[("kafka_batch.offsets.committed", "pay|ments")].value == 2
    assert found[("kafka_batch.rows.written", None)].value == 7
    assert found[("kafka_batch.bytes.written", None)].value == 150
    assert found[("kafka_batch.files.added", None)].value == 2
    assert found[("kafka_batch.dead_letters", None)].value == 1
    assert found[("kafka_batch.merge.upserts", None)].value == 6
    assert found[("kafka_batch.write.seconds", None)] == Metric(
        "kafka_batch.write.seconds", 1.5, TIMING, {"group": "ingest", "output": "s3://lake/t"}
    )
    assert found[("kafka_batch.plan.seconds", None)].value == 0.25
    assert all(m.tags["group"] == "ingest" for m in found.values())


def test_statsd_lines_carry_tags_and_timings_in_milliseconds_without_breaking_the_format():
    lines = statsd_lines(
        [
            Metric("kafka_batch.records.read", 6, COUNT, {"topic": "pay|ments", "group": "g"}),
            Metric("kafka_batch.plan.seconds", 0.25, TIMING, {}),
        ]  # fmt: skip
    )
    assert lines == ["kafka_batch.records.read:6|c|#group:g,topic:pay_ments", "kafka_batch.plan.seconds:250|ms"]


def test_lag_before_is_the_plans_snapshot_and_after_the_ends_less_the_commit_per_topic():
    from kafka_batch_provider.core.metrics import lag_metrics

    snapshot = {"a:0": [10, 0, 50], "a:1": [None, 5, 25], "b:0": [7, 7, 7]}  # committed, log start, end
    ends_after = {"a:0": 53, "a:1": 25, "b:0": 7}  # 3 more arrived on a:0 during the batch
    committed = {"a:0": 50, "a:1": 25, "b:0": 7}
    found = {
        (m.name, m.tags["topic"]): (m.value, m.kind) for m in lag_metrics("g", "out", snapshot, ends_after, committed)
    }
    assert found == {
        ("kafka_batch.lag.before", "a"): (60.0, "gauge"),  # 40 + 20 (no offset: from the log start)
        ("kafka_batch.lag.before", "b"): (0.0, "gauge"),
        ("kafka_batch.lag.after", "a"): (3.0, "gauge"),
        ("kafka_batch.lag.after", "b"): (0.0, "gauge"),
    }, found


def test_health_is_one_number_by_severity_with_the_status_as_a_tag():
    from kafka_batch_provider.core.metrics import health_metrics

    report = {"group_id": "g", "status": "RETENTION_RISK", "partitions": [
        {"topic": "a", "lag": 4}, {"topic": "a", "lag": 1}, {"topic": "b", "lag": 0}]}  # fmt: skip
    found = [(m.name, m.value, m.tags.get("topic") or m.tags.get("status")) for m in health_metrics(report, "o")]
    assert found == [
        ("kafka_batch.lag.records", 5.0, "a"),
        ("kafka_batch.lag.records", 0.0, "b"),
        ("kafka_batch.lag.health", 6.0, "RETENTION_RISK"),
    ], found
