"""Keyed upserts merged into a Delta table, exactly once with the offsets (``--mode upsert``).

The table must equal the newest value per key of what the topic holds, whatever the batches'
boundaries, a crash between the MERGE commit and the Kafka commit, or a repeated run.
"""

from __future__ import annotations

import json

from kafka_batch_provider.core.merging import ORDER_COLUMN, MergeSpec
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import TableOutput, group_offsets, run_batch, write_without_commit

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
    history = [h for h in output.store().sink.table().history() if h["operation"] == "MERGE"]
    assert len(history) == 2, f"expected one MERGE per batch (2), found {len(history)}: the retry merged again"
