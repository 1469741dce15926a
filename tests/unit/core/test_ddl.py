"""The --value-schema DDL check, so a malformed schema is refused before a batch is planned."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.ddl import check_ddl_schema
from kafka_batch_provider.errors import ConfigError


@pytest.mark.parametrize(
    "schema",
    [
        "id long",
        "id bigint,name string",
        "id LONG NOT NULL COMMENT 'the id', tags array<string>",
        "a array<struct<b: int, c map<string, double>>>",
        "struct<id: long, name: string>",
        "`odd name` decimal(10, 2), d date, t timestamp, n timestamp_ntz",
        "s varchar(10), c char(2), i interval day to second, v variant",
    ],
)
def test_spark_ddl_schemas_are_accepted(schema):
    assert check_ddl_schema(schema) == schema


@pytest.mark.parametrize(
    "schema, expected",
    [
        ("id lon g,,", "expected a type"),
        ("id", "expected a type at 'the end'"),
        ("id long,", "expected a column name"),
        ("id long name string", "expected ',' or the end of the schema"),
        ("a array<int", "expected '>'"),
        ("a decimal(x)", "expected a number"),
        ('{"type": "struct"}', "unexpected"),
    ],
)
def test_malformed_schemas_are_one_line(schema, expected):
    with pytest.raises(ConfigError) as refused:
        check_ddl_schema(schema)
    message = str(refused.value)
    assert expected in message and "\n" not in message, f"expected {expected!r} in one line, got {message!r}"
