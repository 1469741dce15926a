"""``--key-format`` end to end: a real broker, the embedded schema registry over HTTP, Spark
``local[2]``, each output read back by its own reader.

Keys are written the way Kafka's producers write them: confluent-kafka's serializers with the
key's subject (``<topic>-key``), a record key as change-data-capture tools send it, a plain
Avro string, a Protobuf message; a key that is not in the wire format becomes a dead letter
whose error names the key.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest, ReaderSchemas
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import Output, TableOutput
from tests.integration.test_dead_letters import published_dead_letters
from tests.unit.decoding.test_protobuf_decoder import message_class

pytestmark = pytest.mark.integration

KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
VALUE = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "item", "type": "string"}]}
PROTO_KEY = 'syntax = "proto3";\npackage shop;\n\nmessage CustomerKey {\n  string region = 1;\n  int64 number = 2;\n}\n'


def avro(registry_url: str, topic: str, schema, records: list, field: str) -> list[bytes]:
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    return [serialize(r, SerializationContext(topic, getattr(MessageField, field))) for r in records]


def ingest(spark, kafka_config, store, group_id, topic, registry, value_format, key_format, **options):
    kafka = KafkaOffsets(kafka_config, timeout=10)
    requests = ReaderSchemas.of(
        ReaderSchemaRequest(value_format, registry) if value_format in ("avro", "protobuf") else None,
        ReaderSchemaRequest(key_format, registry, part="key"),
    )
    outcome = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=requests)
    options = WriteOptions(value_format=value_format, key_format=key_format, **options)
    entry = write_batch(outcome.plan, store, kafka_config, stage_with(spark, registry), options)
    commit_batch(kafka, store, outcome.plan)
    return outcome.plan, entry


def rows_of(output) -> list[dict]:
    if isinstance(output, TableOutput):
        return output.read().to_pylist()
    import os

    import duckdb

    files = os.path.join(output.uri, "batch_id=*", "*.parquet")
    return duckdb.sql(f"select * from read_parquet('{files}')").fetch_arrow_table().to_pylist()


def test_avro_record_keys_become_a_key_struct_and_a_key_that_is_not_framed_a_dead_letter(
    spark, kafka_config, new_topic, group_id, schema_registry, any_output
):
    topic = new_topic(partitions=2)
    registry = RegistrySettings(schema_registry)
    keys = avro(schema_registry, topic, KEY, [{"id": n} for n in range(4)], "KEY")
    values = avro(schema_registry, topic, VALUE, [{"item": f"item-{n}"} for n in range(5)], "VALUE")
    records = [Record(n % 2, values[n], keys[n]) for n in range(4)]
    records.append(Record(0, values[4], b"order-4"))  # a key written as plain bytes
    produce(kafka_config, topic, records)

    with pytest.raises(Exception, match=r"offset \d+: the key cannot be decoded \(magic byte"):
        ingest(spark, kafka_config, any_output.store(), group_id, topic, registry, "avro", "avro")
    plan, entry = ingest(
        spark, kafka_config, any_output.store(), group_id, topic, registry, "avro", "avro", on_bad_record="dead-letter"
    )
    assert plan.extra["key_reader_schema"]["subject"] == f"{topic}-key", f"the plan pinned {plan.extra}"
    assert entry["options"]["key_reader_schema"] == plan.extra["key_reader_schema"], entry["options"]
    assert entry["options"]["key_format"] == "avro" and entry["dead_letters"]["rows"] == 1, entry
    rows = sorted(rows_of(any_output), key=lambda r: r["key"]["id"])
    assert [(r["key"], r["item"]) for r in rows] == [({"id": n}, f"item-{n}") for n in range(4)], rows
    letters = published_dead_letters(any_output.store())
    assert [(row[5], row[9][:5]) for row in letters] == [(b"order-4", "key: ")], f"found {letters}"


def test_protobuf_keys_decode_beside_values_kept_as_strings(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    registry = RegistrySettings(schema_registry)
    cls = message_class(PROTO_KEY, "shop.CustomerKey")
    serialize = ProtobufSerializer(
        cls, SchemaRegistryClient({"url": schema_registry}), {"use.deprecated.format": False}
    )
    keys = [serialize(cls(region="eu", number=n), SerializationContext(topic, MessageField.KEY)) for n in range(3)]
    produce(kafka_config, topic, [Record(0, f"value {n}".encode(), k) for n, k in enumerate(keys)] + [Record(0, b"x")])

    output = Output(str(tmp_path / "lake"))
    _, entry = ingest(spark, kafka_config, output.store(), group_id, topic, registry, "string", "protobuf")
    rows = sorted(rows_of(output), key=lambda r: r["offset"])
    assert [r["key"] for r in rows] == [{"region": "eu", "number": n} for n in range(3)] + [None], rows
    assert [r["value_string"] for r in rows] == ["value 0", "value 1", "value 2", "x"], rows
    assert rows[0]["value"] == b"value 0" and entry["rows"] == 4, f"the raw value stays: {rows[0]}"


def test_a_key_subject_of_another_format_is_refused_before_anything_is_planned(
    kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    avro(schema_registry, topic, "string", ["k"], "KEY")  # registers <topic>-key as Avro
    produce(kafka_config, topic, [Record(0, b"v")])
    store = Output(str(tmp_path / "lake")).store()
    request = ReaderSchemas.of(ReaderSchemaRequest("protobuf", RegistrySettings(schema_registry), part="key"))
    with pytest.raises(ConfigError, match=f"schema registry: {topic}-key version 1 is a AVRO schema, not protobuf"):
        plan_batch(
            KafkaOffsets(kafka_config, timeout=10), store, group_id, [topic], PlanPolicy(), reader_schema=request
        )
    assert store.plan_files() == [], f"a refused plan left plan files: {store.plan_files()}"


def test_a_table_whose_first_batch_had_no_data_takes_the_decoded_keys_type_and_one_of_raw_keys_refuses_it(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    topic = new_topic(partitions=1)
    registry = RegistrySettings(schema_registry)
    keys = avro(schema_registry, topic, KEY, [{"id": n} for n in range(2)], "KEY")
    values = avro(schema_registry, topic, VALUE, [{"item": f"item-{n}"} for n in range(2)], "VALUE")
    produce(kafka_config, topic, [Record(0, b"not framed", keys[0])])  # the first batch: a dead letter only
    table = TableOutput(str(tmp_path / "table"))
    _, first = ingest(
        spark, kafka_config, table.store(), group_id, topic, registry, "avro", "avro", on_bad_record="dead-letter"
    )
    assert first["rows"] == 0 and first["dead_letters"]["rows"] == 1, first
    produce(kafka_config, topic, [Record(0, values[n], keys[n]) for n in range(2)])
    ingest(spark, kafka_config, table.store(), group_id, topic, registry, "avro", "avro")
    rows = table.read().to_pylist()
    assert sorted((r["key"]["id"], r["item"]) for r in rows) == [(0, "item-0"), (1, "item-1")], rows
    assert "value" not in rows[0], f"no batch kept raw values, the table has {sorted(rows[0])}"

    raw_keys = TableOutput(str(tmp_path / "raw"))
    other = f"{group_id}-raw"
    ingest_bytes = WriteOptions(value_format="avro", on_bad_record="dead-letter")
    kafka = KafkaOffsets(kafka_config, timeout=10)
    planned = plan_batch(
        kafka, raw_keys.store(), other, [topic], PlanPolicy(), reader_schema=ReaderSchemaRequest("avro", registry)
    )
    write_batch(planned.plan, raw_keys.store(), kafka_config, stage_with(spark, registry), ingest_bytes)
    commit_batch(kafka, raw_keys.store(), planned.plan)
    produce(kafka_config, topic, [Record(0, values[0], keys[0])])
    with pytest.raises(Exception, match="the table's keys were written as bytes, and .*-key decodes them as struct"):
        ingest(
            spark, kafka_config, raw_keys.store(), other, topic, registry, "avro", "avro", on_bad_record="dead-letter"
        )
