"""Keyed upserts merged into a Delta table, exactly once with the offsets (``--mode upsert``).

The table must equal the newest value per key of what the topic holds, whatever the batches'
boundaries, a crash between the MERGE commit and the Kafka commit, or a repeated run.
"""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.merging import ORDER_COLUMN, MergeSpec
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import TableOutput, group_offsets, run_batch, write_without_commit

pytestmark = pytest.mark.check  # in make check's tier

UPSERT = MergeSpec(mode="upsert")


def keyed(partition: int, key: int, value: dict | None) -> Record:
    return Record(partition, None if value is None else json.dumps(value).encode(), json.dumps({"id": key}).encode())


def table_rows(output: TableOutput) -> dict[int, dict]:
    found = output.read()
    assert found is not None, "the table does not exist"
    rows = found.drop_columns([ORDER_COLUMN]).to_pylist()
    by_key = {row["id"]: row for row in rows}
    assert len(by_key) == len(rows), f"a key is in the table more than once: {sorted(r['id'] for r in rows)}"
    return by_key


def merge_commits(output: TableOutput) -> int:
    """How many commits merged a batch into the table (a retry must not add one)."""
    table = output.store().sink.table()
    if output.format == "delta":
        return sum(1 for h in table.history() if h["operation"] == "MERGE")
    return sum(
        1 for s in table.metadata.snapshots if s.summary and "kafka_batch.seq" in s.summary.additional_properties
    )


def newest_per_key(records: list[Record]) -> dict[int, dict]:
    """What the table must hold: each key's last record in its partition, a null value deleting it."""
    expected: dict[int, dict] = {}
    for record in records:  # one partition per key: the list's order is the log's
        key = json.loads(record.key)["id"]
        if record.value is None:
            expected.pop(key, None)
        else:
            expected[key] = json.loads(record.value)
    return expected


def test_upserts_and_tombstones_merge_exactly_once_across_a_crash(spark, kafka_config, new_topic, group_id, tmp_path):
    # (Iceberg: the same crash in the fault matrix, Debezium's in test_debezium_postgres.py)
    topic = new_topic(partitions=2)
    output = TableOutput(str(tmp_path / "customers"), merge=UPSERT)
    first = [keyed(k % 2, k, {"id": k, "name": f"v1-{k}", "amount": k * 10}) for k in range(1, 9)]
    first += [
        keyed(1, 1, {"id": 1, "name": "v2-1", "amount": 11}),
        keyed(1, 3, None),
        keyed(0, 2, {"id": 2, "name": "v2-2", "amount": None}),
    ]
    produce(kafka_config, topic, first)
    run_batch(spark, kafka_config, output, group_id, [topic])
    assert table_rows(output) == newest_per_key(first)

    # A deleted key comes back, another is deleted, one changes twice: and the run crashes after its
    # MERGE commit, before the Kafka commit. The retry must not apply the batch again.
    second = [keyed(1, 3, {"id": 3, "name": "back-3", "amount": 3}), keyed(1, 5, None)]
    second += [
        keyed(0, 4, {"id": 4, "name": "v2-4", "amount": 40}),
        keyed(0, 4, {"id": 4, "name": "v3-4", "amount": 41}),
    ]
    produce(kafka_config, topic, second)
    write_without_commit(spark, kafka_config, output, group_id, [topic])
    assert table_rows(output) == newest_per_key(first + second)
    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert table_rows(output) == newest_per_key(first + second)
    ends = {p: sum(1 for r in first + second if r.partition == p) for p in (0, 1)}
    assert group_offsets(kafka_config, group_id, topic, 2) == ends, "the group did not reach the log's end"
    batches = [entry["batch_id"] for entry in output.store().sink.entries()]
    assert len(batches) == 2 == merge_commits(output), f"expected 2 batches, each one merge commit: {batches}"


ENVELOPE_VALUE = {
    "type": "record", "name": "Value",
    "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "balance", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
         "default": None},
    ],
}  # fmt: skip
ENVELOPE = {
    "type": "record", "name": "Envelope", "namespace": "db.public.customers",
    "fields": [
        {"name": "before", "type": ["null", ENVELOPE_VALUE], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "connector", "type": "string"},
                                               {"name": "snapshot", "type": ["null", "string"], "default": None},
                                               {"name": "lsn", "type": ["null", "long"], "default": None},
                                               {"name": "sequence", "type": ["null", "string"], "default": None}]}},
        {"name": "op", "type": "string"},
    ],
}  # fmt: skip
ENVELOPE_KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "db.public.customers",
    "fields": [{"name": "id", "type": "long"}],
}


def test_debezium_events_in_avro_through_the_registry_merge_by_their_avro_key(
    spark, kafka_config, new_topic, group_id, schema_registry, tmp_path
):
    # (into Iceberg: the upserts above and the Connect JSON events of test_debezium_postgres.py cover Delta)
    from decimal import Decimal

    from kafka_batch_provider.registry.settings import RegistrySettings
    from tests.integration.test_key_formats import avro, ingest

    topic = new_topic(partitions=1)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    output = TableOutput(
        "",
        format="iceberg",
        table="lake.customers",
        catalog=catalog,
        merge=MergeSpec(mode="changes", change_format="debezium"),
    )

    def event(op: str, lsn: int, after: dict | None = None, before: dict | None = None) -> dict:
        source = {"connector": "postgresql", "snapshot": "true" if op == "r" else "false", "lsn": lsn,
                  "sequence": json.dumps([str(lsn - 1), str(lsn)])}  # fmt: skip
        return {"before": before, "after": after, "source": source, "op": op}

    events = [
        (1, event("r", 100, {"id": 1, "name": "Ada", "balance": Decimal("10.50")})),
        (2, event("r", 100, {"id": 2, "name": "Bo", "balance": None})),
        (2, event("u", 120, {"id": 2, "name": "Bo B.", "balance": Decimal("-0.01")})),
        (1, event("d", 130, None, {"id": 1, "name": "", "balance": None})),
        (3, event("c", 140, {"id": 3, "name": "Cy", "balance": Decimal("9999999999.99")})),
    ]
    keys = avro(schema_registry, topic, ENVELOPE_KEY, [{"id": k} for k, _ in events] + [{"id": 1}], "KEY")
    values = avro(schema_registry, topic, ENVELOPE, [e for _, e in events], "VALUE") + [None]  # the delete's tombstone
    produce(kafka_config, topic, [Record(0, v, k) for k, v in zip(keys, values)])
    store = output.store()
    ingest(spark, kafka_config, store, group_id, topic, RegistrySettings(schema_registry), "avro", "avro")

    found = sorted(output.read().drop_columns([ORDER_COLUMN]).to_pylist(), key=lambda r: r["id"])
    assert found == [
        {"id": 2, "name": "Bo B.", "balance": Decimal("-0.01")},
        {"id": 3, "name": "Cy", "balance": Decimal("9999999999.99")},
    ], f"expected the source table after the events, found {found}"


def test_a_merged_batch_is_bounded_and_a_pending_plan_too_large_is_planned_again(
    kafka_config, new_topic, group_id, tmp_path, monkeypatch
):
    # Merged batches are reduced in the driver's memory: at most MERGED_BATCH_RECORDS each unless
    # max_records says otherwise (here 5 for the test), and a pending plan beyond it (planned before the
    # bound, or one whose write ran out of memory) is never replayed into the same end.
    from kafka_batch_provider.core.planning import PlanPolicy
    from kafka_batch_provider.kafka.client import KafkaOffsets
    from kafka_batch_provider.steps import plan as plan_step

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [keyed(0, k, {"id": k}) for k in range(12)])
    output = TableOutput(str(tmp_path / "bounded"), merge=UPSERT)
    kafka = KafkaOffsets(kafka_config, timeout=10)
    monkeypatch.setattr(plan_step, "MERGED_BATCH_RECORDS", 100)
    unbounded = plan_step.plan_batch(kafka, output.store(), group_id, [topic], PlanPolicy()).plan
    assert unbounded.planned_offsets == 12 and not unbounded.bounded, unbounded.summary()
    monkeypatch.setattr(plan_step, "MERGED_BATCH_RECORDS", 5)
    again = plan_step.plan_batch(kafka, output.store(), group_id, [topic], PlanPolicy())
    assert not again.reused and again.plan.planned_offsets == 5 and again.plan.bounded, again.plan.summary()
    other = TableOutput(str(tmp_path / "said"), merge=UPSERT)
    said = plan_step.plan_batch(kafka, other.store(), f"{group_id}-s", [topic], PlanPolicy(max_records=7))
    assert said.plan.planned_offsets == 7, f"an explicit max_records holds: {said.plan.summary()}"
    appended = TableOutput(str(tmp_path / "appended"))
    plain = plan_step.plan_batch(kafka, appended.store(), f"{group_id}-a", [topic], PlanPolicy()).plan
    assert plain.planned_offsets == 12, f"an appended batch has no such bound: {plain.summary()}"
