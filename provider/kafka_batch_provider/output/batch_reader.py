"""Read exactly one committed batch back from its output, with the output's own reader.

A downstream DAG scheduled on the output's asset gets the batch's facts in the event's extra
(:func:`~kafka_batch_provider.core.assets.batch_event_extra`): its log sequence number and its
offset ranges per partition. Those rows, and no others, are the batch:

* the Parquet layout: the files of the batch's log entry (its own folder), through the output's
  filesystem; once upkeep compacted them, the layout's readable files, filtered by the ranges;
* Delta: the table at the batch's commit version (deltalake), filtered by the ranges (the newest
  version once that one is vacuumed away);
* Iceberg: the batch's snapshot (pyiceberg), filtered by the ranges (the current one once that
  snapshot expired);
* a database table (PostgreSQL, MariaDB): the table as it is, filtered by the ranges in SQL (a
  merged table holds the rows of the batch that are still each key's newest).

The ranges are the filter for the tables because a table's later compaction rewrites files but
keeps each record once: the batch's records are those of its ranges, whatever files hold them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from kafka_batch_provider.errors import ManifestError, StorageError
from kafka_batch_provider.output.database_sink import DatabaseSink
from kafka_batch_provider.output.sink import DELTA, ICEBERG
from kafka_batch_provider.output.store import BatchStore


def read_batch(store: BatchStore, event: Mapping[str, Any], columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of the batch an asset event's extra names (``seq``, ``batch_id``, ``ranges``).

    :raises ManifestError: the output's log has no such batch (another output, or a damaged extra).
    """
    entry = store.log.entry(int(event["seq"]))
    if entry is None or entry.get("batch_id") != event["batch_id"]:
        raise ManifestError(
            f"{store.root}: the output's log has no batch {event['batch_id']} at entry {event['seq']}: "
            "the event names another output"
        )
    wanted = list(columns) if columns else None
    rows = in_ranges(event["ranges"])
    if store.format == DELTA:
        version = event.get("table_version")
        try:
            table = store.sink.table() if version is None else store.sink.table_at(int(version))
        except StorageError:  # the version is vacuumed away: the rows are in the newest one still
            table = store.sink.table()
        return table.to_pyarrow_dataset().to_table(columns=wanted, filter=rows)
    if store.format == ICEBERG:
        table = store.sink.table()
        snapshot = event.get("snapshot_id")
        if snapshot is not None and table.snapshot_by_id(int(snapshot)) is None:
            snapshot = None  # expired: the rows are in the current snapshot still
        fields = tuple(wanted) if wanted else ("*",)
        return table.scan(
            row_filter=iceberg_filter(event["ranges"]), snapshot_id=snapshot, selected_fields=fields
        ).to_arrow()
    if isinstance(store.sink, DatabaseSink):
        return store.sink.rows_in_ranges(event["ranges"], wanted)
    if store.data_uri(entry) is None:  # a batch without files (only dead letters, or nothing to read)
        return pa.table({name: pa.array([], pa.string()) for name in wanted or ["topic"]})
    files = [store.data.path(entry["location"], f["name"]) for f in entry.get("files") or ()]
    if not all(store.data.fs.exists(f) for f in files):  # compacted since: the layout's files hold the rows
        files = [f.split("://", 1)[1] if "://" in f else f for f in store.sink.readable_files()]  # fs paths
    dataset = ds.dataset(files, format="parquet", filesystem=store.data.fs)
    # Every file's columns, not the first's: compacted files of older schema versions lack the
    # columns a newer version added (they read as null there).
    schema = pa.unify_schemas([f.physical_schema for f in dataset.get_fragments()], promote_options="permissive")
    dataset = ds.dataset(files, schema=schema, format="parquet", filesystem=store.data.fs)
    return dataset.to_table(columns=wanted, filter=rows)


def in_ranges(ranges: Sequence[Mapping[str, Any]]) -> pc.Expression:
    """Rows of any of ``ranges`` (``topic``, ``partition``, ``[start, end)``) as a pyarrow filter."""
    found = None
    for r in ranges:
        one = (
            (pc.field("topic") == r["topic"])
            & (pc.field("partition") == int(r["partition"]))
            & (pc.field("offset") >= int(r["start"]))
            & (pc.field("offset") < int(r["end"]))
        )
        found = one if found is None else found | one
    return found if found is not None else pc.scalar(False)


def iceberg_filter(ranges: Sequence[Mapping[str, Any]]) -> Any:
    from pyiceberg.expressions import AlwaysFalse, And, EqualTo, GreaterThanOrEqual, LessThan, Or

    found: Any = AlwaysFalse()
    for r in ranges:
        one = And(
            EqualTo("topic", r["topic"]),
            EqualTo("partition", int(r["partition"])),
            GreaterThanOrEqual("offset", int(r["start"])),
            LessThan("offset", int(r["end"])),
        )
        found = Or(found, one)
    return found
