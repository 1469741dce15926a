"""JSON Schema values written by confluent-kafka's own JSONSerializer, decoded into typed columns:
each row of the mapping (decoding/json_schema_types.py), a new version's property, and the values
that cannot be decoded. The registry is confluent-kafka's in-process mock (``mock://``)."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.decoding.json_schema_decoder import JsonSchemaDecoder
from kafka_batch_provider.decoding.json_schema_types import arrow_schema, value_columns
from kafka_batch_provider.errors import ConfigError, RegistryRefusedError

LINE = {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}
ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "definitions": {"Line": LINE},
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "amount": {"type": "number"},
        "paid": {"type": "boolean"},
        "placed": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "main": {"$ref": "#/definitions/Line"},
        "coupon": {"type": ["string", "null"]},
        "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
        "status": {"enum": ["NEW", "PAID"]},
        "anything": {},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["id"],
}
ORDER_V2 = {**ORDER, "properties": {**ORDER["properties"], "channel": {"type": "string"}}}
EVERY = {
    "id": 7,
    "item": "pen",
    "amount": 2.5,
    "paid": True,
    "placed": "2026-11-24T10:00:00.123456Z",
    "day": "2026-11-24",
    "lines": [{"sku": "a", "qty": 2}],
    "counts": {"x": 1},
    "main": {"sku": "m", "qty": 1},
    "coupon": None,
    "maybe": 3,
    "status": "PAID",
    "anything": {"free": [1, "two"]},
    "either": 5,
}


@pytest.fixture()
def registry():
    return SchemaRegistryClient.new_client({"url": "mock://"})


def serialize(registry, schema: dict, topic: str, record: dict) -> bytes:
    serializer = JSONSerializer(json.dumps(schema), registry)
    return serializer(record, SerializationContext(topic, MessageField.VALUE))


def decoder(registry, schema: dict) -> JsonSchemaDecoder:
    def writer_schema(schema_id: int) -> tuple[str, str, list[str]]:
        found = registry.get_schema(schema_id)
        return found.schema_type or "AVRO", found.schema_str, []

    return JsonSchemaDecoder(json.dumps(schema), writer_schema)


def test_every_row_of_the_mapping(registry):
    value = serialize(registry, ORDER, "t-every", EVERY)
    found = decoder(registry, ORDER).decode(pa.array([value], pa.binary()))
    assert found.problems == {}, f"expected no problems, found {found.problems}"
    row = found.columns.to_pylist()[0]
    expected = {
        **EVERY,
        "placed": dt.datetime(2026, 11, 24, 10, 0, 0, 123456, tzinfo=dt.timezone.utc),
        "day": dt.date(2026, 11, 24),
        "counts": [("x", 1)],
        "maybe": 3.0,
        "anything": '{"free":[1,"two"]}',  # no type: the JSON text
        "either": "5",
    }
    for name, want in expected.items():
        assert row[name] == want, f"column {name}: expected {want!r}, found {row[name]!r}"
    types = {f.name: str(f.type) for f in found.columns.schema}
    assert types["id"] == "int64" and types["placed"] == "timestamp[us, tz=UTC]" and types["day"] == "date32[day]"
    assert types["lines"] == "list<element: struct<sku: string, qty: int64>>", types["lines"]
    assert types["counts"] == "map<string, int64>" and types["coupon"] == "string", types


def test_a_new_version_adds_its_column_and_older_values_read_it_as_null(registry):
    old = serialize(registry, ORDER, "t-evolve", {"id": 1})
    new = serialize(registry, ORDER_V2, "t-evolve", {"id": 2, "channel": "app"})
    found = decoder(registry, ORDER_V2).decode(pa.array([old, new], pa.binary()))
    assert found.problems == {}, found.problems
    rows = found.columns.select(["id", "channel", "item"]).to_pylist()
    expected = [{"id": 1, "channel": None, "item": None}, {"id": 2, "channel": "app", "item": None}]
    assert rows == expected, f"expected {expected}, found {rows}"


def test_values_that_cannot_be_decoded_are_reported_by_row(registry):
    good = serialize(registry, ORDER, "t-bad", {"id": 1})
    header = good[:5]
    values = [
        good,
        header + b'{"id": "one"}',  # breaks its schema: id is an integer
        header + b'{"id": 1, "lines": [{"qty": "x"}]}',  # breaks it deeper
        header + b'{"id": 1',  # not JSON
        header + b'{"id": 1, "placed": "yesterday"}',  # a date-time its column cannot take
        None,
    ]
    found = decoder(registry, ORDER).decode(pa.array(values, pa.binary()))
    assert sorted(found.problems) == [1, 2, 3, 4], f"expected rows 1-4 blamed, found {found.problems}"
    assert "the JSON breaks its schema at $.id: 'one' is not of type 'integer'" in found.problems[1], found.problems[1]
    assert "at $.lines[0].qty" in found.problems[2], found.problems[2]
    assert "JSONDecodeError" in found.problems[3], found.problems[3]
    assert "Invalid isoformat string: 'yesterday'" in found.problems[4], found.problems[4]
    assert found.columns.column("id").to_pylist() == [1, None, None, None, None, None]


def test_a_schema_that_is_not_an_object_or_refers_to_itself_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="must be an object with properties"):
        value_columns({"type": "array", "items": {"type": "string"}})
    tree = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    with pytest.raises(ConfigError, match="refers to itself"):
        arrow_schema(value_columns(tree))


@pytest.mark.parametrize(
    "refusal", [ConfigError("schema registry at http://r: the TLS handshake failed"), RegistryRefusedError("HTTP 401")]
)
def test_a_registry_that_cannot_be_asked_fails_the_decoding_and_never_blames_the_records(registry, refusal):
    value = serialize(registry, ORDER, "t-refused", {"id": 1})

    def refused(schema_id: int):
        raise refusal

    with pytest.raises(type(refusal)):
        JsonSchemaDecoder(json.dumps(ORDER), refused).decode(pa.array([value], pa.binary()))
