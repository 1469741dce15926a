"""Debezium change events as Arrow columns, reduced to each key's newest change. Pure.

The rule of :mod:`kafka_batch_provider.core.change_events` and
:func:`~kafka_batch_provider.core.merging.reduce_changes`, column by column: a Debezium snapshot of
millions of rows took ~5 KB of driver memory and ~125 µs per event as one Python object each;
here the events' envelopes are columns (Connect JSON read by
:mod:`kafka_batch_provider.decoding.connect_json_columns`, the registry formats as the Spark tasks
decoded them), ordering values are computed for whole columns, and each key keeps its newest change
by one sort and one group-by.

Two things stay record by record, for the records they concern only (:attr:`ArrowChanges.record_rule`):
an event holding Debezium's TOAST placeholder (its value comes from an older change of the key,
or a moved row's old key: a chain the record rule follows), with every event of the keys involved;
and a whole batch this cannot read exactly (a map column, an odd converter
setting, a column whose type changes within the batch): :func:`decode` then returns ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.core.arrow_upserts import PARTITION, key_in_two_partitions
from kafka_batch_provider.core.change_events import (
    JSON_FORMATS,
    no_key,
    old_key,
    where_of,
)
from kafka_batch_provider.core.merge_schema import doubled_type
from kafka_batch_provider.core.merging import (
    CHANGES,
    DELETE_OP,
    ON_TRUNCATE_SETTING,
    OP_COLUMN,
    ORDER_COLUMN,
    TRUNCATE_OP,
    UNAVAILABLE,
    UPSERT_OP,
    MergeSpec,
    order_texts,
)
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.decoding.connect_json_columns import NotColumnar, is_schemaless, read_groups, read_schemaless
from kafka_batch_provider.errors import ConfigError, SchemaError

#: The deleted keys' flag for a truncate (output/deleted_keys.py).
TRUNCATE = "truncate"
OPS = {"c": UPSERT_OP, "r": UPSERT_OP, "u": UPSERT_OP, "d": DELETE_OP, "t": TRUNCATE_OP}
#: The decoded events' helper columns (never a row's).
AFTER, LIVE, BY_OFFSET, POSITION = "__after", "__live", "__by_offset", "__position"
#: The events' Kafka topic (never named like a key column, which may be ``topic``); PARTITION beside it.
TOPIC = "__kafka_topic"
#: Debezium's ``source.sequence`` (PostgreSQL): ``["<last commit LSN>","<event LSN>"]``, either null.
SEQUENCE = r'^\[(?:null|"(?P<last>\d*)"),(?:null|"(?P<lsn>\d*)")\]$'


@dataclass
class ArrowChanges:
    """A batch's changes in columns: each key's newest (``rows``), and what the record rule takes."""

    #: the key columns, the row columns, ORDER_COLUMN and OP_COLUMN: one row per key
    rows: pa.Table
    key_columns: tuple[str, ...]
    #: every delete of the columnar rows (key columns, ordering value) and every truncate
    deletes: pa.Table
    truncated_at: str | None
    #: the positions of the batch's records the record rule reduces (with every truncate)
    record_rule: np.ndarray
    #: the topics some of whose changes are ordered by Kafka offsets
    by_offset: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Envelopes:
    """The batch's change events' envelope columns (all records; null where a tombstone)."""

    op: pa.Array
    after: pa.Array  # struct
    before: pa.Array  # struct
    source: pa.Array  # struct
    live: np.ndarray  # not a tombstone
    #: the rows' types were inferred (schemaless JSON): a typed key's columns take the key's types
    inferred: bool = False


@dataclass
class Events:
    """A batch's change events decoded, one row per record (its key, row, op and ordering value),
    without the raw values: what :func:`reduce_events` needs, chunk after chunk."""

    table: pa.Table
    key_columns: tuple[str, ...]
    #: keys whose events the record rule reduces (placeholders, and the old keys of moved rows)
    wanted: set[tuple[Any, ...]] = field(default_factory=set)
    #: the rows' types were inferred (schemaless JSON): null-only columns are left out once the
    #: batch's chunks are together (:func:`reduce_events`), as the record rule leaves them out
    inferred: bool = False


def decode(chunk: pa.Table, spec: MergeSpec, value_format: str, first: int = 0) -> Events | None:
    """One chunk of a batch's records (the batch's records ``first`` onwards) decoded; ``None``
    when the record rule must read the batch."""
    if spec.mode != CHANGES or not chunk.num_rows:
        return None
    try:
        envelopes = envelope_columns(chunk, value_format)
        if envelopes is None:
            return None
        inferred_key = value_format in JSON_FORMATS and is_schemaless(chunk.column("key").combine_chunks())
        keys = key_columns(chunk, spec, value_format, envelopes, inferred_key)
        if envelopes.inferred and not spec.merge_key:
            envelopes.after = with_types_of(envelopes.after, keys, typed_key=not inferred_key)
    except (NotColumnar, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return None  # (the record rule reads it, and names what is wrong in one line)
    live = envelopes.live

    def where(i: int) -> str:
        return where_of({n: chunk.column(n)[int(i)].as_py() for n in ("topic", "partition", "offset")})

    op_text = envelopes.op
    known = pc.fill_null(pc.is_in(op_text, pa.array(list(OPS))), False).to_numpy(zero_copy_only=False)
    if (live & ~known).any():
        at = int(np.flatnonzero(live & ~known)[0])
        raise SchemaError(f"{where(at)}: unknown Debezium op {op_text[at].as_py()!r} (expected c, r, u, d or t)")
    ops = pc.replace_substring_regex(op_text, "^[cr]$", UPSERT_OP)  # (u, d and t stay)
    upsert = live & pc.fill_null(pc.equal(ops, UPSERT_OP), False).to_numpy(zero_copy_only=False)
    truncate = live & pc.fill_null(pc.equal(ops, TRUNCATE_OP), False).to_numpy(zero_copy_only=False)
    has_after = envelopes.after.is_valid().to_numpy(zero_copy_only=False)
    if (upsert & ~has_after).any():
        at = int(np.flatnonzero(upsert & ~has_after)[0])
        raise SchemaError(f"{where(at)}: a Debezium {op_text[at].as_py()!r} event without an after row")
    if truncate.any() and spec.on_truncate != "apply":
        raise ConfigError(
            f"{where(int(np.flatnonzero(truncate)[0]))}: a truncate event would empty the table; to apply it, run with "
            f"{Setting(ON_TRUNCATE_SETTING.name, 'apply')} (nothing was written)",
            setting=ON_TRUNCATE_SETTING,
        )
    keyed = live & ~truncate
    if not keys and keyed.any():
        raise no_key(where(int(np.flatnonzero(keyed)[0])))
    for column in keys.values():
        missing = keyed & ~column.is_valid().to_numpy(zero_copy_only=False)
        if missing.any():
            raise no_key(where(int(np.flatnonzero(missing)[0])))
    orders, offset_ordered = order_values(chunk, envelopes)
    marked = upsert & placeholders(envelopes.after)
    wanted = moved_keys(chunk, keys, marked)
    table = pa.table(
        {
            **keys,
            AFTER: envelopes.after,
            ORDER_COLUMN: orders,
            OP_COLUMN: ops,
            LIVE: pa.array(live),
            BY_OFFSET: pa.array(offset_ordered),
            POSITION: pa.array(np.arange(first, first + chunk.num_rows)),
            TOPIC: chunk.column("topic"),
            PARTITION: chunk.column("partition"),
        }
    )
    return Events(table, tuple(keys), wanted, envelopes.inferred)


def reduce_events(events: Events, spec: MergeSpec) -> ArrowChanges:
    """Each key's newest change of a batch's decoded events (:func:`decode`, chunks concatenated)."""
    table, names = events.table, events.key_columns
    if events.inferred:
        table = table.set_column(table.column_names.index(AFTER), AFTER, typed_fields(table.column(AFTER)))
    live = table.column(LIVE).to_numpy(zero_copy_only=False)
    ops = pc.fill_null(table.column(OP_COLUMN), "").to_numpy(zero_copy_only=False)
    truncate = live & (ops == TRUNCATE_OP)
    keyed = live & ~truncate
    involved = np.zeros(table.num_rows, dtype=bool)
    if events.wanted:  # every event of the keys the record rule takes
        keys = list(zip(*(table.column(n).to_pylist() for n in names)))
        involved = np.array([k in events.wanted for k in keys], dtype=bool) & keyed
    record_rule = table.column(POSITION).to_numpy()[involved | truncate]
    columnar = keyed & ~involved
    orders = table.column(ORDER_COLUMN)
    truncated_at = max(pc.filter(orders, pa.array(truncate)).to_pylist(), default=None)
    superseded = 0
    if truncated_at is not None:
        older = columnar & pc.less(orders, truncated_at).to_numpy(zero_copy_only=False)
        superseded += int(older.sum())
        columnar &= ~older
    by_offset_rows = keyed & table.column(BY_OFFSET).to_numpy(zero_copy_only=False)
    by_offset = set(pc.unique(table.column(TOPIC).filter(pa.array(by_offset_rows))).to_pylist())
    refuse_two_partitions(table, names, columnar & by_offset_rows)
    kept = table.filter(pa.array(columnar))
    ordered = kept.sort_by([(ORDER_COLUMN, "ascending")])
    ordered = ordered.append_column("__i", pa.array(np.arange(ordered.num_rows)))
    newest = ordered.group_by(list(names), use_threads=False).aggregate([("__i", "max")])
    reduced = ordered.take(newest.column("__i_max"))
    superseded += kept.num_rows - reduced.num_rows
    deletes = kept.filter(pc.equal(kept.column(OP_COLUMN), DELETE_OP)).select([*names, ORDER_COLUMN])
    deletes = deletes.append_column(TRUNCATE, pa.array(np.zeros(deletes.num_rows, dtype=bool)))
    counts = {
        "records": table.num_rows,
        "changes": int(live.sum()),
        "superseded": superseded,
        "truncates": int(truncate.sum()),
        "skipped": int((~live).sum()),
    }
    return ArrowChanges(rows_of(reduced, names), names, deletes, truncated_at, record_rule, by_offset, counts)


def rows_of(reduced: pa.Table, names: tuple[str, ...]) -> pa.Table:
    """The reduced events as rows: the key columns, then the after row's fields (a delete: its key
    only), the ordering value and the op."""
    after = reduced.column(AFTER).combine_chunks()
    is_delete = pc.equal(reduced.column(OP_COLUMN), DELETE_OP)
    fields = [f.name for f in after.type]
    columns = {n: reduced.column(n) for n in names if n not in fields}
    for i, name in enumerate(fields):
        value = pc.struct_field(after, [i])
        columns[name] = pc.if_else(is_delete, reduced.column(name).cast(value.type), value) if name in names else value
    return pa.table({**columns, ORDER_COLUMN: reduced.column(ORDER_COLUMN), OP_COLUMN: reduced.column(OP_COLUMN)})


def moved_keys(chunk: pa.Table, keys: Mapping[str, pa.Array], marked: np.ndarray) -> set[tuple[Any, ...]]:
    """The keys of the events holding Debezium's placeholder and the old keys of those that moved:
    the record rule fills a placeholder from their events."""
    wanted: set[tuple[Any, ...]] = set()
    if not marked.any():
        return wanted
    names = tuple(keys)
    headers = chunk.column("headers") if "headers" in chunk.column_names else None
    for i in np.flatnonzero(marked):
        wanted.add(tuple(keys[n][int(i)].as_py() for n in names))
        moved = old_key(headers[int(i)].as_py(), names) if headers is not None else None
        if moved is not None:
            wanted.add(moved)
    return wanted


# -- envelopes --------------------------------------------------------------------------------------


def envelope_columns(batch: pa.Table, value_format: str) -> Envelopes | None:
    """The events' op, after, before and source columns (``None``: not an envelope here)."""
    n = batch.num_rows
    if value_format in JSON_FORMATS:
        values = batch.column("value").combine_chunks()
        if not values.null_count < n:  # tombstones only: nothing to apply (their null columns join the others' types)
            empty = pa.nulls(n, pa.struct([]))
            return Envelopes(pa.nulls(n, pa.string()), empty, empty, empty, np.zeros(n, dtype=bool))
        if is_schemaless(values):
            return schemaless_envelopes(values)
        groups = read_groups(values)
        if any(not {"op", "source", "after", "before"} <= set(g.payloads.column_names) for g in groups):
            return None  # (the record rule names what is wrong)
        live = values.is_valid().to_numpy(zero_copy_only=False)
        found = Envelopes(**{name: scatter(groups, name, n) for name in ("op", "after", "before", "source")}, live=live)
        if not all(pa.types.is_struct(c.type) for c in (found.after, found.before, found.source)):
            return None  # (a MongoDB document as JSON text: the record rule refuses it in one line)
        return found
    if value_format == "json":
        if "value_json" not in batch.column_names:
            return None
        struct = batch.column("value_json").combine_chunks()
        names = [f.name for f in struct.type]
        columns = {name: pc.struct_field(struct, [names.index(name)]) for name in names}
        live = batch.column("value").is_valid().to_numpy(zero_copy_only=False)
    else:
        names = batch.column_names
        columns = {name: batch.column(name).combine_chunks() for name in names}
        live = ~np.logical_and.reduce(
            [
                ~columns[c].is_valid().to_numpy(zero_copy_only=False)
                for c in ("op", "source", "after", "before")
                if c in columns
            ]
        )
    if not {"op", "source", "after", "before"} <= set(names):
        return None
    if not all(pa.types.is_struct(columns[c].type) for c in ("after", "before", "source")):
        return None
    return Envelopes(columns["op"], columns["after"], columns["before"], columns["source"], live)


def schemaless_envelopes(values: pa.Array) -> Envelopes | None:
    """Schemaless JSON events' envelope columns, their rows' numbers as doubles (the record rule's
    types: :meth:`~kafka_batch_provider.core.change_events.Changes.infer_untyped`)."""
    envelope = read_schemaless(values)
    names = [f.name for f in envelope.type]
    if not {"op", "source", "after", "before"} <= set(names):
        return None  # (the record rule names what is wrong)
    columns = {name: pc.struct_field(envelope, [names.index(name)]) for name in ("op", "after", "before", "source")}
    for name in ("after", "before"):
        kind = columns[name].type
        if pa.types.is_null(kind):  # (inserts only have no before, deletes only no after)
            columns[name] = pa.nulls(len(values), pa.struct([]))
        elif not pa.types.is_struct(kind):
            return None  # (a MongoDB document as JSON text: the record rule refuses it in one line)
        else:  # (an integer beyond 2**53 raises ArrowInvalid: the record rule refuses it in one line)
            columns[name] = columns[name].cast(doubled_type(kind))
    if not pa.types.is_struct(columns["source"].type) or not pa.types.is_string(columns["op"].type):
        return None
    return Envelopes(**columns, live=values.is_valid().to_numpy(zero_copy_only=False), inferred=True)


def with_types_of(rows: pa.Array, keys: Mapping[str, pa.Array], typed_key: bool) -> pa.Array:
    """Inferred rows typed as the record rule types them: a typed key's columns first and in the
    key's types (they are known before the rows' types are inferred), then the rows' own."""
    if not typed_key:
        return rows
    kind = rows.type
    fields = [kind.field(n).with_type(keys[n].type) for n in keys if kind.get_field_index(n) >= 0]
    fields += [f for f in kind if f.name not in keys]
    if fields == list(kind):
        return rows
    ordered = pa.StructArray.from_arrays(
        [rows.field(f.name) for f in fields], fields=[kind.field(f.name) for f in fields], mask=rows.is_null()
    )
    return ordered.cast(pa.struct(fields))


def typed_fields(rows: pa.ChunkedArray) -> pa.Array:
    """Inferred rows without the fields that were null in every record of the batch (the record rule
    makes no column of them: there is no type to give it)."""
    struct = rows.combine_chunks()
    kind = struct.type
    kept = [f for f in kind if not pa.types.is_null(f.type)]
    if len(kept) == len(kind) or not kept:
        return struct if len(kept) == len(kind) else pa.nulls(len(struct), pa.struct([]))
    return pa.StructArray.from_arrays([struct.field(f.name) for f in kept], fields=kept, mask=struct.is_null())


def scatter(groups: list[Any], name: str, length: int) -> pa.Array:
    """One payload column of every group, back in the batch's record order (null for tombstones);
    a struct column's types unified across groups (a later schema adds a field: null before it)."""
    parts = [g.payloads.column(name).combine_chunks() for g in groups]
    kind = parts[0].type
    if pa.types.is_struct(kind) and len(parts) > 1:
        unified = pa.unify_schemas([pa.schema(list(p.type)) for p in parts], promote_options="permissive")
        kind = pa.struct(list(unified))
        parts = [p.cast(kind) for p in parts]
    elif len(parts) > 1 and any(p.type != kind for p in parts):
        raise NotColumnar(f"payload field {name} changes its type between schemas")
    positions = np.concatenate([g.positions for g in groups])
    values = pa.concat_arrays(parts)
    if positions.size == length and (positions == np.arange(length)).all():
        return values
    index = np.full(length, -1, dtype=np.int64)
    index[positions] = np.arange(positions.size)
    return values.take(pa.array(index, mask=index < 0))


def key_columns(
    batch: pa.Table, spec: MergeSpec, value_format: str, envelopes: Envelopes, inferred: bool = False
) -> dict[str, pa.Array]:
    """The key's columns, for every record: ``--merge-key`` columns of the row (the ``before`` row
    of a delete), or the Kafka key's fields (``inferred``: JSON keys without a schema)."""
    if spec.merge_key:
        after, before = envelopes.after, envelopes.before
        found = {}
        for name in spec.merge_key:
            if name not in [f.name for f in after.type]:
                raise NotColumnar("a key column the rows lack")  # (the record rule names it)
            value = pc.struct_field(after, [[f.name for f in after.type].index(name)])
            if name in [f.name for f in before.type]:
                old = pc.struct_field(before, [[f.name for f in before.type].index(name)])
                value = pc.if_else(after.is_valid(), value, old.cast(value.type))
            found[name] = value
        return found
    key = batch.column("key").combine_chunks()
    if inferred:  # (JSON keys without a schema)
        struct = read_schemaless(key)
        struct = struct.cast(doubled_type(struct.type))  # (the rows' numbers are doubles)
        found = {f.name: pc.struct_field(struct, [i]) for i, f in enumerate(struct.type)}
        if any(column.null_count > struct.null_count for column in found.values()):
            raise NotColumnar("keys with different fields")  # (the record rule names them)
        return found
    if value_format in JSON_FORMATS:
        groups = read_groups(key)
        if not groups:
            return {}  # (no record has a key: truncates only, or a refusal in decode)
        fields = groups[0].payloads.column_names
        if any(g.payloads.column_names != fields for g in groups):
            raise NotColumnar("keys of several schemas")
        return {f: scatter(groups, f, batch.num_rows) for f in fields}
    if pa.types.is_struct(key.type):
        return {f.name: pc.struct_field(key, [i]) for i, f in enumerate(key.type)}
    return {"key": key}


# -- ordering -----------------------------------------------------------------------------------------


def order_values(batch: pa.Table, envelopes: Envelopes) -> tuple[pa.Array, np.ndarray]:
    """Every event's ordering value (:func:`~kafka_batch_provider.core.merging.debezium_order`, for
    whole columns), and which events are ordered by their Kafka offset alone."""
    source, n = envelopes.source, batch.num_rows
    offsets = batch.column("offset").to_numpy()

    def part(name: str, kind: pa.DataType = pa.string()) -> pa.Array:
        names = [f.name for f in source.type]
        if name not in names:
            return pa.nulls(n, kind)
        value = pc.struct_field(source, [names.index(name)])
        return value if value.type == kind else value.cast(kind)

    connector = pc.fill_null(part("connector"), "").to_numpy(zero_copy_only=False)
    snapshot = pc.utf8_lower(pc.fill_null(part("snapshot"), "false")).to_numpy(zero_copy_only=False)
    op = pc.fill_null(envelopes.op, "").to_numpy(zero_copy_only=False)
    phase = np.where((op == "r") | ~np.isin(snapshot, ["false", ""]), 0, 1)
    orders = order_texts(offsets)
    postgres, mysql = connector == "postgresql", connector == "mysql"
    if postgres.any():
        sequence = pc.extract_regex(pc.fill_null(part("sequence"), "[null,null]"), SEQUENCE)
        last = number(pc.struct_field(sequence, [0]))
        lsn_text = number(pc.struct_field(sequence, [1]))
        lsn = np.where(np.isnan(lsn_text), number(part("lsn", pa.int64())), lsn_text)
        lsn = np.nan_to_num(lsn, nan=0).astype(np.int64)
        last = np.where(np.isnan(last), lsn, last).astype(np.int64)
        orders = pc.if_else(pa.array(postgres), order_texts(last, phase, lsn, offsets), orders)
    if mysql.any():
        file_number = number(pc.extract_regex(pc.fill_null(part("file"), ""), r"(?P<n>\d*)$").field(0))
        position, row = number(part("pos", pa.int64())), number(part("row", pa.int64()))
        texts = order_texts(*(np.nan_to_num(v, nan=0).astype(np.int64) for v in (file_number, position, row)), offsets)
        orders = pc.if_else(pa.array(mysql), texts, orders)
    return orders, ~(postgres | mysql)


def number(values: pa.Array) -> np.ndarray:
    """Digits or integers as float64 (NaN where null or empty), exact below 2**53 (LSNs, positions)."""
    if pa.types.is_string(values.type):
        values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
    return pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)


# -- what the record rule takes -------------------------------------------------------------------


def placeholders(after: pa.Array) -> np.ndarray:
    """Rows where some column of the after row holds Debezium's placeholder (text, bytes, in a list)."""
    found = np.zeros(len(after), dtype=bool)
    for i, f in enumerate(after.type):
        column = pc.struct_field(after, [i])
        kind = f.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            found |= pc.fill_null(pc.equal(column, UNAVAILABLE), False).to_numpy(zero_copy_only=False)
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            found |= pc.fill_null(pc.equal(column, UNAVAILABLE.encode()), False).to_numpy(zero_copy_only=False)
        elif (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
            pa.types.is_string(kind.value_type) or pa.types.is_binary(kind.value_type)
        ):
            flat = pc.list_flatten(column)
            hit = pc.fill_null(
                pc.equal(flat, UNAVAILABLE if pa.types.is_string(kind.value_type) else UNAVAILABLE.encode()), False
            )
            parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
            found[np.unique(parents[hit.to_numpy(zero_copy_only=False)])] = True
    return found


def refuse_two_partitions(events: pa.Table, keys: tuple[str, ...], rows: np.ndarray) -> None:
    """Offsets order a key's events only within one partition (change_events.Changes.note_partition)."""
    if not rows.any():
        return
    key = key_in_two_partitions(events.select([*keys, PARTITION]).filter(pa.array(rows)), keys, PARTITION)
    if key is not None:
        raise ConfigError(
            f"key {key} is in several partitions of one batch: offsets cannot order records of two partitions; "
            "this connector's events are ordered by their offsets, so a key must stay in one partition (Kafka's "
            "default partitioner keeps it there: was the topic's partition count raised?)"
        )
