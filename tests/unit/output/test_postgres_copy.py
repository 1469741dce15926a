"""Arrow columns as PostgreSQL COPY text (output/postgres_copy.py): what a server cannot hold is
refused in one line naming the column; bytea's hex form from any slice."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.postgres import PostgresSink
from kafka_batch_provider.output.postgres_copy import bytea_hex, csv_text

pytestmark = pytest.mark.check


def test_bytea_hex_of_any_slice_keeps_nulls_and_empty_values():
    column = pa.array([b"\x00\xff", None, b"", b"abc"])
    assert bytea_hex(column).to_pylist() == ["\\x00ff", None, "\\x", "\\x616263"]
    assert bytea_hex(column.slice(1)).to_pylist() == [None, "\\x", "\\x616263"]


@pytest.mark.parametrize(
    "column, expected",
    [
        (pa.array(["a\x00b"]), "NUL character"),
        (pa.array([{"x": "a\x00"}]), "NUL character"),
        (pa.array([{"x": float("nan")}]), "NaN or an infinite number"),
        (pa.array([[{"x": float("inf")}]]), "NaN or an infinite number"),
    ],
)
def test_values_postgresql_cannot_hold_are_refused_naming_the_column(column, expected):
    with pytest.raises(ConfigError, match=expected) as refused:
        csv_text(pa.table({"payload": column}))
    assert "column payload" in str(refused.value) and "\n" not in str(refused.value)


def test_a_column_name_longer_than_postgresql_names_is_refused_before_anything_is_read():
    sink = PostgresSink("postgresql://u:secret@127.0.0.1:5432/db", "public.orders")
    sink.check_columns(pa.schema([("x" * 63, pa.int32())]))
    with pytest.raises(ConfigError, match="PostgreSQL names hold at most 63") as refused:
        sink.check_columns(pa.schema([("é" * 32, pa.int32())]))  # 64 bytes
    assert "secret" not in str(refused.value)
