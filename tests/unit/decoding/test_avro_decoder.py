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
from kafka_batch_provider.errors import ConfigError, RegistryUnavailableError, SchemaError

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
    def writer_schema(schema_id: int) -> tuple[str, str, list[str]]:
        try:
            schema = registry.get_schema(schema_id)
        except SchemaRegistryError as exc:  # as registry.client.SchemaRegistry.by_id reports it
            raise SchemaError(f"the registry has no schema id {schema_id} ({exc.error_message})") from None
        return schema.schema_type or "AVRO", schema.schema_str, []

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
        return "AVRO", registry.get_schema(schema_id).schema_str, []

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


def test_a_registry_that_cannot_be_asked_fails_the_decoding_and_never_becomes_record_problems(registry):
    value = serialize(registry, V1, "t-tls", ONE)

    def refused(schema_id):
        raise ConfigError("schema registry settings refused: TLS handshake failed")

    with pytest.raises(ConfigError, match="TLS handshake failed"):  # not a dead letter for every record
        AvroDecoder(json.dumps(V1), refused).decode(pa.array([value, value], pa.binary()))


LOGICAL_UNION = {
    "type": "record",
    "name": "Event",
    "fields": [
        {
            "name": "when",
            "type": [
                "null",
                "string",
                {"type": "long", "logicalType": "timestamp-millis"},
                {"type": "int", "logicalType": "date"},
                {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            ],
        },
        {"name": "either", "type": [{"type": "map", "values": "string"}, ADDRESS]},
    ],
}


def test_logical_types_and_a_record_beside_a_map_in_unions_take_their_own_branches(registry):
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    cases = [
        ("text", {"x": "y"}),
        (at, ("Address", {"city": "Oslo"})),
        (dt.date(2026, 1, 2), {}),
        (Decimal("1.25"), {"k": "v"}),
    ]
    values = [serialize(registry, LOGICAL_UNION, "t-logical", {"when": w, "either": e}) for w, e in cases]
    found = decoder(registry, LOGICAL_UNION).decode(pa.array(values, pa.binary()))
    assert found.problems == {}, f"expected no problems, found {found.problems}"
    rows = found.columns.to_pylist()
    whens = [{k: v for k, v in r["when"].items() if v is not None} for r in rows]
    expected = [
        {"string": "text"},
        {"timestamp-millis": at},
        {"date": dt.date(2026, 1, 2)},
        {"decimal": Decimal("1.25")},
    ]
    assert whens == expected, f"expected {expected}, found {whens}"
    eithers = [{k: v for k, v in r["either"].items() if v is not None} for r in rows]
    expected = [{"map": [("x", "y")]}, {"Address": {"city": "Oslo"}}, {"map": []}, {"map": [("k", "v")]}]
    assert eithers == expected, f"expected {expected}, found {eithers}"


def test_an_unknown_id_is_asked_for_once_and_blames_only_its_records(registry):
    asked = []

    def fetch(schema_id):
        asked.append(schema_id)
        raise SchemaError(f"schema registry at http://r has no schema id {schema_id} (schema not found)")

    value = b"\x00\x00\x00\x00\x63" + b"\x02"
    found = AvroDecoder(json.dumps(V1), fetch).decode(pa.array([value] * 100, pa.binary()))
    assert len(found.problems) == 100 and asked == [99], f"expected one question for id 99, found {asked}"


def test_a_schema_id_of_another_format_blames_its_records_in_one_line(registry):
    decoding = AvroDecoder(json.dumps(V1), lambda schema_id: ("PROTOBUF", 'syntax = "proto3";', []))
    found = decoding.decode(pa.array([b"\x00\x00\x00\x00\x05\x08\x01"], pa.binary()))
    assert found.problems == {0: "schema id 5 is a PROTOBUF schema, not Avro"}, found.problems


def test_a_decimal_wider_than_its_column_blames_its_record_not_the_batch(registry):
    wide = {
        "type": "record",
        "name": "P",
        "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}],
    }
    narrow = {
        **wide,
        "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}],
    }
    values = [
        serialize(registry, narrow, "t-dec-n", {"d": Decimal("12.34")}),
        serialize(registry, wide, "t-dec-w", {"d": Decimal("12345678.90")}),
    ]
    found = decoder(registry, narrow).decode(pa.array(values, pa.binary()))
    assert sorted(found.problems) == [1], f"expected only the wide value refused, found {found.problems}"
    assert found.columns.column("d").to_pylist() == [Decimal("12.34"), None]


def test_defaults_of_millisecond_fields_added_since_are_read_as_milliseconds(registry):
    writer = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    added = [
        ("t", {"type": "long", "logicalType": "timestamp-millis"}, 1_700_000_000_123),
        ("lt", {"type": "long", "logicalType": "local-timestamp-millis"}, 1_700_000_000_123),
        ("tm", {"type": "int", "logicalType": "time-millis"}, 3_723_004),
        ("tu", {"type": "long", "logicalType": "timestamp-micros"}, 1_700_000_000_123_456),
    ]
    reader = {**writer, "fields": [*writer["fields"], *({"name": n, "type": t, "default": d} for n, t, d in added)]}
    old = serialize(registry, writer, "t-defaults", {"a": 1})
    row = decoder(registry, reader).decode(pa.array([old], pa.binary())).columns.to_pylist()[0]
    expected = {
        "a": 1,
        "t": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
        "lt": dt.datetime(2023, 11, 14, 22, 13, 20, 123000),
        "tm": dt.time(1, 2, 3, 4000),
        "tu": dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
    }
    assert row == expected, f"expected {expected}, found {row}"


def test_enums_and_fixed_types_a_union_names_by_reference_are_untagged(registry):
    # fastavro tags a named type read from a union by reference as (name, value), enums and fixed too
    schema = {
        "type": "record",
        "name": "Tagged",
        "namespace": "lab",
        "fields": [
            {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "BLUE"]}},
            {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 2}},
            {"name": "maybe_colour", "type": ["null", "Colour"]},
            {"name": "maybe_hash", "type": ["null", "Hash"]},
            {"name": "either", "type": ["null", "long", "Colour"]},
        ],
    }
    record = {"colour": "RED", "hash": b"ab", "maybe_colour": "BLUE", "maybe_hash": b"cd", "either": "BLUE"}
    found = decoder(registry, schema).decode(pa.array([serialize(registry, schema, "t-tagged", record)], pa.binary()))
    assert found.problems == {}, f"expected no problems, found {found.problems}"
    expected = {**record, "either": {"long": None, "Colour": "BLUE"}}
    assert found.columns.to_pylist() == [expected], f"expected {expected}, found {found.columns.to_pylist()}"
