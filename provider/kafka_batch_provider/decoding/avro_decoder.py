"""Avro values in the registry's wire format -> typed Arrow columns, resolved to one reader schema.

A batch holds records of several schema ids (producers evolve mid-batch). Each record is read
with its writer schema and resolved to the batch's reader schema by Avro's own resolution
rules (fastavro): fields added since get their defaults, removed ones are skipped, promoted
types (int -> long, float -> double, string <-> bytes) are widened. The columns follow
:mod:`kafka_batch_provider.decoding.avro_types`.

A value that cannot be decoded is not a row: it is reported with its reason (the caller
fails the batch or writes a dead letter), so no record is dropped silently.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafka_batch_provider.decoding.avro_types import arrow_schema, branch_name, resolve_names
from kafka_batch_provider.decoding.wire import HEADER_BYTES, NOT_FRAMED, TOMBSTONE, schema_ids
from kafka_batch_provider.errors import SchemaError


@dataclass
class Decoded:
    """The value columns of a batch's rows (one row per input value, nulls where a value was a
    tombstone or could not be decoded), the schema id of each, and why a value could not be decoded.

    :param problems: row -> the reason.
    """

    columns: pa.RecordBatch
    schema_ids: list[int]
    problems: dict[int, str] = field(default_factory=dict)


class AvroDecoder:
    """:param reader_schema: the batch's reader schema (Avro JSON text).
    :param writer_schema: schema id -> that id's Avro JSON text (the registry; called once per id)."""

    def __init__(self, reader_schema: str, writer_schema: Callable[[int], str]) -> None:
        import fastavro

        self._fastavro = fastavro
        reader = json.loads(reader_schema)
        self.arrow = arrow_schema(reader)
        named: dict[str, Any] = {}
        resolve_names(reader, named, "")
        self.reader = fastavro.parse_schema(reader)
        self._writer_schema = writer_schema
        self._writers: dict[int, Any] = {}
        # Per column, how fastavro's value becomes what pyarrow takes (None: as it is).
        self._converters = {f["name"]: converter(f["type"], named) for f in named_fields(reader, named)}

    def writer(self, schema_id: int) -> Any:
        """The parsed writer schema of an id, fetched once (a decoder lives as long as its task)."""
        if schema_id not in self._writers:
            self._writers[schema_id] = self._fastavro.parse_schema(json.loads(self._writer_schema(schema_id)))
        return self._writers[schema_id]

    def decode(self, values: pa.Array) -> Decoded:
        framing = schema_ids(values)
        ids = framing.ids.tolist()
        problems = dict(framing.problems)
        names = self.arrow.names
        columns: dict[str, list[Any]] = {name: [None] * len(ids) for name in names}
        raw = values.to_pylist()
        read = self._fastavro.schemaless_reader
        for row, schema_id in enumerate(ids):
            if schema_id in (TOMBSTONE, NOT_FRAMED):
                continue
            try:
                writer = self.writer(schema_id)
            except SchemaError as exc:  # an id the registry does not know: this record's fault
                problems[row] = str(exc)
                continue  # (an unreachable registry raises on: the batch waits or fails, no record is blamed)
            try:
                record = read(
                    io.BytesIO(raw[row][HEADER_BYTES:]),
                    writer,
                    self.reader,
                    return_record_name=True,
                    return_record_name_override=True,  # named only where a union has several records
                )
            except Exception as exc:  # a corrupt or truncated payload, a writer schema that cannot resolve
                problems[row] = f"schema id {schema_id}: {one_line(exc)}"
                continue
            for name in names:
                columns[name][row] = record.get(name)
        arrays = []
        for column in self.arrow:
            data = columns[column.name]
            convert = self._converters.get(column.name)
            if convert is not None:
                data = [None if v is None else convert(v) for v in data]
            arrays.append(pa.array(data, type=column.type))
        return Decoded(pa.RecordBatch.from_arrays(arrays, schema=self.arrow), ids, problems)


Convert = Callable[[Any], Any]


def named_fields(reader: Any, named: dict[str, Any]) -> list[dict[str, Any]]:
    schema = named.get(reader, reader) if isinstance(reader, str) else reader
    return list(schema.get("fields", []))


def converter(avro: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()) -> Convert | None:
    """How a value fastavro read for ``avro`` becomes the value pyarrow takes for its column type
    (:mod:`~kafka_batch_provider.decoding.avro_types`); ``None`` where it already is."""
    if isinstance(avro, str):
        if avro in named and avro not in seen:
            return converter(named[avro], named, seen | {avro})
        return None
    if isinstance(avro, list):
        others = [b for b in avro if b != "null"]
        if len(others) == 1:
            return converter(others[0], named, seen)
        return union_converter(others, named, seen)
    kind = avro.get("type")
    if isinstance(kind, (dict, list)):
        return converter(kind, named, seen)
    if avro.get("logicalType") == "uuid" and kind == "string":
        return str
    if kind in ("record", "error"):
        fields = [(f["name"], converter(f["type"], named, seen | {avro.get("name", "")})) for f in avro["fields"]]
        if all(c is None for _, c in fields):
            return None
        return lambda v: {n: (v.get(n) if c is None or v.get(n) is None else c(v.get(n))) for n, c in fields}
    if kind == "array":
        item = converter(avro["items"], named, seen)
        return None if item is None else (lambda v: [None if x is None else item(x) for x in v])
    if kind == "map":
        value = converter(avro["values"], named, seen)
        return None if value is None else (lambda v: {k: None if x is None else value(x) for k, x in v.items()})
    return None


#: Python types fastavro gives for each branch kind of a union, to tell the branch a value took.
BRANCH_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float,),
    "double": (float,),
    "string": (str,),
    "bytes": (bytes,),
    "enum": (str,),
    "fixed": (bytes,),
    "array": (list,),
    "record": (dict,),
    "error": (dict,),
    "map": (dict,),
}


def union_converter(branches: list[Any], named: dict[str, Any], seen: frozenset[str]) -> Convert:
    """A union of several types becomes a struct with one field per branch; fastavro names a
    record's branch (``return_record_name``), any other branch is told by the value's type."""
    fields = []
    for branch in branches:
        kind = branch if isinstance(branch, str) else branch.get("type")
        target = named.get(branch, branch) if isinstance(branch, str) else branch
        if isinstance(target, dict):
            kind = target.get("type")
        fields.append((branch_name(branch), kind, converter(branch, named, seen)))

    # The union's order, but a plain dict is a record's before it is a map's.
    by_preference = sorted(fields, key=lambda f: f[1] not in ("record", "error"))

    def convert(value: Any) -> dict[str, Any]:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            name, value = branch_name(value[0]), value[1]
            chosen = next(f for f in fields if f[0] == name)
        else:
            chosen = next((f for f in by_preference if takes(f[1], value)), fields[0])
        name, _, inner = chosen
        return {name: value if inner is None else inner(value)}

    return convert


def takes(kind: str, value: Any) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, not to Avro
        return kind == "boolean"
    return isinstance(value, BRANCH_TYPES.get(kind, ()))


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
