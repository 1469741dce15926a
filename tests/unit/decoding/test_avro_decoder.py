"""Avro values written by confluent-kafka's own AvroSerializer, decoded into typed columns.

The registry here is confluent-kafka's in-process mock (``mock://``): the integration tests
use the embedded registry server; these check the decoding itself, value by value.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.decoding.avro_decoder import AvroDecoder
from kafka_batch_provider.errors import RegistryUnavailableError, SchemaError

ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "paid", "type": "boolean"},
        {"name": "qty", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "home", "type": ADDRESS},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "either", "type": ["null", "long", "string", "Address"], "default": None},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "time_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "time_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}

UTC = dt.timezone.utc
ONE = {
    "id": 7,
    "name": "pen",
    "amount": 2.5,
    "paid": True,
    "qty": 3,
    "ratio": 0.5,
    "raw": b"\x00\x01",
    "hash": b"abcd",
    "colour": "GREEN",
    "tags": ["a", "b"],
    "counts": {"x": 1},
    "home": {"city": "Oslo"},
    "note": None,
    "either": 12,
    "day": dt.date(2026, 11, 24),
    "at_ms": dt.datetime(2026, 11, 24, 10, 0, 0, 123000, tzinfo=UTC),
    "at_us": dt.datetime(2026, 11, 24, 10, 0, 0, 123456, tzinfo=UTC),
    "local_ms": dt.datetime(2026, 11, 24, 10, 0, 0, 5000),
    "time_ms": dt.time(10, 0, 0, 5000),
    "time_us": dt.time(10, 0, 0, 5),
    "price": Decimal("12.34"),
    "ref": str(uuid.UUID(int=5)),
}


@pytest.fixture()
def registry():
    return SchemaRegistryClient.new_client({"url": "mock://"})  # confluent-kafka's in-process mock


def serializer(registry, schema: dict) -> AvroSerializer:
    return AvroSerializer(registry, json.dumps(schema), conf={"auto.register.schemas": True})


def serialize(registry, schema: dict, subject_topic: str, record: dict) -> bytes:
    return serializer(registry, schema)(record, SerializationContext(subject_topic, MessageField.VALUE))


def decoder(registry, reader: dict) -> AvroDecoder:
    def writer_schema(schema_id: int) -> str:
        try:
            return registry.get_schema(schema_id).schema_str
        except SchemaRegistryError as exc:  # as registry.client.SchemaRegistry.by_id reports it
            raise SchemaError(f"the registry has no schema id {schema_id} ({exc.error_message})") from None

    return AvroDecoder(json.dumps(reader), writer_schema)


def test_every_type_of_the_mapping_decodes_as_confluent_kafka_reads_it(registry):
    value = serialize(registry, V1, "t-every", ONE)
    found = decoder(registry, V1).decode(pa.array([value], pa.binary()))
    assert found.problems == {}, f"expected no problems, found {found.problems}"
    row = found.columns.to_pylist()[0]
    expected = {
        **ONE,
        "counts": [("x", 1)],  # pyarrow gives a map as key-value pairs
        "either": {"long": 12, "string": None, "Address": None},
    }
    for name, want in expected.items():
        assert row[name] == want, f"column {name}: expected {want!r}, found {row[name]!r}"
    confluent = AvroDeserializer(registry)(value, SerializationContext("t-every", MessageField.VALUE))
    assert confluent["price"] == row["price"] and confluent["at_us"] == row["at_us"]


def test_a_union_tells_its_branches_apart(registry):
    values = [serialize(registry, V1, "t-union", {**ONE, "either": e}) for e in (None, 5, "five", {"city": "Rome"})]
    found = decoder(registry, V1).decode(pa.array(values, pa.binary())).columns.column("either").to_pylist()
    expected = [
        None,
        {"long": 5, "string": None, "Address": None},
        {"long": None, "string": "five", "Address": None},
        {"long": None, "string": None, "Address": {"city": "Rome"}},
    ]
    assert found == expected, f"expected {expected}, found {found}"


def test_records_of_an_older_schema_are_resolved_to_the_reader_schema(registry):
    old = serialize(registry, V1, "t-evolve", {**ONE, "id": 1})
    new = serialize(registry, V2, "t-evolve", {**ONE, "id": 2, "channel": "app"})
    found = decoder(registry, V2).decode(pa.array([old, new], pa.binary()))
    assert found.problems == {}
    assert found.schema_ids[0] != found.schema_ids[1], "two schema versions give two ids"
    rows = found.columns.select(["id", "channel"]).to_pylist()
    expected = [{"id": 1, "channel": "web"}, {"id": 2, "channel": "app"}]  # the default fills the old record
    assert rows == expected, f"expected {expected}, found {rows}"


def test_undecodable_values_are_reported_by_row_and_tombstones_are_null_rows(registry):
    good = serialize(registry, V1, "t-bad", ONE)
    values = [good, None, b"\x01" + good[1:], good[:5], good[:-3], b"\x00\x00\x0f\x42\x40" + good[5:]]
    found = decoder(registry, V1).decode(pa.array(values, pa.binary()))
    assert sorted(found.problems) == [2, 3, 4, 5], f"expected problems on rows 2-5, found {found.problems}"
    assert "magic byte 0x01" in found.problems[2]
    assert "schema id 1000000" in found.problems[5], found.problems[5]
    rows = found.columns.column("id").to_pylist()
    assert rows == [7, None, None, None, None, None], f"expected only row 0 decoded, found {rows}"


def test_each_schema_id_is_fetched_once(registry):
    fetched = []

    def fetch(schema_id):
        fetched.append(schema_id)
        return registry.get_schema(schema_id).schema_str

    value = serialize(registry, V1, "t-once", ONE)
    reader = AvroDecoder(json.dumps(V1), fetch)
    reader.decode(pa.array([value] * 50, pa.binary()))
    reader.decode(pa.array([value] * 50, pa.binary()))
    assert len(fetched) == 1, f"expected one fetch for one schema id, found {fetched}"


def test_registry_schema_round_trip_keeps_the_text(registry):
    schema_id = registry.register_schema("t-text-value", Schema(json.dumps(V1), "AVRO"))
    assert json.loads(registry.get_schema(schema_id).schema_str)["name"] == "Order"


def test_an_unreachable_registry_fails_the_decoding_instead_of_blaming_the_records(registry):
    value = serialize(registry, V1, "t-outage", ONE)

    def unreachable(schema_id):
        raise RegistryUnavailableError("schema registry at http://127.0.0.1:1 did not answer schema id 1 within 1s")

    with pytest.raises(RegistryUnavailableError):
        AvroDecoder(json.dumps(V1), unreachable).decode(pa.array([value], pa.binary()))
