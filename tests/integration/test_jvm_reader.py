"""The ``jvm`` reader (Spark's own Kafka source, the connector jars of ``make jvm-tools``) end to end,
as the ``python`` reader is tested: real Apache Kafka, the session's Spark Connect server (started
with the connector's jars), ``kafka-batch`` as a user runs it.

* exactly once across a driver killed after staging and one killed after its log entry;
* a transactional topic into a Delta table: ``read_committed`` (``kafka.isolation.level``) leaves
  the aborted record and the control records out;
* planned offsets deleted before the read: ``failOnDataLoss`` refuses them in one line, nothing
  is published or committed;
* the write check counts what Spark's source read (``Dataset.observe``) against what was written;
* a decoded value column (``--value-format string``) through Spark Connect.

spark-submit with the jvm reader runs in ``test_secrets_everywhere.py`` (a DAG run over SASL_SSL), Spark Connect
over SASL_SSL in ``test_secure_kafka.py``; without the connector it is refused in ``test_cli.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.core.write_check import TaskReports, check_write
from kafka_batch_provider.errors import WriteCheckError
from kafka_batch_provider.spark.jvm_observation import observed_receipts
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import (
    TableOutput,
    assert_exactly_once,
    group_offsets,
    offsets_of,
    produce_committed_aborted_committed,
    read_dataset,
)
from tests.integration.test_cli import cli, last_json

pytestmark = pytest.mark.integration

KILL_BEFORE_LOG_ENTRY = {"KAFKA_BATCH_FAIL_POINT": "before-log-entry:kill"}
KILL_AFTER_LOG_ENTRY = {"KAFKA_BATCH_FAIL_POINT": "after-log-entry:kill"}


def assert_final_error_line(result, exit_code: int, expected: str) -> None:
    """Progress lines, then the failure as one ``error:`` line, the last, and ``exit_code``."""
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert (result.returncode, errors) == (exit_code, lines[-1:]), (
        f"expected exit {exit_code} and one final error line, got exit {result.returncode} and {lines[-3:]}"
    )
    assert expected in errors[0] and "Traceback" not in result.stderr, f"expected {expected!r} in {errors[0]!r}"


def log_entries(out: str) -> list[str]:
    return sorted(p.name for p in (Path(out) / "_log").glob("*.json")) if (Path(out) / "_log").is_dir() else []


def test_the_jvm_reader_ingests_exactly_once_across_drivers_killed_before_and_after_the_log_entry(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 30))
    out = str(tmp_path / "lake")
    run = ["run", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id,
           "--output", out, "--reader", "jvm", "--value-format", "string",
           "--spark-remote", spark_connect_remote]  # fmt: skip

    killed = cli(*run, env=KILL_BEFORE_LOG_ENTRY)
    assert killed.returncode == -9, f"expected the driver killed (-9) after staging, got {killed.returncode}"
    assert log_entries(out) == [], f"expected no log entry after a kill before it, found {log_entries(out)}"
    first = last_json(cli(*run))
    assert (first["records"], first["reused"]) == (30, True), f"expected the same plan replayed, got {first}"

    produce(kafka_config, topic, sample_records(2, 10, first_id=30))
    killed = cli(*run, env=KILL_AFTER_LOG_ENTRY)
    assert killed.returncode == -9, f"expected the driver killed (-9) after its log entry, got {killed.returncode}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 15, 1: 15}, "the second batch is not committed yet"
    parquet_before = sorted(p.name for p in Path(out).rglob("*.parquet"))
    repaired = last_json(cli(*run))
    assert repaired["repaired"], f"expected the next run to commit the logged batch without reading, got {repaired}"
    assert sorted(p.name for p in Path(out).rglob("*.parquet")) == parquet_before, "the batch was written again"

    assert_exactly_once(out, offsets_of(topic, {0: 20, 1: 20}))
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 20, 1: 20}
    values = [r["value_string"] for r in read_dataset(out, ["value_string"]).to_pylist()]
    assert len(set(values)) == 40 and all(values), f"expected 40 distinct decoded values, got {sorted(values)[:3]}"


def test_the_jvm_reader_leaves_aborted_records_and_markers_out_of_a_delta_table(
    kafka_config, kafka_bootstrap_servers, kafka_broker_kind, spark_connect_remote, new_topic, group_id, tmp_path
):
    if kafka_broker_kind == "tansu":
        pytest.skip("tansu hands aborted records to read_committed readers (design.md): needs a real Kafka")
    topic = new_topic(partitions=1)
    produce_committed_aborted_committed(kafka_config, topic)  # 0-2 committed, 4 aborted, 6 committed
    table = TableOutput(str(tmp_path / "orders"), format="delta")

    result = last_json(
        cli(
            "run",
            "--bootstrap-servers",
            kafka_bootstrap_servers,
            "--topic",
            topic,
            "--group",
            group_id,
            *table.cli_args(),
            "--reader",
            "jvm",
            "--spark-remote",
            spark_connect_remote,
        )  # fmt: skip
    )

    assert (result["records"], result["committed"]) == (4, {f"{topic}:0": 8}), f"expected 4 rows to 8, got {result}"
    rows = table.read(["offset", "value"]).to_pylist()
    found = sorted((r["offset"], r["value"]) for r in rows)
    expected = [(0, b"committed-0"), (1, b"committed-1"), (2, b"committed-2"), (6, b"committed-3")]
    assert found == expected, f"expected only the committed records in the Delta table, found {found}"


def test_the_jvm_reader_refuses_planned_offsets_gone_from_kafka_and_publishes_nothing(
    kafka_config, kafka_bootstrap_servers, kafka_broker_kind, spark_connect_remote, new_topic, group_id, tmp_path
):
    if kafka_broker_kind == "tansu":
        pytest.skip("tansu has no DeleteRecords (design.md)")
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 20))
    out = str(tmp_path / "lake")
    kafka = ["--bootstrap-servers", kafka_bootstrap_servers]
    planned = last_json(cli("plan", *kafka, "--topic", topic, "--group", group_id, "--output", out))
    admin = AdminClient(kafka_config)
    for future in admin.delete_records([KafkaTopicPartition(topic, 0, 10)]).values():
        future.result(timeout=30)  # offsets 0-9 of the plan are gone before Spark reads them

    result = cli("write", "--plan", planned["plan_path"], *kafka, "--reader", "jvm",
                 "--spark-remote", spark_connect_remote)  # fmt: skip

    expected = (
        f"the jvm reader found planned offsets gone from Kafka (retention, deleted records or topic): Could not "
        f"read records in offset [0, 20) for topic partition {topic}-0; nothing was published"
    )
    assert_final_error_line(result, 2, expected)
    assert log_entries(out) == [], f"expected nothing published, found log entries {log_entries(out)}"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}, "expected nothing committed"


def test_the_write_check_compares_what_sparks_source_read_with_what_was_written():
    plan = OffsetPlan("b-1", "incremental", "g", ("t",), "read_committed", (OffsetRange("t", 0, 0, 10),))
    written = {"topic": "t", "partition": 0, "rows": 9, "min_offset": 0, "max_offset": 9}
    files = [{"name": "part-0.parquet", "bytes": 100, "rows": 9}]
    observed = {"rows_0": 10, "first_0": 0, "last_0": 9}  # what the source's rows were counted as
    reports = TaskReports(files=files, written=[written], receipts=observed_receipts(plan, observed))

    with pytest.raises(WriteCheckError, match=r"10 rows were read but 9 written"):
        check_write(plan, reports, {"part-0.parquet": 100}, {"part-0.parquet": 9}, counted_at_source=True)

    reports.receipts = observed_receipts(plan, {"rows_0": 9, "first_0": 0, "last_0": 9})
    stats = check_write(plan, reports, {"part-0.parquet": 100}, {"part-0.parquet": 9}, counted_at_source=True)
    assert stats[0]["rows"] == 9, f"expected 9 rows checked and recorded, got {stats}"
