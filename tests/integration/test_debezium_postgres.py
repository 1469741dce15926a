"""Debezium change events from a real PostgreSQL, merged into a Delta and an Iceberg table exactly once
(``--mode changes --change-format debezium``).

The source is not our producer: PostgreSQL changes rows, Debezium (in Kafka Connect) turns the
WAL into change events on Apache Kafka, and after every ingest the lake table must equal
``SELECT * FROM`` the source table, row by row and column by column: a snapshot, inserts,
updates (numerics, timestamps with time zones, a TOASTed column left unchanged), deletes, a
primary-key change, a multi-statement transaction, an added column, a crash between the MERGE
commit and the Kafka commit, and a truncate (refused, then applied).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import uuid
from dataclasses import replace
from typing import Any

import pytest

from kafka_batch_provider.core.merging import ORDER_COLUMN, UNAVAILABLE, MergeSpec
from kafka_batch_provider.dev.kafka_connect import wait_for_records
from kafka_batch_provider.errors import ConfigError
from tests.integration.helpers import TableOutput, group_offsets, run_batch, write_without_commit
from tests.integration.test_merged_tables import merge_commits

pytestmark = pytest.mark.xdist_group("cdc")

CHANGES = MergeSpec(mode="changes", change_format="debezium")
TABLE = """CREATE TABLE customers (
    id int PRIMARY KEY, name text NOT NULL, email text, balance numeric(12,2), born date,
    created_at timestamptz NOT NULL, updated_at timestamp(6), attrs jsonb, ext_id uuid, bio text,
    photo bytea, tags text[])"""
#: 6,400 characters that do not compress: stored out of line (TOAST), so an update that leaves it
#: alone sends Debezium's placeholder instead of the value.
TOASTED = "".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(200))
#: The same for a bytea and an array column (Debezium's placeholder is then bytes, or a list holding it).
PHOTO = random.Random(7).randbytes(8192)
TAGS = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(300)]


def change_events(kafka_config: dict, topic: str) -> list[dict]:
    """Every change event's payload in the topic (the tombstones left out)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_config, "group.id": "debezium-events-probe", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        found = []
        while len(found) < end:
            message = consumer.poll(10)
            assert message is not None and message.error() is None, f"could not read {topic}: {message}"
            found.append(message)
        return [json.loads(m.value())["payload"] for m in found if m.value() is not None]
    finally:
        consumer.close()


def source_rows(db, table: str = "customers", key: tuple[str, ...] = ("id",)) -> tuple[list[str], list[dict[str, Any]]]:
    with db.connect() as conn:
        cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {', '.join(key)}")
        columns = [d.name for d in cursor.description]
        return columns, [dict(zip(columns, row)) for row in cursor.fetchall()]


def as_source_value(lake: Any, source: Any) -> Any:
    """The lake's value in the source driver's terms (jsonb as parsed JSON, uuid as text)."""
    if isinstance(source, (dict, list)) and isinstance(lake, str):
        return json.loads(lake)
    if isinstance(source, uuid.UUID):
        return uuid.UUID(lake) if isinstance(lake, str) else lake
    return lake


def assert_lake_equals_source(
    output: TableOutput, db, table_name: str = "customers", key: tuple[str, ...] = ("id",)
) -> int:
    """The table equals ``SELECT * FROM`` the source table: same columns (plus the ordering value), same rows."""
    columns, expected = source_rows(db, table_name, key)
    table = output.read()
    assert table is not None, "the table does not exist"
    assert set(table.column_names) == {*columns, ORDER_COLUMN}, (
        f"expected the source's columns {columns} and {ORDER_COLUMN}; the table has {table.column_names}"
    )

    def key_of(row: dict) -> tuple:
        return tuple(row[k] for k in key)

    found = sorted(table.drop_columns([ORDER_COLUMN]).to_pylist(), key=key_of)
    assert [key_of(r) for r in found] == [key_of(r) for r in expected], (
        f"expected the source's keys {[key_of(r) for r in expected]}, the table holds {[key_of(r) for r in found]}"
    )
    for lake_row, source_row in zip(found, expected):
        for column in columns:
            lake, source = as_source_value(lake_row[column], source_row[column]), source_row[column]
            assert lake == source, (
                f"row {key_of(source_row)} column {column}: source has {str(source)[:60]!r}, "
                f"lake has {str(lake)[:60]!r}"
            )
    return len(expected)


def test_a_postgres_table_through_debezium_equals_its_delta_and_iceberg_tables(
    cdc_source, spark, kafka_config, group_id, tmp_path
):
    db = cdc_source.new_database()
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute(
            "INSERT INTO customers VALUES "
            "(1, 'Ada', 'ada@example.com', 1234.50, '1815-12-10', '2024-03-10 12:00:00.5+05:30', "
            '\'2025-01-01 00:00:00.000001\', \'{"tier": "gold", "tags": [1, 2]}\', '
            "'6f1c1b8e-2a55-4c38-9a43-0d6b8e2f0a11', %s, %s, %s), "
            "(2, 'Brendan', NULL, 9999999999.99, NULL, '1999-12-31 23:59:59+00', NULL, NULL, NULL, 'short', "
            "'\\x00ff'::bytea, '{a,b}'), "
            "(3, 'Chen', 'chen@example.com', 0.00, '2000-02-29', '2020-06-01 08:00:00-07', NULL, '[]', NULL, NULL, "
            "NULL, NULL)",
            (TOASTED, PHOTO, TAGS),
        )
    db.capture(["public.customers"])
    topic = db.topic("customers")
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    # One source, two lakes: a Delta and an Iceberg table, each with its own group.
    lakes = {
        f"{group_id}-delta": TableOutput(str(tmp_path / "customers"), merge=CHANGES),
        f"{group_id}-iceberg": TableOutput(
            "", format="iceberg", table="lake.customers", catalog=catalog, merge=CHANGES
        ),
    }

    def ingest_and_compare(rows: int, crash_first: bool = False) -> None:
        for group, output in lakes.items():
            if crash_first:  # after the merge commit, before the Kafka commit: the retry only commits
                write_without_commit(spark, kafka_config, output, group, [topic])
                assert assert_lake_equals_source(output, db) == rows, output.format
            run_batch(spark, kafka_config, output, group, [topic])
            assert assert_lake_equals_source(output, db) == rows, output.format

    records = 3  # the snapshot: op=r
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(3)

    with db.connect() as conn:
        conn.execute(
            "INSERT INTO customers VALUES (4, 'Dita', NULL, 10, NULL, now(), NULL, NULL, NULL, NULL, NULL, NULL)"
        )
        # bio, photo and tags are TOASTed and left unchanged: Debezium sends its placeholder for each
        conn.execute("UPDATE customers SET email = 'ada@lovelace.org' WHERE id = 1")
        conn.execute(
            "UPDATE customers SET balance = -0.01, updated_at = '2026-11-26 10:11:12.123456', "
            "created_at = '2026-11-26 10:11:12.654321-03:30' WHERE id = 2"
        )
        conn.execute("DELETE FROM customers WHERE id = 3")
        conn.execute("UPDATE customers SET id = 30 WHERE id = 4")  # a key change: delete 4, create 30
        with conn.transaction():
            conn.execute(
                "INSERT INTO customers VALUES (5, 'Emil', NULL, 5.5, NULL, now(), NULL, NULL, NULL, 'x', NULL, NULL)"
            )
            conn.execute("UPDATE customers SET name = 'Emil R.' WHERE id = 5")
            conn.execute(
                "INSERT INTO customers VALUES (6, 'Fay', NULL, NULL, NULL, now(), NULL, NULL, NULL, NULL, NULL, NULL)"
            )
    records += 1 + 1 + 1 + 2 + 3 + 3  # a delete is followed by a tombstone; a key change is delete, tombstone, create
    wait_for_records(kafka_config, topic, records)
    [after] = [e["after"] for e in change_events(kafka_config, topic) if e["op"] == "u" and e["after"]["id"] == 1]
    sent = {c: str(after[c])[:40] for c in ("bio", "photo", "tags")}
    placeholders = {
        "bio": UNAVAILABLE,
        "photo": base64.b64encode(UNAVAILABLE.encode()).decode(),
        "tags": f"['{UNAVAILABLE}']",
    }
    assert sent == {c: v[:40] for c, v in placeholders.items()}, (
        f"expected Debezium's placeholder for each TOASTed column left unchanged, found {sent}"
    )
    ingest_and_compare(5)

    # A column added upstream becomes a column; the run crashes after its merge commit, before the
    # Kafka commit: the retry must find the batch merged and only commit.
    with db.connect() as conn:
        # (a DEFAULT set later: ADD COLUMN ... DEFAULT would give the existing rows the default in
        # the source, with no change event for them)
        conn.execute("ALTER TABLE customers ADD COLUMN loyalty int")
        conn.execute("ALTER TABLE customers ALTER COLUMN loyalty SET DEFAULT 0")
        conn.execute("UPDATE customers SET loyalty = 42 WHERE id = 1")
        # an explicit NULL in a column with a DEFAULT: Connect's JsonConverter sends the default
        # instead unless replace.null.with.default=false (dev/kafka_connect.py sets it)
        conn.execute("UPDATE customers SET loyalty = NULL WHERE id = 2")
        conn.execute(
            "INSERT INTO customers VALUES (7, 'Gus', NULL, 1, NULL, now(), NULL, NULL, NULL, NULL, NULL, NULL, 3)"
        )
    records += 3
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(6, crash_first=True)
    for output in lakes.values():
        assert merge_commits(output) == 3, f"{output.format}: expected 3 merge commits, found {merge_commits(output)}"

    # A truncate is refused in one line (nothing changes) until the run says to apply it.
    with db.connect() as conn:
        conn.execute("TRUNCATE customers")
    records += 1
    wait_for_records(kafka_config, topic, records)
    applying = MergeSpec(mode="changes", change_format="debezium", on_truncate="apply")
    for group, output in lakes.items():
        before = output.read().num_rows
        with pytest.raises(ConfigError, match="truncate event would empty the table") as refused:
            run_batch(spark, kafka_config, output, group, [topic])
        assert "\n" not in str(refused.value)
        assert output.read().num_rows == before, f"{output.format}: a refused truncate changed the table"
        assert group_offsets(kafka_config, group, topic, 1) == {0: records - 1}, "a refused batch moved the group"
        outcome, _ = run_batch(spark, kafka_config, replace(output, merge=applying), group, [topic])
        assert assert_lake_equals_source(output, db) == 0, output.format
        merged = (output.store().entry_of(outcome.plan) or {}).get("merged") or {}
        assert merged.get("truncates") == 1, f"{output.format}: the batch's counts must say it truncated: {merged}"
        assert "truncated" not in outcome.plan.summary(), "a plan's bound is 'bounded', not 'truncated'"
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO customers VALUES (8, 'Hal', NULL, 2, NULL, now(), NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
        )
    records += 1
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(1)
    for group in lakes:
        assert group_offsets(kafka_config, group, topic, 1) == {0: records}


def test_primary_key_changes_keep_their_toasted_columns_in_delta_and_iceberg(
    cdc_source, spark, kafka_config, group_id, tmp_path
):
    # REPLICA IDENTITY DEFAULT: a key change's create event carries Debezium's placeholder for each
    # TOASTed column it left alone; the value is the old key's row's, never the new key's.
    db = cdc_source.new_database("keys")
    documents = {i: "".join(hashlib.sha256(f"{i}-{n}".encode()).hexdigest() for n in range(160)) for i in range(1, 6)}
    blobs = {i: random.Random(i).randbytes(14000) for i in range(1, 6)}
    tags = {i: [hashlib.md5(f"{i}-{n}".encode()).hexdigest() for n in range(300)] for i in range(1, 6)}
    with db.connect() as conn:
        conn.execute(
            "CREATE TABLE accounts (region text, id int, label text, doc text, blob bytea, tags text[], "
            "PRIMARY KEY (region, id))"
        )
        for i in range(1, 6):
            conn.execute(
                "INSERT INTO accounts VALUES ('eu', %s, %s, %s, %s, %s)",
                (i, f"account {i}", documents[i], blobs[i], tags[i]),
            )
    db.capture(["public.accounts"])
    topic = db.topic("accounts")
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    lakes = {
        f"{group_id}-delta": TableOutput(str(tmp_path / "accounts"), merge=CHANGES),
        f"{group_id}-iceberg": TableOutput("", format="iceberg", table="lake.accounts", catalog=catalog, merge=CHANGES),
    }
    key = ("region", "id")

    def ingest_and_compare(rows: int) -> None:
        for group, output in lakes.items():
            run_batch(spark, kafka_config, output, group, [topic])
            found = assert_lake_equals_source(output, db, "accounts", key)
            assert found == rows, f"{output.format}: expected {rows} rows, found {found}"

    records = 5
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(5)

    with db.connect() as conn:
        conn.execute("DELETE FROM accounts WHERE id = 3")
    records += 2  # the delete and its tombstone
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(4)

    with db.connect() as conn:
        with conn.transaction():  # a swap of two keys through a third, in one transaction
            conn.execute("UPDATE accounts SET id = 100 WHERE id = 1")
            conn.execute("UPDATE accounts SET id = 1 WHERE id = 2")
            conn.execute("UPDATE accounts SET id = 2 WHERE id = 100")
        conn.execute("UPDATE accounts SET id = 3 WHERE id = 4")  # onto the key deleted one batch earlier
        conn.execute("UPDATE accounts SET label = 'moved twice', id = 6 WHERE id = 5")
        conn.execute("UPDATE accounts SET region = 'us' WHERE id = 6")
    records += 3 * 6  # each key change: a delete, its tombstone and a create
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(4)

    with db.connect() as conn:  # a row that moved in an earlier batch moves again
        conn.execute("UPDATE accounts SET id = 7 WHERE id = 3")
    records += 3
    wait_for_records(kafka_config, topic, records)
    ingest_and_compare(4)


def test_a_bounded_batch_holds_whole_source_transactions(cdc_source, spark, kafka_config, group_id, tmp_path):
    # provide.transaction.metadata=true marks each event's transaction: a batch bounded by
    # max_records ends where the transaction it would cut starts, so after every batch the table
    # holds a state the source had (here: the money in the accounts always adds up).
    from kafka_batch_provider.core.planning import PlanPolicy

    db = cdc_source.new_database("tx")
    with db.connect() as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
    db.capture(["public.accounts"], provide_transaction_metadata="true")
    states: list[dict[int, int]] = [{}]

    def change(*statements: str) -> None:
        with db.connect() as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement)
        states.append({row["id"]: row["balance"] for row in source_rows(db, "accounts")[1]})

    change(*(f"INSERT INTO accounts VALUES ({i}, 100)" for i in range(1, 5)))  # 4 events
    for i, (debit, credit) in enumerate([(1, 2), (2, 3), (3, 4), (4, 1), (1, 3)]):  # 2 events each
        change(
            f"UPDATE accounts SET balance = balance - {10 + i} WHERE id = {debit}",
            f"UPDATE accounts SET balance = balance + {10 + i} WHERE id = {credit}",
        )
    change("UPDATE accounts SET balance = balance + 100 WHERE id = 1", "DELETE FROM accounts WHERE id = 4")  # 3
    topic = db.topic("accounts")
    wait_for_records(kafka_config, topic, 4 + 5 * 2 + 3)
    output = TableOutput(str(tmp_path / "accounts"), merge=CHANGES)
    batches = []
    while True:
        outcome, _ = run_batch(spark, kafka_config, output, group_id, [topic], PlanPolicy(max_records=5))
        if not outcome.plan.ranges:
            break
        batches.append(outcome.plan.ranges[0].end)
        held = {row["id"]: row["balance"] for row in output.read().to_pylist()}
        assert held in states, (
            f"after the batch ending at offset {batches[-1]} the table holds {held}, a state the source never "
            f"had (it had {states})"
        )
    assert held == states[-1], f"expected the source's last state {states[-1]}, the table holds {held}"
    assert batches == [4, 8, 12, 17], f"expected batches ending between transactions at 4, 8, 12, 17: {batches}"
