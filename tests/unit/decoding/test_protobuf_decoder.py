"""Protobuf values written by confluent-kafka's own ProtobufSerializer, decoded into typed columns:
each row of the mapping (decoding/protobuf_types.py), evolution by field number, and the values
that cannot be decoded. The registry is confluent-kafka's in-process mock (``mock://``)."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, message_factory

from kafka_batch_provider.decoding.protobuf_decoder import ProtobufDecoder, file_of
from kafka_batch_provider.decoding.protobuf_types import message_columns, value_message
from kafka_batch_provider.dev.schema_registry.formats import parse_schema
from kafka_batch_provider.errors import ConfigError, RegistryRefusedError, SchemaError

ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Line { string sku = 1; int32 qty = 2; }
enum Status { NEW = 0; PAID = 1; }
message Order {
  int64 id = 1;
  string item = 2;
  google.protobuf.Timestamp placed = 3;
  repeated Line lines = 4;
  map<string, int64> counts = 5;
  oneof payment { string card = 6; string cash = 7; }
  Status status = 8;
  optional string coupon = 9;
  uint64 big = 10;
  uint32 small = 11;
  sint32 delta = 12;
  bytes raw = 13;
  double amount = 14;
  float ratio = 15;
  bool paid = 16;
  google.protobuf.StringValue note = 17;
  repeated string tags = 18;
  Line main = 19;
}
"""
#: Version 2: a new field (a new column); field 2 renamed (matched by number, the reader's name wins).
ORDER_V2 = ORDER.replace("string item = 2;", "string title = 2;").replace(
    "Line main = 19;", "Line main = 19;\n  string channel = 20;"
)


def file_set(text: str) -> bytes:
    return descriptor_pb2.FileDescriptorSet(file=[parse_schema("PROTOBUF", text).model]).SerializeToString()


def message_class(text: str, name: str = "shop.Order"):
    file = file_of(file_set(text))
    return message_factory.GetMessageClass(file.pool.FindMessageTypeByName(name))


@pytest.fixture()
def registry():
    return SchemaRegistryClient.new_client({"url": "mock://"})


def serialize(registry, text: str, topic: str, **fields) -> bytes:
    cls = message_class(text)
    serializer = ProtobufSerializer(cls, registry, {"use.deprecated.format": False})
    return serializer(cls(**fields), SerializationContext(topic, MessageField.VALUE))


def decoder(registry, text: str) -> ProtobufDecoder:
    def writer_files(schema_id: int) -> bytes:
        found = registry.get_schema(schema_id)
        if found.schema_type != "PROTOBUF":
            raise SchemaError(f"schema id {schema_id} is a {found.schema_type} schema, not Protobuf")
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(found.schema_str))
        return descriptor_pb2.FileDescriptorSet(file=[proto]).SerializeToString()

    return ProtobufDecoder(file_set(text), writer_files)


def test_every_row_of_the_mapping(registry):
    value = serialize(
        registry,
        ORDER,
        "t-every",
        id=7,
        item="pen",
        placed={"seconds": 1_790_000_000, "nanos": 123_456_000},
        lines=[{"sku": "a", "qty": 2}],
        counts={"x": 1},
        cash="yes",
        status="PAID",
        big=2**64 - 1,
        small=2**32 - 1,
        delta=-5,
        raw=b"\x00\x01",
        amount=2.5,
        ratio=0.5,
        paid=True,
        note={"value": "gift"},
        tags=["t1", "t2"],
    )
    found = decoder(registry, ORDER).decode(pa.array([value], pa.binary()))
    assert found.problems == {}, f"expected no problems, found {found.problems}"
    row = found.columns.to_pylist()[0]
    expected = {
        "id": 7,
        "item": "pen",
        "placed": dt.datetime(2026, 9, 21, 14, 13, 20, 123456, tzinfo=dt.timezone.utc),
        "lines": [{"sku": "a", "qty": 2}],
        "counts": [("x", 1)],
        "card": None,  # the oneof member not set
        "cash": "yes",
        "status": "PAID",
        "coupon": None,  # optional, unset
        "big": Decimal(2**64 - 1),
        "small": 2**32 - 1,
        "delta": -5,
        "raw": b"\x00\x01",
        "amount": 2.5,
        "ratio": 0.5,
        "paid": True,
        "note": "gift",
        "tags": ["t1", "t2"],
        "main": None,  # a message field not set
    }
    for name, want in expected.items():
        assert row[name] == want, f"column {name}: expected {want!r}, found {row[name]!r}"
    types = {f.name: str(f.type) for f in found.columns.schema}
    assert types["big"] == "decimal128(20, 0)" and types["small"] == "int64", types
    assert types["placed"] == "timestamp[us, tz=UTC]" and types["note"] == "string", types


def test_unset_scalars_read_as_their_defaults_and_a_new_version_adds_a_column(registry):
    old = serialize(registry, ORDER, "t-evolve", id=1, item="old")
    new = serialize(registry, ORDER_V2, "t-evolve", id=2, title="new", channel="app")
    found = decoder(registry, ORDER_V2).decode(pa.array([old, new], pa.binary()))
    assert found.problems == {}, found.problems
    assert found.schema_ids[0] != found.schema_ids[1], "two versions give two ids"
    rows = found.columns.select(["id", "title", "channel", "paid", "status"]).to_pylist()
    expected = [
        {"id": 1, "title": "old", "channel": "", "paid": False, "status": "NEW"},  # field 2 by number
        {"id": 2, "title": "new", "channel": "app", "paid": False, "status": "NEW"},
    ]
    assert rows == expected, f"expected {expected}, found {rows}"


def test_values_that_cannot_be_decoded_are_reported_by_row(registry):
    good = serialize(registry, ORDER, "t-bad", id=1)
    schema_id = int.from_bytes(good[1:5], "big")
    header = good[:5]
    assert good[5:7] == b"\x02\x02", f"expected the index path [1] (shop.Order), found {good[5:7]!r}"
    values = [
        good,
        header + b"\x02\x0a" + good[6:],  # message index [5]: the file has 2 top-level messages
        header + b"\x02\x00" + good[6:],  # message index [0]: shop.Line, not the value's shop.Order
        header + good[5:7] + b"\x12\x05ab",  # shop.Order's index, then a string field that runs past the end
        None,
    ]
    found = decoder(registry, ORDER).decode(pa.array(values, pa.binary()))
    assert sorted(found.problems) == [1, 2, 3], f"expected rows 1-3 blamed, found {found.problems}"
    assert "message index [5] is out of range" in found.problems[1], found.problems[1]
    assert "the value is a shop.Line, not the reader schema's shop.Order" in found.problems[2], found.problems[2]
    assert f"schema id {schema_id}: DecodeError" in found.problems[3], found.problems[3]
    assert found.columns.column("id").to_pylist() == [1, None, None, None, None]


def test_the_value_message_is_the_one_no_other_message_uses():
    file = file_of(file_set(ORDER))
    assert value_message(file).full_name == "shop.Order"
    assert message_columns(value_message(file)).names[:3] == ["id", "item", "placed"]


def test_a_message_that_contains_itself_is_refused_in_one_line():
    tree = 'syntax = "proto3"; message Node { string name = 1; repeated Node children = 2; }'
    with pytest.raises(ConfigError, match="Protobuf message Node contains itself"):
        message_columns(value_message(file_of(file_set(tree))))


@pytest.mark.parametrize(
    "refusal", [ConfigError("schema registry at http://r: the TLS handshake failed"), RegistryRefusedError("HTTP 401")]
)
def test_a_registry_that_cannot_be_asked_fails_the_decoding_and_never_blames_the_records(registry, refusal):
    value = serialize(registry, ORDER, "t-refused", id=1)

    def refused(schema_id: int) -> bytes:
        raise refusal

    with pytest.raises(type(refusal)):
        ProtobufDecoder(file_set(ORDER), refused).decode(pa.array([value], pa.binary()))
