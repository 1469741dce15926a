"""A bounded batch of Debezium change events ends between source transactions (plan step).

For every partition whose range the bound cuts short, the records just before the bound are
read and its end moves back to where the transaction it would cut starts
(:func:`~kafka_batch_provider.core.source_transactions.edge_before`), so the table only ever
holds whole transactions. The record at the bound is read first (without transaction metadata
nothing more is read); then the window read before it grows (x4) until it reaches the
transaction's start, up to LAST_WINDOW records. Only each record's mark is kept, never its value.
A range that is one transaction from its start, or a transaction longer than the last window,
keeps its bound: the batch must move, and the plan says so.

Values must be JSON (Connect's JSON converter, with or without schemas, or the registry's
JSON Schema format); for Avro and Protobuf values the bound stays where it is, and the plan says
that too.
"""

from __future__ import annotations

from dataclasses import replace

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.plan import OffsetPlan, batch_id_for
from kafka_batch_provider.core.source_transactions import TOMBSTONE, Mark, edge_before, transaction_mark
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.steps.commit import Progress

#: Records read before a bound at first; the window grows x4 until it holds a transaction's start,
#: up to LAST_WINDOW (beyond it the bound stays, and the plan says so: the plan step reads marks,
#: not values, but a bulk UPDATE of millions of rows is one transaction).
FIRST_WINDOW = 256
LAST_WINDOW = 65_536
#: Registry formats whose values are JSON after the 5-byte header.
JSON_FORMATS = (None, "json-schema")
HEADER = 5


def at_transaction_edges(
    kafka: KafkaOffsets, plan: OffsetPlan, value_format: str | None, progress: Progress
) -> tuple[OffsetPlan, list[str]]:
    """The plan with each bounded range ending between transactions, and what moved, line by line."""
    log_ends = {key: state[2] for key, state in plan.extra.get("snapshot", {}).items()}
    cut = [r for r in plan.ranges if r.size > 0 and r.end < log_ends.get(r.tp.key, r.end)]
    if not cut:
        return plan, []
    if value_format not in JSON_FORMATS:
        notes = [f"{value_format} values: the bound stays where it is, not moved to a source transaction's edge"]
    else:
        edges = {r.tp.key: edge_of(kafka, r, value_format) for r in cut}
        notes = [note for _, note in edges.values() if note]
        ranges = tuple(replace(r, end=edges[r.tp.key][0]) if r.tp.key in edges else r for r in plan.ranges)
        if ranges != plan.ranges:
            batch_id = batch_id_for(plan.mode, plan.group_id, plan.seq, plan.topic_ids, ranges)
            plan = replace(plan, ranges=ranges, batch_id=batch_id)
    for note in notes:
        progress(note)
    return plan, notes


def edge_of(kafka: KafkaOffsets, r: OffsetRange, value_format: str | None) -> tuple[int, str | None]:
    """Where ``r`` may end, and a line saying why when it moved (or could not)."""

    def mark(value: bytes | None) -> Mark:
        return transaction_mark(json_of(value, value_format))

    probe = kafka.marks_around(r.tp, r.end, r.end, mark)
    if next((m for _, m in probe if m is not TOMBSTONE), None) is None:
        return r.end, None  # the next event is in no transaction (without metadata: one record read)
    window = FIRST_WINDOW
    while True:
        low = max(r.start, r.end - window)
        edge = edge_before(kafka.marks_around(r.tp, low, r.end, mark), r.end)
        if edge.transaction is None:
            return r.end, None
        if edge.seen_whole and low > r.start and window < LAST_WINDOW:
            window *= 4
            continue
        if edge.seen_whole and low > r.start:
            return r.end, (
                f"{r.tp.key}: source transaction {edge.transaction} holds more than {window} records before "
                f"offset {r.end}: this batch ends inside it"
            )
        if edge.end == r.start:
            return r.end, (
                f"{r.tp.key}: source transaction {edge.transaction} holds more than this batch's "
                f"{r.size} record(s) from offset {r.start}: this batch ends inside it"
            )
        return edge.end, (
            f"{r.tp.key}: the bound moved from offset {r.end} to {edge.end}, where source transaction "
            f"{edge.transaction} starts: a batch holds whole transactions"
        )


def json_of(value: bytes | None, value_format: str | None) -> bytes | None:
    """The JSON text of a value (the registry's header dropped)."""
    return value[HEADER:] if value is not None and value_format is not None else value
