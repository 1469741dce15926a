"""Values decoded in blocks by the compiled reader give exactly the columns of decoding them one
by one, and a block with a corrupt value in it is never used (decoding/avro_blocks.py).

The values are written by confluent-kafka's own AvroSerializer (the in-process mock registry).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from decimal import Decimal

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.decoding.avro_blocks import (
    MIN_VALUES,
    AvroBlocks,
    encoded_sizes,
    native_reader,
    record_sizes,
    unsupported,
)
from kafka_batch_provider.decoding.avro_decoder import AvroDecoder

UTC = dt.timezone.utc
POINT = {
    "type": "record",
    "name": "Point",
    "fields": [{"name": "x", "type": "int"}, {"name": "label", "type": ["null", "string"]}],
}
#: Every part of the mapping the blocks take (avro_types.py), nested and nullable.
EVERY = {
    "type": "record",
    "name": "Reading",
    "namespace": "lab",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "qty", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "nothing", "type": "null"},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "maybe_colour", "type": ["null", "Colour"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "points", "type": {"type": "array", "items": POINT}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "origin", "type": ["null", "Point"]},
        {"name": "note", "type": ["string", "null"]},
        {"name": "maybe_tags", "type": ["null", {"type": "array", "items": "long"}]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "time_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "time_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 2}},
        {
            "name": "weight",
            "type": {"type": "fixed", "name": "W", "size": 8, "logicalType": "decimal", "precision": 12, "scale": 3},
        },
    ],
}


def some_reading(rng: random.Random, n: int) -> dict:
    """A reading whose numbers span every varint size and sign, with empty and null parts."""
    big = rng.choice([0, 1, -1, 63, 64, -65, 8191, 2**31 - 1, -(2**31), 2**62, -(2**63)])
    return {
        "id": big if n % 3 else n,
        "name": rng.choice(["", "ä", "x" * 200, f"sensor-{n}"]),
        "amount": rng.uniform(-1e6, 1e6),
        "ok": n % 2 == 0,
        "qty": rng.choice([0, -1, 2**31 - 1, -(2**31), n]),
        "ratio": 0.5,
        "raw": bytes(rng.randrange(256) for _ in range(rng.randrange(0, 150))),
        "nothing": None,
        "hash": b"abcd",
        "colour": rng.choice(["RED", "GREEN", "BLUE"]),
        "maybe_colour": rng.choice([None, "BLUE"]),
        "tags": [f"t{i}" for i in range(rng.randrange(0, 70))],
        "points": [{"x": i, "label": rng.choice([None, "p"])} for i in range(rng.randrange(0, 3))],
        "counts": {f"k{i}": rng.choice([None, i * 1000]) for i in range(rng.randrange(0, 3))},
        "origin": rng.choice([None, {"x": -5, "label": "o"}]),
        "note": rng.choice([None, "n"]),
        "maybe_tags": rng.choice([None, [], [1, 2**40]]),
        "day": dt.date(2026, 11, 24) - dt.timedelta(days=rng.randrange(0, 30000)),
        "at_ms": dt.datetime(2026, 11, 24, 10, 0, 0, 123000, tzinfo=UTC),
        "at_us": rng.choice([None, dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]),
        "local_ms": dt.datetime(2026, 11, 24, 10, 0, 0, 5000),
        "time_ms": dt.time(10, 0, 0, 5000),
        "time_us": dt.time(23, 59, 59, 999999),
        # signs and sizes, but no negative power of two (fastavro spends a byte more on those)
        "price": Decimal(rng.choice(["0", "1.00", "-1.01", "12.34", "-99999999999999999999.99", "127.99", "-127.99"])),
        "weight": Decimal("-1.234"),
    }


@pytest.fixture()
def registry():
    return SchemaRegistryClient.new_client({"url": "mock://"})


def encoded(registry, schema: dict, records: list[dict]) -> list[bytes]:
    serializer = AvroSerializer(registry, json.dumps(schema), conf={"auto.register.schemas": True})
    context = SerializationContext("readings", MessageField.VALUE)
    return [serializer(record, context) for record in records]


def decoder(registry, schema: dict, blocks: bool = True) -> AvroDecoder:
    def writer_schema(schema_id: int) -> tuple[str, str, list[str]]:
        schema = registry.get_schema(schema_id)
        return "AVRO", schema.schema_str, []

    found = AvroDecoder(json.dumps(schema), writer_schema)
    if not blocks:
        found.blocks = None
    return found


def test_the_pinned_native_reader_is_installed():
    assert native_reader() is not None, (
        "polars-avro's native reader (constraints.txt) is missing: every value would go one by one"
    )


def test_blocks_give_exactly_the_columns_of_one_by_one_for_every_type(registry):
    rng = random.Random(7)
    values = pa.array(encoded(registry, EVERY, [some_reading(rng, n) for n in range(300)]), pa.binary())
    fast, slow = decoder(registry, EVERY), decoder(registry, EVERY, blocks=False)
    in_blocks, one_by_one = fast.decode(values), slow.decode(values)
    assert fast.counts == {"blocks": 300, "one_by_one": 0}, f"expected all 300 values in blocks, found {fast.counts}"
    assert in_blocks.problems == {} and one_by_one.problems == {}, (in_blocks.problems, one_by_one.problems)
    assert in_blocks.columns.schema == one_by_one.columns.schema, (
        f"the schemas differ:\n{in_blocks.columns.schema}\n---\n{one_by_one.columns.schema}"
    )
    for name in in_blocks.columns.schema.names:
        got, want = in_blocks.columns.column(name), one_by_one.columns.column(name)
        if not got.equals(want):
            row = next(i for i in range(len(got)) if got[i] != want[i])
            pytest.fail(f"column {name}, row {row}: blocks gave {got[row]!r}, one by one {want[row]!r}")


def test_sizes_are_the_payloads_sizes(registry):
    rng = random.Random(11)
    payloads = [value[5:] for value in encoded(registry, EVERY, [some_reading(rng, n) for n in range(200)])]
    blocks = AvroBlocks(fastavro.parse_schema(EVERY, _write_hint=False), named_types(EVERY))
    table = blocks.native(pa.array([b"\x00\x00\x00\x00\x01" + p for p in payloads], pa.binary()))
    sizes = record_sizes(table, fastavro.parse_schema(EVERY, _write_hint=False), named_types(EVERY))
    expected = np.array([len(p) for p in payloads])
    wrong = np.flatnonzero(sizes != expected)
    assert not len(wrong), f"row {wrong[0]}: expected {expected[wrong[0]]} bytes, computed {sizes[wrong[0]]}"


def named_types(schema: dict) -> dict:
    named: dict = {}
    fastavro.parse_schema(schema, named, _write_hint=False)
    return named


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 1), (63, 1), (64, 2), (-64, 1), (-65, 2), (2**55, 9), (2**62, 10), (2**63 - 1, 10), (-(2**63), 10)],
)
def test_varint_sizes_follow_zigzag(value, expected):
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, "long", value)
    found = encoded_sizes(pa.array([value], pa.int64()), "long", {})
    assert len(buffer.getvalue()) == expected and found.tolist() == [expected], f"{value}: {found.tolist()} bytes"


CORRUPTIONS = {
    # a string's length one byte longer: every value after it would read shifted, and the reader says nothing
    "string length bumped": lambda v: v[:6] + bytes([v[6] + 4]) + v[7:],
    "trailing bytes": lambda v: v + b"\x05\x06",
    "truncated": lambda v: v[:-3],
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_block_with_a_corrupt_value_is_decoded_one_by_one_and_blames_only_it(registry, corruption):
    schema = {"type": "record", "name": "S", "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}]}
    # the first field a one-byte varint, so the corruption lands on the string's length
    values = encoded(registry, schema, [{"n": i % 50, "s": f"value {i}"} for i in range(40)])
    values[17] = CORRUPTIONS[corruption](values[17])
    fast = decoder(registry, schema)
    found = fast.decode(pa.array(values, pa.binary()))
    assert fast.counts == {"blocks": 0, "one_by_one": 40}, f"the block should have been refused, found {fast.counts}"
    rows = found.columns.to_pylist()
    for i in range(40):
        if i != 17:
            assert rows[i] == {"n": i % 50, "s": f"value {i}"}, f"row {i}: {rows[i]}"
    if corruption == "trailing bytes":  # fastavro reads the value and ignores what follows, as confluent-kafka does
        assert found.problems == {}, found.problems
    else:
        assert list(found.problems) == [17], f"expected only row 17 blamed, found {found.problems}"


def test_values_of_an_older_schema_go_one_by_one_and_the_reader_schemas_in_blocks_in_order(registry):
    v1 = {"type": "record", "name": "S", "fields": [{"name": "n", "type": "long"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "extra", "type": "string", "default": "old"}]}
    old = encoded(registry, v1, [{"n": i} for i in range(0, 40, 2)])
    new = encoded(registry, v2, [{"n": i, "extra": "new"} for i in range(1, 40, 2)])
    values = [value for pair in zip(old, new) for value in pair] + [None]
    fast = decoder(registry, v2)
    found = fast.decode(pa.array(values, pa.binary()))
    assert fast.counts == {"blocks": 20, "one_by_one": 20}, found
    rows = found.columns.to_pylist()
    expected = [{"n": i, "extra": "old" if i % 2 == 0 else "new"} for i in range(40)] + [{"n": None, "extra": None}]
    assert rows == expected, f"expected rows in their order, found {rows[:4]}..."


def test_few_values_go_one_by_one(registry):
    schema = {"type": "record", "name": "S", "fields": [{"name": "n", "type": "long"}]}
    fast = decoder(registry, schema)
    fast.decode(pa.array(encoded(registry, schema, [{"n": i} for i in range(MIN_VALUES - 1)]), pa.binary()))
    assert fast.counts == {"blocks": 0, "one_by_one": MIN_VALUES - 1}, fast.counts


@pytest.mark.parametrize(
    ("field_type", "reason"),
    [
        (["null", "long", "string"], "a union that is not [null, T]"),
        ({"type": "string", "logicalType": "uuid"}, "the logical type uuid"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, "a decimal of more than 38 digits"),
    ],
)
def test_schemas_with_parts_the_blocks_do_not_cover_are_named(registry, field_type, reason):
    schema = {"type": "record", "name": "S", "fields": [{"name": "f", "type": field_type}]}
    assert unsupported(fastavro.parse_schema(schema, _write_hint=False), {}) == reason
    assert decoder(registry, schema).blocks is None


@pytest.mark.timeout(120)
def test_a_value_with_one_trailing_byte_does_not_hang_the_block(registry):
    # asked for a second batch, the compiled reader spun forever on what is left after the rows
    schema = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}
    values = encoded(registry, schema, [{"n": i} for i in range(20)])
    values[3] += b"\x02"
    fast = decoder(registry, schema)
    found = fast.decode(pa.array(values, pa.binary()))
    assert fast.counts == {"blocks": 0, "one_by_one": 20}, fast.counts
    assert found.columns.column("n").to_pylist() == list(range(20)), found.columns.column("n").to_pylist()


#: a logical type, and a value of its plain type that the one-by-one decoding reads differently or refuses
OUT_OF_RANGE = {
    "decimal wider than its precision": (
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
        "bytes",
        (123456).to_bytes(3, "big", signed=True),
    ),
    "negative decimal wider than its precision": (
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
        "bytes",
        (-10000).to_bytes(2, "big", signed=True),
    ),
    "timestamp-millis past year 9999": ({"type": "long", "logicalType": "timestamp-millis"}, "long", 2**62),
    "date past year 9999": ({"type": "int", "logicalType": "date"}, "int", 2**30),
    "time-millis below midnight": ({"type": "int", "logicalType": "time-millis"}, "int", -5),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_a_value_the_one_by_one_decoding_reads_otherwise_keeps_the_block_from_being_used(registry, case):
    logical, plain, bad = OUT_OF_RANGE[case]
    schema = {"type": "record", "name": "L", "fields": [{"name": "f", "type": logical}]}
    plain_schema = {"type": "record", "name": "L", "fields": [{"name": "f", "type": plain}]}
    good = encoded(registry, schema, [{"f": Decimal("1.5") if plain == "bytes" else 1}] * 20)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(plain_schema), {"f": bad})
    values = pa.array([*good, good[0][:5] + buffer.getvalue()], pa.binary())
    fast, slow = decoder(registry, schema), decoder(registry, schema, blocks=False)
    in_blocks, one_by_one = fast.decode(values), slow.decode(values)
    assert fast.counts["blocks"] == 0, f"{case}: the block was used ({fast.counts})"
    assert in_blocks.problems == one_by_one.problems and in_blocks.columns.equals(one_by_one.columns), (
        f"{case}: blocks gave {in_blocks.problems} / {in_blocks.columns.column('f')[20]}, "
        f"one by one {one_by_one.problems} / {one_by_one.columns.column('f')[20]}"
    )
