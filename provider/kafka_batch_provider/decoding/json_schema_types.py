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
columns (``additionalProperties``); keep the bytes with ``--keep-raw-value``. References are
followed: local ones (``#/definitions/...``, ``#/$defs/...``) and those to the registry's
referenced schemas, by the name the reference was registered with (``address.json``, Confluent's
convention) or by their ``$id``, with a pointer into them (``address.json#/$defs/Street``) or not.
A schema that refers to itself has no column type and is refused in one line.

Each part's type comes with how a JSON value becomes what pyarrow takes for it
(:class:`Column`): the decoder converts a value by walking the same tree.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import pyarrow as pa

from kafka_batch_provider.errors import ConfigError

SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


@dataclass(frozen=True)
class Column:
    """A part of the value: its Arrow type, and how a (non-null) JSON value becomes pyarrow's value."""

    type: pa.DataType
    convert: Callable[[Any], Any]


@dataclass(frozen=True)
class Scope:
    """Where references resolve: ``root``, the document a part is in (``#/...`` points into it), and
    ``documents``, the registry's referenced schemas by their reference name and by their ``$id``."""

    root: Mapping[str, Any]
    documents: Mapping[str, Any]

    def at(self, root: Mapping[str, Any]) -> Scope:
        return Scope(root, self.documents)


def documents_of(references: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The referenced schemas (``(name, text)`` pairs, as the registry gives them) by name and by ``$id``."""
    found: dict[str, Any] = {}
    for name, text in references:
        document = json.loads(text)
        found[name] = document
        if isinstance(document, Mapping) and isinstance(document.get("$id"), str):
            found.setdefault(document["$id"], document)
    return found


def value_columns(
    schema: Mapping[str, Any], part: str = "value", references: Sequence[tuple[str, str]] = ()
) -> dict[str, Column]:
    """The columns of a value (or key) schema: one per property of its top-level object.

    :param references: the registry's referenced schemas, ``(name, text)``.
    """
    scope = Scope(schema, documents_of(references))
    found, scope = resolved(schema, scope, ())
    if not (isinstance(found, Mapping) and isinstance(found.get("properties"), Mapping) and found["properties"]):
        raise ConfigError(f"the {part}'s JSON Schema must be an object with properties to become columns")
    return properties(found, scope, ())


def arrow_schema(columns: Mapping[str, Column]) -> pa.Schema:
    return pa.schema([pa.field(name, column.type) for name, column in columns.items()])


def resolved(part: Any, scope: Scope, seen: tuple[str, ...]) -> tuple[Any, Scope]:
    """``part`` with its ``$ref`` followed, and the scope of what it points at."""
    if not isinstance(part, Mapping) or "$ref" not in part:
        return part, scope
    reference = str(part["$ref"])
    document, _, pointer = reference.partition("#")
    where = place(reference, scope)
    if where in seen:
        raise ConfigError(f"JSON Schema {reference} refers to itself: a recursive schema has no column type")
    if document:
        root = referenced(document, scope)
        if root is None:
            return {}, scope  # a document the registry did not give: kept as JSON text
        scope = scope.at(root)
    target: Any = scope.root
    for step in pointer.lstrip("/").split("/") if pointer.strip("/") else []:
        target = target.get(step.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
    if target is None:
        raise ConfigError(f"JSON Schema reference {reference} points at nothing")
    return resolved(target, scope, (*seen, where))


def referenced(document: str, scope: Scope) -> Mapping[str, Any] | None:
    """A referenced document: by the reference's registered name, or by ``$id`` (as given, or
    relative to the ``$id`` of the document it is referred to from)."""
    if document in scope.documents:
        return scope.documents[document]
    base = scope.root.get("$id") if isinstance(scope.root, Mapping) else None
    return scope.documents.get(urljoin(base, document)) if isinstance(base, str) else None


def properties(schema: Mapping[str, Any], scope: Scope, seen: tuple[str, ...]) -> dict[str, Column]:
    return {name: column_of(part, scope, seen) for name, part in schema["properties"].items()}


def place(reference: str, scope: Scope) -> str:
    """Where a reference points, the same for every way of writing it from the same document."""
    document, _, pointer = reference.partition("#")
    return f"{document or id(scope.root)}#{pointer.rstrip('/')}"


def column_of(part: Any, scope: Scope, seen: tuple[str, ...]) -> Column:
    reference = part.get("$ref") if isinstance(part, Mapping) else None
    where = place(str(reference), scope) if reference else None
    found, scope = resolved(part, scope, seen)
    return part_column(found, scope, (*seen, where) if where else seen)


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


JSON_TEXT = Column(pa.string(), json_text)


def part_column(part: Any, scope: Scope, seen: tuple[str, ...]) -> Column:
    if not isinstance(part, Mapping):
        return JSON_TEXT  # a true / false schema
    kind = part.get("type")
    if kind is None:
        for key in ("anyOf", "oneOf"):
            if isinstance(part.get(key), list):
                others = [b for b in part[key] if not (isinstance(b, Mapping) and b.get("type") == "null")]
                if len(others) == 1:
                    return column_of(others[0], scope, seen)
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
            fields = properties(part, scope, seen)
            return Column(pa.struct([pa.field(n, c.type) for n, c in fields.items()]), struct_of(fields))
        values = part.get("additionalProperties")
        if isinstance(values, Mapping) and values:
            value = column_of(values, scope, seen)
            return Column(pa.map_(pa.string(), value.type), map_of(value))
        return JSON_TEXT
    if kind == "array" and isinstance(part.get("items"), Mapping):
        item = column_of(part["items"], scope, seen)
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
    text = checked(str)(value)
    try:
        found = dt.datetime.fromisoformat(text)
    except ValueError:
        if text[10:11] != "t" and not text.endswith("z"):
            raise
        # RFC 3339 allows a lower-case "t" and "z" (section 5.6), which fromisoformat does not take
        found = dt.datetime.fromisoformat(text.upper())
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
