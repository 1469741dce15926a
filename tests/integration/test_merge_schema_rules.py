"""One schema rule for merged tables, Delta and Iceberg alike (issue 47).

A merged table's columns follow the batches: a new column or nested field is added, numbers are
held wide from the start (integers as int64, floats as double, so a source's ``ALTER COLUMN ...
TYPE bigint`` is no change), schemaless JSON numbers are doubles, and a value that cannot be held
exactly is refused in one line before anything is committed. Driven through the sinks' own
merge (tests/support/staged_merges.py); the same records give the same table in both formats.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.errors import KafkaBatchError
from tests.support.staged_merges import Staged, StagedTopic, connect_json, staged_topic

pytestmark = pytest.mark.check  # in make check's tier: no Spark, no Kafka

UPSERT = MergeSpec(mode="upsert")


@pytest.fixture(params=["delta", "iceberg"])
def topic(request, tmp_path) -> StagedTopic:
    return staged_topic(request.param, tmp_path, UPSERT)


def field_type(schema: pa.Schema, path: str) -> pa.DataType:
    kind: pa.DataType = schema.field(path.split(".")[0]).type
    for name in path.split(".")[1:]:
        kind = kind.field(name).type
    return kind


def test_a_nested_field_a_later_batch_brings_is_added_not_dropped(topic):
    topic.commit([Staged({"id": 1}, {"id": 1, "address": {"city": "Oslo"}})])
    topic.commit(
        [
            Staged({"id": 2}, {"id": 2, "address": {"city": "Lima", "zip": "15001"}}),
            Staged({"id": 1}, {"id": 1, "address": {"city": "Bergen", "zip": "5003"}}),
        ]
    )
    rows = topic.rows()
    found = {k: rows[k]["address"] for k in sorted(rows)}
    expected = {1: {"city": "Bergen", "zip": "5003"}, 2: {"city": "Lima", "zip": "15001"}}
    assert found == expected, f"address.zip must be kept in the {topic.output.format} table: found {found}"
    topic.commit([Staged({"id": 3}, {"id": 3, "address": {"city": "Quito"}})])  # a batch without the field
    assert topic.rows()[3]["address"] == {"city": "Quito", "zip": None}, topic.rows()[3]


INT32 = {"type": "struct", "fields": [{"field": "id", "type": "int32"}, {"field": "qty", "type": "int32"},
                                       {"field": "ratio", "type": "float"}]}  # fmt: skip
INT64 = {"type": "struct", "fields": [{"field": "id", "type": "int32"}, {"field": "qty", "type": "int64"},
                                       {"field": "ratio", "type": "double"}]}  # fmt: skip
KEY = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}


def test_numbers_are_wide_from_the_start_so_a_source_widening_them_is_no_change(topic):
    # Debezium after ALTER COLUMN qty TYPE bigint, ratio TYPE double precision: int32 then int64
    topic.commit([Staged(connect_json(KEY, {"id": 1}), connect_json(INT32, {"id": 1, "qty": 7, "ratio": 0.5}))])
    big = 2**31 + 5
    topic.commit([Staged(connect_json(KEY, {"id": 2}), connect_json(INT64, {"id": 2, "qty": big, "ratio": 0.1}))])
    rows = topic.rows()
    assert (rows[2]["qty"], rows[2]["ratio"]) == (big, 0.1), f"expected qty {big} and ratio 0.1, found {rows[2]}"
    assert rows[1]["qty"] == 7, rows[1]
    schema = topic.schema()
    kinds = {name: str(field_type(schema, name)) for name in ("id", "qty", "ratio")}
    assert kinds == {"id": "int64", "qty": "int64", "ratio": "double"}, f"the wide types, found {kinds}"


def test_schemaless_json_numbers_are_doubles_so_a_fraction_after_integers_fits(topic):
    topic.commit([Staged({"id": 1}, {"id": 1, "price": 10}), Staged({"id": 2}, {"id": 2, "price": 12})])
    topic.commit([Staged({"id": 1}, {"id": 1, "price": 10.5})])
    rows = topic.rows()
    assert {k: rows[k]["price"] for k in rows} == {1: 10.5, 2: 12.0}, rows
    assert field_type(topic.schema(), "price") == pa.float64(), topic.schema()


def test_a_schemaless_integer_a_double_cannot_hold_is_refused_in_one_line_and_nothing_is_committed(topic):
    topic.commit([Staged({"id": 1}, {"id": 1, "n": 1})])
    topic_before = topic.output.read().num_rows
    with pytest.raises(KafkaBatchError) as refused:
        topic.commit([Staged({"id": 2}, {"id": 2, "n": 2**53 + 1})])
    message = str(refused.value)
    assert "\n" not in message and "9007199254740993" in message and "schema" in message, message
    assert topic.output.read().num_rows == topic_before, "a refused batch changes nothing"
    assert topic.output.store().log.tail()["seq"] == 1, "the refused batch is not in the table's log"


def test_a_batch_another_writer_commits_during_our_schema_change_is_not_merged_twice(topic, monkeypatch):
    # Our batch 2 brings a column: a schema-only commit first. Another writer commits its own batch 2
    # right then. Ours must see it and lose the entry, not merge onto the new state as a second batch 2.
    from kafka_batch_provider.output.delta import DeltaSink
    from kafka_batch_provider.output.iceberg import IcebergSink
    from tests.support.staged_merges import StagedTopic

    topic.commit([Staged({"id": 1}, {"id": 1, "name": "a"})])
    other = StagedTopic(topic.output, ends=dict(topic.ends), batches=list(topic.batches))
    sink = DeltaSink if topic.output.format == "delta" else IcebergSink
    evolve, raced = sink.evolve_schema, []

    def evolve_and_race(self, *args):
        changed = evolve(self, *args)
        if not raced:
            raced.append(True)  # (the other writer's own commit comes through here too)
            other.commit([Staged({"id": 2}, {"id": 2, "name": "theirs"})])
        return changed

    monkeypatch.setattr(sink, "evolve_schema", evolve_and_race)
    with pytest.raises(AssertionError, match="batch 2 was not committed"):
        topic.commit([Staged({"id": 3}, {"id": 3, "name": "ours", "extra": 7})])
    entries = sorted((e["seq"], e["batch_id"]) for e in topic.output.store().sink.entries())
    assert entries == [(1, "b-1"), (2, "b-2")], f"one batch 2 only, found {entries}"
    assert sorted(r["id"] for r in topic.output.read().to_pylist()) == [1, 2], "ours was not merged"
