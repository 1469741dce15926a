"""The keys a merged table deleted, with the ordering value of the delete: what stops an older
change (a replay, a late partition, a redelivery) from bringing a deleted key back.

One Parquet file per batch, ``<table>/_kafka_batch/_deleted_keys/<batch id>.parquet``: the
key's columns, :data:`~kafka_batch_provider.core.merging.ORDER_COLUMN`, and ``truncate`` (a row
whose key is null: the table was emptied at that ordering value).

It is written *before* the batch's table commit, and that is safe: a file only ever says "this
key was deleted at this point of the source's history", which the batch's own range of the log
holds and will apply; a guard that is early is still right, since the commit that follows (or
a retry of the same range) applies exactly that delete. Readers take the newest ordering value
per key, so files repeated by retries change nothing. Upkeep drops files older than the
retention (``kafka-batch upkeep --deleted-keys-retention-days``).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import DELETE_OP, ORDER_COLUMN, TRUNCATE_OP, Change
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.tables import CONTROL

FOLDER = f"{CONTROL}/_deleted_keys"
TRUNCATE = "truncate"


class DeletedKeys:
    """The deleted keys of the table at ``data``."""

    def __init__(self, data: Location) -> None:
        self.data = data

    def record(self, batch_id: str, key_fields: Sequence[pa.Field], changes: Iterable[Change]) -> int:
        """Save the batch's deletes and truncate (before its commit); how many were saved."""
        kept = [c for c in changes if c.op in (DELETE_OP, TRUNCATE_OP)]
        if not kept:
            return 0
        schema = pa.schema([*key_fields, pa.field(ORDER_COLUMN, pa.string()), pa.field(TRUNCATE, pa.bool_())])
        rows = [
            {
                **{f.name: (c.key[i] if c.op == DELETE_OP else None) for i, f in enumerate(key_fields)},
                ORDER_COLUMN: c.order,
                TRUNCATE: c.op == TRUNCATE_OP,
            }
            for c in kept
        ]
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
        self.data.put_atomic(f"{FOLDER}/{batch_id}.parquet", sink.getvalue())
        return len(kept)

    def load(self) -> pa.Table | None:
        names = sorted(n for n in self.data.list_names(FOLDER) if n.endswith(".parquet"))
        if not names:
            return None
        tables = []
        for name in names:
            with self.data.open_input(f"{FOLDER}/{name}") as f:
                tables.append(pq.read_table(f))
        return pa.concat_tables(tables, promote_options="permissive")

    def guard(self, key_columns: Sequence[str]) -> tuple[dict[tuple[Any, ...], str], str | None]:
        """The newest delete per key, and the newest truncate (``None`` when never truncated)."""
        found = self.load()
        if found is None:
            return {}, None
        newest: dict[tuple[Any, ...], str] = {}
        truncated: str | None = None
        columns = [
            found.column(k).to_pylist() if k in found.column_names else [None] * found.num_rows for k in key_columns
        ]
        for i, (order, truncate) in enumerate(
            zip(found.column(ORDER_COLUMN).to_pylist(), found.column(TRUNCATE).to_pylist())
        ):
            if truncate:
                truncated = max(truncated or order, order)
                continue
            key = tuple(column[i] for column in columns)
            if order > newest.get(key, ""):
                newest[key] = order
        return newest, truncated

    def expire(self, older_than: float) -> int:
        """Drop the files written before ``older_than`` (epoch seconds); how many were dropped."""
        found = self.data.files_below(FOLDER)
        old = sorted(name for name, (_, modified) in found.items() if modified < older_than)
        self.data.delete(f"{FOLDER}/{name}" for name in old)
        return len(old)
