"""Debezium events read as columns (core/arrow_changes.py, decoding/connect_json_columns.py) agree
with the record rule at their edges (issue 47's review): key columns named like Kafka's own, a
32-bit float, a column whose type changes within a batch, chunks of tombstones or truncates only,
several chunks per batch. Kafka Connect JSON with embedded schemas, staged and committed through
each sink's own merge (tests/support/staged_merges.py), Delta and Iceberg alike.
"""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.merging import ORDER_COLUMN, MergeSpec
from kafka_batch_provider.errors import SchemaError
from kafka_batch_provider.output import merge_source
from tests.support.staged_merges import Staged, staged_topic

pytestmark = pytest.mark.check  # in make check's tier: no Spark, no Kafka

CHANGES = MergeSpec(mode="changes", change_format="debezium", on_truncate="apply")
FORMATS = ["delta", "iceberg"]


def column(kind: str, name: str, optional: bool = True) -> dict:
    return {"type": kind, "optional": optional, "field": name}


def event(key: dict, key_fields: list, row_fields: list, op: str, row: dict | None, lsn: int) -> Staged:
    """A Debezium Postgres event as JsonConverter writes it (a delete's before holds its key)."""
    source = [column("string", "connector"), column("string", "sequence"), column("int64", "lsn")]
    schema = {"type": "struct", "fields": [
        {"type": "struct", "fields": row_fields, "optional": True, "field": "before"},
        {"type": "struct", "fields": row_fields, "optional": True, "field": "after"},
        {"type": "struct", "fields": source, "optional": False, "field": "source"},
        column("string", "op")]}  # fmt: skip
    payload = {"before": key if op == "d" else None, "after": None if op in ("d", "t") else row, "op": op,
               "source": {"connector": "postgresql", "sequence": json.dumps([str(lsn)] * 2), "lsn": lsn}}  # fmt: skip
    key_json = None if op == "t" else {"schema": {"type": "struct", "fields": key_fields}, "payload": key}
    return Staged(key_json, {"schema": schema, "payload": payload})


@pytest.mark.parametrize("fmt", FORMATS)
def test_key_columns_named_topic_and_partition_are_the_rows_own(fmt, tmp_path):
    # (the columns' helper columns once took those names: six rows became one)
    key_fields = [column("string", "topic", False), column("int32", "partition", False)]
    row_fields = [*key_fields, column("int64", "committed")]
    topic = staged_topic(fmt, tmp_path, CHANGES)
    rows = [{"topic": "orders", "partition": p, "committed": p * 100} for p in range(6)]
    topic.commit([event({"topic": "orders", "partition": p}, key_fields, row_fields, "r", rows[p], 100 + p)
                  for p in range(6)])  # fmt: skip
    found = sorted((r["partition"], r["committed"]) for r in topic.output.read().to_pylist())
    assert found == [(p, p * 100) for p in range(6)], f"{fmt}: expected the six source rows, found {found}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_32_bit_float_is_the_same_double_whichever_rule_reads_it(fmt, tmp_path):
    key_fields = [column("int32", "id", False)]
    row_fields = [*key_fields, column("float", "ratio"), column("string", "doc")]
    topic = staged_topic(fmt, tmp_path, CHANGES)
    topic.commit([event({"id": 1}, key_fields, row_fields, "c", {"id": 1, "ratio": 0.1, "doc": "d"}, 100),
                  event({"id": 2}, key_fields, row_fields, "c", {"id": 2, "ratio": 0.1, "doc": "d"}, 101)])  # fmt: skip
    # key 2's update leaves doc alone (Debezium's placeholder): its key takes the record rule
    placeholder = "__debezium_unavailable_value"
    topic.commit([event({"id": 2}, key_fields, row_fields, "u", {"id": 2, "ratio": 0.1, "doc": placeholder}, 200),
                  event({"id": 1}, key_fields, row_fields, "u", {"id": 1, "ratio": 0.1, "doc": "e"}, 201)])  # fmt: skip
    found = {r["id"]: (r["ratio"], r["doc"]) for r in topic.output.read().to_pylist()}
    assert found == {1: (0.1, "e"), 2: (0.1, "d")}, f"{fmt}: 0.1 either way, found {found}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_column_whose_type_changes_within_a_batch_is_refused_in_one_line(fmt, tmp_path):
    key_fields = [column("int32", "id", False)]
    before, after = [*key_fields, column("int32", "code")], [*key_fields, column("string", "code")]
    topic = staged_topic(fmt, tmp_path, CHANGES)
    with pytest.raises(SchemaError) as refused:  # ALTER TABLE ... ALTER COLUMN code TYPE text, mid-batch
        topic.commit([event({"id": 1}, key_fields, before, "c", {"id": 1, "code": 5}, 100),
                      event({"id": 2}, key_fields, after, "c", {"id": 2, "code": "A-5"}, 110)])  # fmt: skip
    message = str(refused.value)
    assert "\n" not in message and "A-5" in message, message


@pytest.mark.parametrize("fmt", FORMATS)
def test_chunks_of_tombstones_or_truncates_only_keep_the_batch_in_columns(fmt, tmp_path, monkeypatch):
    monkeypatch.setattr(merge_source, "CHUNK_RECORDS", 2)
    read_whole = []
    original = merge_source.read_batch
    monkeypatch.setattr(merge_source, "read_batch", lambda *a: read_whole.append(1) or original(*a))
    key_fields = [column("int32", "id", False)]
    row_fields = [*key_fields, column("string", "v")]
    topic = staged_topic(fmt, tmp_path, CHANGES)
    rows = [event({"id": k}, key_fields, row_fields, "c", {"id": k, "v": f"v{k}"}, 100 + k) for k in range(4)]
    deleted = event({"id": 0}, key_fields, row_fields, "d", None, 200)
    # chunks of two: [c0 c1] [c2 c3] [d0 tombstone] [tombstone truncate] [c5]
    topic.commit([*rows, deleted, Staged(deleted.key, None), Staged(deleted.key, None),
                  event({}, key_fields, row_fields, "t", None, 300),
                  event({"id": 5}, key_fields, row_fields, "c", {"id": 5, "v": "v5"}, 400)])  # fmt: skip
    found = {r["id"]: r["v"] for r in topic.output.read().to_pylist()}
    assert found == {5: "v5"}, f"{fmt}: only the row after the truncate stays, found {found}"
    assert not read_whole, "the batch was read whole (the record rule), not in columns"


def schemaless(op: str, key: dict, row: dict | None, lsn: int) -> Staged:
    """A Debezium Postgres event as JsonConverter writes it with ``schemas.enable=false``."""
    source = {"connector": "postgresql", "sequence": json.dumps([str(lsn)] * 2), "lsn": lsn}
    return Staged(key, {"before": key if op == "d" else None, "after": row, "op": op, "source": source})


def both_rules(tmp_path, monkeypatch, batches: list[list[Staged]], chunk: int = 2) -> list:
    """Each rule's Delta table (schema, rows) after ``batches``: in columns, ``chunk`` records at a
    time, and the record rule (the columns turned off), or the one-line error each gave."""
    found = []
    for rule in ("columns", "records"):
        with monkeypatch.context() as patched:
            patched.setattr(merge_source, "CHUNK_RECORDS", chunk)
            if rule == "records":
                patched.setattr(merge_source, "decoded_batch", lambda *a: None)
            topic = staged_topic("delta", tmp_path / rule, CHANGES)
            try:
                for batch in batches:
                    topic.commit(batch)
            except SchemaError as exc:
                assert "\n" not in str(exc), str(exc)
                found.append(type(exc).__name__)
                continue
            table = topic.output.read().drop_columns([ORDER_COLUMN])
            found.append((table.schema, sorted(table.to_pylist(), key=lambda r: r["id"])))
    return found


def test_schemaless_events_in_columns_give_the_record_rules_table(tmp_path, monkeypatch):
    # (each case found by review: the columns' table differed from the record rule's)
    cases = {
        # a column null in a first chunk keeps its place (it was appended at the end)
        "null first": [
            [
                schemaless("c", {"id": i}, {"id": i, "x": None if i < 3 else "s", "y": f"v{i}"}, 100 + i)
                for i in range(1, 5)
            ]
        ],  # fmt: skip
        # a typed key's columns first and in the key's type, as the record rule has them
        "typed key": [
            [
                Staged(
                    {"schema": {"type": "struct", "fields": [column("int32", "id", False)]}, "payload": {"id": i}},
                    schemaless("c", {}, {"name": f"n{i}", "id": i}, 100 + i).value,
                )
                for i in range(1, 4)
            ]
        ],  # fmt: skip
        # JSON's null as a value: skipped, as the record rule skips it
        "null value": [
            [
                schemaless("c", {"id": 1}, {"id": 1, "v": "a"}, 100),
                Staged({"id": 2}, b"null"),
                schemaless("c", {"id": 3}, {"id": 3, "v": "c"}, 102),
            ]
        ],  # fmt: skip
        # a connector that starts sending schemas mid-batch: one type for the batch
        "schemas later": [
            [
                schemaless("c", {"id": 1}, {"id": 1, "v": "a"}, 100),
                schemaless("c", {"id": 2}, {"id": 2, "v": "b"}, 101),
                event(
                    {"id": 3},
                    [column("int32", "id", False)],
                    [column("int32", "id", False), column("string", "v")],
                    "c",
                    {"id": 3, "v": "c"},
                    102,
                ),
            ]
        ],  # fmt: skip
        # beyond 64 bits: refused in one line by both
        "huge": [[schemaless("c", {"id": 1}, {"id": 1, "n": 2**64}, 100)]],
    }
    for name, batches in cases.items():
        columns, records = both_rules(tmp_path / name.replace(" ", "-"), monkeypatch, batches)
        assert columns == records, f"{name}: in columns {columns}, by the record rule {records}"
