"""A merged batch's source: the batch's staged rows read back, turned into changes, reduced to
one per key and guarded against deleted keys, as the Arrow table a table format merges.

The Spark tasks write a merged batch's records exactly as an appended batch's (so the write
check, dead letters and retries are the same); at the table commit, this module reads those
files back on the driver and hands the Delta and Iceberg sinks one source table:

* the row columns, :data:`~kafka_batch_provider.core.merging.ORDER_COLUMN` (kept in the table)
  and :data:`~kafka_batch_provider.core.merging.OP_COLUMN` (``u`` or ``d``, never in the table);
* at most one change per key, the newest (:func:`~kafka_batch_provider.core.merging.reduce_changes`);
* without the changes older than a delete or truncate the table already applied
  (:class:`~kafka_batch_provider.output.deleted_keys.DeletedKeys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.change_events import changes_of
from kafka_batch_provider.core.merging import (
    DELETE_OP,
    OP_COLUMN,
    ORDER_COLUMN,
    UPSERT_OP,
    MergeSpec,
    is_unavailable,
    reduce_changes,
)
from kafka_batch_provider.output.deleted_keys import DeletedKeys
from kafka_batch_provider.output.location import Location


@dataclass
class MergeSource:
    source: pa.Table
    key_columns: tuple[str, ...]
    #: the ordering value of the batch's newest truncate (rows older than it leave the table)
    truncated_at: str | None = None
    #: columns where a kept change holds Debezium's TOAST placeholder (the table's value stays)
    unavailable: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def row_columns(self) -> list[str]:
        return [n for n in self.source.column_names if n != OP_COLUMN]


def read_batch(data: Location, manifest: Mapping[str, Any]) -> pa.Table:
    """The batch's staged rows (every file the write check counted)."""
    tables = []
    for f in manifest.get("files", []):
        with data.open_input(f"{manifest['location']}/{f['name']}") as handle:
            tables.append(pq.read_table(handle))
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def merge_source(data: Location, manifest: Mapping[str, Any], spec: MergeSpec) -> MergeSource:
    """The batch's merge source (see the module's docstring); records its deletes first."""
    batch = read_batch(data, manifest)
    value_format = str((manifest.get("options") or {}).get("value_format") or "bytes")
    found = changes_of(batch, spec, value_format)
    reduced = reduce_changes(found.changes)
    key_fields = [found.row_fields[k] for k in found.key_columns if k in found.row_fields]
    deleted = DeletedKeys(data)
    deleted.record(str(manifest["batch_id"]), key_fields, found.changes)
    newest_deletes, truncated = deleted.guard(found.key_columns)
    kept, guarded = [], 0
    for change in reduced.changes:
        floor = max(newest_deletes.get(change.key, ""), truncated or "")
        if change.op == UPSERT_OP and change.order <= floor:
            guarded += 1  # older than a delete or truncate already seen: it must not bring the key back
            continue
        kept.append(change)
    schema = pa.schema(
        [*found.row_fields.values(), pa.field(ORDER_COLUMN, pa.string()), pa.field(OP_COLUMN, pa.string())]
    )
    rows = []
    for change in kept:
        row = dict(change.row) if change.op == UPSERT_OP else dict(zip(found.key_columns, change.key))
        row[ORDER_COLUMN], row[OP_COLUMN] = change.order, change.op
        rows.append(row)
    source = pa.Table.from_pylist(rows, schema=schema)
    return MergeSource(
        source=source,
        key_columns=found.key_columns,
        truncated_at=reduced.truncated_at,
        unavailable={c for c in reduced.unavailable if pa.types.is_string(schema.field(c).type)},
        counts={
            "records": batch.num_rows,
            "changes": len(found.changes),
            "upserts": sum(1 for c in kept if c.op == UPSERT_OP),
            "deletes": sum(1 for c in kept if c.op == DELETE_OP),
            "superseded": reduced.superseded,
            "older_than_a_delete": guarded,
            "skipped": found.skipped,
        },
    )


def apply_changes(target: pa.Table, merged: MergeSource, schema: pa.Schema) -> pa.Table:
    """The rows that replace ``target`` (the table's rows a merge reads back: every row whose
    first key column takes one of the batch's values), for formats that rewrite rows themselves
    (Iceberg's copy-on-write): each row with a newer change is updated or dropped, the others
    stay as they are (unless the batch's truncate is newer), and the new keys are added.
    """
    keys = merged.key_columns
    changes = {tuple(row[k] for k in keys): row for row in merged.source.to_pylist()}
    columns = schema.names
    kept, matched = [], set()
    for row in target.to_pylist():
        key = tuple(row.get(k) for k in keys)
        change = changes.get(key)
        if change is None or change[ORDER_COLUMN] <= (row.get(ORDER_COLUMN) or ""):
            if change is not None:
                matched.add(key)  # an older change: the row stays
            if merged.truncated_at is None or (row.get(ORDER_COLUMN) or "") > merged.truncated_at:
                kept.append(row)
            continue
        matched.add(key)
        if change[OP_COLUMN] == UPSERT_OP:
            kept.append({c: row.get(c) if c in merged.unavailable and is_unavailable(change.get(c)) else change.get(c)
                         for c in columns})  # fmt: skip
    for key, change in changes.items():
        if key not in matched and change[OP_COLUMN] == UPSERT_OP:
            kept.append({c: None if is_unavailable(change.get(c)) else change.get(c) for c in columns})
    return pa.Table.from_pylist(kept, schema=schema)
