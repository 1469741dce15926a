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


def test_headers_made_json_once_per_distinct_value_equal_each_rows_own_json():
    # (output/postgres_copy.distinct_rows: rows told apart by length-prefixed fields, in compiled code)
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kafka_batch_provider.output.postgres_copy import json_text, json_texts
    from kafka_batch_provider.output.tables import KAFKA_SCHEMA

    header = st.none() | st.fixed_dictionaries(
        {
            "key": st.none() | st.sampled_from(["a", "ab", "", "a\\x00"]),
            "value": st.none() | st.sampled_from([b"", b"b", b"ab", b"\\x00"]),
        }
    )
    rows = st.lists(st.none() | st.lists(header, max_size=3), max_size=12)

    @settings(max_examples=200, deadline=None)
    @given(values=rows)
    def same(values):
        column = pa.array(values, KAFKA_SCHEMA.field("headers").type)
        assert json_text(column).to_pylist() == json_texts(column, "headers").to_pylist(), values

    same()
