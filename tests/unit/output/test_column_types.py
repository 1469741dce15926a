"""Which typed columns each table format can hold, refused before anything is read (pure)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.delta import DeltaSink
from kafka_batch_provider.output.tables import TableFiles, leaf_types

NESTED = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("lines", pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("at", pa.time64("us"))]))),
        pa.field("tags", pa.map_(pa.string(), pa.decimal256(40, 2))),
    ]
)


def test_leaf_types_name_nested_columns_as_the_column_check_does():
    found = [(path, str(kind)) for path, kind in leaf_types(NESTED)]
    assert found == [
        ("id", "int64"),
        ("lines.element.sku", "string"),
        ("lines.element.at", "time64[us]"),
        ("tags.key", "string"),
        ("tags.value", "decimal256(40, 2)"),
    ], found


@pytest.mark.parametrize(
    "sink, schema, expected",
    [
        (DeltaSink, NESTED, "column tags.value would be decimal256(40, 2), but table decimals have at most 38"),
        (TableFiles, NESTED, "column tags.value would be decimal256(40, 2), but table decimals have at most 38"),
        (DeltaSink, NESTED.remove(2), "column lines.element.at would be time64[us], which Delta tables cannot hold"),
        (DeltaSink, pa.schema([pa.field("nothing", pa.null())]), "column nothing would be null"),
    ],
)
def test_a_column_the_table_format_cannot_hold_is_refused_in_one_line(sink, schema, expected):
    with pytest.raises(ConfigError) as caught:
        sink.check_columns(SimpleNamespace(name="t"), schema)
    assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_what_the_formats_hold_passes():
    TableFiles.check_columns(SimpleNamespace(name="t"), NESTED.remove(2))  # Iceberg has time
    DeltaSink.check_columns(SimpleNamespace(name="t"), pa.schema([pa.field("d", pa.decimal128(38, 4))]))
