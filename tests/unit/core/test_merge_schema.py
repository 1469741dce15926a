"""The merged tables' schema rule (core/merge_schema.py): wide numbers, fields added, never dropped."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_batch_provider.core.merge_schema import conform, union_schema, wide_type, widened
from kafka_batch_provider.errors import SchemaError

NESTED = pa.struct(
    [
        ("n", pa.int16()),
        ("tags", pa.list_(pa.struct([("w", pa.float32())]))),
        ("m", pa.map_(pa.string(), pa.int32())),
    ]
)


def test_numbers_are_widened_at_every_depth_and_nothing_else_changes():
    found = wide_type(NESTED)
    expected = pa.struct(
        [
            ("n", pa.int64()),
            ("tags", pa.list_(pa.struct([("w", pa.float64())]))),
            ("m", pa.map_(pa.string(), pa.int64())),
        ]
    )
    assert found == expected, f"expected {expected}, found {found}"
    table = widened(pa.table({"s": pa.array([{"n": 1, "tags": [{"w": 0.5}], "m": [("a", 2)]}], NESTED)}))
    assert table.column("s").to_pylist() == [{"n": 1, "tags": [{"w": 0.5}], "m": [("a", 2)]}], table


def test_the_union_adds_nested_fields_in_place_and_keeps_the_tables_types():
    table = pa.schema([("id", pa.int64()), ("a", pa.list_(pa.struct([("x", pa.string())])))])
    batch = pa.schema([("a", pa.list_(pa.struct([("y", pa.int64()), ("x", pa.large_string())]))), ("z", pa.bool_())])
    found = union_schema(table, batch)
    expected = pa.schema(
        [("id", pa.int64()), ("a", pa.list_(pa.struct([("x", pa.string()), ("y", pa.int64())]))), ("z", pa.bool_())]
    )
    assert found == expected, f"expected {expected}, found {found}"


def test_conform_casts_by_name_and_fills_a_missing_field_with_null():
    target = pa.schema([("s", pa.struct([("b", pa.string()), ("a", pa.int32())]))])
    source = pa.table({"s": pa.array([{"a": 7}], pa.struct([("a", pa.int64())]))})
    found = conform(source, target, "t").column("s").to_pylist()
    assert found == [{"b": None, "a": 7}], found


@pytest.mark.parametrize(
    "source, expected",
    [
        (pa.table({"s": pa.array([{"a": 1, "new": "x"}])}), "the table has no column s.new, which the batch has"),
        (pa.table({"n": pa.array([2**31 + 5], pa.int64())}), "column n is int32, the batch has int64 values"),
        (pa.table({"n": pa.array([10.5])}), "column n is int32, the batch has double values that do not fit"),
    ],
)
def test_conform_refuses_in_one_line_a_field_it_would_drop_or_a_value_that_does_not_fit(source, expected):
    target = pa.schema([("s", pa.struct([("a", pa.int64())])), ("n", pa.int32())])
    with pytest.raises(SchemaError) as refused:
        conform(source, target, "Delta table t")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("Delta table t: ") and expected in message, message
