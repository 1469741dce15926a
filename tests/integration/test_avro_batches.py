"""``--value-format avro`` end to end: a real broker, the embedded schema registry over HTTP,
Spark ``local[2]``, each output format read back by its own reader.

Producers write with confluent-kafka's AvroSerializer (the registry's wire format); the plan
pins the reader schema, the Spark tasks decode, the table gains the columns a new version adds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
from kafka_batch_provider.dev.schema_registry.auth import Credential
from kafka_batch_provider.errors import ConfigError, SchemaError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import Output, TableOutput, read_dataset
from tests.integration.test_cli import assert_one_line_error, cli, last_json

pytestmark = pytest.mark.integration

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
    ],
}
# Version 2 adds an optional top-level field and a nested one: both become columns.
V2 = {
    **V1,
    "fields": [
        *V1["fields"][:3],
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "qty", "type": "int"},
                        {"name": "note", "type": ["null", "string"], "default": None},
                    ],
                },
            },
        },
        {"name": "coupon", "type": ["null", "string"], "default": None},
    ],
}


def order(n: int, **more) -> dict:
    line = {"sku": f"sku-{n}", "qty": n % 5 + 1, **({"note": more.pop("note")} if "note" in more else {})}
    return {"id": n, "item": f"item-{n}", "placed": 1_767_225_600_000 + n, "lines": [line], **more}


def produce_avro(kafka_config: dict, registry_url: str, topic: str, schema: dict, records: list[dict], partitions=2):
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    values = [serialize(r, SerializationContext(topic, MessageField.VALUE)) for r in records]
    produce(
        kafka_config,
        topic,
        [Record(i % partitions, v, str(r["id"]).encode()) for i, (r, v) in enumerate(zip(records, values))],
    )


def ingest(spark, kafka_config, store, group_id, topic, registry: RegistrySettings, **options):
    """plan -> write -> commit with values decoded from Avro, in-process (as ``kafka-batch run``)."""
    kafka = KafkaOffsets(kafka_config, timeout=10)
    request = ReaderSchemaRequest("avro", registry, options.pop("subject", None), options.pop("version", None))
    outcome = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    entry = write_batch(
        outcome.plan, store, kafka_config, stage_with(spark, registry), WriteOptions(value_format="avro", **options)
    )
    commit_batch(kafka, store, outcome.plan)
    return outcome.plan, entry


def read_back(output) -> list[dict]:
    """The output as its readers see it: the table's own reader, or DuckDB over the Parquet files by name."""
    if isinstance(output, TableOutput):
        rows = output.read().to_pylist()
    else:
        import duckdb

        files = os.path.join(output.uri, "**", "*.parquet")
        rows = duckdb.sql(f"select * from read_parquet('{files}', union_by_name=true)").fetch_arrow_table().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def test_avro_values_become_typed_columns_and_a_new_version_adds_its_columns(
    spark, kafka_config, new_topic, group_id, schema_registry, any_output
):
    topic = new_topic(partitions=2)
    registry = RegistrySettings(schema_registry)
    produce_avro(kafka_config, schema_registry, topic, V1, [order(n) for n in range(6)])
    first, entry = ingest(spark, kafka_config, any_output.store(), group_id, topic, registry)
    pinned = first.extra["reader_schema"]
    assert (pinned["subject"], pinned["version"]) == (f"{topic}-value", 1), f"the plan pinned {pinned}"
    assert entry["options"]["reader_schema"] == pinned, f"the log entry records {entry['options']}"
    assert "key:binary,topic:string" in entry["schema"] and "id:bigint" in entry["schema"], f"schema {entry['schema']}"

    # The producer moves to version 2 mid-stream: a batch of both versions, read with version 2.
    produce_avro(kafka_config, schema_registry, topic, V1, [order(6)])
    produce_avro(kafka_config, schema_registry, topic, V2, [order(7, coupon="SAVE7", note="gift")])
    second, _ = ingest(spark, kafka_config, any_output.store(), group_id, topic, registry)
    assert second.extra["reader_schema"]["version"] == 2, f"the second plan pinned {second.extra}"

    rows = read_back(any_output)
    assert [r["id"] for r in rows] == list(range(8)), f"expected ids 0..7, found {[r['id'] for r in rows]}"
    assert rows[7]["coupon"] == "SAVE7" and rows[7]["lines"][0]["note"] == "gift", f"found {rows[7]}"
    assert rows[6]["coupon"] is None and rows[6]["lines"][0]["note"] is None, "V1 records take V2's defaults"
    assert rows[0]["coupon"] is None, "rows of the first batch read the new column as null"
    assert rows[3]["lines"] == [{"sku": "sku-3", "qty": 4, "note": None}], f"found {rows[3]['lines']}"
    assert rows[5]["placed"].timestamp() == (1_767_225_600_000 + 5) / 1000, f"found {rows[5]['placed']!r}"
    assert rows[2]["topic"] == topic and rows[2]["key"] == b"2", "the Kafka columns stay beside the fields"
    assert "value" not in rows[0], "the raw value is not kept unless asked for"


def test_a_pinned_version_decodes_every_record_with_it_and_keep_raw_value_keeps_the_bytes(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    registry = RegistrySettings(schema_registry)
    produce_avro(kafka_config, schema_registry, topic, V1, [order(1)], partitions=1)
    produce_avro(kafka_config, schema_registry, topic, V2, [order(2, coupon="C2")], partitions=1)
    output = Output(str(tmp_path / "lake"))
    plan, _ = ingest(spark, kafka_config, output.store(), group_id, topic, registry, version=1, keep_raw_value=True)
    assert plan.extra["reader_schema"]["version"] == 1, f"the plan pinned {plan.extra}"
    table = read_dataset(output)
    assert "coupon" not in table.column_names, f"version 1 has no coupon column, found {table.column_names}"
    assert table.column("value").to_pylist()[1][:1] == b"\x00", "keep_raw_value keeps the framed bytes"


def test_a_retry_decodes_with_the_plans_schema_even_after_a_newer_version(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    registry = RegistrySettings(schema_registry)
    produce_avro(kafka_config, schema_registry, topic, V1, [order(1), order(2)], partitions=1)
    store = Output(str(tmp_path / "lake")).store()
    kafka = KafkaOffsets(kafka_config, timeout=10)
    request = ReaderSchemaRequest("avro", registry)
    planned = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request).plan
    # A new version arrives before the write (a crashed first attempt, then a retry).
    SchemaRegistryClient({"url": schema_registry}).register_schema(f"{topic}-value", Schema(json.dumps(V2), "AVRO"))
    again = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    assert again.reused and again.plan.extra == planned.extra, f"the retry re-planned: {again.plan.extra}"
    entry = write_batch(again.plan, store, kafka_config, stage_with(spark, registry), WriteOptions(value_format="avro"))
    assert "coupon" not in entry["schema"], f"the retry decoded with a newer version: {entry['schema']}"


def test_registry_refusals_happen_before_anything_is_planned_or_written(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    produce_avro(kafka_config, schema_registry, topic, V1, [order(1)], partitions=1)
    store = Output(str(tmp_path / "lake")).store()
    kafka = KafkaOffsets(kafka_config, timeout=10)
    registry = RegistrySettings(schema_registry)
    with pytest.raises(ConfigError, match="value format avro decodes with a schema registry"):
        ReaderSchemaRequest("avro", None)
    with pytest.raises(SchemaError, match=r"version not found \(version 9 of"):
        request = ReaderSchemaRequest("avro", registry, version=9)
        plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    with pytest.raises(SchemaError, match="no-such-subject"):
        request = ReaderSchemaRequest("avro", registry, subject="no-such-subject")
        plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    assert store.plan_files() == [], f"a refused plan left plan files: {store.plan_files()}"
    # A plan made without a registry format is not written as avro (nor the other way round).
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy()).plan
    with pytest.raises(ConfigError, match="values were planned without a schema registry format"):
        write_batch(plan, store, kafka_config, stage_with(spark, registry), WriteOptions(value_format="avro"))
    assert store.log.tail() is None, "a refused write changed the log"


SECRET = "reg-pass-8d1f"


def test_the_command_line_reads_avro_through_an_authenticated_registry_and_keeps_its_secret_out(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    credentials = (Credential(user="ingest", password=SECRET),)
    with EmbeddedSchemaRegistry(log_path=tmp_path / "registry.log", credentials=credentials) as server:
        topic = new_topic(partitions=2)
        serialize = AvroSerializer(
            SchemaRegistryClient({"url": server.url, "basic.auth.user.info": f"ingest:{SECRET}"}), json.dumps(V1)
        )
        values = [serialize(order(n), SerializationContext(topic, MessageField.VALUE)) for n in range(10)]
        produce(kafka_config, topic, [Record(n % 2, v) for n, v in enumerate(values)])
        settings = tmp_path / "registry.json"
        settings.write_text(json.dumps({"basic.auth.user.info": f"ingest:{SECRET}"}))
        out = tmp_path / "lake"
        common = ["--bootstrap-servers", kafka_bootstrap_servers, "--output", str(out)]
        registry = ["--schema-registry-url", server.url, "--schema-registry-config-file", str(settings)]
        run = ["run", "--topic", topic, "--group", group_id, *common, "--value-format", "avro", *registry]

        missing = cli(*run[:-4])  # no registry
        assert_one_line_error(missing, "value format avro decodes with a schema registry: set --schema-registry-url")
        no_subject = cli(*run, "--value-subject", "nothing-value")
        assert_one_line_error(no_subject, "subject not found (the latest version of 'nothing-value')")
        assert not out.exists() or not list(out.rglob("_plans/*.json")), "a refused run left a plan"

        result = last_json(cli(*run))
        assert result["records"] == 10, f"expected 10 records, found {result}"
        table = read_dataset(Output(str(out)))
        assert sorted(table.column("id").to_pylist()) == list(range(10)), "every record decoded once"
        for path in out.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".parquet", ""):
                assert SECRET.encode() not in path.read_bytes(), f"the registry password is in {path}"
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert SECRET not in ps, "the registry password is in the process table"


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_version_that_changes_a_fields_type_is_refused_naming_subject_versions_and_field(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path, fmt
):
    topic = new_topic(partitions=1)
    subject = f"{topic}-value"
    registry = RegistrySettings(schema_registry)
    client = SchemaRegistryClient({"url": schema_registry})
    produce_avro(kafka_config, schema_registry, topic, V1, [order(1)], partitions=1)
    if fmt == "delta":
        output = TableOutput(str(tmp_path / "orders"))
    else:
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
        output = TableOutput("", format="iceberg", table="lake.orders", catalog=catalog)
    ingest(spark, kafka_config, output.store(), group_id, topic, registry)
    # A registry whose subject checks nothing (NONE) lets a producer turn id into a string.
    client.set_compatibility(subject, "NONE")
    retyped = {**V1, "fields": [{"name": "id", "type": "string"}, *V1["fields"][1:]]}
    serialize = AvroSerializer(client, json.dumps(retyped))
    value = serialize({**order(2), "id": "two"}, SerializationContext(topic, MessageField.VALUE))
    produce(kafka_config, topic, [Record(0, value)])
    store = output.store()
    before = store.log.tail()
    with pytest.raises(SchemaError) as caught:
        ingest(spark, kafka_config, store, group_id, topic, registry)
    message = str(caught.value)
    expected = f"{subject} version 2 makes field id string, but the table holds it as int64 (written with version 1)"
    assert expected in message and "\n" not in message, message
    assert output.store().log.tail() == before, "the refused batch changed the table's log"
    committed = KafkaOffsets(kafka_config).committed_offsets(group_id, [TopicPartition(topic, 0)])
    assert list(committed.values()) == [1], f"the group moved past the refused batch: {committed}"


def test_a_field_delta_cannot_hold_is_refused_before_anything_is_read(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    with_time = {**V1, "fields": [*V1["fields"], {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}}]}
    produce_avro(kafka_config, schema_registry, topic, with_time, [{**order(1), "at": dt.time(8, 30)}], partitions=1)
    output = TableOutput(str(tmp_path / "orders"))
    with pytest.raises(ConfigError) as caught:
        ingest(spark, kafka_config, output.store(), group_id, topic, RegistrySettings(schema_registry))
    expected = "column at would be time64[us], which Delta tables cannot hold"
    assert expected in str(caught.value), str(caught.value)
    assert output.read() is None, "a refused batch created the Delta table"


def test_a_field_named_value_takes_its_own_type_in_a_new_iceberg_table(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    reading = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"},
                                                                {"name": "value", "type": "double"}]}  # fmt: skip
    produce_avro(kafka_config, schema_registry, topic, reading, [{"id": 1, "value": 2.5}], partitions=1)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    output = TableOutput("", format="iceberg", table="lake.readings", catalog=catalog)
    ingest(spark, kafka_config, output.store(), group_id, topic, RegistrySettings(schema_registry))
    rows = output.read(["id", "value"]).to_pylist()
    assert rows == [{"id": 1, "value": 2.5}], f"expected the field value as a double, found {rows}"


def test_a_pending_plan_is_not_replaced_by_a_plan_in_another_value_format(
    kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    produce_avro(kafka_config, schema_registry, topic, V1, [order(1)], partitions=1)
    store = Output(str(tmp_path / "lake")).store()
    kafka = KafkaOffsets(kafka_config, timeout=10)
    request = ReaderSchemaRequest("avro", RegistrySettings(schema_registry))
    pending = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    plan_file = pending.plan_path
    before = open(plan_file, "rb").read()  # a local output: the plan is a local file
    planned = f"pending batch {pending.plan.batch_id} was planned with values as avro, this run plans without one"
    with pytest.raises(ConfigError, match=f"{planned}: finish it with the value and key formats it was planned with"):
        plan_batch(kafka, store, group_id, [topic], PlanPolicy())
    after = open(plan_file, "rb").read()
    assert after == before, "the refused plan step rewrote the pending plan"
    again = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    assert again.reused and again.plan.batch_id == pending.plan.batch_id, "the same format reuses the plan"
