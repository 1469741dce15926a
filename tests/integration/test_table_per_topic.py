"""A table per topic in one batch, against Apache Kafka and real Spark: a pattern into Delta tables.

Each topic's table holds exactly its topic's records, with its own offset log; one Spark job
writes them all; a table that cannot be written leaves the others written, and the next run
finishes it without writing any record twice.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import NewPartitionPolicy, PlanPolicy
from kafka_batch_provider.core.topic_patterns import PATTERN_PLAN_KEY
from kafka_batch_provider.errors import GroupMismatchError, KafkaBatchError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.formats import OutputSpec
from kafka_batch_provider.spark.ingest import stage_tables_with
from kafka_batch_provider.steps.tables import commit_tables, plan_tables, tables_failed, write_tables
from kafka_batch_provider.testing.producers import Record, create_topics, produce
from tests.integration.helpers import group_offsets

pytestmark = pytest.mark.integration


def fill(kafka_config: dict, topic: str, counts: dict[int, int], first: int = 0) -> None:
    records = [Record(p, b"%s-%d" % (topic.encode(), i)) for p, n in counts.items() for i in range(first, first + n)]
    produce(kafka_config, topic, records)


def run_tables(spark, kafka_config, spec, group_id, pattern, policy=PlanPolicy(), registry=None, **options):
    """plan -> one Spark job -> commit, in-process, as ``kafka-batch run --output '.../{topic}'`` does
    (``registry``: the values are Avro, each topic's read with its own subject's schema)."""
    from kafka_batch_provider.core.write_options import WriteOptions
    from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest

    kafka = KafkaOffsets(kafka_config, timeout=10)
    pins = ReaderSchemaRequest("avro", registry) if registry else None
    planned = plan_tables(kafka, spec, group_id, [], policy, reader_schema=pins, topic_pattern=pattern)
    busy = planned.with_work
    write_tables(busy, kafka.kafka_config, stage_tables_with(spark, registry), WriteOptions(**options))
    done = commit_tables(kafka, busy)
    failures = {**planned.failures, **done.failures}
    if failures:  # after the others were ingested, as kafka-batch run does
        raise tables_failed(failures, len(planned.tables) + len(planned.failures))
    return planned, done.committed


def table_rows(path) -> Counter:
    """``(topic, partition, offset)`` of every row of the Delta table at ``path``, counted."""
    table = DeltaTable(str(path)).to_pyarrow_table(columns=["topic", "partition", "offset"])
    return Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))


def expected_rows(topic: str, counts: dict[int, int]) -> Counter:
    return Counter((topic, p, o) for p, n in counts.items() for o in range(n))


def test_a_pattern_lands_each_topic_in_its_own_table_in_one_job(spark, kafka_config, group_id, tmp_path):
    prefix = f"tpt{uuid.uuid4().hex[:8]}"
    orders, payments = f"{prefix}.orders", f"{prefix}.payments"
    create_topics(kafka_config, {orders: 3, payments: 1})
    fill(kafka_config, orders, {0: 40, 1: 3, 2: 2})
    fill(kafka_config, payments, {0: 5})
    spec = OutputSpec("delta", output=str(tmp_path / "lake" / "{topic}"))
    pattern = re.escape(prefix) + r"\..*"

    planned, committed = run_tables(spark, kafka_config, spec, group_id, pattern, max_tasks=2)
    assert sorted(t.topic for t in planned.with_work) == [orders, payments], planned.summary()
    for topic, counts in ((orders, {0: 40, 1: 3, 2: 2}), (payments, {0: 5})):
        found = table_rows(tmp_path / "lake" / topic)
        assert found == expected_rows(topic, counts), f"{topic}'s table: {sorted(found)[:5]} ... ({len(found)} rows)"
    entries = {t.topic: t.store.log.tail() for t in planned.with_work}
    assert {t: e["options"]["tasks"] for t, e in entries.items()} == {orders: 2, payments: 2}, (
        "both tables should say they were written by the same job's 2 tasks"
    )
    assert entries[orders]["offsets"] == {f"{orders}:0": 40, f"{orders}:1": 3, f"{orders}:2": 2}, entries[orders]
    assert group_offsets(kafka_config, group_id, payments, 1) == {0: 5}, committed

    # A topic created since: its own new table in the next batch; the idle one gets no batch of data.
    invoices = f"{prefix}.invoices"
    create_topics(kafka_config, {invoices: 1})
    fill(kafka_config, invoices, {0: 7})
    fill(kafka_config, orders, {1: 4}, first=3)
    planned, _ = run_tables(spark, kafka_config, spec, group_id, pattern)
    assert table_rows(tmp_path / "lake" / invoices) == expected_rows(invoices, {0: 7})
    assert table_rows(tmp_path / "lake" / orders) == expected_rows(orders, {0: 40, 1: 7, 2: 2})
    first_entry = next(t for t in planned.tables if t.topic == invoices).store.log.tail()
    assert first_entry[PATTERN_PLAN_KEY] == {"pattern": pattern}, first_entry.get(PATTERN_PLAN_KEY)
    assert table_rows(tmp_path / "lake" / payments) == expected_rows(payments, {0: 5}), "the idle table changed"


def test_a_table_that_fails_leaves_the_others_written_and_the_next_run_lands_it_once(
    spark, kafka_config, group_id, tmp_path
):
    prefix = f"tpf{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{name}" for name in ("a", "b", "c")]
    create_topics(kafka_config, {t: 1 for t in topics})
    for topic in topics:
        fill(kafka_config, topic, {0: 6})
    lake = tmp_path / "lake"
    spec = OutputSpec("delta", output=str(lake / "{topic}"))
    pattern = re.escape(prefix) + r"\.[abc]"
    # b's table is someone else's, with a column of another type: its commit is refused.
    write_deltalake(str(lake / topics[1]), pa.table({"offset": pa.array(["not a number"])}))

    with pytest.raises(KafkaBatchError) as failed:
        run_tables(spark, kafka_config, spec, group_id, pattern)
    message = str(failed.value)
    assert message.startswith(f"1 of 3 table(s) not ingested (the others were): topic {topics[1]!r}: "), message
    for topic in (topics[0], topics[2]):
        assert table_rows(lake / topic) == expected_rows(topic, {0: 6}), f"{topic} should be written"
        assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}, "no table is committed until all are"

    # The table is repaired (here: removed, its pending plan with it); the next run commits a and c
    # without reading them again, and writes b once, from its start: a table's first batch starts as
    # new partitions do, whatever --new-topic-start says (nothing tells a new topic from b here).
    import shutil

    shutil.rmtree(lake / topics[1])
    fill(kafka_config, topics[0], {0: 2}, first=6)
    latest = PlanPolicy(new_topic_start=NewPartitionPolicy.LATEST)
    planned, _ = run_tables(spark, kafka_config, spec, group_id, pattern, latest)
    repaired = sorted(t.topic for t in planned.tables if t.outcome.repaired)
    assert repaired == [topics[0], topics[2]], f"expected a and c finished without reading again, found {repaired}"
    assert table_rows(lake / topics[0]) == expected_rows(topics[0], {0: 8})
    assert table_rows(lake / topics[1]) == expected_rows(topics[1], {0: 6})
    assert table_rows(lake / topics[2]) == expected_rows(topics[2], {0: 6})
    found = {t: group_offsets(kafka_config, group_id, t, 1)[0] for t in topics}
    assert found == {topics[0]: 8, topics[1]: 6, topics[2]: 6}, f"committed offsets {found}"

    # Someone moves b's group past its table's log: b cannot be planned, a and c go on.
    KafkaOffsets(kafka_config, timeout=10).commit(
        group_id, {TopicPartition(topics[1], 0): 6}, {TopicPartition(topics[1], 0): 7}
    )
    for topic in topics:
        fill(kafka_config, topic, {0: 1}, first=8 if topic == topics[0] else 6)
    with pytest.raises(GroupMismatchError) as refused:
        run_tables(spark, kafka_config, spec, group_id, pattern)
    assert f"1 of 3 table(s) not ingested (the others were): topic {topics[1]!r}" in str(refused.value), refused.value
    found = {t: group_offsets(kafka_config, group_id, t, 1)[0] for t in topics}
    assert found == {topics[0]: 9, topics[1]: 7, topics[2]: 7}, f"a and c should be committed, b left: {found}"
    assert table_rows(lake / topics[2]) == expected_rows(topics[2], {0: 7})


def avro_records(registry_url: str, topic: str, schema: dict, values: list[dict]) -> list[Record]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return [Record(0, serialize(v, context)) for v in values]


ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
PAYMENT = {
    "type": "record",
    "name": "Payment",
    "fields": [{"name": "id", "type": "long"}, {"name": "cents", "type": "int"}],
}
PAYMENT_V2 = {
    **PAYMENT,
    "fields": [*PAYMENT["fields"], {"name": "currency", "type": ["null", "string"], "default": None}],
}


def test_each_topic_is_read_with_its_own_subject_and_its_table_evolves_on_its_own(
    spark, kafka_config, group_id, schema_registry, tmp_path
):
    from kafka_batch_provider.registry.settings import RegistrySettings

    prefix = f"tpa{uuid.uuid4().hex[:8]}"
    orders, payments = f"{prefix}.orders", f"{prefix}.payments"
    create_topics(kafka_config, {orders: 1, payments: 1})
    produce(
        kafka_config, orders, avro_records(schema_registry, orders, ORDER, [{"id": i, "item": "x"} for i in range(4)])
    )
    produce(kafka_config, payments, avro_records(schema_registry, payments, PAYMENT, [{"id": 1, "cents": 250}]))
    spec = OutputSpec("delta", output=str(tmp_path / "lake" / "{topic}"))
    registry = RegistrySettings(schema_registry)
    pattern = re.escape(prefix) + r"\..*"

    run_tables(spark, kafka_config, spec, group_id, pattern, registry=registry, value_format="avro")
    # payments' producer moves to a version with one more field; orders' stays as it was
    more = [{"id": 2, "cents": 99, "currency": "EUR"}]
    produce(kafka_config, payments, avro_records(schema_registry, payments, PAYMENT_V2, more))
    produce(kafka_config, orders, avro_records(schema_registry, orders, ORDER, [{"id": 9, "item": "y"}]))
    run_tables(spark, kafka_config, spec, group_id, pattern, registry=registry, value_format="avro")

    columns = {t: DeltaTable(str(tmp_path / "lake" / t)).schema().to_arrow().names for t in (orders, payments)}
    assert {"item"} <= set(columns[orders]) and not {"cents", "currency"} & set(columns[orders]), columns
    assert {"cents", "currency"} <= set(columns[payments]) and "item" not in columns[payments], columns
    paid = DeltaTable(str(tmp_path / "lake" / payments)).to_pyarrow_table(columns=["id", "currency"]).to_pylist()
    assert sorted(paid, key=lambda r: r["id"]) == [{"id": 1, "currency": None}, {"id": 2, "currency": "EUR"}], paid


def test_the_spark_application_writes_every_tables_plan_it_is_given(
    spark_connect_remote, kafka_config, group_id, tmp_path, monkeypatch, capsys
):
    """What spark-submit runs for a table per topic (the CLI's and the Spark operator's Spark step):
    the application with one ``--plan`` per table and the output template, here in this process on
    the worker's Spark engine (``SPARK_REMOTE``: the application's getOrCreate joins it; a real
    spark-submit runs it in tests/integration/test_cli.py's table-per-topic run)."""
    from kafka_batch_provider.spark import app

    monkeypatch.setenv("SPARK_REMOTE", spark_connect_remote)
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)  # pyspark sets it: put back after

    prefix = f"tpapp{uuid.uuid4().hex[:8]}"
    counts = {f"{prefix}.x": {0: 5, 1: 2}, f"{prefix}.y": {0: 3}}
    create_topics(kafka_config, {t: len(c) for t, c in counts.items()})
    for topic, partitions in counts.items():
        fill(kafka_config, topic, partitions)
    spec = OutputSpec("delta", output=str(tmp_path / "lake" / "{topic}"))
    kafka = KafkaOffsets(kafka_config, timeout=10)
    planned = plan_tables(kafka, spec, group_id, [], PlanPolicy(), topic_pattern=re.escape(prefix) + r"\..*")
    monkeypatch.setenv("KAFKA_BATCH_KAFKA_CONFIG", json.dumps(kafka_config))
    plans = [arg for t in planned.with_work for arg in ("--plan", t.outcome.plan_path)]

    assert app.run([*plans, "--format", "delta", "--output", spec.output]) == 0, capsys.readouterr().err[-1500:]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {t: r["rows"] for t, r in result["tables"].items()} == {t: sum(c.values()) for t, c in counts.items()}, (
        result
    )
    assert sorted(commit_tables(kafka, planned.with_work).committed) == sorted(counts)
    for topic, partitions in counts.items():
        assert table_rows(tmp_path / "lake" / topic) == expected_rows(topic, partitions)
