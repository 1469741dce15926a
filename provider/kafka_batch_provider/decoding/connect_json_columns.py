"""Kafka Connect's ``JsonConverter`` records as Arrow columns, many records at once. Pure.

The same mapping as :mod:`kafka_batch_provider.decoding.connect_json` (which reads one record at a
time), vectorised: a Debezium snapshot of millions of rows is parsed by pyarrow's JSON reader, not
one Python object per event.

With ``schemas.enable=true`` every record is ``{"schema":<schema>,"payload":<payload>}``, written by
Jackson in that order and without spaces, and the records of one table version share the schema's
exact text. So the records are grouped by their first record's prefix (``{"schema":...,"payload":``:
one ``starts_with`` per group, a memory compare), each group's payloads are cut out at that fixed
length, joined one per line and read with the schema's *wire* types as pyarrow's explicit schema
(:func:`wire_type`: base64 text for bytes and decimals, numbers for dates and timestamps), then
turned into their column types (:func:`logical`).

Without an embedded schema (``schemas.enable=false``) there are no types to read with: pyarrow's
JSON reader would guess them (it takes ISO-8601 text for timestamps, where the record rule keeps
text), so :func:`read_schemaless` parses each record with Python's ``json`` and lets Arrow infer
the types as the record rule does (``pa.array`` of the parsed objects). Still one Python object per
record, but only for the chunk being read: the objects are gone once the chunk is columns.

A record this cannot read exactly (a map, a number where base64 was expected with
``decimal.format=NUMERIC``, text after the closing brace) raises :class:`NotColumnar`: its caller
takes the record-by-record path for it, which reads everything the converter writes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.decoding.connect_json import (
    DATES,
    DECIMAL,
    PRIMITIVES,
    TIMESTAMPS,
    ZONED_TIMESTAMP,
    arrow_type,
    value_of,
)

SCHEMA_START = b'{"schema":'
PAYLOAD_START = b',"payload":'


class NotColumnar(Exception):
    """Records the columnar reader cannot read exactly: the record-by-record path reads them."""


@dataclass
class Group:
    """Records sharing one embedded schema: their positions in the input and their payloads."""

    positions: np.ndarray
    schema: Mapping[str, Any] | None
    payloads: pa.Table  # one row per record, the schema's top-level fields as columns (logical types)


def schema_groups(values: pa.Array) -> Iterator[tuple[np.ndarray, bytes]]:
    """The positions of the non-null records sharing each embedded schema, and that schema's
    prefix text (``{"schema":...,"payload":``); records without an embedded schema raise."""
    values = values.cast(pa.binary()) if not pa.types.is_binary(values.type) else values
    remaining = np.flatnonzero(values.is_valid().to_numpy(zero_copy_only=False))
    while remaining.size:
        rest = values if remaining.size == len(values) else values.take(pa.array(remaining))  # (no copy: all)
        first = rest[0].as_py()
        end = first.find(PAYLOAD_START) if first.startswith(SCHEMA_START) else -1
        if end < 0:
            raise NotColumnar("a record without an embedded schema")
        prefix = first[: end + len(PAYLOAD_START)]
        same = pc.starts_with(rest, pattern=prefix).to_numpy(zero_copy_only=False)
        yield remaining[same], prefix
        remaining = remaining[~same]


def is_schemaless(values: pa.Array) -> bool:
    """Whether no record of ``values`` has an embedded schema (Connect JSON with
    ``schemas.enable=false``, or plain JSON)."""
    binary = values.cast(pa.binary()) if not pa.types.is_binary(values.type) else values
    return not pc.any(pc.starts_with(binary, pattern=SCHEMA_START)).as_py()


def read_schemaless(values: pa.Array) -> pa.Array:
    """JSON objects without schemas as one struct column (null where a record is null), typed as
    Arrow infers them from the parsed objects."""
    parsed = []
    for raw in values.to_pylist():
        try:
            document = None if raw is None else json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            raise NotColumnar("a record that is not JSON") from None
        if raw is not None and (not isinstance(document, dict) or set(document) == {"schema", "payload"}):
            raise NotColumnar("a record that is not a JSON object without a schema")
        parsed.append(document)
    try:
        found = pa.array(parsed)  # (types that disagree raise ArrowInvalid: the record rule names them)
    except OverflowError:
        raise NotColumnar("an integer beyond 64 bits") from None
    return found if pa.types.is_struct(found.type) else pa.nulls(len(parsed), pa.struct([]))


def read_groups(values: pa.Array) -> list[Group]:
    """Every non-null record of ``values`` (Connect JSON with an embedded schema), by schema."""
    found = []
    for positions, prefix in schema_groups(values):
        schema = json.loads(prefix[len(SCHEMA_START) : -len(PAYLOAD_START)])
        records = values if positions.size == len(values) else values.take(pa.array(positions))
        if not pc.all(pc.ends_with(records.cast(pa.binary()), pattern=b"}")).as_py():
            raise NotColumnar("text after a record's closing brace")
        payloads = pc.binary_slice(records.cast(pa.binary()), len(prefix), -1)
        found.append(Group(positions, schema, read_payloads(payloads, schema)))
    return found


def read_payloads(payloads: pa.Array, schema: Mapping[str, Any] | None) -> pa.Table:
    """Payload texts (JSON objects) of one struct schema as a table of its fields' columns."""
    if schema is None or schema.get("type") != "struct":
        raise NotColumnar("a payload that is not a struct")
    wire = wire_type(schema)
    lines = pc.binary_join_element_wise(payloads, pa.scalar(b"\n"), b"")
    data = lines.buffers()[2]
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
    text = data[int(offsets[0]) : int(offsets[-1])] if len(lines) else pa.py_buffer(b"")
    from pyarrow import json as pa_json

    try:
        table = pa_json.read_json(
            io.BytesIO(text),
            # (blocks of 1 MB are parsed in parallel; a payload longer than that reads record by record)
            read_options=pa_json.ReadOptions(block_size=1 << 20),
            parse_options=pa_json.ParseOptions(
                explicit_schema=pa.schema(list(wire)), unexpected_field_behavior="error"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise NotColumnar(str(exc).splitlines()[0]) from None
    if table.num_rows != len(payloads):
        raise NotColumnar("a payload spanning lines")
    fields = {f["field"]: f for f in schema.get("fields", [])}
    columns = [logical(table.column(name).combine_chunks(), fields[name]) for name in table.column_names]
    return pa.table(columns, names=table.column_names)


def wire_type(schema: Mapping[str, Any]) -> pa.DataType:
    """The type pyarrow's JSON reader reads a Connect payload as (before :func:`logical`)."""
    kind, name = schema.get("type"), schema.get("name")
    if name == DECIMAL or name == ZONED_TIMESTAMP or kind == "bytes":
        return pa.string()  # base64, ISO 8601
    if name in DATES:
        return pa.int32()
    if name in TIMESTAMPS:
        return pa.int64()
    if kind == "struct":
        return pa.struct([pa.field(f["field"], wire_type(f)) for f in schema.get("fields", [])])
    if kind == "array":
        return pa.list_(wire_type(schema["items"]))
    if kind in PRIMITIVES:
        # (a 32-bit float read as a double, as the record path reads the JSON number: merged
        # tables hold doubles, and 0.1 must stay 0.1, not float32's 0.10000000149)
        return pa.float64() if pa.types.is_floating(PRIMITIVES[kind]) else PRIMITIVES[kind]
    raise NotColumnar(f"Connect schema type {kind!r} is read record by record")


def logical(array: pa.Array, schema: Mapping[str, Any]) -> pa.Array:
    """A column read with :func:`wire_type` in its column type (:func:`connect_json.arrow_type`)."""
    kind, name = schema.get("type"), schema.get("name")
    target = arrow_type(schema)
    if name in DATES or name in TIMESTAMPS:
        return array.cast(target)
    if name == DECIMAL or name == ZONED_TIMESTAMP or kind == "bytes":
        # (few columns; a Python value each, as the record path makes them)
        return pa.array([value_of(v, schema) for v in array.to_pylist()], target)
    if kind == "struct":
        fields = schema.get("fields", [])
        children = [logical(array.field(i), f) for i, f in enumerate(fields)]
        names = [pa.field(f["field"], child.type) for f, child in zip(fields, children)]
        return pa.StructArray.from_arrays(children, fields=names, mask=array.is_null())
    if kind == "array":
        values = logical(array.values, schema["items"])
        return pa.ListArray.from_arrays(array.offsets, values, type=pa.list_(values.type), mask=array.is_null())
    if pa.types.is_floating(target):
        return array  # (kept a double: see wire_type)
    return array if array.type == target else array.cast(target)


def as_typed_columns(batch: pa.Table, reserved: Collection[str]) -> pa.Table | None:
    """A batch of Connect JSON keys and values with embedded schemas as the Spark tasks stage a
    registry format: the Kafka columns, ``key`` as its decoded payload (a struct's fields become the
    key's columns), and the value's top-level fields as columns (null for a tombstone, whose raw
    ``value`` stays null). ``None`` when the columns would not be the record rule's: more than one
    schema in the batch (the record rule widens across them), a key or value without a schema, a
    null key, a field named like a Kafka column (``reserved``), or a record this reader cannot read
    exactly (:class:`NotColumnar`)."""
    if not {"key", "value"} <= set(batch.column_names) or not batch.num_rows:
        return None
    keys, values = batch.column("key").combine_chunks(), batch.column("value").combine_chunks()
    if keys.null_count:
        return None
    try:
        key_groups, value_groups = read_groups(keys), read_groups(values)
    except NotColumnar:
        return None
    if len(key_groups) != 1 or len(value_groups) > 1:
        return None
    [key] = key_groups
    key_column = key.payloads.to_struct_array() if key.schema.get("type") == "struct" else None
    if key_column is None or any(name in reserved for name in key.payloads.column_names):
        return None
    columns = {name: batch.column(name) for name in batch.column_names if name != "key"}
    columns["key"] = key_column
    if value_groups:
        [value] = value_groups
        if any(name in reserved for name in value.payloads.column_names):
            return None
        positions = np.full(len(values), -1, dtype=np.int64)
        positions[value.positions] = np.arange(len(value.positions))
        where = pa.array(positions, mask=positions < 0)
        for name in value.payloads.column_names:
            columns[name] = value.payloads.column(name).take(where)
    return pa.table(columns)
