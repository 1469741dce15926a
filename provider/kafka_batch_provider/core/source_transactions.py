"""Where a bounded batch of change events may end: never inside a source transaction.

A batch bounded by ``--max-records`` ends where the offsets run out, which can be halfway
through a transaction of the source database: until the next batch, the table would show a
transfer's debit without its credit, a state the source never had. When Debezium marks each
event's transaction (``provide.transaction.metadata=true``), the plan step reads the records
around each partition's bound and moves the bound back to where the transaction it would cut
starts (:mod:`kafka_batch_provider.steps.transaction_edges` does the reading; this module only
decides).

Each record is reduced to a mark:

- a transaction's identity (a string);
- :data:`TOMBSTONE` for a record without a value: Debezium writes one right after a delete, in
  the same transaction, so it goes with the records around it;
- ``None`` for a record outside any transaction: a snapshot read (``op=r``), a heartbeat, a value
  that is not a Debezium event, or a connector without transaction metadata.

Only each partition's own order is known here, so a transaction whose events went to several
partitions (Debezium partitions by key) is kept whole in each partition, not across them
(docs/merged-tables.md says what that can show).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final


class _Tombstone:
    def __repr__(self) -> str:
        return "TOMBSTONE"


#: The mark of a record without a value.
TOMBSTONE: Final = _Tombstone()

Mark = str | _Tombstone | None


def transaction_mark(value: bytes | None) -> Mark:
    """The transaction a JSON Debezium change event belongs to (with or without Connect's
    schema envelope).

    PostgreSQL's ``transaction.id`` is ``<txId>:<the event's LSN>``, different for every event of
    one transaction (seen with Debezium 3.6.1), so its identity is ``source.txId``; every other
    connector's id is the same for all the events of a transaction.
    """
    if value is None:
        return TOMBSTONE
    try:
        event: Any = json.loads(value)
    except ValueError:
        return None
    if isinstance(event, dict) and "payload" in event and "schema" in event:
        event = event["payload"]
    if not isinstance(event, dict):
        return None
    transaction, source = event.get("transaction"), event.get("source")
    if not isinstance(transaction, dict) or transaction.get("id") is None:
        return None
    if isinstance(source, dict) and source.get("connector") == "postgresql" and source.get("txId") is not None:
        return f"txId {source['txId']}"
    return str(transaction["id"])


@dataclass(frozen=True)
class Edge:
    """Where a partition's range may end.

    :param end: the new end (the bound itself when it cuts no transaction).
    :param transaction: the transaction the bound would have cut (``None``: it cut none).
    :param seen_whole: no record read before the bound belongs to another transaction: read
        further back, unless the records read start where the range starts.
    """

    end: int
    transaction: Mark = None
    seen_whole: bool = False


def edge_before(records: Sequence[tuple[int, Mark]], end: int) -> Edge:
    """The last place at or before ``end`` where no transaction is cut.

    :param records: ``(offset, mark)`` in offset order: those just before ``end``, then those from
        ``end`` up to the first one with a value (fewer when the log ends first).
    :param end: the bound: the first offset the batch would leave out.
    """
    after = next((mark for offset, mark in records if offset >= end and mark is not TOMBSTONE), TOMBSTONE)
    if after is None or after is TOMBSTONE:  # the next event is in no transaction, or there is none yet
        return Edge(end)
    before = [(offset, mark) for offset, mark in records if offset < end]
    # The last record of another transaction (or none): the cut one's records start after it.
    other = next((i for i in range(len(before) - 1, -1, -1) if before[i][1] not in (after, TOMBSTONE)), None)
    start = 0 if other is None else other + 1
    first = next((offset for offset, mark in before[start:] if mark == after), None)
    return Edge(end if first is None else first, None if first is None else after, seen_whole=other is None)
