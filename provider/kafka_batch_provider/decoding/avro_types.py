"""Avro schemas as Arrow types: the columns a ``--value-format avro`` batch is written with.

Pure: an Avro schema (JSON, as the registry returns it) in, a ``pyarrow`` type out. The mapping:

==========================================  =====================================================
Avro                                        Arrow
==========================================  =====================================================
null / boolean / int / long                 null / bool / int32 / int64
float / double                              float32 / float64
string / bytes / fixed(n)                   string / binary / fixed_size_binary(n)
enum                                        string (the symbol)
array<T> / map<T>                           list<T> / map<string, T>
record                                      struct (nested records too)
union [null, T]                             T, nullable
union of several types (with or w/o null)   struct of one nullable field per branch, named by
                                            the branch's type (``long``, ``string``, a record's
                                            name): the branch the value took is set
date                                        date32
time-millis / time-micros                   time64(us)
timestamp-millis / -micros                  timestamp(us, UTC)
local-timestamp-millis / -micros            timestamp(us), no time zone
decimal(p, s) on bytes or fixed             decimal128(p, s) (decimal256 above 38 digits)
uuid                                        string
duration                                    fixed_size_binary(12), as Avro stores it
==========================================  =====================================================

Names are resolved as fastavro parses the schema (fully qualified, the enclosing namespace
for a short reference). Every column, nested field, list element and map value is nullable, as
in the Protobuf and JSON Schema mappings: a tombstone (a record whose value is null) gives a row
whose value columns are null, a column added by a newer schema is null in older rows, and a
newer version may make any field optional (``"int"`` to ``["null", "int"]`` is BACKWARD
compatible): a table, or a Parquet reader that takes its schema from the first file, that had
learnt "never null" from older batches would refuse the newer ones. A recursive record (a linked
list, a tree) has no Arrow type: it is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from kafka_batch_provider.errors import ConfigError

PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}

#: Logical types on the Avro type they annotate; anything else falls back to the plain type,
#: as the Avro specification says readers must.
LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("date", "int"): pa.date32(),
    # Microseconds throughout: Delta and Iceberg tables store times and timestamps in them.
    ("time-millis", "int"): pa.time64("us"),
    ("time-micros", "long"): pa.time64("us"),
    ("timestamp-millis", "long"): pa.timestamp("us", tz="UTC"),
    ("timestamp-micros", "long"): pa.timestamp("us", tz="UTC"),
    ("local-timestamp-millis", "long"): pa.timestamp("us"),
    ("local-timestamp-micros", "long"): pa.timestamp("us"),
    ("uuid", "string"): pa.string(),
}


#: The one field of the record a key is read as (:func:`as_key_record`).
KEY_FIELD = "key"


def as_key_record(avro: Any) -> dict[str, Any]:
    """A key's schema as a record of one field, ``key``. A record is encoded as its fields in
    order, so every key (a string, a long, a record) decodes exactly as itself, and becomes one
    column. The record has no namespace: the key's own names keep theirs."""
    return {"type": "record", "name": "kafka_batch_key", "fields": [{"name": KEY_FIELD, "type": avro}]}


def arrow_schema(avro: Any, references: Sequence[Any] = ()) -> pa.Schema:
    """The columns of a record schema: one per field (the value's fields become columns).

    :param references: the schemas it imports (the registry's references), parsed first.
    """
    named: dict[str, Any] = {}
    return columns_of(parsed(avro, named, references), named)


def columns_of(schema: Any, named: dict[str, Any]) -> pa.Schema:
    """:func:`arrow_schema` of a schema :func:`parsed` already (``named``: its named types)."""
    if not (isinstance(schema, Mapping) and schema.get("type") in ("record", "error")):
        raise ConfigError(f"the value schema must be an Avro record to become columns, got {short(schema)}")
    struct = arrow_type(schema, named, ())
    return pa.schema([column.with_nullable(True) for column in struct])


def parsed(avro: Any, named: dict[str, Any], references: Sequence[Any] = ()) -> Any:
    """The schema as fastavro parses it (every name fully qualified), self-contained: each named
    type of its references defined where it is first used (:func:`inlined`), so the schema reads
    alone, as fastavro's reader (which parses it again) and a container file's header need it.
    Every named type is in ``named``; an invalid schema is refused in one line."""
    import fastavro

    try:
        for reference in references:
            fastavro.parse_schema(reference, named, _write_hint=False)
        found = fastavro.parse_schema(avro, named, _write_hint=False)
    except Exception as exc:  # fastavro's SchemaParseException, UnknownType, ...
        text = " ".join(str(exc).split())
        raise ConfigError(f"invalid Avro schema ({type(exc).__name__}: {text or short(avro)})") from None
    return inlined(found, named, set()) if references else found


def inlined(avro: Any, named: Mapping[str, Any], defined: set[str]) -> Any:
    """A parsed schema with each named type it refers to defined at its first use (in the order Avro
    reads a schema: depth first, fields in order) and referred to by its full name after that.

    :param defined: the names defined so far (filled in).
    """
    if isinstance(avro, str):
        if avro in PRIMITIVES or avro in defined or avro not in named:
            return avro
        return inlined(named[avro], named, defined)
    if isinstance(avro, list):
        return [inlined(branch, named, defined) for branch in avro]
    if not isinstance(avro, Mapping):
        return avro
    found = dict(avro)
    kind = found.get("type")
    if kind in ("record", "error", "enum", "fixed") and "name" in found:
        defined.add(str(found["name"]))
    if kind in ("record", "error"):
        found["fields"] = [{**f, "type": inlined(f["type"], named, defined)} for f in found["fields"]]
    elif kind == "array":
        found["items"] = inlined(found["items"], named, defined)
    elif kind == "map":
        found["values"] = inlined(found["values"], named, defined)
    elif isinstance(kind, (str, list, Mapping)) and kind not in PRIMITIVES and kind not in ("enum", "fixed"):
        found["type"] = inlined(kind, named, defined)
    return found


def arrow_field(name: str, avro: Any, named: dict[str, Any], seen: tuple[str, ...]) -> pa.Field:
    """A field, nullable (see the module's docstring)."""
    if isinstance(avro, list) and "null" in avro:
        others = [branch for branch in avro if branch != "null"]
        if not others:
            return pa.field(name, pa.null())
        return pa.field(name, arrow_type(others[0] if len(others) == 1 else others, named, seen))
    return pa.field(name, arrow_type(avro, named, seen))


def arrow_type(avro: Any, named: dict[str, Any], seen: tuple[str, ...]) -> pa.DataType:
    if isinstance(avro, str):
        if avro in PRIMITIVES:
            return PRIMITIVES[avro]
        if avro in seen:
            raise ConfigError(f"Avro record {avro!r} refers to itself: a recursive schema has no column type")
        if avro not in named:
            raise ConfigError(f"Avro schema names the unknown type {avro!r}")
        return arrow_type(named[avro], named, seen)
    if isinstance(avro, list):
        return union_type(avro, named, seen)
    if not isinstance(avro, Mapping):
        raise ConfigError(f"unknown Avro type {short(avro)}")
    kind = avro.get("type")
    logical = avro.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return decimal_type(avro)
    if logical == "duration" and kind == "fixed":
        return pa.binary(12)
    if isinstance(kind, str) and (logical, kind) in LOGICAL:
        return LOGICAL[(logical, kind)]
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    if kind in ("record", "error"):
        name = avro["name"]
        inner = (*seen, name)
        return pa.struct([arrow_field(f["name"], f["type"], named, inner) for f in avro["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary(int(avro["size"]))
    if kind == "array":
        return pa.list_(arrow_field("element", avro["items"], named, seen))
    if kind == "map":
        return pa.map_(pa.string(), arrow_field("value", avro["values"], named, seen))
    if isinstance(kind, (dict, list)):  # {"type": {"type": "array", ...}} nests a complete type
        return arrow_type(kind, named, seen)
    raise ConfigError(f"unknown Avro type {short(avro)}")


def union_type(branches: list[Any], named: dict[str, Any], seen: tuple[str, ...]) -> pa.DataType:
    """A union that is not just ``[null, T]``: one nullable field per non-null branch."""
    others = [branch for branch in branches if branch != "null"]
    if len(others) == 1:
        return arrow_type(others[0], named, seen)
    check_distinct(others, named)
    names = branch_names(others)
    return pa.struct([pa.field(name, arrow_type(branch, named, seen)) for name, branch in zip(names, others)])


#: What a value of each kind of branch is in Python once read: branches of one family in the
#: same union cannot be told apart (fastavro names only a record's branch).
FAMILIES = {
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "string": "str",
    "enum": "str",
    "uuid": "str",
    "bytes": "bytes",
    "fixed": "bytes",
    "duration": "bytes",
    "boolean": "bool",
    "array": "list",
    "map": "map",
    "date": "date",
    "time-millis": "time",
    "time-micros": "time",
    "timestamp-millis": "datetime",
    "timestamp-micros": "datetime",
    "local-timestamp-millis": "datetime",
    "local-timestamp-micros": "datetime",
    "decimal": "decimal",
}


def branch_kind(branch: Any, named: Mapping[str, Any]) -> str:
    """A branch's kind: its logical type when it has one (on the type it annotates: elsewhere it is
    ignored, as in :func:`arrow_type`), else its Avro type (a record: its name)."""
    target = named.get(branch, branch) if isinstance(branch, str) else branch
    if not isinstance(target, Mapping):
        return str(target)
    kind = target.get("type")
    if isinstance(kind, (Mapping, list)):
        return branch_kind(kind, named)
    logical = applied_logical(target)
    if logical in FAMILIES:
        return str(logical)
    if kind in ("record", "error"):
        return f"record {target.get('name')}"
    return str(kind)


def check_distinct(branches: Sequence[Any], named: Mapping[str, Any]) -> None:
    """A union's branches must read as different Python types, or a value's branch is a guess."""
    seen: dict[str, str] = {}
    for branch in branches:
        kind = branch_kind(branch, named)
        family = FAMILIES.get(kind, kind)
        if family in seen:
            raise ConfigError(
                f"Avro union of {seen[family]} and {kind} cannot become a column: a value of either reads "
                "the same, so the branch it took would be a guess; keep one of the two in the reader schema"
            )
        seen[family] = kind


def branch_names(branches: Sequence[Any]) -> list[str]:
    """The struct fields of a union's branches: their short names, or full ones (dots as ``_``)
    where two branches share a short name (``a.Address`` and ``b.Address``)."""
    short_names = [branch_name(b) for b in branches]
    return [
        name if short_names.count(name) == 1 else full_branch_name(b).replace(".", "_")
        for name, b in zip(short_names, branches)
    ]


def full_branch_name(branch: Any) -> str:
    if isinstance(branch, Mapping):
        return str(branch.get("name") or applied_logical(branch) or branch.get("type"))
    return str(branch)


def branch_name(branch: Any) -> str:
    """A union branch's field name: its type's name (``long``, ``Address``, ``array``; a logical
    type's where it applies: ``date``)."""
    if isinstance(branch, str):
        return branch.rsplit(".", 1)[-1]
    if isinstance(branch, Mapping):
        name = branch.get("name") or applied_logical(branch) or branch.get("type")
        return str(name).rsplit(".", 1)[-1]
    return "union"


#: The logical types besides ``LOGICAL``'s (whose column types depend on their parameters) and their types.
PARAMETRIZED_LOGICAL = {("decimal", "bytes"), ("decimal", "fixed"), ("duration", "fixed")}


def applied_logical(avro: Mapping[str, Any]) -> str | None:
    """A type's logical type where it annotates that type: elsewhere (``date`` on a long, an unknown
    one) a reader ignores it, as :func:`arrow_type` does."""
    logical, kind = avro.get("logicalType"), avro.get("type")
    if not isinstance(kind, str) or ((logical, kind) not in LOGICAL and (logical, kind) not in PARAMETRIZED_LOGICAL):
        return None
    return str(logical)


def decimal_type(avro: Mapping[str, Any]) -> pa.DataType:
    precision, scale = int(avro.get("precision", 0)), int(avro.get("scale", 0))
    if not 0 < precision <= 76 or not 0 <= scale <= precision:
        raise ConfigError(f"Avro decimal with precision {precision} and scale {scale} has no column type")
    return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)


def short(avro: Any, limit: int = 80) -> str:
    text = repr(avro)
    return text if len(text) <= limit else text[: limit - 3] + "..."
