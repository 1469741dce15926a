"""A merged batch's source: the batch's staged rows read back, turned into changes, reduced to
one per key and guarded against deleted keys, as the Arrow table a table format merges.

The Spark tasks write a merged batch's records exactly as an appended batch's (so the write
check, dead letters and retries are the same); at the table commit, this module reads those
files back on the driver and hands the Delta and Iceberg sinks one source table:

* the row columns, :data:`~kafka_batch_provider.core.merging.ORDER_COLUMN` (kept in the table),
  :data:`~kafka_batch_provider.core.merging.OP_COLUMN` (``u`` or ``d``) and, for a column some
  change left unavailable (Debezium's TOAST placeholder, never written), a flag saying the row
  keeps its value (neither is a table column);
* at most one change per key, the newest (:func:`~kafka_batch_provider.core.merging.reduce_changes`);
* without the changes older than a delete or truncate the table already applied
  (:class:`~kafka_batch_provider.output.deleted_keys.DeletedKeys`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_batch_provider.core.arrow_changes import Events, decode, reduce_events
from kafka_batch_provider.core.arrow_upserts import ArrowUpserts, arrow_upserts
from kafka_batch_provider.core.change_events import Changes, changes_of
from kafka_batch_provider.core.merge_schema import wide_type, widened
from kafka_batch_provider.core.merging import (
    CHANGES,
    DELETE_OP,
    OP_COLUMN,
    ORDER_COLUMN,
    TRUNCATE_OP,
    UNKNOWN_ORIGIN,
    UPSERT,
    UPSERT_OP,
    Change,
    MergeSpec,
    Reduced,
    is_unavailable,
    reduce_changes,
)
from kafka_batch_provider.errors import ConfigError, SchemaError
from kafka_batch_provider.output.deleted_keys import DeletedKeys, deletes_table
from kafka_batch_provider.output.location import Location

#: The merge source's flag column saying a change left ``column`` unavailable (a TOASTed value
#: Debezium did not send): the row keeps its value.
KEEP_PREFIX = "_kafka_keep__"


@dataclass
class MergeSource:
    source: pa.Table
    key_columns: tuple[str, ...]
    #: the ordering value of the batch's newest truncate (rows older than it leave the table)
    truncated_at: str | None = None
    #: ``{column: its flag column}`` for columns some change left unavailable (TOAST)
    keep: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def row_columns(self) -> list[str]:
        """The columns a table row takes (not the op and flag columns)."""
        helpers = {OP_COLUMN, *self.keep.values()}
        return [n for n in self.source.column_names if n not in helpers]

    @property
    def row_schema(self) -> pa.Schema:
        return pa.schema([self.source.schema.field(n) for n in self.row_columns])


#: The table's rows at some keys, as the batch finds the table: ``(key columns, keys, columns,
#: earlier)`` to ``{key: {column: value}}`` (a sink's ``rows_at`` on the table state it merges into;
#: with ``earlier``, a key the table no longer holds is looked for as the earlier batches found it).
RowLookup = Callable[..., dict[tuple[Any, ...], dict]]
#: How many earlier batches a moved row's old key is looked for in (a key change's delete and its
#: create can land in two batches: they are in two partitions, each bounded on its own).
EARLIER_BATCHES = 3


def merge_batch(sink: Any, manifest: dict[str, Any], table: Any) -> MergeSource:
    """A table sink's merge source of the batch ``manifest`` for ``table`` (the state it merges into;
    its deletes recorded first, its counts put into the manifest); deleted keys of the sink's
    committed batches count."""
    recreated = recreated_topics(sink, manifest)

    seq = int(manifest["seq"])

    def lookup(
        keys: Sequence[str], wanted: Collection[tuple[Any, ...]], columns: Sequence[str], earlier: bool = False
    ) -> dict:
        found = sink.rows_at(table, keys, wanted, columns) if table is not None else {}
        for before in range(seq - 1, max(seq - 1 - EARLIER_BATCHES, 0), -1) if earlier else ():
            missing = set(wanted) - set(found)
            if not missing:
                break
            found.update(sink.rows_before(before, keys, missing, columns))
        return found

    merged = merge_source(sink.data, manifest, sink.merge, DeletedKeys(sink.data, sink), recreated, lookup)
    sink.check_columns(merged.row_schema)
    manifest["merged"] = merged.counts
    return merged


#: How far back a batch looks for the last batch that read each of its topics (entries).
RECREATED_LOOKBACK = 200


def recreated_topics(sink: Any, manifest: Mapping[str, Any]) -> set[str]:
    """The batch's topics that were deleted and recreated since the table last read records of them
    (another topic id): their offsets started again at 0. The log is walked back to that batch (an
    offsets-only batch in between recorded the new id already), at most RECREATED_LOOKBACK entries."""
    now = manifest.get("topic_ids") or {}
    wanted = {r["topic"] for r in manifest.get("ranges") or () if read_any(r) and now.get(r["topic"])}
    found: set[str] = set()
    seq = int(manifest["seq"]) - 1
    while wanted and seq >= 1 and int(manifest["seq"]) - seq <= RECREATED_LOOKBACK:
        entry = sink.entry(seq)
        if entry is None:
            break
        then = entry.get("topic_ids") or {}
        for topic in [t for t in wanted if t not in then]:
            wanted.discard(topic)  # not known then: never read before
        for r in entry.get("ranges") or ():
            if r["topic"] in wanted and read_any(r):
                if then.get(r["topic"]) != now[r["topic"]]:
                    found.add(r["topic"])
                wanted.discard(r["topic"])
        seq -= 1
    return found


def read_any(entry_range: Mapping[str, Any]) -> bool:
    """Whether a log entry's range read records (not only moved the offsets)."""
    if "rows" in entry_range and entry_range["rows"] is not None:
        return int(entry_range["rows"]) > 0
    return int(entry_range.get("end", 0)) > int(entry_range.get("start", 0))


def refuse_offsets_of_a_recreated_topic(recreated: Collection[str], by_offset: Collection[str], label: str) -> None:
    """A recreated topic's offsets start again at 0: a table ordering changes by offsets would find
    every change older than the row it changes and ignore it. Refused before anything is written."""
    both = sorted(set(recreated) & set(by_offset))
    if both:
        raise ConfigError(
            f"{label}: topic {both[0]!r} was deleted and recreated since the table's previous batch (a new topic "
            "id), and this table orders its changes by Kafka offsets, which started again at 0: its changes would "
            "look older than the rows they change. Ingest the recreated topic into a new table (nothing was written)"
        )


def read_batch(data: Location, manifest: Mapping[str, Any]) -> pa.Table:
    """The batch's staged rows (every file the write check counted)."""
    tables = []
    for f in manifest.get("files", []):
        with data.open_input(f"{manifest['location']}/{f['name']}") as handle:
            tables.append(pq.read_table(handle))
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


#: Records read back and decoded at a time: one chunk's raw values are what the driver holds at
#: once (the decoded events, far smaller, are kept for the whole batch).
CHUNK_RECORDS = 10_000


def decoded_batch(data: Location, manifest: Mapping[str, Any], spec: MergeSpec, value_format: str) -> Events | None:
    """The batch's change events decoded chunk by chunk (:func:`~kafka_batch_provider.core.arrow_changes.decode`);
    ``None`` when the record rule must read the batch."""
    parts: list[Events] = []
    first = 0
    for chunk in prefetched(staged_chunks(data, manifest)):
        events = decode(pa.Table.from_batches([chunk]), spec, value_format, first)
        known = next((p.key_columns for p in parts if p.key_columns), ())
        if events is None or (known and events.key_columns and events.key_columns != known):
            return None
        if parts and events.inferred != parts[0].inferred:
            return None  # (with schemas, then without: the record rule types the batch as one)
        parts.append(events)
        first += chunk.num_rows
        del chunk
        pa.default_memory_pool().release_unused()  # (the raw chunk's memory back to the system)
    if not parts:
        return None
    try:
        table = pa.concat_tables([p.table for p in parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None  # a column's type changes within the batch: the record rule names it in one line
    keys = next((p.key_columns for p in parts if p.key_columns), ())
    if not keys and table.num_rows:
        return None
    return Events(table, keys, set().union(*(p.wanted for p in parts)), parts[0].inferred)


def staged_chunks(data: Location, manifest: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
    """The batch's staged records, :data:`CHUNK_RECORDS` at a time, in :func:`read_batch`'s order."""
    for f in manifest.get("files", []):
        with data.open_input(f"{manifest['location']}/{f['name']}") as handle:
            yield from pq.ParquetFile(handle).iter_batches(batch_size=CHUNK_RECORDS)


def prefetched(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, the next one read by a thread while the caller works on this one (pyarrow reads
    and decompresses without the GIL: the read and the decoding overlap on two cores)."""
    with ThreadPoolExecutor(1) as pool:
        ahead = pool.submit(next, items, None)
        while (item := ahead.result()) is not None:
            ahead = pool.submit(next, items, None)
            yield item


def read_rows(data: Location, manifest: Mapping[str, Any], positions: np.ndarray) -> pa.Table:
    """The batch's staged records at ``positions`` (in the order :func:`read_batch` reads them), a
    chunk at a time: the raw values of the others are never all held."""
    tables, first = [], 0
    if positions.size:
        for chunk in staged_chunks(data, manifest):
            inside = positions[(positions >= first) & (positions < first + chunk.num_rows)] - first
            if inside.size:
                tables.append(pa.Table.from_batches([chunk]).take(pa.array(inside)))
            first += chunk.num_rows
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def merge_source(
    data: Location,
    manifest: Mapping[str, Any],
    spec: MergeSpec,
    deleted: DeletedKeys,
    recreated: Collection[str] = (),
    lookup: RowLookup | None = None,
) -> MergeSource:
    """The batch's merge source (see the module's docstring); records its deletes in ``deleted``
    first. ``recreated``: the batch's topics recreated since the previous batch (refused where
    offsets order the changes); ``lookup``: the table's rows at other keys (a moved row's old key)."""
    value_format = str((manifest.get("options") or {}).get("value_format") or "bytes")
    current = (int(manifest["seq"]), str(manifest["batch_id"]))
    label = f"batch {manifest['batch_id']}"
    batch = read_batch(data, manifest) if spec.mode == UPSERT else None  # (upserts are read whole)
    typed = arrow_upserts(batch, spec, value_format) if batch is not None else None
    if typed is not None:
        refuse_offsets_of_a_recreated_topic(recreated, set() if spec.order_by else recreated, label)
        return typed_merge_source(typed, deleted, current)
    events = decoded_batch(data, manifest, spec, value_format) if spec.mode == CHANGES else None
    columnar = reduce_events(events, spec) if events is not None else None
    # The records the columns did not decide (all of them without columns) take the record rule.
    if columnar is not None:
        record_batch = read_rows(data, manifest, columnar.record_rule)
    else:
        record_batch = batch if batch is not None else read_batch(data, manifest)
    found = changes_of(record_batch, spec, value_format)
    refuse_offsets_of_a_recreated_topic(recreated, found.by_offset | (columnar.by_offset if columnar else set()), label)
    reduced = reduce_changes(without_stale(found.changes, found.key_columns, lookup))
    key_fields = [found.row_fields[k] for k in found.key_columns if k in found.row_fields]
    recorded = deletes_table(key_fields, found.changes)
    if columnar is not None:
        recorded = pa.concat_tables([columnar.deletes, recorded], promote_options="permissive")
    deleted.record_table(*current, recorded)
    by_record = record_rows(found, reduced, deleted, current, lookup, label)
    truncates = sum(1 for c in found.changes if c.op == TRUNCATE_OP)
    counts = {
        "records": record_batch.num_rows,
        "changes": len(found.changes),
        "superseded": reduced.superseded,
        "truncates": truncates,
        "skipped": found.skipped,
        **by_record.counts,
    }
    if columnar is None:
        return MergeSource(by_record.source, found.key_columns, reduced.truncated_at, by_record.keep, counts)
    rows, guarded = guarded_rows(widened(columnar.rows), columnar.key_columns, deleted, current)
    source = rows
    if by_record.source.num_rows:  # (the rows the record rule reduced: keys with placeholders, truncates)
        try:
            source = pa.concat_tables([rows, by_record.source], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"{label}: a column's type changes within the batch: {str(exc).splitlines()[0]}"
            ) from None
    upserts = pc.sum(pc.equal(source.column(OP_COLUMN), UPSERT_OP)).as_py() or 0
    counts.update(
        changes=columnar.counts["changes"],  # (the record rule's truncates are the columns' too)
        superseded=counts["superseded"] + columnar.counts["superseded"],
        skipped=columnar.counts["skipped"],
        older_than_a_delete=counts["older_than_a_delete"] + guarded,
        records=columnar.counts["records"],
        upserts=upserts,
        deletes=source.num_rows - upserts,
    )
    truncated_at = max(filter(None, (columnar.truncated_at, reduced.truncated_at)), default=None)
    return MergeSource(source, columnar.key_columns, truncated_at, by_record.keep, counts)


def record_rows(
    found: Changes,
    reduced: Reduced,
    deleted: DeletedKeys,
    current: tuple[int, str],
    lookup: RowLookup | None,
    label: str,
) -> MergeSource:
    """The rows of changes reduced record by record (guarded, placeholders resolved) as a source."""
    upserts = [c.key for c in reduced.changes if c.op == UPSERT_OP]
    newest_deletes, truncated = deleted.guard(found.key_columns, upserts, current) if reduced.changes else ({}, None)
    kept, guarded = [], 0
    for change in reduced.changes:
        floor = max(newest_deletes.get(change.key, ""), truncated or "")
        if change.op == UPSERT_OP and change.order <= floor:
            guarded += 1  # older than a delete or truncate already seen: it must not bring the key back
            continue
        kept.append(change)
    rows, unavailable = [], set()
    borrowed: list[tuple[dict[str, Any], str, tuple[Any, ...]]] = []  # (row, column, the key it takes it from)
    for change in kept:
        row = dict(change.row) if change.op == UPSERT_OP else dict(zip(found.key_columns, change.key))
        for column, value in list(row.items()):
            if not is_unavailable(value):
                continue
            row[column] = None  # never the placeholder
            if column in change.origins:  # a moved row: its old key's value, looked up below
                borrowed.append((row, column, change.origins[column]))
            else:  # the table's value stays (a new row: null)
                row[KEEP_PREFIX + column] = True
                unavailable.add(column)
        row[ORDER_COLUMN], row[OP_COLUMN] = change.order, change.op
        rows.append(row)
    unresolved = borrow_values(borrowed, found.key_columns, lookup)
    keep = {column: KEEP_PREFIX + column for column in sorted(unavailable)}
    schema = pa.schema(
        [
            *(f.with_type(wide_type(f.type)) for f in found.row_fields.values()),
            pa.field(ORDER_COLUMN, pa.string()),
            pa.field(OP_COLUMN, pa.string()),
            *(pa.field(flag, pa.bool_()) for flag in keep.values()),
        ]
    )
    try:
        source = pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise SchemaError(f"{label}: a value does not fit its column's type: {exc}") from None
    counts = {
        "upserts": sum(1 for c in kept if c.op == UPSERT_OP),
        "deletes": sum(1 for c in kept if c.op == DELETE_OP),
        "older_than_a_delete": guarded,
        # a moved row's TOASTed values whose old key's row was not found (null in the table)
        **({"unresolved": unresolved} if unresolved else {}),
    }
    return MergeSource(source, found.key_columns, reduced.truncated_at, keep, counts)


def guarded_rows(
    rows: pa.Table, key_columns: Sequence[str], deleted: DeletedKeys, current: tuple[int, str]
) -> tuple[pa.Table, int]:
    """``rows`` without the upserts older than a delete or truncate the table has seen (they must not
    bring the key back), in columns; how many were dropped."""
    newest, truncated = deleted.newest_table(key_columns, rows.select(list(key_columns)), current)
    if newest is None and truncated is None:
        return rows, 0
    at = np.full(rows.num_rows, "", dtype=object)
    if newest is not None:
        index = rows.select(list(key_columns)).append_column("__i", pa.array(np.arange(rows.num_rows)))
        joined = index.join(newest, keys=list(key_columns), join_type="inner")
        at[joined.column("__i").to_numpy()] = joined.column(ORDER_COLUMN).to_numpy(zero_copy_only=False)
    floor = pa.array(at, pa.string())
    if truncated is not None:
        floor = pc.max_element_wise(floor, pa.scalar(truncated))
    older = pc.and_(pc.equal(rows.column(OP_COLUMN), UPSERT_OP), pc.less_equal(rows.column(ORDER_COLUMN), floor))
    dropped = pc.sum(older).as_py() or 0
    return (rows.filter(pc.invert(older)) if dropped else rows), dropped


def without_stale(changes: list[Change], key_columns: Sequence[str], lookup: RowLookup | None) -> list[Change]:
    """``changes`` without those the table's row at their key is already as new as (a redelivery
    after a connector restart, a replay): the merge would ignore them, and a placeholder must not
    take its value through them. The same event sent again has a later offset, so the ordering
    values are compared without their last component (the offset) where they have a source position."""
    keyed = [c for c in changes if c.op != TRUNCATE_OP]
    placeholders = any(c.row and any(is_unavailable(v) for v in c.row.values()) for c in keyed)
    if not placeholders or lookup is None:  # (only a placeholder's chain can go wrong through them)
        return changes
    found = lookup(key_columns, {c.key for c in keyed}, [ORDER_COLUMN])
    if not found:
        return changes

    def stale(change: Change) -> bool:
        standing = (found.get(change.key) or {}).get(ORDER_COLUMN)
        if not standing:
            return False
        if "." in change.order and "." in standing:  # (a source position, then the offset)
            return change.order.rpartition(".")[0] <= standing.rpartition(".")[0]
        return change.order <= standing

    return [c for c in changes if c.op == TRUNCATE_OP or not stale(c)]


def borrow_values(
    borrowed: list[tuple[dict[str, Any], str, tuple[Any, ...]]], key_columns: Sequence[str], lookup: RowLookup | None
) -> int:
    """Fill moved rows' placeholder columns with their old keys' values in the table; how many the
    table did not have (they stay null)."""
    if not borrowed:
        return 0
    wanted = {origin for _, _, origin in borrowed if origin != UNKNOWN_ORIGIN}
    columns = sorted({column for _, column, _ in borrowed})
    found = lookup(key_columns, wanted, columns, earlier=True) if lookup is not None and wanted else {}
    missing = 0
    for row, column, origin in borrowed:
        if origin in found:
            row[column] = found[origin].get(column)
        else:
            missing += 1
    return missing


def rows_by_key(table: pa.Table, key_columns: Sequence[str], wanted: Collection[tuple[Any, ...]]) -> dict:
    """``{key: row}`` of ``table``'s rows whose key is one of ``wanted`` (the sinks' ``rows_at``)."""
    wanted = set(wanted)
    keys = zip(*(table.column(k).to_pylist() for k in key_columns))
    return {key: row for key, row in zip(keys, table.to_pylist()) if key in wanted}


def typed_merge_source(typed: ArrowUpserts, deleted: DeletedKeys, current: tuple[int, str]) -> MergeSource:
    """The merge source of upserts reduced with Arrow (:mod:`kafka_batch_provider.core.arrow_upserts`)."""
    deleted.record_table(*current, typed.deletes)
    rows, guarded = guarded_rows(widened(typed.rows), typed.key_columns, deleted, current)
    upserts = pc.sum(pc.equal(rows.column(OP_COLUMN), UPSERT_OP)).as_py() or 0
    counts = {
        **typed.counts,
        "upserts": upserts,
        "deletes": rows.num_rows - upserts,
        "truncates": 0,
        "older_than_a_delete": guarded,
        "skipped": 0,
    }
    return MergeSource(source=rows, key_columns=typed.key_columns, counts=counts)
