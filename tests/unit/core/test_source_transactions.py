"""Where a bounded batch of Debezium events may end: the marks read from values, and the edge."""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.source_transactions import TOMBSTONE, Edge, edge_before, transaction_mark

pytestmark = pytest.mark.check


def event(transaction: dict | None, connector: str = "mysql", enveloped: bool = False, **source) -> bytes:
    payload = {"op": "u", "after": {"id": 1}, "source": {"connector": connector, **source}, "transaction": transaction}
    return json.dumps({"schema": {"type": "struct"}, "payload": payload} if enveloped else payload).encode()


def test_marks_name_the_transaction_of_each_event_with_or_without_connects_envelope():
    assert transaction_mark(event({"id": "gtid:7", "total_order": 2})) == "gtid:7"
    assert transaction_mark(event({"id": "gtid:7"}, enveloped=True)) == "gtid:7"
    # PostgreSQL's id carries each event's own LSN: its transaction is source.txId
    first = transaction_mark(event({"id": "731:26511584"}, "postgresql", txId=731, lsn=26511584))
    third = transaction_mark(event({"id": "731:26511936"}, "postgresql", txId=731, lsn=26511936))
    assert first == third == "txId 731", (first, third)
    assert transaction_mark(None) is TOMBSTONE
    for outside in (event(None), b"not json", b"[1, 2]", json.dumps({"op": "r", "transaction": None}).encode()):
        assert transaction_mark(outside) is None, outside


def marks(*spec: tuple[int, object]) -> list[tuple[int, object]]:
    return list(spec)


def test_a_bound_inside_a_transaction_moves_back_to_where_it_starts():
    records = marks((10, "a"), (11, "b"), (12, "b"), (13, "b"), (14, "c"))
    assert edge_before(records, 13) == Edge(11, "b")
    # between two transactions: unchanged
    assert edge_before(records, 14) == Edge(14)
    assert edge_before(records, 11) == Edge(11)


def test_tombstones_go_with_the_delete_before_them():
    # a's delete and its tombstone, then b: a bound on a's tombstone cuts nothing
    assert edge_before(marks((5, "a"), (6, TOMBSTONE), (7, "b")), 6) == Edge(6)
    # b's delete, its tombstone, more of b: the bound moves back over the tombstone to b's start
    records = marks((5, "a"), (6, TOMBSTONE), (7, "b"), (8, TOMBSTONE), (9, "b"))
    assert edge_before(records, 9) == Edge(7, "b")
    assert edge_before(records, 8) == Edge(7, "b"), "the next event with a value decides"


def test_records_outside_transactions_stop_nothing_and_are_never_cut():
    assert edge_before(marks((1, None), (2, None), (3, None)), 2) == Edge(2)  # a snapshot
    assert edge_before(marks((1, None), (2, "t"), (3, "t")), 3) == Edge(2, "t")
    assert edge_before(marks((1, "t"), (2, None)), 2) == Edge(2)
    assert edge_before(marks((0, "t")), 1) == Edge(1), "nothing after the bound yet: no cut"


def test_a_window_holding_only_the_cut_transaction_asks_to_read_further_back():
    assert edge_before(marks((20, "t"), (21, "t"), (22, "t")), 22) == Edge(20, "t", seen_whole=True)
    assert edge_before(marks((20, TOMBSTONE), (21, "t")), 21) == Edge(21, None, seen_whole=True)
