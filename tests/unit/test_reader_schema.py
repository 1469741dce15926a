"""Which registry schema a batch is read with (pure): subjects, pinned versions, plans and runs agreeing."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.reader_schema import (
    PLAN_KEY,
    PLAN_KEYS,
    ReaderSchema,
    check_plan_decodes_as,
    check_plan_formats,
    check_schema_choice,
    planned_formats,
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
    with pytest.raises(ConfigError, match="batch b-1's values were planned avro with orders-value version 3 .schema "):
        check_plan_decodes_as("b-1", extra, "string")
    with pytest.raises(ConfigError, match="batch b-1's values were planned without a schema registry format"):
        check_plan_decodes_as("b-1", {}, "avro")


def test_keys_have_a_reader_schema_of_their_own_beside_the_values():
    key = ReaderSchema("protobuf", "orders-key", 1, 5)
    extra = {PLAN_KEY: PINNED.to_dict(), PLAN_KEYS["key"]: key.to_dict()}
    assert check_plan_formats("b-1", extra, "avro", "protobuf") == (PINNED, key)
    assert planned_formats(extra) == {"value": "avro", "key": "protobuf"}
    assert check_plan_formats("b-1", {PLAN_KEY: PINNED.to_dict()}, "avro") == (PINNED, None)
    with pytest.raises(
        ConfigError, match="batch b-1's keys were planned protobuf with orders-key version 1 .*key_format"
    ):
        check_plan_formats("b-1", extra, "avro", "bytes")
    with pytest.raises(ConfigError, match="batch b-1's keys were planned without a schema registry format"):
        check_plan_formats("b-1", {PLAN_KEY: PINNED.to_dict()}, "avro", "avro")
    assert value_subject(["orders"], None, "key") == "orders-key"
    with pytest.raises(ConfigError, match="2 topics have no one key subject: .*key_subject"):
        value_subject(["a", "b"], None, "key")
    with pytest.raises(ConfigError, match="key_subject is only used with a schema registry format .key_format"):
        check_schema_choice("string", "orders-key", None, "key")
    with pytest.raises(ConfigError, match="key_schema_version must be a registered version number"):
        check_schema_choice("avro", None, -1, "key")


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


class Registry:
    """The two calls the decoders make of a registry, answered from a dict (the integration tests
    use the embedded registry over HTTP)."""

    def __init__(self, schemas: dict[int, tuple[str, str]]) -> None:
        self.schemas = schemas
        self.asked: list[int] = []

    def writer_schema(self, schema_id: int) -> tuple[str, str, list[str]]:
        from kafka_batch_provider.errors import SchemaError

        self.asked.append(schema_id)
        if schema_id not in self.schemas:
            raise SchemaError(f"schema id {schema_id} not found")
        kind, text = self.schemas[schema_id]
        return kind, text, []


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_an_avro_key_of_any_schema_becomes_the_key_column_and_a_bad_one_is_named_as_the_key():
    import json

    import pyarrow as pa

    from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA
    from kafka_batch_provider.spark.value_decoding import KeyDecoding, ValueDecoding, record_problems

    record = json.dumps({"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]})
    string_key = KeyDecoding("avro", '"string"')
    record_key = KeyDecoding("avro", record)
    assert string_key.column() == pa.field("key", pa.string())
    assert [(f.name, f.type) for f in record_key.column().type] == [("id", pa.int64())]
    schema = ValueDecoding(None, {}, key=record_key).output_schema(KAFKA_ARROW_SCHEMA)
    assert schema.names == list(KAFKA_ARROW_SCHEMA.names), "only keys decoded: value stays, in its place"
    assert schema.field("key").type == record_key.column().type and schema.field("value").type == pa.binary()

    registry = Registry({1: ("AVRO", '"string"'), 2: ("AVRO", record)})
    keys = pa.array([framed(1, b"\x06abc"), None, framed(1, b"\x10"), b"plain", framed(1, b"")], pa.binary())
    found = string_key.decoder(registry).decode(keys)
    assert string_key.key_column(found).to_pylist() == ["abc", None, None, None, None]
    problems, ids = record_problems(None, found)
    assert sorted(problems) == [2, 3, 4] and all(p.startswith("key: ") for p in problems.values()), problems
    assert ids[0] == 1 and ids[1] < 0, ids
    found = record_key.decoder(registry).decode(pa.array([framed(2, b"\x54"), None], pa.binary()))
    assert record_key.key_column(found).to_pylist() == [{"id": 42}, None]
    assert registry.asked == [1, 2], "each writer schema is asked once per decoder"


def test_a_record_whose_value_and_key_both_fail_names_both():
    import json

    import pyarrow as pa

    from kafka_batch_provider.errors import SchemaError
    from kafka_batch_provider.spark.value_decoding import KeyDecoding, ValueDecoding

    value_schema = json.dumps({"type": "record", "name": "V", "fields": [{"name": "n", "type": "long"}]})
    decoding = ValueDecoding(value_schema, {}, key=KeyDecoding("avro", '"long"'))
    registry = Registry({1: ("AVRO", value_schema), 2: ("AVRO", '"long"')})
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([framed(2, b"\x02"), b"x", framed(2, b"\x04")], pa.binary()),
            "value": pa.array([framed(1, b"\x02"), framed(1, b"\x04"), b"y"], pa.binary()),
            "topic": ["t"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array([10, 11, 12], pa.int64()),
        }
    )
    found = decoding.decoder(registry).decode(batch.column("value"))
    keys = decoding.key.decoder(registry).decode(batch.column("key"))
    with pytest.raises(SchemaError, match=r"t\[0\] offset 11: the key cannot be decoded \(1 byte.*1 more record"):
        decoding.decoded(batch, found, keys)
    kept = ValueDecoding(value_schema, {}, on_bad_record="dead-letter", key=KeyDecoding("avro", '"long"'))
    decoded = kept.decoded(batch, found, keys)
    assert decoded.to_pydict()["key"] == [1] and decoded.to_pydict()["n"] == [1], decoded.to_pydict()
