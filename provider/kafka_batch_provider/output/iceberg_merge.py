"""A merged batch into an Iceberg table: one copy-on-write snapshot, each data file read once.

pyiceberg has no MERGE. Its ``upsert`` scans the matching rows, then deletes them (a second scan
and a rewrite of every file holding one) and appends the new rows: two passes over the files and
two snapshots. Here, in one ``overwrite`` snapshot carrying the batch's summary:

1. the files that may hold a key of the batch (pruned by every key column's values, or all files
   when the batch truncates) are read one at a time;
2. each file's rows are joined with the batch's changes on the key, by the rules Delta's MERGE
   follows (:meth:`kafka_batch_provider.output.delta.DeltaSink._merge`): a row with a newer change
   is dropped (replaced, or deleted), a row older than the batch's truncate is dropped, the others
   stay; a file that loses no row is left alone, the others are rewritten without those rows;
3. the batch's upserts are appended, except where the table holds a row at least as new.

A column a change left unavailable (Debezium's TOAST placeholder) takes the replaced row's value.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.core.merging import OP_COLUMN, ORDER_COLUMN, UPSERT_OP
from kafka_batch_provider.output.merge_source import MergeSource

SOURCE_ORDER = "__kafka_batch_source_order"
ROW = "__kafka_batch_row"


def merge_into(
    table: Any, transaction: Any, merged: MergeSource, source: pa.Table, summary: Mapping[str, str]
) -> dict[str, int]:
    """Stage the batch's snapshot in ``transaction``; how many files it rewrote and added."""
    from pyiceberg.expressions import AlwaysTrue, And
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    metadata = transaction.table_metadata
    schema = metadata.schema()
    arrow_schema = schema.as_arrow()
    keys = list(merged.key_columns)
    if merged.truncated_at is not None:
        row_filter: Any = AlwaysTrue()
    elif source.num_rows:
        row_filter = reduce(And, [key_filter(source.column(k), k) for k in keys])
    else:
        row_filter = None
    tasks = list(table.scan(row_filter=row_filter).plan_files()) if row_filter is not None else []
    changes = source.select([*keys, ORDER_COLUMN]).rename_columns([*keys, SOURCE_ORDER])
    stays: set[tuple[Any, ...]] = set()  # keys whose row is at least as new as the batch's change
    replaced: dict[tuple[Any, ...], dict[str, Any]] = {}  # rows a change with a kept column replaces
    commit_uuid, counter = uuid.uuid4(), itertools.count(0)
    removed, written = [], []
    for task in tasks:
        rows = ArrowScan(metadata, table.io, schema, AlwaysTrue()).to_table(tasks=[task])
        drop = dropped_rows(rows, changes, keys, merged, stays, replaced)
        if not drop.any():
            continue
        removed.append(task.file)
        kept = rows.filter(pa.array(~drop))
        if kept.num_rows:
            written += _dataframe_to_data_files(
                table_metadata=metadata, df=kept, io=table.io, write_uuid=commit_uuid, counter=counter
            )
    new_rows = rows_to_add(source, keys, merged, stays, replaced, arrow_schema)
    if new_rows.num_rows:
        written += _dataframe_to_data_files(
            table_metadata=metadata, df=new_rows, io=table.io, write_uuid=commit_uuid, counter=counter
        )
    if removed or written:
        with transaction.update_snapshot(snapshot_properties=dict(summary)).overwrite(commit_uuid) as snapshot:
            for data_file in removed:
                snapshot.delete_data_file(data_file)
            for data_file in written:
                snapshot.append_data_file(data_file)
    else:  # nothing to change: an empty append still records the batch
        with transaction.update_snapshot(snapshot_properties=dict(summary)).fast_append():
            pass
    return {"files_rewritten": len(removed), "files_added": len(written)}


#: Up to this many distinct values a key column prunes the files by the values themselves; beyond
#: it by their range (pyiceberg makes a Python object of each value: 500,000 took 6 s).
IN_LIMIT = 1000


def key_filter(values: Any, column: str) -> Any:
    """The files that may hold one of ``values`` in ``column``: by value, or by range when many."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual

    distinct = values.unique()
    if len(distinct) <= IN_LIMIT:
        return In(column, distinct.to_pylist())
    low, high = pc.min_max(distinct).values()
    return And(GreaterThanOrEqual(column, low.as_py()), LessThanOrEqual(column, high.as_py()))


def dropped_rows(
    rows: pa.Table,
    changes: pa.Table,
    keys: list[str],
    merged: MergeSource,
    stays: set[tuple[Any, ...]],
    replaced: dict[tuple[Any, ...], dict[str, Any]],
) -> np.ndarray:
    """Which of a file's rows leave the table (a boolean per row); notes the keys whose row stays
    although the batch changes them, and the rows whose kept columns a change needs."""
    drop = np.zeros(rows.num_rows, dtype=bool)
    order = pc.fill_null(rows.column(ORDER_COLUMN), "")
    if merged.truncated_at is not None:
        drop |= pc.less(order, merged.truncated_at).to_numpy(zero_copy_only=False)
    if not keys or not changes.num_rows:
        return drop
    indexed = (
        rows.select(keys).append_column(ORDER_COLUMN, order).append_column(ROW, pa.array(np.arange(rows.num_rows)))
    )
    joined = indexed.join(changes, keys=keys, join_type="inner")
    if not joined.num_rows:
        return drop
    newer = pc.greater(joined.column(SOURCE_ORDER), joined.column(ORDER_COLUMN)).to_numpy(zero_copy_only=False)
    positions = joined.column(ROW).to_numpy()
    drop[positions[newer]] = True
    older = joined.filter(pa.array(~newer))
    stays.update(zip(*(older.column(k).to_pylist() for k in keys)))
    if merged.keep and newer.any():
        for position in positions[newer]:
            row = {name: rows.column(name)[int(position)].as_py() for name in merged.keep}
            replaced[tuple(rows.column(k)[int(position)].as_py() for k in keys)] = row
    return drop


def rows_to_add(
    source: pa.Table,
    keys: list[str],
    merged: MergeSource,
    stays: set[tuple[Any, ...]],
    replaced: dict[tuple[Any, ...], dict[str, Any]],
    schema: pa.Schema,
) -> pa.Table:
    """The batch's upserts, but for keys whose row stays; a kept column takes the replaced row's value."""
    upserts = source.filter(pc.equal(source.column(OP_COLUMN), UPSERT_OP))
    if stays:
        key_values = zip(*(upserts.column(k).to_pylist() for k in keys))
        upserts = upserts.filter(pa.array([key not in stays for key in key_values]))
    columns = {
        name: upserts.column(name)
        if name in upserts.column_names
        else pa.nulls(upserts.num_rows, schema.field(name).type)
        for name in schema.names
    }
    for column, flag in merged.keep.items():
        flags = upserts.column(flag).to_pylist()
        key_values = list(zip(*(upserts.column(k).to_pylist() for k in keys)))
        values = columns[column].to_pylist()
        columns[column] = pa.array(
            [
                replaced.get(key, {}).get(column) if kept else value
                for key, kept, value in zip(key_values, flags, values)
            ],
            schema.field(column).type,
        )
    return pa.table(columns, schema=schema)
