"""A batch's records as changes: Debezium envelopes (Connect JSON and typed columns) and keyed upserts (pure)."""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from kafka_batch_provider.core.change_events import changes_of
from kafka_batch_provider.core.merging import DELETE_OP, TRUNCATE_OP, UPSERT_OP, MergeSpec
from kafka_batch_provider.errors import ConfigError, SchemaError

CHANGES = MergeSpec(mode="changes", change_format="debezium")
ROW_SCHEMA = {
    "type": "struct",
    "optional": True,
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "12"}, "field": "balance"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "born"},
        {"type": "string", "optional": False, "name": "io.debezium.time.ZonedTimestamp", "field": "created_at"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "updated_at"},
    ],
}  # fmt: skip
KEY_SCHEMA = {"type": "struct", "optional": False, "fields": [{"type": "int32", "optional": False, "field": "id"}]}


def envelope(op: str, after: dict | None, before: dict | None = None, lsn: int = 10) -> bytes:
    schema = {"type": "struct", "fields": [{**ROW_SCHEMA, "field": "before"}, {**ROW_SCHEMA, "field": "after"},
              {"type": "struct", "field": "source", "fields": []}, {"type": "string", "field": "op"}]}  # fmt: skip
    source = {"connector": "postgresql", "snapshot": "false", "sequence": json.dumps([str(lsn), str(lsn)]), "lsn": lsn}
    return json.dumps(
        {"schema": schema, "payload": {"op": op, "before": before, "after": after, "source": source}}
    ).encode()


def key(k: int) -> bytes:
    return json.dumps({"schema": KEY_SCHEMA, "payload": {"id": k}}).encode()


def batch(*records: tuple[bytes | None, bytes | None]) -> pa.Table:
    return pa.table({
        "key": pa.array([k for k, _ in records], pa.binary()),
        "value": pa.array([v for _, v in records], pa.binary()),
        "topic": ["db.public.t"] * len(records),
        "partition": pa.array([0] * len(records), pa.int32()),
        "offset": pa.array(range(len(records)), pa.int64()),
    })  # fmt: skip


def test_connect_json_debezium_events_become_typed_rows_and_deletes():
    after = {"id": 1, "balance": base64.b64encode((123450).to_bytes(3, "big", signed=True)).decode(),
             "born": -56270, "created_at": "2024-03-10T06:30:00.500000Z", "updated_at": 1735689600000001}  # fmt: skip
    found = changes_of(batch((key(1), envelope("c", after)), (key(1), envelope("d", None, {"id": 1}, lsn=11)),
                             (key(1), None)), CHANGES, "bytes")  # fmt: skip
    assert [c.op for c in found.changes] == [UPSERT_OP, DELETE_OP] and found.skipped == 1, "the tombstone is skipped"
    row = found.changes[0].row
    assert row["balance"] == Decimal("1234.50") and row["born"] == date(1815, 12, 10)
    assert row["created_at"] == datetime(2024, 3, 10, 6, 30, 0, 500000, tzinfo=timezone.utc)
    assert found.key_columns == ("id",)
    assert found.row_fields["balance"].type == pa.decimal128(12, 2)
    assert found.row_fields["updated_at"].type == pa.timestamp("us")
    typed = pa.Table.from_pylist([row], schema=pa.schema(found.row_fields.values()))
    assert typed.column("updated_at").to_pylist() == [datetime(2025, 1, 1, 0, 0, 0, 1)]


def test_a_truncate_is_refused_unless_the_run_applies_it():
    record = (
        None,
        json.dumps({"op": "t", "before": None, "after": None, "source": {"connector": "postgresql"}}).encode(),
    )
    with pytest.raises(ConfigError, match="db.public.t/0@0: a truncate event would empty the table"):
        changes_of(batch(record), CHANGES, "bytes")
    applied = changes_of(
        batch(record), MergeSpec(mode="changes", change_format="debezium", on_truncate="apply"), "bytes"
    )
    assert [c.op for c in applied.changes] == [TRUNCATE_OP]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b'{"id": 1, "name": "x"}', "not a Debezium change event"),
        (b"\x00\x00\x00\x00\x01binary", "not JSON"),
        (json.dumps({"op": "x", "source": {}, "after": None}).encode(), "unknown Debezium op 'x'"),
    ],
)
def test_a_value_that_is_not_a_change_event_is_one_line_naming_the_record(value, message):
    with pytest.raises(SchemaError, match=message) as refused:
        changes_of(batch((key(1), value)), CHANGES, "bytes")
    assert "db.public.t/0@0" in str(refused.value) and "\n" not in str(refused.value)


def test_upserts_key_by_the_kafka_key_or_by_named_columns_and_a_null_value_deletes():
    records = batch((b'{"id": 7}', b'{"id": 7, "name": "a"}'), (b'{"id": 7}', None))
    found = changes_of(records, MergeSpec(mode="upsert"), "bytes")
    assert [(c.key, c.op) for c in found.changes] == [((7,), UPSERT_OP), ((7,), DELETE_OP)]
    named = changes_of(batch((b"k", b'{"id": 7, "name": "a"}')), MergeSpec(mode="upsert", merge_key=("name",)), "bytes")
    assert named.key_columns == ("name",) and named.changes[0].key == ("a",)
    with pytest.raises(ConfigError, match="key column 'nope' is not in the value's columns"):
        changes_of(batch((b"k", b'{"id": 7}')), MergeSpec(mode="upsert", merge_key=("nope",)), "bytes")
    with pytest.raises(ConfigError, match="the record has no key"):
        changes_of(batch((None, b'{"id": 7}')), MergeSpec(mode="upsert"), "bytes")
    with pytest.raises(ConfigError, match="a tombstone .* has no columns"):
        changes_of(batch((b"k", None)), MergeSpec(mode="upsert", merge_key=("id",)), "bytes")


def test_typed_registry_columns_upsert_with_their_decoded_key_struct():
    records = pa.table({
        "key": pa.array([{"id": 1}, {"id": 1}], pa.struct([("id", pa.int64())])),
        "topic": ["t", "t"], "partition": pa.array([0, 0], pa.int32()), "offset": pa.array([0, 1], pa.int64()),
        "name": ["a", None], "amount": pa.array([1.5, None]),
    })  # fmt: skip
    found = changes_of(records, MergeSpec(mode="upsert"), "avro")
    assert [c.op for c in found.changes] == [UPSERT_OP, DELETE_OP], "a row whose value columns are all null deletes"
    assert found.changes[0].row == {"id": 1, "name": "a", "amount": 1.5}
    assert list(found.row_fields) == ["name", "amount", "id"]


def test_schemaless_json_types_come_from_every_row_and_a_batch_of_deletes_knows_its_key():
    records = batch((b'{"id": 1}', b'{"id": 1, "email": null, "price": 10}'),
                    (b'{"id": 2}', b'{"id": 2, "email": "x", "price": 10.5}'))  # fmt: skip
    found = changes_of(records, MergeSpec(mode="upsert"), "bytes")
    assert found.row_fields["email"].type == pa.string() and found.row_fields["price"].type == pa.float64()
    typed = pa.Table.from_pylist([c.row for c in found.changes], schema=pa.schema(found.row_fields.values()))
    assert typed.column("price").to_pylist() == [10.0, 10.5]
    deletes = changes_of(batch((key(3), envelope("d", None, {"id": 3}))), CHANGES, "bytes")
    assert deletes.key_columns == ("id",) and deletes.row_fields["id"].type == pa.int32(), "the key's schema names it"


def test_a_key_that_is_not_a_json_object_is_kept_as_its_bytes():
    found = changes_of(
        batch((b"1001", b'{"name": "a"}'), (b"null", b'{"name": "b"}')), MergeSpec(mode="upsert"), "bytes"
    )
    assert [c.key for c in found.changes] == [(b"1001",), (b"null",)] and found.row_fields["key"].type == pa.binary()


def test_one_key_in_two_partitions_cannot_be_ordered_by_offsets():
    records = batch((b"k", b'{"v": 1}'), (b"k", b'{"v": 2}'))
    records = records.set_column(3, "partition", pa.array([0, 1], pa.int32()))
    with pytest.raises(ConfigError, match=r"key \[b'k'\] is also in partition 0 .*order_by"):
        changes_of(records, MergeSpec(mode="upsert"), "bytes")


def test_connect_timestamps_are_datetimes_and_wide_decimals_decimal256():
    from kafka_batch_provider.decoding.connect_json import arrow_type, value_of

    micro = {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}
    assert value_of(1735689600000001, micro) == datetime(2025, 1, 1, 0, 0, 0, 1)
    wide = {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "50"},
    }
    assert arrow_type(wide) == pa.decimal256(50, 2)
    pairs = {"type": "map", "keys": {"type": "int32"}, "values": {"type": "string"}}
    assert value_of([[1, "a"], [2, "b"]], pairs) == [(1, "a"), (2, "b")]
