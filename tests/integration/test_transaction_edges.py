"""A bounded batch of Debezium events ends between source transactions (the plan step, on a real
broker): the bound moves back to where the transaction it would cut starts, however far back, and
never for records outside transactions; a transaction larger than the batch keeps its bound.

tests/integration/test_debezium_postgres.py proves the same end to end on a real PostgreSQL.
"""

from __future__ import annotations

import json
from itertools import count

import pytest

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.transaction_edges import at_transaction_edges
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import TableOutput

pytestmark = pytest.mark.check

CHANGES = MergeSpec(mode="changes", change_format="debezium")
ids = count(1)


def change(partition: int, txid: int | None, op: str = "u", enveloped: bool = False) -> Record:
    """A PostgreSQL change event (``txid`` None: a snapshot read); its transaction id carries the
    event's own LSN, as Debezium's does."""
    lsn = next(ids)
    payload = {
        "op": op, "before": None, "after": {"id": lsn},
        "source": {"connector": "postgresql", "txId": txid, "lsn": lsn},
        "transaction": None if txid is None else {"id": f"{txid}:{lsn}", "total_order": 1},
    }  # fmt: skip
    value = {"schema": {"type": "struct"}, "payload": payload} if enveloped else payload
    return Record(partition, json.dumps(value).encode(), json.dumps({"id": lsn}).encode())


def transaction(partition: int, txid: int, events: int) -> list[Record]:
    return [change(partition, txid, enveloped=i % 2 == 0) for i in range(events)]


def planned_ends(kafka_config, topic, tmp_path, group, max_records, notes=None) -> dict[int, int]:
    output = TableOutput(str(tmp_path / group), merge=CHANGES)
    said = notes if notes is not None else []
    outcome = plan_batch(
        KafkaOffsets(kafka_config, timeout=10), output.store(), group, [topic],
        PlanPolicy(max_records=max_records), progress=said.append,
    )  # fmt: skip
    saved = output.store().load_plan(outcome.plan.seq, outcome.plan.batch_id)
    assert saved.ranges == outcome.plan.ranges and saved.batch_id == outcome.plan.batch_id, "the saved plan differs"
    return {r.partition: r.end for r in outcome.plan.ranges}


def test_a_bound_inside_a_transaction_moves_back_to_its_start_however_far(kafka_config, new_topic, group_id, tmp_path):
    topic = new_topic(partitions=1)
    delete_then_tombstone = [change(0, 11, "d"), Record(0, None, b'{"id": 0}')]
    records = [
        *[change(0, None, "r") for _ in range(3)],  # 0-2: the snapshot, in no transaction
        *transaction(0, 10, 2),  # 3-4
        change(0, 11),
        *delete_then_tombstone,
        change(0, 11),  # 5-8
        *transaction(0, 12, 400),  # 9-408: more than the first window read
        *transaction(0, 13, 2),  # 409-410
    ]
    produce(kafka_config, topic, records)
    expected = {
        2: 2,  # inside the snapshot: no transaction to keep whole
        4: 3,  # inside 10: back to its start
        5: 5,  # between 10 and 11: unchanged
        7: 5,  # on 11's tombstone (11 goes on after it)
        8: 5,
        400: 9,  # deep inside 12: the window read grows until it reaches 12's start
        409: 409,
    }
    found = {bound: planned_ends(kafka_config, topic, tmp_path, f"{group_id}-{bound}", bound)[0] for bound in expected}
    assert found == expected, f"expected bounds moved to {expected}, found {found}"


def test_a_transaction_larger_than_the_batch_keeps_the_bound_and_says_so(kafka_config, new_topic, group_id, tmp_path):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [*transaction(0, 20, 6), *[change(1, None, "r") for _ in range(6)]])
    notes: list[str] = []
    ends = planned_ends(kafka_config, topic, tmp_path, group_id, 8, notes)
    assert ends == {0: 4, 1: 4}, f"expected each partition's fair share (4), found {ends}"
    assert any(f"{topic}:0: source transaction txId 20 holds more than this batch" in n for n in notes), notes
    assert not any(f"{topic}:1" in n for n in notes), f"partition 1 holds no transaction: {notes}"


def test_each_partition_ends_between_transactions_and_the_batch_id_follows(kafka_config, new_topic, group_id, tmp_path):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [*transaction(0, 30, 3), *transaction(0, 31, 3), *transaction(1, 32, 5)])
    notes: list[str] = []
    ends = planned_ends(kafka_config, topic, tmp_path, group_id, 8, notes)
    # fair shares 4 + 4: partition 0 cuts 31 (3-5) and goes back to 3; partition 1 is one transaction
    assert ends == {0: 3, 1: 4}, f"expected ends {{0: 3, 1: 4}}, found {ends}"
    assert f"{topic}:0: the bound moved from offset 4 to 3, where source transaction txId 31 starts" in notes[0], notes


def test_registry_values_other_than_json_keep_their_bound_and_say_so():
    from kafka_batch_provider.core.offsets import OffsetRange
    from kafka_batch_provider.core.plan import OffsetPlan

    plan = OffsetPlan(
        "b-1", "incremental", "g", ("t",), "read_committed", (OffsetRange("t", 0, 0, 5, None),),
        bounded=True, extra={"snapshot": {"t:0": [None, 0, 9]}},
    )  # fmt: skip
    said: list[str] = []
    same, notes = at_transaction_edges(None, plan, "avro", said.append)  # type: ignore[arg-type]
    assert same == plan and notes == said == ["avro values: the bound stays where it is, not moved to a source "
                                               "transaction's edge"], notes  # fmt: skip


def test_a_bulk_transaction_beyond_the_last_window_keeps_the_bound_and_says_so(
    kafka_config, new_topic, group_id, tmp_path, monkeypatch
):
    # the plan reads marks, not values, and at most LAST_WINDOW records back from a bound
    from kafka_batch_provider.steps import transaction_edges

    monkeypatch.setattr(transaction_edges, "FIRST_WINDOW", 4)
    monkeypatch.setattr(transaction_edges, "LAST_WINDOW", 16)
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [*transaction(0, 40, 2), *transaction(0, 41, 60)])
    notes: list[str] = []
    ends = planned_ends(kafka_config, topic, tmp_path, group_id, 50, notes)
    assert ends == {0: 50}, f"expected the bound kept at 50, found {ends}"
    assert any("source transaction txId 41 holds more than 16 records before offset 50" in n for n in notes), notes
    wider = planned_ends(kafka_config, topic, tmp_path, f"{group_id}-w", 12, [])
    assert wider == {0: 2}, f"within the last window the bound moves to 41's start (2), found {wider}"
