"""``--value-format protobuf`` and ``json-schema`` end to end: a real broker, the embedded schema
registry over HTTP, Spark ``local[2]``, each output format read back by its own reader.

Producers write with confluent-kafka's ProtobufSerializer and JSONSerializer; a second version
adds a field mid-stream (a new column), and values that cannot be decoded become dead letters.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.registry.client import SchemaRegistry
from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import TableOutput
from tests.unit.decoding.test_protobuf_decoder import ORDER, message_class

pytestmark = pytest.mark.integration

PROTO_V2 = ORDER.replace("Line main = 19;", "Line main = 19;\n  string channel = 20;")
JSON_V1 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "lines": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
        },
    },
    "required": ["id"],
    "additionalProperties": False,  # a closed model: BACKWARD lets a new version add a property
}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "channel": {"type": "string"}}}


def read_back(output) -> list[dict]:
    """The data as its readers see it: the table's own reader, or DuckDB over the batches' files
    (not the dead letters)."""
    if isinstance(output, TableOutput):
        rows = output.read().to_pylist()
    else:
        import duckdb

        files = os.path.join(output.uri, "batch_id=*", "*.parquet")
        rows = duckdb.sql(f"select * from read_parquet('{files}', union_by_name=true)").fetch_arrow_table().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def ingest(spark, kafka_config, store, group_id, topic, registry, value_format, **options):
    kafka = KafkaOffsets(kafka_config, timeout=10)
    outcome = plan_batch(
        kafka, store, group_id, [topic], PlanPolicy(), reader_schema=ReaderSchemaRequest(value_format, registry)
    )
    entry = write_batch(
        outcome.plan,
        store,
        kafka_config,
        stage_with(spark, registry),
        WriteOptions(value_format=value_format, **options),
    )
    commit_batch(kafka, store, outcome.plan)
    return outcome.plan, entry


def produce_values(kafka_config, topic, values: list[bytes], first_id: int) -> None:
    produce(kafka_config, topic, [Record(i % 2, v, str(first_id + i).encode()) for i, v in enumerate(values)])


def protobuf_values(registry_url, topic, text, records) -> list[bytes]:
    cls = message_class(text)
    serialize = ProtobufSerializer(cls, SchemaRegistryClient({"url": registry_url}), {"use.deprecated.format": False})
    return [serialize(cls(**r), SerializationContext(topic, MessageField.VALUE)) for r in records]


def json_values(registry_url, topic, schema, records) -> list[bytes]:
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": registry_url}))
    return [serialize(r, SerializationContext(topic, MessageField.VALUE)) for r in records]


def test_protobuf_values_become_typed_columns_a_new_field_a_column_and_bad_ones_dead_letters(
    spark, kafka_config, new_topic, group_id, schema_registry, any_output
):
    topic = new_topic(partitions=2)
    registry = RegistrySettings(schema_registry)
    first = [{"id": n, "item": f"item-{n}", "lines": [{"sku": f"s{n}", "qty": n}], "card": "c"} for n in range(4)]
    values = protobuf_values(schema_registry, topic, ORDER, first)
    produce_values(kafka_config, topic, values, 0)
    ingest(spark, kafka_config, any_output.store(), group_id, topic, registry, "protobuf")

    second = protobuf_values(schema_registry, topic, PROTO_V2, [{"id": 4, "item": "item-4", "channel": "app"}])
    out_of_range = values[0][:5] + b"\x02\x0a" + values[0][7:]  # message index [5]
    produce_values(kafka_config, topic, [*second, out_of_range], 4)
    plan, entry = ingest(
        spark, kafka_config, any_output.store(), group_id, topic, registry, "protobuf", on_bad_record="dead-letter"
    )
    assert plan.extra["reader_schema"]["version"] == 2, f"the second plan pinned {plan.extra}"
    assert entry["dead_letters"]["rows"] == 1, f"expected one dead letter, the log entry has {entry['dead_letters']}"

    rows = read_back(any_output)
    assert [r["id"] for r in rows] == [0, 1, 2, 3, 4], f"expected ids 0..4, found {[r['id'] for r in rows]}"
    assert rows[4]["channel"] == "app" and rows[0]["channel"] is None, f"found {rows[4]}, {rows[0]}"
    assert rows[2]["lines"] == [{"sku": "s2", "qty": 2}] and rows[2]["card"] == "c" and rows[2]["cash"] is None
    assert rows[1]["status"] == "NEW" and rows[1]["topic"] == topic, f"found {rows[1]}"


def test_json_schema_values_become_typed_columns_and_values_that_break_their_schema_fail_the_batch(
    spark, kafka_config, new_topic, group_id, schema_registry, any_output
):
    topic = new_topic(partitions=2)
    registry = RegistrySettings(schema_registry)
    first = [{"id": n, "item": f"item-{n}", "lines": [{"sku": f"s{n}", "qty": n}]} for n in range(4)]
    values = json_values(schema_registry, topic, JSON_V1, first)
    produce_values(kafka_config, topic, values, 0)
    ingest(spark, kafka_config, any_output.store(), group_id, topic, registry, "json-schema")

    second = json_values(schema_registry, topic, JSON_V2, [{"id": 4, "channel": "app"}])
    broken = second[0][:5] + b'{"id": "four"}'
    produce_values(kafka_config, topic, [*second, broken], 4)
    with pytest.raises(  # in-process, Spark's PythonException carries the task's one line
        Exception, match=r"offset \d+: the value cannot be decoded \(schema id \d+: the JSON breaks its"
    ):
        ingest(spark, kafka_config, any_output.store(), group_id, topic, registry, "json-schema")
    ingest(
        spark, kafka_config, any_output.store(), group_id, topic, registry, "json-schema", on_bad_record="dead-letter"
    )

    rows = read_back(any_output)
    assert [r["id"] for r in rows] == [0, 1, 2, 3, 4], f"expected ids 0..4, found {[r['id'] for r in rows]}"
    assert rows[4]["channel"] == "app" and rows[4]["item"] is None and rows[0]["channel"] is None, rows[4]
    assert rows[3]["lines"] == [{"sku": "s3", "qty": 3}], f"found {rows[3]}"


def test_the_serialized_protobuf_schema_is_fetched_even_after_its_text_was(schema_registry, new_topic):
    # confluent-kafka caches a schema by id whatever the format asked: a client of its own serves it
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient({"url": schema_registry})
    # as .proto text, with a field of its own (the session's registry may hold ORDER as base64 already)
    text = ORDER.replace("Line main = 19;", f"Line main = 19;\n  string only_{uuid.uuid4().hex} = 30;")
    schema_id = client.register_schema(f"{topic}-value", Schema(text, "PROTOBUF"))
    registry = SchemaRegistry(RegistrySettings(schema_registry))
    assert "message Order" in registry.by_id(schema_id).text, "expected the text form first"
    files = descriptor_pb2.FileDescriptorSet.FromString(registry.protobuf_files(schema_id))
    assert [m.name for m in files.file[-1].message_type] == ["Line", "Order"], f"found {files}"
