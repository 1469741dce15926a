"""Which registry schema a batch is read with (pure): subjects, pinned versions, plans and runs agreeing."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.reader_schema import (
    PLAN_KEY,
    ReaderSchema,
    check_plan_decodes_as,
    check_schema_choice,
    value_subject,
)
from kafka_batch_provider.errors import ConfigError

PINNED = ReaderSchema("avro", "orders-value", 3, 17)


def test_the_value_subject_is_the_topics_unless_named():
    assert value_subject(["orders"], None) == "orders-value"
    assert value_subject(["orders", "orders"], None) == "orders-value"
    assert value_subject(["a", "b"], "shared-value") == "shared-value"
    with pytest.raises(ConfigError, match="2 topics have no one value subject: name the subject .*value_subject"):
        value_subject(["a", "b"], None)


@pytest.mark.parametrize(
    "value_format, subject, version, expected",
    [
        ("bytes", "orders-value", None, "value_subject is only used with a schema registry format"),
        ("json", None, 2, "value_schema_version is only used with a schema registry format"),
        ("avro", None, 0, "value_schema_version must be a registered version number (1, 2, ...), got 0"),
        ("avro", None, True, "must be a registered version number"),
    ],
)
def test_a_schema_choice_that_cannot_apply_is_refused_in_one_line(value_format, subject, version, expected):
    with pytest.raises(ConfigError) as caught:
        check_schema_choice(value_format, subject, version)
    assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_a_plan_and_its_run_must_decode_alike():
    extra = {PLAN_KEY: PINNED.to_dict()}
    assert check_plan_decodes_as("b-1", extra, "avro") == PINNED
    assert check_plan_decodes_as("b-1", {}, "bytes") is None
    with pytest.raises(ConfigError, match="batch b-1 was planned avro with orders-value version 3 .schema id 17."):
        check_plan_decodes_as("b-1", extra, "string")
    with pytest.raises(ConfigError, match="batch b-1 was planned without a schema registry format"):
        check_plan_decodes_as("b-1", {}, "avro")


def test_a_reader_schema_survives_the_plan_file():
    assert ReaderSchema.from_dict(PINNED.to_dict()) == PINNED
    assert PINNED.to_dict() == {"format": "avro", "subject": "orders-value", "version": 3, "id": 17}


@pytest.mark.parametrize(
    "damaged", [{"format": "avro"}, {**PINNED.to_dict(), "id": "x"}, "avro", {**PINNED.to_dict(), "format": "xml"}]
)
def test_a_damaged_reader_schema_in_a_plan_is_one_line_naming_the_way_out(damaged):
    with pytest.raises(ConfigError) as caught:
        check_plan_decodes_as("b-1", {PLAN_KEY: damaged}, "avro")
    assert "the plan's reader schema is damaged" in str(caught.value) and "kafka-batch discard" in str(caught.value)


def test_a_value_field_named_like_a_column_it_stands_beside_is_refused_in_any_letter_case():
    import json

    from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA
    from kafka_batch_provider.spark.value_decoding import ValueDecoding

    def decoding(*names: str, keep: bool = False) -> ValueDecoding:
        fields = [{"name": n, "type": "long"} for n in names]
        return ValueDecoding(json.dumps({"type": "record", "name": "R", "fields": fields}), {}, keep_raw_value=keep)

    assert decoding("id", "value").output_schema(KAFKA_ARROW_SCHEMA).names[-2:] == ["id", "value"]
    cases = [
        (decoding("Topic"), (), "field 'Topic' has the name of the column 'topic'"),
        (decoding("value", keep=True), (), "field 'value' has the name of the column 'value'"),
        (decoding("date"), ("_receipt", "date"), "field 'date' has the name of the column 'date'"),
        (decoding("Id", "id"), (), "field 'id' has the name of the column 'Id'"),
    ]
    for found, reserved, expected in cases:
        with pytest.raises(ConfigError) as caught:
            found.output_schema(KAFKA_ARROW_SCHEMA, reserved)
        assert expected in str(caught.value), str(caught.value)
