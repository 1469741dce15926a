"""Upserts of Kafka Connect JSON keys and values with embedded schemas reduced as Arrow columns
(decoding/connect_json_columns.as_typed_columns, then core/arrow_upserts) equal the record rule's
reduction of the same batches (core/change_events, the reference), batch after batch, into a Delta
table: the same rows, the same types, the same counts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.decoding import connect_json_columns
from tests.integration.helpers import TableOutput
from tests.support.staged_merges import Staged, StagedTopic

pytestmark = pytest.mark.integration

KEY_SCHEMA = {"type": "struct", "name": "k", "optional": False,
              "fields": [{"field": "id", "type": "int32", "optional": False}]}  # fmt: skip
VALUE_SCHEMA = {"type": "struct", "name": "v", "optional": False, "fields": [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "name", "type": "string", "optional": True},
    {"field": "amount", "type": "double", "optional": True},
    {"field": "at", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp"},
    {"field": "raw", "type": "bytes", "optional": True},
]}  # fmt: skip


def record(key: int, value: dict | None) -> Staged:
    payload = None if value is None else {"schema": VALUE_SCHEMA, "payload": {"id": key, **value}}
    return Staged({"schema": KEY_SCHEMA, "payload": {"id": key}}, payload, partition=key % 2)


VALUES = st.none() | st.fixed_dictionaries({
    "name": st.none() | st.text(max_size=5), "amount": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    "at": st.none() | st.integers(0, 2**41), "raw": st.none() | st.sampled_from(["", "AAE=", "/w=="]),
})  # fmt: skip
BATCHES = st.lists(st.lists(st.tuples(st.integers(0, 6), VALUES), min_size=1, max_size=12), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=BATCHES)
def test_connect_json_upserts_in_columns_equal_the_record_rule(batches, tmp_path_factory, monkeypatch):
    spec = MergeSpec(mode="upsert")
    columns = StagedTopic(TableOutput(str(tmp_path_factory.mktemp("columns") / "t"), merge=spec))
    records = StagedTopic(TableOutput(str(tmp_path_factory.mktemp("records") / "t"), merge=spec))
    used = []
    real = connect_json_columns.as_typed_columns
    for batch in batches:
        staged = [record(key, value) for key, value in batch]
        monkeypatch.setattr(connect_json_columns, "as_typed_columns", lambda *a: used.append(1) or real(*a))
        by_columns = columns.commit(staged)
        monkeypatch.setattr(connect_json_columns, "as_typed_columns", lambda *a: None)  # the record rule
        by_records = records.commit(staged)
        assert by_columns["merged"] == by_records["merged"], (by_columns["merged"], by_records["merged"], batch)
        assert columns.rows() == records.rows(), f"after {batch}"
        assert columns.output.read().schema == records.output.read().schema
    assert used, "the columnar path was never asked"


def test_what_the_columns_cannot_read_exactly_goes_record_by_record():
    key = b'{"schema":{"type":"int32","optional":false},"payload":1}'
    value = b'{"schema":{"type":"struct","fields":[{"field":"a","type":"int32"}]},"payload":{"a":1}}'
    other = b'{"schema":{"type":"struct","fields":[{"field":"b","type":"int32"}]},"payload":{"b":1}}'
    offset = {"topic": ["t", "t"], "partition": pa.array([0, 0], pa.int32()), "offset": pa.array([0, 1], pa.int64())}
    struct_key = b'{"schema":{"type":"struct","fields":[{"field":"id","type":"int32"}]},"payload":{"id":1}}'
    cases = {
        "a key that is not a struct": pa.table({"key": [key, key], "value": [value, value], **offset}),
        "two value schemas": pa.table({"key": [struct_key, struct_key], "value": [value, other], **offset}),
        "a null key": pa.table({"key": pa.array([None, struct_key], pa.binary()), "value": [value, value], **offset}),
        "a value field named like a Kafka column": pa.table({"key": [struct_key, struct_key], "value": [
            value.replace(b'"a"', b'"offset"'), value.replace(b'"a"', b'"offset"')], **offset}),
    }  # fmt: skip
    for what, batch in cases.items():
        assert connect_json_columns.as_typed_columns(batch, ("key", "value", "topic", "partition", "offset")) is None, (
            what
        )
    typed = connect_json_columns.as_typed_columns(
        pa.table({"key": [struct_key, struct_key], "value": pa.array([value, None], pa.binary()), **offset}),
        ("key", "value", "topic", "partition", "offset"),
    )
    assert typed.column("a").to_pylist() == [1, None] and typed.column("key").to_pylist() == [{"id": 1}] * 2
