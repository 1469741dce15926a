"""One schema rule for merged tables, Delta and Iceberg alike. Pure.

* **Numbers are wide from the start**: a merged table holds integers as int64 and floating point
  numbers as double (at any depth). A source that widens a column later (Debezium after ``ALTER
  COLUMN ... TYPE bigint``) then changes nothing, in both formats: delta-rs cannot widen a
  column's type, Iceberg can (int to long, float to double) but Delta could not follow it.
* **Schemaless JSON numbers are doubles**: JSON has one number type, and a column inferred as
  integer from a first batch of ``10`` s could not take a later ``10.5`` (neither format widens a
  long to a double). An integer a double cannot hold exactly (beyond 2**53) is refused in one
  line: give such values a schema (Connect JSON with ``schemas.enable``, a registry format).
* **Columns and nested fields are added, never dropped**: a batch's new field joins the table
  (:func:`union_schema`), a field the batch lacks is null in its rows, and the batch is cast to
  the table's types only where every value fits (:func:`conform`), else refused in one line.
"""

from __future__ import annotations

import pyarrow as pa

from kafka_batch_provider.errors import SchemaError


def wide_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every integer as int64, every floating point number as double, and every
    timestamp of seconds or milliseconds in microseconds (Delta's only unit: a table created from
    a millisecond column holds microseconds, and refused the next batch's milliseconds)."""
    if pa.types.is_integer(kind):
        return pa.int64()
    if pa.types.is_floating(kind):
        return pa.float64()
    if pa.types.is_timestamp(kind) and kind.unit in ("s", "ms"):
        return pa.timestamp("us", kind.tz)
    return map_children(kind, wide_type)


def doubled_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every integer as double (schemaless JSON's numbers)."""
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return pa.float64()
    return map_children(kind, doubled_type)


def map_children(kind: pa.DataType, change) -> pa.DataType:
    """``kind`` with ``change`` applied to each child type of a struct, list or map (else ``kind``)."""
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(change(f.type)) for f in kind])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = kind.value_field.with_type(change(kind.value_type))
        return pa.list_(element) if pa.types.is_list(kind) else pa.large_list(element)
    if pa.types.is_map(kind):
        return pa.map_(
            kind.key_field.with_type(change(kind.key_type)),
            kind.item_field.with_type(change(kind.item_type)),
            kind.keys_sorted,
        )
    return kind


def widened(table: pa.Table) -> pa.Table:
    """``table`` with its numbers and timestamps wide (:func:`wide_type`); a widening never loses a value."""
    for index, f in enumerate(table.schema):
        kind = wide_type(f.type)
        if kind != f.type:
            table = table.set_column(index, f.with_type(kind), table.column(index).cast(kind))
    return table


def union_schema(table: pa.Schema, batch: pa.Schema) -> pa.Schema:
    """The table's schema with the fields only the batch has added (nested ones in place); the
    table's columns keep their types."""
    theirs = {f.name: f for f in batch}
    fields = [_union_field(f, theirs.get(f.name)) for f in table]
    fields += [f for f in batch if f.name not in table.names]
    return pa.schema(fields, metadata=table.metadata)


def _union_field(ours: pa.Field, theirs: pa.Field | None) -> pa.Field:
    if theirs is None:
        return ours
    kind, other = ours.type, theirs.type
    if pa.types.is_struct(kind) and pa.types.is_struct(other):
        return ours.with_type(pa.struct(list(union_schema(pa.schema(list(kind)), pa.schema(list(other))))))
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
        pa.types.is_list(other) or pa.types.is_large_list(other)
    ):
        element = _union_field(kind.value_field, other.value_field)
        return ours.with_type(pa.list_(element) if pa.types.is_list(kind) else pa.large_list(element))
    if pa.types.is_map(kind) and pa.types.is_map(other):
        item = _union_field(kind.item_field, other.item_field)
        return ours.with_type(pa.map_(kind.key_field, item, kind.keys_sorted))
    return ours


def dropped_fields(table: pa.DataType | pa.Schema, batch: pa.DataType | pa.Schema, prefix: str = "") -> list[str]:
    """The batch's fields (nested ones as ``a.b``) the table's type has no place for."""
    ours, theirs = _children(table), _children(batch)
    if ours is None or theirs is None:
        return []
    names = {f.name: f for f in ours}
    lost = []
    for f in theirs:
        if f.name not in names:
            lost.append(f"{prefix}{f.name}")
        else:
            lost += dropped_fields(names[f.name].type, f.type, f"{prefix}{f.name}.")
    return lost


def _children(kind: pa.DataType | pa.Schema) -> list[pa.Field] | None:
    if isinstance(kind, pa.Schema) or pa.types.is_struct(kind):
        return list(kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [kind.value_field.with_name("element")]
    if pa.types.is_map(kind):
        return [kind.item_field.with_name("value")]
    return None


def conform(source: pa.Table, target: pa.Schema, label: str) -> pa.Table:
    """The source with each column the table has cast to the table's type (by field name, a
    missing nested field as null); refused in one line when a field would be dropped or a value
    does not fit (an int64 above an int column's range, a fraction for a long column)."""
    for name in source.column_names:
        if name not in target.names:
            continue
        ours, theirs = target.field(name).type, source.schema.field(name).type
        if ours == theirs:
            continue
        lost = dropped_fields(ours, theirs, f"{name}.")
        if lost:
            raise SchemaError(f"{label}: the table has no column {lost[0]}, which the batch has: it would be lost")
        try:
            cast = source.column(name).cast(ours)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaError(
                f"{label}: column {name} is {ours}, the batch has {theirs} values that do not fit: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        source = source.set_column(source.column_names.index(name), pa.field(name, ours), cast)
    return source
