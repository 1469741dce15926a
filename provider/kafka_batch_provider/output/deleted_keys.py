"""The keys a merged table deleted, with the ordering value of the delete: what stops an older
change (a replay, a late partition, a redelivery) from bringing a deleted key back.

One Parquet file per batch attempt, ``<table>/_kafka_batch/_deleted_keys/<seq>-<batch id>.parquet``:
the key's columns, :data:`~kafka_batch_provider.core.merging.ORDER_COLUMN`, ``truncate`` (a row
whose key is null: the table was emptied at that ordering value) and ``recorded_at``.

It is written *before* the batch's table commit, and only files of committed batches count
(plus the committing batch's own), so a batch that lost its entry to another attempt with other
offsets guards nothing. Readers take the newest ordering value per key, so repeated files change
nothing. Upkeep forgets deletes recorded before the retention
(``kafka-batch upkeep --deleted-keys-retention-days``), drops the files of batches that never
committed, and folds the rest into one file, so a merge reads few files.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import DELETE_OP, ORDER_COLUMN, TRUNCATE_OP, Change
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.tables import CONTROL

FOLDER = f"{CONTROL}/_deleted_keys"
TRUNCATE, RECORDED_AT = "truncate", "recorded_at"
COMPACTED = "compacted-"


def file_name(seq: int, batch_id: str) -> str:
    return f"{seq:012d}-{batch_id}.parquet"


def batch_of(name: str) -> tuple[int, str] | None:
    """``(seq, batch id)`` of a batch's file; ``None`` for a compacted one."""
    if name.startswith(COMPACTED):
        return None
    seq, _, batch_id = name.removesuffix(".parquet").partition("-")
    return int(seq), batch_id


class DeletedKeys:
    """The deleted keys of the table at ``data``, whose offset log ``log`` (the sink: ``entry``,
    ``tail_seq``) says which batches' files count."""

    def __init__(self, data: Location, log: Any) -> None:
        self.data = data
        self.log = log

    def committed(self, seq: int, batch_id: str) -> bool:
        """Whether the batch ``(seq, batch id)`` is the log's entry ``seq``."""
        entry = self.log.entry(seq)
        return entry is not None and str(entry["batch_id"]) == batch_id

    def record(self, seq: int, batch_id: str, key_fields: Sequence[pa.Field], changes: Iterable[Change]) -> int:
        """Save the batch's deletes and truncate (before its commit); how many were saved."""
        return self.record_table(seq, batch_id, deletes_table(key_fields, changes))

    def record_table(self, seq: int, batch_id: str, deletes: pa.Table) -> int:
        """Save ``deletes`` (key columns, ordering value, and ``truncate`` when any is one)."""
        if not deletes.num_rows:
            return 0
        if TRUNCATE not in deletes.column_names:
            deletes = deletes.append_column(TRUNCATE, pa.array(np.zeros(deletes.num_rows, dtype=bool)))
        deletes = deletes.append_column(RECORDED_AT, pa.array(np.full(deletes.num_rows, time.time())))
        sink = io.BytesIO()
        pq.write_table(deletes, sink)
        self.data.put_atomic(f"{FOLDER}/{file_name(seq, batch_id)}", sink.getvalue())
        return deletes.num_rows

    def names(self) -> list[str]:
        return sorted(n for n in self.data.list_names(FOLDER) if n.endswith(".parquet"))

    def counts(self, name: str, current: tuple[int, str] | None = None) -> bool:
        batch = batch_of(name)
        return batch is None or batch == current or self.committed(*batch)

    def load(
        self, wanted: tuple[str, Sequence[Any] | pa.Array] | None = None, current: tuple[int, str] | None = None
    ) -> pa.Table | None:
        """The rows of the files that count (``wanted``: only truncates and the rows whose
        ``column`` takes one of ``values``).

        A file that vanishes while it is read was folded into a compacted file by upkeep: the
        listing is taken again, so the compacted file is read instead.
        """
        while True:
            tables = []
            try:
                for name in (n for n in self.names() if self.counts(n, current)):
                    with self.data.open_input(f"{FOLDER}/{name}") as f:
                        tables.append(pq.read_table(f))
            except FileNotFoundError:
                continue
            if wanted is not None:
                column, values = wanted
                tables = [
                    # (the values typed as the file's column: an empty list would be of type null)
                    t.filter(
                        pc.field(TRUNCATE) | pc.field(column).isin(typed_values(values, t.schema.field(column).type))
                    )
                    if column in t.column_names
                    else t.filter(pc.field(TRUNCATE))  # a batch of truncates alone has no key columns
                    for t in tables
                ]
            return pa.concat_tables(tables, promote_options="permissive") if tables else None

    def newest_table(
        self, key_columns: Sequence[str], keys: pa.Table, current: tuple[int, str] | None = None
    ) -> tuple[pa.Table | None, str | None]:
        """:meth:`guard` in columns: the newest delete of each of ``keys``' keys (their columns and
        the ordering value, typed as ``keys``), and the newest truncate."""
        if not keys.num_rows or not key_columns:
            return None, None  # (nothing to guard)
        found = self.load((key_columns[0], pc.unique(keys.column(key_columns[0]))), current)
        if found is None:
            return None, None
        truncates = found.filter(pc.field(TRUNCATE)).column(ORDER_COLUMN)
        truncated = pc.max(truncates).as_py() if len(truncates) else None
        found = found.filter(~pc.field(TRUNCATE))
        if not found.num_rows or any(k not in found.column_names for k in key_columns):
            return None, truncated
        typed = pa.table(
            {k: found.column(k).cast(keys.schema.field(k).type, safe=False) for k in key_columns}
            | {ORDER_COLUMN: found.column(ORDER_COLUMN)}
        )
        newest = typed.group_by(list(key_columns), use_threads=False).aggregate([(ORDER_COLUMN, "max")])
        return newest.rename_columns([*key_columns, ORDER_COLUMN]), truncated

    def guard(
        self,
        key_columns: Sequence[str],
        keys: Iterable[tuple[Any, ...]] | None = None,
        current: tuple[int, str] | None = None,
    ) -> tuple[dict[tuple[Any, ...], str], str | None]:
        """The newest delete per key (of ``keys`` only, when given) and the newest truncate, from
        committed batches and the ``current`` one."""
        wanted = None
        if keys is not None and key_columns:
            wanted = (key_columns[0], sorted({key[0] for key in keys}, key=repr))
        found = self.load(wanted, current)
        if found is None:
            return {}, None
        newest: dict[tuple[Any, ...], str] = {}
        truncated: str | None = None
        columns = [
            found.column(k).to_pylist() if k in found.column_names else [None] * found.num_rows for k in key_columns
        ]
        orders, truncates = found.column(ORDER_COLUMN).to_pylist(), found.column(TRUNCATE).to_pylist()
        for i, (order, truncate) in enumerate(zip(orders, truncates)):
            if truncate:
                truncated = max(truncated or order, order)
                continue
            key = tuple(column[i] for column in columns)
            if order > newest.get(key, ""):
                newest[key] = order
        return newest, truncated

    def upkeep(self, older_than: float) -> tuple[int, int, int]:
        """Forget deletes recorded before ``older_than`` (epoch seconds), drop the files of batches
        that lost their entry (at or below the log's tail, not committed), and fold the
        committed ones into one file holding each key's newest delete and the newest truncate:
        ``(files folded, deletes forgotten, keys kept)``. Files of batches still in flight are left
        alone; the newest ordering value per key is what every reader takes anyway."""
        names, lost = [], []
        tail_seq = self.log.tail_seq()
        for name in self.names():
            batch = batch_of(name)
            if batch is None or self.committed(*batch):
                names.append(name)
            elif batch[0] <= tail_seq:
                lost.append(name)
        self.data.delete(f"{FOLDER}/{name}" for name in lost)
        if not names:
            return 0, 0, 0
        tables = []
        for name in names:
            with self.data.open_input(f"{FOLDER}/{name}") as f:
                tables.append(pq.read_table(f))
        found = pa.concat_tables(tables, promote_options="permissive")
        recent = found.filter(pc.field(RECORDED_AT) >= older_than)
        keys = [n for n in found.column_names if n not in (ORDER_COLUMN, TRUNCATE, RECORDED_AT)]
        folded = recent.group_by([*keys, TRUNCATE], use_threads=False).aggregate(
            [(ORDER_COLUMN, "max"), (RECORDED_AT, "max")]
        )
        folded = folded.rename_columns([*keys, TRUNCATE, ORDER_COLUMN, RECORDED_AT])
        folded = folded.select([*keys, ORDER_COLUMN, TRUNCATE, RECORDED_AT])
        truncates = folded.filter(pc.field(TRUNCATE))
        if truncates.num_rows > 1:  # only the newest truncate counts
            newest = max(truncates.column(ORDER_COLUMN).to_pylist())
            folded = folded.filter(~pc.field(TRUNCATE) | (pc.field(ORDER_COLUMN) == newest))
        if len(names) == 1 and folded.num_rows == found.num_rows:
            return 1, 0, folded.num_rows  # one file, nothing to forget or fold
        if folded.num_rows:
            sink = io.BytesIO()
            pq.write_table(folded, sink)
            self.data.put_atomic(f"{FOLDER}/{COMPACTED}{uuid.uuid4().hex[:12]}.parquet", sink.getvalue())
        self.data.delete(f"{FOLDER}/{name}" for name in names)
        return len(names), found.num_rows - recent.num_rows, folded.num_rows


def deletes_table(key_fields: Sequence[pa.Field], changes: Iterable[Change]) -> pa.Table:
    """The deletes and truncates among ``changes``: key columns, ordering value, truncate flag."""
    kept = [c for c in changes if c.op in (DELETE_OP, TRUNCATE_OP)]
    schema = pa.schema([*key_fields, pa.field(ORDER_COLUMN, pa.string()), pa.field(TRUNCATE, pa.bool_())])
    rows = [
        {
            **{f.name: (c.key[i] if c.op == DELETE_OP else None) for i, f in enumerate(key_fields)},
            ORDER_COLUMN: c.order,
            TRUNCATE: c.op == TRUNCATE_OP,
        }
        for c in kept
    ]
    return pa.Table.from_pylist(rows, schema=schema)


def typed_values(values: Sequence[Any] | pa.Array, kind: pa.DataType) -> pa.Array:
    """Key values as a column of ``kind`` (a value that cannot be one matches no row of it)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        try:
            return values.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return values.cast(kind, safe=False)
    return pa.array(values, kind)
