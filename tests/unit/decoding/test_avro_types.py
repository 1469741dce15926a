"""Every row of the Avro -> Arrow mapping (docs/formats.md, "Typed values from a schema registry")."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_batch_provider.decoding.avro_types import arrow_schema
from kafka_batch_provider.errors import ConfigError


def record(*fields: dict, name: str = "Order") -> dict:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}


ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}

ROWS = [
    ("boolean", pa.bool_()),
    ("int", pa.int32()),
    ("long", pa.int64()),
    ("float", pa.float32()),
    ("double", pa.float64()),
    ("string", pa.string()),
    ("bytes", pa.binary()),
    ({"type": "fixed", "name": "Hash", "size": 16}, pa.binary(16)),
    ({"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}, pa.string()),
    ({"type": "array", "items": "long"}, pa.list_(pa.field("element", pa.int64()))),
    (
        {"type": "map", "values": ["null", "double"]},
        pa.map_(pa.string(), pa.field("value", pa.float64(), nullable=True)),
    ),
    (ADDRESS, pa.struct([pa.field("city", pa.string())])),
    (["null", "string"], pa.string()),
    (["null", "long", "string"], pa.struct([pa.field("long", pa.int64()), pa.field("string", pa.string())])),
    (["long", "boolean"], pa.struct([pa.field("long", pa.int64()), pa.field("boolean", pa.bool_())])),
    ({"type": "int", "logicalType": "date"}, pa.date32()),
    ({"type": "int", "logicalType": "time-millis"}, pa.time64("us")),
    ({"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
    ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("us", tz="UTC")),
    ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", tz="UTC")),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("us")),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us")),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, pa.decimal128(10, 2)),
    (
        {"type": "fixed", "name": "Big", "size": 32, "logicalType": "decimal", "precision": 60, "scale": 5},
        pa.decimal256(60, 5),
    ),
    ({"type": "string", "logicalType": "uuid"}, pa.string()),
    ({"type": "fixed", "name": "Span", "size": 12, "logicalType": "duration"}, pa.binary(12)),
    ({"type": "long", "logicalType": "no-such-logical-type"}, pa.int64()),  # readers fall back to the base type
]


@pytest.mark.parametrize("avro, expected", ROWS, ids=[repr(a)[:40] for a, _ in ROWS])
def test_each_avro_type_becomes_its_column_type(avro, expected):
    found = arrow_schema(record({"name": "f", "type": avro})).field("f")
    assert found.type == expected, f"expected {expected} for {avro}, found {found.type}"
    assert found.nullable, "columns are always nullable (tombstones, columns added later)"


def test_a_record_branch_of_a_union_and_references_by_name():
    schema = record(
        {"name": "home", "type": ADDRESS},
        {"name": "work", "type": ["null", "shop.Address"]},
        {"name": "either", "type": ["null", "long", "Address"]},
    )
    found = arrow_schema(schema)
    address = pa.struct([pa.field("city", pa.string())])
    assert found.field("home").type == address
    assert found.field("work").type == address
    assert found.field("either").type == pa.struct([pa.field("long", pa.int64()), pa.field("Address", address)])


def test_nested_fields_elements_and_map_values_are_nullable_whatever_the_avro_type():
    # A later version may make any of them optional: a schema that said "never null" would refuse it.
    schema = record(
        {
            "name": "inner",
            "type": record({"name": "a", "type": "long"}, {"name": "b", "type": ["null", "long"]}, name="Inner"),
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
    )
    found = arrow_schema(schema)
    inner = found.field("inner").type
    assert [(f.name, f.nullable) for f in inner] == [("a", True), ("b", True)], f"found {inner}"
    assert found.field("tags").type.value_field.nullable, f"found {found.field('tags').type}"
    assert found.field("counts").type.item_field.nullable, f"found {found.field('counts').type}"


@pytest.mark.parametrize(
    "schema, message",
    [
        ("string", "must be an Avro record"),
        (record({"name": "next", "type": ["null", "Node"]}, name="Node"), "refers to itself"),
        (record({"name": "x", "type": "Missing"}), "invalid Avro schema .*Missing"),
        (record({"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 0}}), "precision 0"),
    ],
)
def test_schemas_without_columns_are_refused_in_one_line(schema, message):
    with pytest.raises(ConfigError, match=message) as caught:
        arrow_schema(schema)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "union, message",
    [
        (["null", "int", "long"], "union of int and long"),
        (["float", "double"], "union of float and double"),
        (["string", {"type": "enum", "name": "E", "symbols": ["A"]}], "union of string and enum"),
        (["bytes", {"type": "fixed", "name": "F", "size": 2}], "union of bytes and fixed"),
        (
            [{"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "timestamp-micros"}],
            "union of timestamp-millis and timestamp-micros",
        ),
    ],
)
def test_a_union_whose_branches_read_alike_is_refused_in_one_line(union, message):
    with pytest.raises(ConfigError, match=message) as caught:
        arrow_schema(record({"name": "u", "type": union}))
    assert "\n" not in str(caught.value)


def test_names_resolve_in_their_namespace_and_like_named_branches_get_full_names():
    schema = {
        "type": "record",
        "name": "R",
        "namespace": "a",
        "fields": [
            {"name": "p1", "type": {"type": "record", "name": "Addr", "fields": [{"name": "x", "type": "int"}]}},
            {
                "name": "p3",
                "type": {
                    "type": "record",
                    "name": "Addr",
                    "namespace": "b",
                    "fields": [{"name": "y", "type": "string"}],
                },
            },
            {"name": "p2", "type": "Addr"},  # a.Addr: the enclosing namespace's
            {"name": "u", "type": ["null", "a.Addr", "b.Addr"]},
        ],
    }
    found = arrow_schema(schema)
    a_addr = pa.struct([pa.field("x", pa.int32())])
    b_addr = pa.struct([pa.field("y", pa.string())])
    assert found.field("p2").type == a_addr, f"expected a.Addr for p2, found {found.field('p2').type}"
    expected = pa.struct([pa.field("a_Addr", a_addr), pa.field("b_Addr", b_addr)])
    assert found.field("u").type == expected, f"expected {expected}, found {found.field('u').type}"


@pytest.mark.parametrize("reference", ["com.x.Node", "Node"])
def test_a_recursive_schema_is_refused_however_its_name_is_spelled(reference):
    schema = {
        "type": "record",
        "name": "Node",
        "namespace": "com.x",
        "fields": [{"name": "next", "type": ["null", reference]}],
    }
    with pytest.raises(ConfigError, match="refers to itself"):
        arrow_schema(schema)


def test_a_referenced_schema_is_imported_first():
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "common",
        "fields": [{"name": "city", "type": "string"}],
    }
    found = arrow_schema(record({"name": "home", "type": "common.Address"}), [address])
    assert found.field("home").type == pa.struct([pa.field("city", pa.string())])
