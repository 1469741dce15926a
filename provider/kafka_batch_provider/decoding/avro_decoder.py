"""Avro values in the registry's wire format -> typed Arrow columns, resolved to one reader schema.

A batch holds records of several schema ids (producers evolve mid-batch). Each record is read
with its writer schema and resolved to the batch's reader schema by Avro's own resolution
rules (fastavro): fields added since get their defaults, removed ones are skipped, promoted
types (int -> long, float -> double, string <-> bytes) are widened. The columns follow
:mod:`kafka_batch_provider.decoding.avro_types`.

A value that cannot be decoded is not a row: it is reported with its reason (the caller
fails the batch or writes a dead letter), so no record is dropped silently. What is wrong
with a schema id (unknown to the registry, not Avro, not resolvable to the reader schema) is
the fault of its records; an unreachable registry is nobody's: it raises, and the batch waits
or fails as a whole.

The values written with the reader schema itself (most of a batch) are decoded many at a time
by a compiled reader (:mod:`kafka_batch_provider.decoding.avro_blocks`); the others, and any
block that reader cannot vouch for, one at a time by fastavro.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_batch_provider.decoding.avro_blocks import MIN_VALUES, AvroBlocks, unsupported
from kafka_batch_provider.decoding.avro_defaults import with_default_values
from kafka_batch_provider.decoding.avro_types import FAMILIES, branch_kind, branch_names, columns_of, parsed
from kafka_batch_provider.decoding.wire import HEADER_BYTES, schema_ids
from kafka_batch_provider.errors import ConfigError, SchemaError

#: A schema the registry references: the name the reference was registered with, and its text.
Reference = tuple[str, str]
#: A writer schema as the registry gives it: its type (``AVRO``, ``PROTOBUF``, ``JSON``), its
#: text, and the schemas it references (each before those that import it).
WriterSchema = tuple[str, str, Sequence[Reference]]


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
    :param writer_schema: schema id -> :data:`WriterSchema` (the registry; called once per id,
        raising :class:`SchemaError` for an id it does not know).
    :param references: the schemas the reader schema references."""

    def __init__(
        self, reader_schema: str, writer_schema: Callable[[int], WriterSchema], references: Sequence[Reference] = ()
    ) -> None:
        import fastavro

        self._read = fastavro.schemaless_reader
        named: dict[str, Any] = {}
        self.reader = parsed(json.loads(reader_schema), named, [json.loads(text) for _, text in references])
        self.arrow = columns_of(self.reader, named)
        self._reading = readable(self.reader, default_values=True)
        self._writer_schema = writer_schema
        self._writers: dict[int, Any] = {}
        self._reading_writers: dict[int, Any] = {}  # each writer schema as fastavro's reader takes it
        self._unknown: dict[int, str] = {}  # ids whose records cannot be read: why (asked once)
        # Per column that needs it, how fastavro's value becomes what pyarrow takes (the rest are as they are).
        found = {f["name"]: converter(f["type"], named) for f in self.reader["fields"]}
        self._converters = {name: convert for name, convert in found.items() if convert is not None}
        # The reader schema's own values in blocks, unless it has parts the blocks do not cover.
        self.blocks = None if unsupported(self.reader, named) else AvroBlocks(self.reader, named)
        #: how many values each way (the tests and the benchmark read it)
        self.counts = {"blocks": 0, "one_by_one": 0}

    def writer(self, schema_id: int) -> Any:
        """The parsed writer schema of an id, fetched and parsed once (a decoder lives as long as its task).

        :raises SchemaError: the id's records cannot be read (the reason is kept for the next ones).
        :raises ConfigError: the registry cannot be asked at all (TLS, settings refused): nobody's
            records are at fault, so it is never a record's problem (nor a dead letter's).
        """
        if schema_id in self._unknown:
            raise SchemaError(self._unknown[schema_id])
        if schema_id not in self._writers:
            try:
                kind, text, references = self._writer_schema(schema_id)
                if kind != "AVRO":
                    raise SchemaError(f"schema id {schema_id} is a {kind} schema, not Avro")
                try:
                    writer = parsed(json.loads(text), {}, [json.loads(r) for _, r in references])
                except ConfigError as exc:  # an invalid writer schema is its records' fault, not the batch's
                    raise SchemaError(str(exc)) from None
                self._reading_writers[schema_id] = readable(writer)
                self._writers[schema_id] = writer
            except (SchemaError, ValueError) as exc:
                self._unknown[schema_id] = f"schema id {schema_id}: {exc}" if "schema id" not in str(exc) else str(exc)
                raise SchemaError(self._unknown[schema_id]) from None
        return self._writers[schema_id]

    def decode(self, values: pa.Array) -> Decoded:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        values = values.cast(pa.binary()) if values.type != pa.binary() else values
        framing = schema_ids(values)
        ids = framing.ids
        problems = dict(framing.problems)
        one_by_one: list[np.ndarray] = []
        in_blocks: list[tuple[np.ndarray, pa.Table]] = []
        for schema_id in np.unique(ids[ids >= 0]).tolist():
            rows = np.flatnonzero(ids == schema_id)
            try:
                writer = self.writer(schema_id)
            except SchemaError as exc:
                problems.update(dict.fromkeys(rows.tolist(), str(exc)))
                continue
            table = None
            if self.blocks is not None and writer == self.reader and len(rows) >= MIN_VALUES:
                table = self.blocks.read(
                    values if len(rows) == len(values) else values.take(pa.array(rows)), self.arrow
                )
            if table is None:
                one_by_one.append(rows)
            else:
                in_blocks.append((rows, table))
        records: list[dict[str, Any] | None] = [None] * len(values)
        if one_by_one:
            rows = np.concatenate(one_by_one)
            self.counts["one_by_one"] += len(rows)
            for row, raw in zip(rows.tolist(), values.take(pa.array(rows)).to_pylist()):
                schema_id = int(ids[row])
                try:
                    # return_record_name: a record read from a union comes as (its full name, the record)
                    record = self._read(
                        io.BytesIO(raw[HEADER_BYTES:]),
                        self._reading_writers[schema_id],
                        self._reading,
                        return_record_name=True,
                    )
                    records[row] = self.converted(record)
                except Exception as exc:  # a corrupt or truncated payload, a writer schema that cannot resolve
                    problems[row] = f"schema id {schema_id}: {one_line(exc)}"
        columns = self.batch(records, problems) if one_by_one else self.nulls(len(values))
        if in_blocks:
            self.counts["blocks"] += sum(len(rows) for rows, _ in in_blocks)
            columns = placed(columns, in_blocks)
        return Decoded(columns, ids.tolist(), problems)

    def converted(self, record: dict[str, Any]) -> dict[str, Any]:
        converted = dict(record)
        for name, convert in self._converters.items():
            if converted.get(name) is not None:
                converted[name] = convert(converted[name])
        return converted

    def batch(self, records: list[dict[str, Any] | None], problems: dict[int, str]) -> pa.RecordBatch:
        """The columns; a record Arrow cannot take (a decimal wider than its column) becomes a problem."""
        try:
            return self.columns(records)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            for row, record in enumerate(records):
                if record is None:
                    continue
                try:
                    self.columns([record])
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    problems[row] = f"the value does not fit its columns: {one_line(exc)}"
                    records[row] = None
            return self.columns(records)

    def nulls(self, count: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.nulls(count, column.type) for column in self.arrow], schema=self.arrow)

    def columns(self, records: list[dict[str, Any] | None]) -> pa.RecordBatch:
        arrays = [
            pa.array([None if r is None else r.get(column.name) for r in records], type=column.type)
            for column in self.arrow
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)


def readable(schema: Any, default_values: bool = False) -> Any:
    """A parsed, self-contained schema as fastavro's reader takes it: marked parsed, so the reader does
    not parse it again for every value, with its defaults as values when it is the reader's."""
    import fastavro

    found = fastavro.parse_schema(schema, {})
    return with_default_values(found, found["__named_schemas"]) if default_values else found


def placed(columns: pa.RecordBatch, in_blocks: list[tuple[np.ndarray, pa.Table]]) -> pa.RecordBatch:
    """``columns`` with the rows decoded in blocks put in their places (each block: its rows, its table)."""
    if len(in_blocks) == 1 and len(in_blocks[0][0]) == columns.num_rows:
        return in_blocks[0][1].combine_chunks().to_batches()[0]
    source = np.arange(columns.num_rows)
    start = columns.num_rows
    for rows, table in in_blocks:
        source[rows] = np.arange(start, start + table.num_rows)
        start += table.num_rows
    stacked = pa.concat_tables([pa.Table.from_batches([columns]), *(table for _, table in in_blocks)])
    return stacked.take(pa.array(source)).combine_chunks().to_batches()[0]


Convert = Callable[[Any], Any]


def untagged(value: Any) -> Any:
    """A named type read from a union comes as ``(name, value)`` (fastavro tags records, and enums
    and fixed types the union names by reference): the value."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value[1]
    return value


def is_named(avro: Any, named: dict[str, Any]) -> bool:
    """Whether a union branch is a named type (record, enum, fixed), whose values fastavro may tag."""
    target = named.get(avro, avro) if isinstance(avro, str) else avro
    if not isinstance(target, dict):
        return False
    kind = target.get("type")
    return is_named(kind, named) if isinstance(kind, (dict, list)) else kind in ("record", "error", "enum", "fixed")


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
            inner = converter(others[0], named, seen)
            if not is_named(others[0], named):
                return inner  # only a named type's branch comes tagged
            return untagged if inner is None else (lambda v: inner(untagged(v)))
        return union_converter(others, named, seen)
    kind = avro.get("type")
    if isinstance(kind, (dict, list)):
        return converter(kind, named, seen)
    if avro.get("logicalType") == "uuid" and kind == "string":
        return str
    if kind in ("record", "error"):
        inner_seen = seen | {str(avro.get("name", ""))}
        fields = [(f["name"], converter(f["type"], named, inner_seen)) for f in avro["fields"]]
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


#: The Python types fastavro reads each family of union branch as (avro_types.FAMILIES).
PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float,),
    "str": (str, uuid.UUID),
    "bytes": (bytes,),
    "bool": (bool,),
    "list": (list,),
    "map": (dict,),
    "date": (dt.date,),
    "time": (dt.time,),
    "datetime": (dt.datetime,),
    "decimal": (decimal.Decimal,),
}


def union_converter(branches: list[Any], named: dict[str, Any], seen: frozenset[str]) -> Convert:
    """A union of several types becomes a struct with one field per branch. fastavro names a
    record's branch; any other branch is told by the Python type of the value, which
    :func:`~kafka_batch_provider.decoding.avro_types.check_distinct` made unambiguous."""
    names = branch_names(branches)
    kinds = [branch_kind(b, named) for b in branches]
    records = {kind.split(" ", 1)[1]: i for i, kind in enumerate(kinds) if kind.startswith("record ")}
    inners = [converter(b, named, seen) for b in branches]

    def branch_of(value: Any) -> int:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            if value[0] in records:
                return records[value[0]]
            value = value[1]  # an enum or fixed named by reference: told by its Python type like the rest
        for i, kind in enumerate(kinds):
            family = FAMILIES.get(kind, kind)
            if isinstance(value, bool) != (family == "bool"):  # a bool is an int to Python, not to Avro
                continue
            if isinstance(value, PYTHON_TYPES.get(family, ())) and not (
                family == "date" and isinstance(value, dt.datetime)  # a datetime is a date to Python
            ):
                return i
        raise ValueError(f"no branch of the union takes a {type(value).__name__}")

    def convert(value: Any) -> dict[str, Any]:
        i = branch_of(value)
        value = untagged(value)
        return {names[i]: value if inners[i] is None else inners[i](value)}

    return convert


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
