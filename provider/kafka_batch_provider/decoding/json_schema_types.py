"""JSON Schemas as Arrow types: the columns a ``--value-format json-schema`` batch is written with.

Pure: a JSON Schema (as the registry returns it, parsed) in, a ``pyarrow`` type out. The mapping:

==========================================  =====================================================
JSON Schema                                 Arrow
==========================================  =====================================================
object with ``properties``                  struct, one field per property (the value: columns)
object with only ``additionalProperties``   map<string, T>
array with ``items``                        list<T>
string / integer / number / boolean         string / int64 / float64 / bool
string, ``format: date-time`` / ``date``    timestamp(us, UTC) / date
``type: [T, "null"]``, ``anyOf`` T or null  T, nullable
anything else (no type, ``oneOf`` of        string: the value's JSON text, as the producer
several types, an object without            wrote it
properties, ``enum`` of non-strings)
==========================================  =====================================================

Every column and field is nullable: JSON has no required value that a type could hold (a
missing property and ``null`` read alike). Properties a value has beyond the schema's are not
columns (``additionalProperties``); keep the bytes with ``--keep-raw-value``. Local references
(``#/definitions/...``, ``#/$defs/...``) are followed; a schema that refers to itself has no
column type and is refused in one line.

Each part's type comes with how a JSON value becomes what pyarrow takes for it
(:class:`Column`): the decoder converts a value by walking the same tree.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kafka_batch_provider.errors import ConfigError

SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


@dataclass(frozen=True)
class Column:
    """A part of the value: its Arrow type, and how a (non-null) JSON value becomes pyarrow's value."""

    type: pa.DataType
    convert: Callable[[Any], Any]


def value_columns(schema: Mapping[str, Any], part: str = "value") -> dict[str, Column]:
    """The columns of a value (or key) schema: one per property of its top-level object."""
    found = resolved(schema, schema, ())
    if not (isinstance(found, Mapping) and isinstance(found.get("properties"), Mapping) and found["properties"]):
        raise ConfigError(f"the {part}'s JSON Schema must be an object with properties to become columns")
    return properties(found, schema, ())


def arrow_schema(columns: Mapping[str, Column]) -> pa.Schema:
    return pa.schema([pa.field(name, column.type) for name, column in columns.items()])


def resolved(part: Any, root: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """``part`` with a local ``$ref`` followed (``#/definitions/X``, ``#/$defs/X``)."""
    if not isinstance(part, Mapping) or "$ref" not in part:
        return part
    reference = str(part["$ref"])
    if reference in seen:
        raise ConfigError(f"JSON Schema {reference} refers to itself: a recursive schema has no column type")
    if reference != "#" and not reference.startswith("#/"):
        return {}  # another document's: kept as JSON text
    target: Any = root
    for step in reference[2:].split("/") if reference != "#" else []:
        target = target.get(step.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
    if target is None:
        raise ConfigError(f"JSON Schema reference {reference} points at nothing")
    return resolved(target, root, (*seen, reference))


def properties(schema: Mapping[str, Any], root: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Column]:
    return {name: column_of(part, root, seen) for name, part in schema["properties"].items()}


def column_of(part: Any, root: Mapping[str, Any], seen: tuple[str, ...]) -> Column:
    reference = part.get("$ref") if isinstance(part, Mapping) else None
    found = resolved(part, root, seen)
    return part_column(found, root, (*seen, str(reference)) if reference else seen)


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


JSON_TEXT = Column(pa.string(), json_text)


def part_column(part: Any, root: Mapping[str, Any], seen: tuple[str, ...]) -> Column:
    if not isinstance(part, Mapping):
        return JSON_TEXT  # a true / false schema
    kind = part.get("type")
    if kind is None:
        for key in ("anyOf", "oneOf"):
            if isinstance(part.get(key), list):
                others = [b for b in part[key] if not (isinstance(b, Mapping) and b.get("type") == "null")]
                if len(others) == 1:
                    return column_of(others[0], root, seen)
        if isinstance(part.get("enum"), list) and all(isinstance(v, str) for v in part["enum"]):
            return Column(pa.string(), checked(str))
        if not isinstance(part.get("properties"), Mapping):
            return JSON_TEXT
        kind = "object"
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) != 1:
            return JSON_TEXT
        kind = others[0]
    if kind == "string":
        if part.get("format") == "date-time":
            return Column(pa.timestamp("us", tz="UTC"), timestamp)
        if part.get("format") == "date":
            return Column(pa.date32(), lambda v: dt.date.fromisoformat(checked(str)(v)))
        return Column(pa.string(), checked(str))
    if kind == "integer":
        return Column(pa.int64(), integer)
    if kind == "number":
        return Column(pa.float64(), number)
    if kind == "boolean":
        return Column(pa.bool_(), checked(bool))
    if kind == "object":
        if isinstance(part.get("properties"), Mapping) and part["properties"]:
            fields = properties(part, root, seen)
            return Column(pa.struct([pa.field(n, c.type) for n, c in fields.items()]), struct_of(fields))
        values = part.get("additionalProperties")
        if isinstance(values, Mapping) and values:
            value = column_of(values, root, seen)
            return Column(pa.map_(pa.string(), value.type), map_of(value))
        return JSON_TEXT
    if kind == "array" and isinstance(part.get("items"), Mapping):
        item = column_of(part["items"], root, seen)
        return Column(pa.list_(pa.field("element", item.type)), list_of(item))
    return JSON_TEXT


def checked(kind: type) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if not isinstance(value, kind):
            raise ValueError(f"expected a {kind.__name__}, found {json_text(value)[:40]}")
        return value

    return convert


def integer(value: Any) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        raise ValueError(f"expected an integer, found {json_text(value)[:40]}")
    return int(value)


def number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, found {json_text(value)[:40]}")
    return float(value)


def timestamp(value: Any) -> dt.datetime:
    found = dt.datetime.fromisoformat(checked(str)(value))
    if found.tzinfo is None:
        raise ValueError(f"date-time {value!r} has no time zone (RFC 3339 asks for one)")
    return found


def struct_of(fields: Mapping[str, Column]) -> Callable[[Any], dict[str, Any]]:
    def convert(value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object, found {json_text(value)[:40]}")
        return {n: None if value.get(n) is None else c.convert(value[n]) for n, c in fields.items()}

    return convert


def map_of(item: Column) -> Callable[[Any], list[tuple[str, Any]]]:
    def convert(value: Any) -> list[tuple[str, Any]]:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object, found {json_text(value)[:40]}")
        return [(k, None if v is None else item.convert(v)) for k, v in value.items()]

    return convert


def list_of(item: Column) -> Callable[[Any], list[Any]]:
    def convert(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise ValueError(f"expected an array, found {json_text(value)[:40]}")
        return [None if v is None else item.convert(v) for v in value]

    return convert
