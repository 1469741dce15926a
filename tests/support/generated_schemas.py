"""Generated schemas and values for the differential decoding test (tests/integration/test_decoding_differential.py).

Hypothesis strategies that draw a schema, the schemas it references (each registered under a
subject of its own) and values that fit it, in each registry format:

* :func:`avro_cases`: records with nested records, arrays, maps, enums, fixed, unions with null
  and unions of several types, every logical type (and logical types Avro says to ignore),
  named types in and out of namespaces (two of one short name in one union), named types
  used again by name, and named types of other subjects (references, one referencing another);
* :func:`protobuf_cases`: a file built as a ``FileDescriptorProto`` (proto3, with ``optional``,
  or proto2) with several top-level messages, nested messages and enums, ``repeated``, maps,
  ``oneof``, ``google.protobuf.Timestamp`` and the wrappers, and messages and enums imported
  from other registered files;
* :func:`json_schema_cases`: objects, nested objects, arrays, maps (``additionalProperties``),
  local ``$ref`` (``#/definitions``, ``#/$defs``), ``$ref`` to another registered schema by its
  reference name (``addr0.json``, with or without a pointer into it) and by its ``$id``
  (absolute, or from the value's schema relative to its own ``$id``), ``anyOf`` / ``oneOf`` /
  ``type`` lists with null, ``format: date-time`` / ``date`` (RFC 3339's spellings but a leap
  second), enums of strings, and the parts the mapping keeps as JSON text.

Sizes stay small (a handful of fields, nesting depth at most 3) so that a case takes milliseconds.
Names are valid for their format and distinct where they must be.

The oracles (:func:`avro_expected`, :func:`protobuf_expected`, :func:`json_expected`) turn what
confluent-kafka's own deserializers return into the values our Arrow columns must hold
(``to_pylist()`` form), following the mapping tables of ``decoding/*_types.py``. They are written
here from those tables and the formats' libraries, not from our decoders.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis's caches (its Unicode tables, the constants it finds in the code under test) in the
# temporary folder, not in a .hypothesis folder of the project (the tests keep no example database).
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "kafka-batch-hypothesis"))

UTC = dt.timezone.utc
#: Nesting depth of records, messages and objects.
MAX_DEPTH = 3
#: The fewest values an Avro case has: the block path needs at least avro_blocks.MIN_VALUES (16).
AVRO_VALUES = 16

LOWER = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"


def identifiers(first: str, rest: str, longest: int = 5) -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: a + b, st.sampled_from(first), st.text(rest, max_size=longest))


def unique_names(draw: Callable, names: st.SearchStrategy[str], count: int) -> list[str]:
    return draw(st.lists(names, min_size=count, max_size=count, unique_by=str.lower))


# =============================================================================================
# Avro
# =============================================================================================

AVRO_FIELD_NAMES = identifiers(LOWER + "_", LOWER + DIGITS + "_")
AVRO_SYMBOLS = identifiers("ABCXYZ_", "ABCXYZ019_", 3)
AVRO_SHORT_NAMES = ("Item", "Part", "Thing")
AVRO_NAMESPACES = ("a", "b.c", "lab")


@dataclass(frozen=True)
class AvroPart:
    """A drawn Avro type: its schema (JSON), the values that fit it, and what a union needs to know."""

    schema: Any
    values: st.SearchStrategy[Any]
    #: what a value of it is in Python (a union's branches must differ in it: avro_types.check_distinct)
    family: str
    #: Avro's own type (a union may not hold two of one unnamed type); ``named`` for named types
    underlying: str
    #: full name of a named type
    name: str | None = None
    is_record: bool = False


@dataclass(frozen=True)
class AvroReference:
    """A named type registered under a subject of its own; ``name`` is its full name (the reference's
    name), ``references`` the names of the references it uses itself."""

    name: str
    schema: dict[str, Any]
    references: tuple[str, ...]


@dataclass(frozen=True)
class AvroCase:
    schema: dict[str, Any]
    references: tuple[AvroReference, ...]
    values: tuple[Any, ...]
    #: drawn without the parts the compiled block path leaves to fastavro (avro_blocks.unsupported)
    block_friendly: bool


def avro_decimal(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    """Decimals of at most ``precision`` digits with exactly ``scale`` places (as fastavro writes them)."""
    limit = 10**precision - 1
    exact = decimal.Context(prec=100)  # the default 28 digits would round a wider one (and change its scale)
    return st.integers(-limit, limit).map(lambda n: Decimal(n).scaleb(-scale, context=exact))


def fixed_precision(size: int) -> int:
    """The most digits a two's complement number of ``size`` bytes holds in full."""
    return len(str(2 ** (8 * size - 1) - 1)) - 1


#: kind -> (schema, values, family, underlying) for the kinds that are not named types
AVRO_SIMPLE: dict[str, tuple[Any, st.SearchStrategy[Any], str, str]] = {
    "null": ("null", st.none(), "null", "null"),
    "boolean": ("boolean", st.booleans(), "bool", "boolean"),
    "int": ("int", st.integers(-(2**31), 2**31 - 1), "int", "int"),
    "long": ("long", st.integers(-(2**63), 2**63 - 1), "int", "long"),
    "float": ("float", st.floats(width=32), "float", "float"),
    "double": ("double", st.floats(), "float", "double"),
    "bytes": ("bytes", st.binary(max_size=6), "bytes", "bytes"),
    "string": ("string", st.text(max_size=6), "str", "string"),
    "date": ({"type": "int", "logicalType": "date"}, st.dates(), "date", "int"),
    "time-millis": ({"type": "int", "logicalType": "time-millis"}, st.times(), "time", "int"),
    "time-micros": ({"type": "long", "logicalType": "time-micros"}, st.times(), "time", "long"),
    "timestamp-millis": (
        {"type": "long", "logicalType": "timestamp-millis"},
        st.datetimes(timezones=st.just(UTC)),
        "datetime",
        "long",
    ),
    "timestamp-micros": (
        {"type": "long", "logicalType": "timestamp-micros"},
        st.datetimes(timezones=st.just(UTC)),
        "datetime",
        "long",
    ),
    "local-timestamp-millis": (
        {"type": "long", "logicalType": "local-timestamp-millis"},
        st.datetimes(),
        "datetime",
        "long",
    ),
    "local-timestamp-micros": (
        {"type": "long", "logicalType": "local-timestamp-micros"},
        st.datetimes(),
        "datetime",
        "long",
    ),
    "uuid": ({"type": "string", "logicalType": "uuid"}, st.uuids() | st.uuids().map(str), "str", "string"),
    # Logical types a reader must ignore (unknown, or on another type): the plain type's values.
    "unknown-logical": ({"type": "string", "logicalType": "x-colour"}, st.text(max_size=6), "str", "string"),
    "misplaced-logical": (
        {"type": "long", "logicalType": "date"},
        st.integers(-(2**63), 2**63 - 1),
        "int",
        "long",
    ),
}
#: The kinds the compiled block path leaves to fastavro (avro_blocks.unsupported).
AVRO_NOT_IN_BLOCKS = {"uuid", "duration", "union", "wide-decimal", "null"}
AVRO_NAMED_KINDS = ("enum", "fixed", "duration", "decimal-fixed", "record")
AVRO_LEAF_KINDS = (*AVRO_SIMPLE, "enum", "fixed", "duration", "decimal-bytes", "wide-decimal", "decimal-fixed")
#: Family and underlying type of the kinds not in AVRO_SIMPLE (a record's family is its name).
AVRO_KIND_FAMILY = {
    "enum": ("str", "named"),
    "fixed": ("bytes", "named"),
    "duration": ("bytes", "named"),
    "decimal-fixed": ("decimal", "named"),
    "decimal-bytes": ("decimal", "bytes"),
    "wide-decimal": ("decimal", "bytes"),
    "array": ("list", "array"),
    "map": ("map", "map"),
}


class AvroBuilder:
    """Draws Avro types in the order a schema is read (depth first), so a named type is used by
    name only after its definition, and never inside itself."""

    def __init__(self, draw: Callable, block_friendly: bool) -> None:
        self.draw = draw
        self.block_friendly = block_friendly
        #: named types complete so far (usable by name), by full name
        self.named: dict[str, AvroPart] = {}
        self.taken: set[str] = set()
        #: the references drawn so far, and those the document being drawn uses
        self.references: dict[str, AvroReference] = {}
        self.used_references: set[str] = set()

    def allowed(self, kind: str) -> bool:
        return not (self.block_friendly and kind in AVRO_NOT_IN_BLOCKS)

    def kind(self, depth: int, namespace: str, union_ok: bool = True) -> str:
        """A kind of type: each leaf kind once, the others several times (so they are not drowned)."""
        kinds = [k for k in AVRO_LEAF_KINDS if self.allowed(k)]
        if depth < MAX_DEPTH:
            kinds += ["record", "array", "map"] * 3
            if union_ok:  # a union is not a union's branch
                kinds += ["nullable"] * 3 + (["union"] * 3 if self.allowed("union") else [])
        if self.usable(namespace):
            kinds += ["by-name"] * 4
        return self.draw(st.sampled_from(kinds))

    def usable(self, namespace: str) -> list[str]:
        """The named types a name can refer to here: by full name, and a type of the null namespace
        only where there is no enclosing namespace (elsewhere its name would be read as one of it)."""
        return sorted(n for n in self.named if "." in n or not namespace)

    def name(self, namespace: str) -> tuple[dict[str, str], str, str]:
        """A new named type's name keys, its full name and its namespace (for the types inside it)."""
        short = self.draw(st.sampled_from(AVRO_SHORT_NAMES))
        # "namespace": "" (the null namespace) only where there is no enclosing one: inside one, fastavro's
        # parsed form drops it (a short name, read again as the enclosing namespace's), and with it
        # confluent-kafka's deserializer, our decoder and the embedded registry's canonical text.
        how = self.draw(st.sampled_from(["inherit", "namespace", "dotted"] + ([] if namespace else ["null"])))
        own = namespace if how in ("inherit", "null") else self.draw(st.sampled_from(AVRO_NAMESPACES))
        suffix = 0
        while (full := f"{own}.{short}{suffix or ''}" if own else f"{short}{suffix or ''}") in self.taken:
            suffix += 1
        self.taken.add(full)
        short = full.rsplit(".", 1)[-1]
        if how == "dotted":
            return {"name": full}, full, own
        if how == "null":
            return {"name": short, "namespace": ""}, full, own
        if how == "namespace":
            return {"name": short, "namespace": own}, full, own
        return {"name": short}, full, own

    def part(self, depth: int, namespace: str, kind: str | None = None, union_ok: bool = True) -> AvroPart:
        kind = kind or self.kind(depth, namespace, union_ok)
        draw = self.draw
        if kind in AVRO_SIMPLE:
            schema, values, family, underlying = AVRO_SIMPLE[kind]
            if isinstance(schema, str) and draw(st.booleans()):
                schema = {"type": schema}  # {"type": "long"} is "long"
            return AvroPart(schema, values, family, underlying)
        if kind in ("decimal-bytes", "wide-decimal"):
            precision = draw(st.integers(39, 76) if kind == "wide-decimal" else st.integers(1, 38))
            scale = draw(st.integers(0, precision))
            schema = {"type": "bytes", "logicalType": "decimal", "precision": precision}
            if scale or draw(st.booleans()):
                schema["scale"] = scale
            return AvroPart(schema, avro_decimal(precision, scale), "decimal", "bytes")
        if kind == "array":
            items = self.part(depth + 1, namespace)
            return AvroPart(
                {"type": "array", "items": items.schema}, st.lists(items.values, max_size=3), "list", "array"
            )
        if kind == "map":
            inner = self.part(depth + 1, namespace)
            values = st.dictionaries(st.text(max_size=4), inner.values, max_size=3)
            return AvroPart({"type": "map", "values": inner.schema}, values, "map", "map")
        if kind == "nullable":
            inner = self.part(depth, namespace, union_ok=False)
            schema = ["null", inner.schema] if draw(st.booleans()) else [inner.schema, "null"]
            return AvroPart(schema, st.none() | inner.values, inner.family, "union")
        if kind == "union":
            return self.union(depth, namespace)
        if kind == "by-name":
            full = draw(st.sampled_from(self.usable(namespace)))
            found = self.named[full]
            if full in self.references:
                self.used_references.add(full)
            return AvroPart(full, found.values, found.family, "named", full, found.is_record)
        return self.named_type(kind, depth, namespace)

    def named_type(self, kind: str, depth: int, namespace: str) -> AvroPart:
        draw = self.draw
        keys, full, own = self.name(namespace)
        if kind == "enum":
            symbols = unique_names(draw, AVRO_SYMBOLS, draw(st.integers(1, 4)))
            schema = {"type": "enum", **keys, "symbols": symbols}
            part = AvroPart(schema, st.sampled_from(symbols), "str", "named", full)
        elif kind in ("fixed", "duration", "decimal-fixed"):
            smallest = 1 if kind == "decimal-fixed" or self.block_friendly else 0  # size 0: not in blocks
            size = 12 if kind == "duration" else draw(st.integers(smallest, 8))
            schema = {"type": "fixed", **keys, "size": size}
            values: st.SearchStrategy[Any] = st.binary(min_size=size, max_size=size)
            family = "bytes"
            if kind == "duration":
                schema["logicalType"] = "duration"
            elif kind == "decimal-fixed":
                precision = draw(st.integers(1, fixed_precision(size)))
                scale = draw(st.integers(0, precision))
                schema.update(logicalType="decimal", precision=precision, scale=scale)
                values, family = avro_decimal(precision, scale), "decimal"
            part = AvroPart(schema, values, family, "named", full)
        else:
            fewest = 0 if depth > 0 and not self.block_friendly else 1  # no fields: not in blocks
            count = draw(st.integers(fewest, 3 if depth > 0 else 5))
            names = unique_names(draw, AVRO_FIELD_NAMES, count)
            fields, strategies = [], {}
            for field_name in names:
                inner = self.part(depth + 1, own)
                fields.append({"name": field_name, "type": inner.schema})
                strategies[field_name] = inner.values
            schema = {"type": "record", **keys, "fields": fields}
            part = AvroPart(schema, st.fixed_dictionaries(strategies), f"record {full}", "named", full, True)
        self.named[full] = part
        return part

    def union(self, depth: int, namespace: str) -> AvroPart:
        """A union of two or three types of distinct families (what the mapping takes), with or
        without null. fastavro writes a value in the first branch that takes it, and its date, time
        and timestamp branches take ints too (a date's a string as well, raising when it is not one):
        those branches come last. A record's values are written as ``(name, record)``, the notation
        that names the branch (for other types fastavro's validation does not take it)."""
        draw = self.draw
        candidates = [k for k in AVRO_LEAF_KINDS if k != "null" and self.allowed(k)]
        candidates += ["record", "record", "array", "map"] + (["by-name"] if self.usable(namespace) else [])
        wanted = draw(st.integers(2, 3))
        chosen: list[AvroPart] = []
        families: set[str] = set()
        underlying: set[str] = set()
        # Eight draws to choose from (hypothesis's permutations stay close to the order given).
        for kind in draw(st.lists(st.sampled_from(candidates), min_size=8, max_size=8)):
            if len(chosen) == wanted:
                break
            if kind == "by-name":
                full = draw(st.sampled_from(self.usable(namespace)))
                found = self.named[full]
                family, under = found.family, "named"
            elif kind == "record":
                family, under = "record", "named"
            elif kind in AVRO_SIMPLE:
                family, under = AVRO_SIMPLE[kind][2:]
            else:
                family, under = AVRO_KIND_FAMILY[kind]
            if (kind != "record" and family in families) or (under != "named" and under in underlying):
                continue
            if kind == "by-name" and (full in {p.name for p in chosen}):
                continue
            if kind == "by-name":
                if full in self.references:
                    self.used_references.add(full)
                part = AvroPart(full, found.values, found.family, "named", full, found.is_record)
            else:
                part = self.part(depth + 1, namespace, kind=kind)
            chosen.append(part)
            families.add(part.family)
            underlying.add(part.underlying)
        chosen.sort(key=lambda p: p.family in ("date", "time", "datetime"))
        branches = [p.schema for p in chosen]
        values = [st.tuples(st.just(p.name), p.values) if p.is_record else p.values for p in chosen]
        if draw(st.booleans()):
            branches.insert(draw(st.integers(0, len(branches))), "null")
            values.append(st.none())
        return AvroPart(branches, st.one_of(values), "union", "union")


@st.composite
def avro_cases(draw: Callable) -> AvroCase:
    """A record schema, the named types it takes from other subjects, and 16 to 20 values."""
    block_friendly = draw(st.booleans())
    builder = AvroBuilder(draw, block_friendly)
    references: list[AvroReference] = []
    for _ in range(draw(st.integers(0, 2))):
        builder.used_references = set()
        kind = draw(st.sampled_from(["record", "record", "enum", "fixed"]))
        part = builder.part(MAX_DEPTH - 1 if kind == "record" else 1, "", kind=kind)
        reference = AvroReference(part.name or "", part.schema, tuple(sorted(builder.used_references)))
        references.append(reference)
        # Used by name from here on: the definition lives in its own subject.
        builder.references[reference.name] = reference
        builder.named = {r.name: builder.named[r.name] for r in references}
    top = builder.part(0, "", kind="record")  # no enclosing namespace: its own, if any, it names
    values = draw(st.lists(top.values, min_size=AVRO_VALUES, max_size=AVRO_VALUES + 4))
    return AvroCase(top.schema, tuple(references), tuple(values), block_friendly)


def avro_names(schema: Any, references: Sequence[Any], write_hint: bool = False) -> tuple[Any, dict[str, Any]]:
    """The schema as fastavro (the reference's own parser) reads it, and its named types by full name
    (``write_hint``: marked parsed, as its reader takes it)."""
    import fastavro

    named: dict[str, Any] = {}
    for reference in references:
        fastavro.parse_schema(reference, named, _write_hint=False)
    return fastavro.parse_schema(schema, named, _write_hint=write_hint), named


def avro_expected(schema: Any, value: Any, named: Mapping[str, Any]) -> Any:
    """The column value of what AvroDeserializer (``return_record_name=True``) read for ``schema``,
    per avro_types' table."""
    if value is None:
        return None
    if isinstance(schema, str):
        return avro_expected(named[schema], value, named) if schema in named else value
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        branch = avro_branch(others, value, named)
        if isinstance(value, tuple):
            value = value[1]  # a record read from a union comes as (its full name, the record)
        found = avro_expected(others[branch], value, named)
        if len(others) == 1:
            return found
        return {name: found if i == branch else None for i, name in enumerate(avro_branch_names(others))}
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in named):
        return avro_expected(kind, value, named)
    if kind in ("record", "error"):
        return {f["name"]: avro_expected(f["type"], value.get(f["name"]), named) for f in schema["fields"]}
    if kind == "array":
        return [avro_expected(schema["items"], v, named) for v in value]
    if kind == "map":
        return [(k, avro_expected(schema["values"], v, named)) for k, v in value.items()]
    if logical == "uuid" and kind == "string":
        return str(value)
    return value


def avro_kind(schema: Any, named: Mapping[str, Any]) -> tuple[str, Any]:
    """A union branch's Avro type (a logical type's name where it has one) and its definition."""
    if isinstance(schema, str):
        return avro_kind(named[schema], named) if schema in named else (schema, schema)
    kind = schema.get("type")
    if isinstance(kind, (dict, list)):
        return avro_kind(kind, named)
    logical = schema.get("logicalType")
    return (logical if (kind, logical) in AVRO_LOGICAL else kind), schema


#: (type, logical type) where the logical type applies: elsewhere Avro reads the plain type.
AVRO_LOGICAL = {
    ("int", "date"),
    ("int", "time-millis"),
    ("long", "time-micros"),
    ("long", "timestamp-millis"),
    ("long", "timestamp-micros"),
    ("long", "local-timestamp-millis"),
    ("long", "local-timestamp-micros"),
    ("string", "uuid"),
    ("bytes", "decimal"),
    ("fixed", "decimal"),
}


#: A read value's Python type -> the union branches' kinds it can have come from.
AVRO_PYTHON_KINDS: list[tuple[type | tuple[type, ...], set[str]]] = [
    (bool, {"boolean"}),
    (int, {"int", "long"}),
    (float, {"float", "double"}),
    (uuid.UUID, {"uuid"}),
    (str, {"string", "enum"}),
    (bytes, {"bytes", "fixed"}),
    (Decimal, {"decimal"}),
    (dt.datetime, {"timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"}),
    (dt.date, {"date"}),
    (dt.time, {"time-millis", "time-micros"}),
    (list, {"array"}),
    (dict, {"map"}),
]


def avro_branch(branches: list[Any], value: Any, named: Mapping[str, Any]) -> int:
    """Which branch a value read from a union came from: a record by the name fastavro gives it,
    anything else by its Python type (the mapping takes only unions where that is unambiguous)."""
    kinds = [avro_kind(b, named) for b in branches]
    if isinstance(value, tuple):
        return next(i for i, (_, d) in enumerate(kinds) if isinstance(d, dict) and d.get("name") == value[0])
    for python_type, possible in AVRO_PYTHON_KINDS:
        if isinstance(value, python_type):
            return next(i for i, (k, _) in enumerate(kinds) if k in possible)
    raise AssertionError(f"no branch of {branches} reads as a {type(value).__name__}")


def avro_branch_names(branches: list[Any]) -> list[str]:
    """The struct fields of a union of several types (avro_types' table): each branch's type name
    (``long``, a named type's short name, ``array``, a logical type's name where it applies: not
    ``date`` on a long, which Avro reads as a long), the full name with ``_`` for dots where two
    branches share a short name."""

    def full(branch: Any) -> str:
        if isinstance(branch, str):
            return branch
        kind, logical = branch.get("type"), branch.get("logicalType")
        applies = (kind, logical) in AVRO_LOGICAL or (kind, logical) == ("fixed", "duration")
        return str(branch.get("name") or (logical if applies else kind))

    shorts = [full(b).rsplit(".", 1)[-1] for b in branches]
    return [s if shorts.count(s) == 1 else full(b).replace(".", "_") for s, b in zip(shorts, branches)]


# =============================================================================================
# Protobuf
# =============================================================================================

FD = descriptor_pb2.FieldDescriptorProto
PROTO_FIELD_NAMES = identifiers(LOWER, LOWER + DIGITS)
TIMESTAMP_FILE = "google/protobuf/timestamp.proto"
WRAPPERS_FILE = "google/protobuf/wrappers.proto"

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT32 = st.integers(0, 2**32 - 1)
UINT64 = st.integers(0, 2**64 - 1)
#: scalar type -> its values
PROTO_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FD.TYPE_DOUBLE: st.floats(),
    FD.TYPE_FLOAT: st.floats(width=32),
    FD.TYPE_INT32: INT32,
    FD.TYPE_SINT32: INT32,
    FD.TYPE_SFIXED32: INT32,
    FD.TYPE_INT64: INT64,
    FD.TYPE_SINT64: INT64,
    FD.TYPE_SFIXED64: INT64,
    FD.TYPE_UINT32: UINT32,
    FD.TYPE_FIXED32: UINT32,
    FD.TYPE_UINT64: UINT64,
    FD.TYPE_FIXED64: UINT64,
    FD.TYPE_BOOL: st.booleans(),
    FD.TYPE_STRING: st.text(max_size=6),
    FD.TYPE_BYTES: st.binary(max_size=6),
}
PROTO_MAP_KEYS = [t for t in PROTO_SCALARS if t not in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT, FD.TYPE_BYTES)]
#: wrapper message -> the scalar type it wraps
PROTO_WRAPPERS = {
    "DoubleValue": FD.TYPE_DOUBLE,
    "FloatValue": FD.TYPE_FLOAT,
    "Int64Value": FD.TYPE_INT64,
    "UInt64Value": FD.TYPE_UINT64,
    "Int32Value": FD.TYPE_INT32,
    "UInt32Value": FD.TYPE_UINT32,
    "BoolValue": FD.TYPE_BOOL,
    "StringValue": FD.TYPE_STRING,
    "BytesValue": FD.TYPE_BYTES,
}
TIMESTAMPS = st.fixed_dictionaries(
    {"seconds": st.integers(-62_135_596_800, 253_402_300_799), "nanos": st.integers(0, 999_999_999)}
)


@dataclass(frozen=True)
class ProtoType:
    """A type a field can have: a scalar, or a message or enum by its full name (``.pkg.Name``)."""

    type: int
    values: st.SearchStrategy[Any]
    type_name: str = ""
    #: the file that defines it, which the file using it must import ("" for the file itself)
    file: str = ""
    #: an enum whose first value is not 0 (proto2) is no map's value type
    map_value: bool = True


@dataclass(frozen=True)
class ProtobufCase:
    """``files``: the imported files first, the value's file last; ``message``: the value's message
    (full name); ``values``: field name -> value, a message as such a dict, an enum as its number,
    a Timestamp as ``{"seconds", "nanos"}``, a wrapper as ``{"value"}`` (:func:`fill`)."""

    files: tuple[descriptor_pb2.FileDescriptorProto, ...]
    message: str
    values: tuple[dict[str, Any], ...]


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


class ProtoBuilder:
    """Draws messages and enums into files; a message uses only types complete before it (no recursion)."""

    def __init__(self, draw: Callable, syntax: str) -> None:
        self.draw = draw
        self.syntax = syntax
        #: message and enum types usable so far
        self.types: list[ProtoType] = []
        self.counter = 0

    def new_name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def enum(self, scope: str, file: str) -> tuple[descriptor_pb2.EnumDescriptorProto, ProtoType]:
        draw = self.draw
        name = self.new_name("E")
        count = draw(st.integers(1, 4))
        if self.syntax == "proto3":  # proto3 enums start at 0
            numbers = [
                0,
                *draw(st.lists(st.integers(1, 2**31 - 1), min_size=count - 1, max_size=count - 1, unique=True)),
            ]
        else:
            numbers = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=count, max_size=count, unique=True))
        enum = descriptor_pb2.EnumDescriptorProto(name=name)
        for i, number in enumerate(numbers):  # a value's name is scoped beside its enum: prefixed, so distinct
            enum.value.add(name=f"{name}_V{i}", number=number)
        values = st.sampled_from(numbers)
        if self.syntax == "proto3":  # an open enum takes numbers it does not name
            values = values | INT32
        full = f".{scope}.{name}" if scope else f".{name}"
        return enum, ProtoType(FD.TYPE_ENUM, values, full, file, map_value=numbers[0] == 0)

    def value_type(self, depth: int, file: str, wkt: bool = True, in_map: bool = False) -> ProtoType:
        """A field's (or a map value's) type: a scalar, an enum or message drawn before, a well-known type."""
        draw = self.draw
        choices = ["scalar", "scalar", "scalar"]
        named = [t for t in self.types if t.map_value or not in_map]
        if named:
            choices += ["named", "named"]
        if wkt:
            choices += ["timestamp", "wrapper"]
        choice = draw(st.sampled_from(choices))
        if choice == "scalar":
            scalar = draw(st.sampled_from(sorted(PROTO_SCALARS)))
            return ProtoType(scalar, PROTO_SCALARS[scalar])
        if choice == "named":
            return draw(st.sampled_from(named))
        if choice == "timestamp":
            return ProtoType(FD.TYPE_MESSAGE, TIMESTAMPS, ".google.protobuf.Timestamp", TIMESTAMP_FILE)
        wrapper = draw(st.sampled_from(sorted(PROTO_WRAPPERS)))
        values = st.fixed_dictionaries({"value": PROTO_SCALARS[PROTO_WRAPPERS[wrapper]]})
        return ProtoType(FD.TYPE_MESSAGE, values, f".google.protobuf.{wrapper}", WRAPPERS_FILE)

    def message(
        self, name: str, scope: str, depth: int, file: str, imports: set[str]
    ) -> tuple[descriptor_pb2.DescriptorProto, st.SearchStrategy[dict[str, Any]]]:
        """A message with nested types, fields of every label, oneofs; and the values that fit it."""
        draw = self.draw
        full = f"{scope}.{name}" if scope else name
        message = descriptor_pb2.DescriptorProto(name=name)
        if depth < MAX_DEPTH:
            for _ in range(draw(st.integers(0, 1))):
                nested_name = self.new_name("N")
                nested, values = self.message(nested_name, full, depth + 1, file, imports)
                message.nested_type.append(nested)
                self.types.append(ProtoType(FD.TYPE_MESSAGE, values, f".{full}.{nested_name}", file))
        if draw(st.booleans()):
            enum, found = self.enum(full, file)
            message.enum_type.append(enum)
            self.types.append(found)
        count = draw(st.integers(0 if depth else 1, 4 if depth else 6))
        names = unique_names(draw, PROTO_FIELD_NAMES, count)
        numbers = draw(
            st.lists(
                st.integers(1, 18_999) | st.integers(20_000, 2**29 - 1), min_size=count, max_size=count, unique=True
            )
        )
        labels = ["singular", "singular", "repeated", "map", "oneof"] + (
            ["optional"] if self.syntax == "proto3" else []
        )
        plain: dict[str, st.SearchStrategy[Any]] = {}
        oneofs: dict[int, dict[str, st.SearchStrategy[Any]]] = {}
        synthetic: list[descriptor_pb2.FieldDescriptorProto] = []
        oneof_count = draw(st.integers(1, 2))
        for field_name, number in zip(names, numbers):
            label = draw(st.sampled_from(labels))
            field = message.field.add(name=field_name, number=number, label=FD.LABEL_OPTIONAL)
            if label == "map":
                key = draw(st.sampled_from(PROTO_MAP_KEYS))
                value = self.value_type(depth, file, in_map=True)
                entry = message.nested_type.add(name=f"{camel(field_name)}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=FD.LABEL_OPTIONAL, type=key)
                entry.field.add(name="value", number=2, label=FD.LABEL_OPTIONAL, type=value.type)
                if value.type_name:
                    entry.field[1].type_name = value.type_name
                self.uses(value, imports)
                field.label, field.type, field.type_name = FD.LABEL_REPEATED, FD.TYPE_MESSAGE, f".{full}.{entry.name}"
                plain[field_name] = st.dictionaries(PROTO_SCALARS[key], value.values, max_size=3)
                continue
            found = self.value_type(depth, file)
            self.uses(found, imports)
            field.type = found.type
            if found.type_name:
                field.type_name = found.type_name
            if label == "repeated":
                field.label = FD.LABEL_REPEATED
                plain[field_name] = st.lists(found.values, max_size=3)
            elif label == "oneof":
                group = draw(st.integers(0, oneof_count - 1))
                oneofs.setdefault(group, {})[field_name] = found.values
                field.oneof_index = group
            elif label == "optional":
                field.proto3_optional = True
                synthetic.append(field)
                plain[field_name] = found.values
            else:
                plain[field_name] = found.values
        # Real oneofs first (numbered as drawn, none empty), the synthetic ones of proto3 optional after.
        order = sorted(oneofs)
        for index, group in enumerate(order):
            message.oneof_decl.add(name=f"choice{group}")
            for field in message.field:
                if field.HasField("oneof_index") and not field.proto3_optional and field.oneof_index == group:
                    field.oneof_index = index
        for field in synthetic:
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{field.name}")
        choices = [
            st.one_of(st.just({}), *(values.map(lambda v, n=n: {n: v}) for n, values in oneofs[group].items()))
            for group in order
        ]
        strategy = st.tuples(st.fixed_dictionaries({}, optional=plain), *choices).map(
            lambda parts: {k: v for part in parts for k, v in part.items()}
        )
        return message, strategy

    def uses(self, found: ProtoType, imports: set[str]) -> None:
        if found.file:
            imports.add(found.file)

    def file(
        self, name: str, package: str, top_level: int, depth: int, imports: set[str]
    ) -> tuple[descriptor_pb2.FileDescriptorProto, list[tuple[str, st.SearchStrategy[Any]]]]:
        """A file of ``top_level`` messages (and maybe an enum); each message's full name and values."""
        draw = self.draw
        file = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax=self.syntax)
        if draw(st.booleans()):
            enum, found = self.enum(package, name)
            file.enum_type.append(enum)
            self.types.append(found)
        messages = []
        for _ in range(top_level):
            message_name = self.new_name("M")
            message, values = self.message(message_name, package, depth, name, imports)
            file.message_type.append(message)
            full = f"{package}.{message_name}" if package else message_name
            self.types.append(ProtoType(FD.TYPE_MESSAGE, values, f".{full}", name))
            messages.append((full, values))
        return file, messages


@st.composite
def protobuf_cases(draw: Callable) -> ProtobufCase:
    """A value's file (proto3 mostly, proto2 too) importing 0-2 registered files, and 1-6 values.

    The value's message is the file's first top-level message no other message of it uses (the
    one protobuf_types.value_message takes): helpers it uses come before it, an unrelated message
    may follow it."""
    syntax = draw(st.sampled_from(["proto3", "proto3", "proto3", "proto2"]))
    builder = ProtoBuilder(draw, syntax)
    files: list[descriptor_pb2.FileDescriptorProto] = []
    for index in range(draw(st.integers(0, 2))):
        imports: set[str] = set()
        name = f"lib/dep{index}.proto"
        dep, _ = builder.file(name, draw(st.sampled_from([f"dep{index}", f"lib.dep{index}"])), 1, 2, imports)
        dep.dependency.extend(sorted(i for i in imports if i != name))
        files.append(dep)
    package = draw(st.sampled_from(["", "shop", "a.b"]))
    imports = set()
    name = "case.proto"
    helpers = draw(st.integers(0, 2))
    main, messages = builder.file(name, package, helpers + 1, 0, imports)
    value_name, values = messages[-1]
    value_message = main.message_type[-1]
    # Every helper used by the value's message, so none of them is a top-level root before it
    # (a field added here is unset in the values: they were drawn for the message as it was).
    for helper in main.message_type[:-1]:
        helper_name = f".{package}.{helper.name}" if package else f".{helper.name}"
        if not any(f.type_name == helper_name for f in value_message.field):
            numbers = {f.number for f in value_message.field}
            number = next(n for n in range(1, 19_000) if n not in numbers)
            value_message.field.add(  # longer than a drawn name, so distinct
                name=f"helper_{helper.name.lower()}",
                number=number,
                label=FD.LABEL_OPTIONAL,
                type=FD.TYPE_MESSAGE,
                type_name=helper_name,
            )
    if draw(st.booleans()):  # an unrelated message after the value's (not using it): not the value's message
        builder.types = [t for t in builder.types if t.type_name != f".{value_name}"]
        extra_name = builder.new_name("M")
        extra, _ = builder.message(extra_name, package, 2, name, imports)
        main.message_type.append(extra)
    main.dependency.extend(sorted({*imports, *(f.name for f in files)} - {name}))
    count = draw(st.integers(1, 6))
    return ProtobufCase((*files, main), value_name, tuple(draw(st.lists(values, min_size=count, max_size=count))))


def fill(message: Any, value: Mapping[str, Any]) -> Any:
    """Sets a message's fields from a :class:`ProtobufCase` value; returns the message."""
    for field in message.DESCRIPTOR.fields:
        if field.name not in value:
            continue
        given = value[field.name]
        target = getattr(message, field.name)
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            if entry.fields_by_name["value"].message_type is None:
                target.update(given)
            else:
                for key, item in given.items():
                    fill(target[key], item)
                    target[key].SetInParent()
        elif field.is_repeated:
            if entry is None:
                target.extend(given)
            else:
                for item in given:
                    fill(target.add(), item)
        elif entry is not None:
            target.SetInParent()
            fill(target, given)
        else:
            setattr(message, field.name, given)
    return message


UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)


def protobuf_expected(message: Any) -> dict[str, Any]:
    """The columns of a message ProtobufDeserializer returned, per protobuf_types' table. A field
    protobuf lists as set takes its value; one it does not: null where the field has presence,
    its default (an empty list, 0, "", the enum's first value) where it has not. A map's entries
    are sorted by key: protobuf gives no order."""
    listed = {field.name: value for field, value in message.ListFields()}
    row: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        entry = field.message_type
        is_map = entry is not None and entry.GetOptions().map_entry
        if field.name in listed:
            value = listed[field.name]
            if is_map:
                value_field = entry.fields_by_name["value"]
                key_field = entry.fields_by_name["key"]
                row[field.name] = sorted(
                    ((protobuf_single(key_field, k), protobuf_single(value_field, v)) for k, v in value.items()),
                    key=lambda e: e[0],
                )
            elif field.is_repeated:
                row[field.name] = [protobuf_single(field, v) for v in value]
            else:
                row[field.name] = protobuf_single(field, value)
        elif field.is_repeated:
            row[field.name] = []
        elif field.has_presence:
            row[field.name] = None
        else:
            row[field.name] = protobuf_single(field, field.default_value)
    return row


def protobuf_single(field: Any, value: Any) -> Any:
    message = field.message_type
    if message is None:
        if field.type == FieldDescriptor.TYPE_ENUM:
            known = field.enum_type.values_by_number.get(value)
            return known.name if known is not None else str(value)
        return Decimal(value) if field.type in UNSIGNED_64 else value
    if message.full_name == "google.protobuf.Timestamp":
        return value.ToDatetime(tzinfo=UTC)  # microseconds, the nanoseconds below cut off
    if message.full_name.startswith("google.protobuf.") and message.full_name.endswith("Value"):
        return protobuf_single(message.fields_by_name["value"], value.value)
    return protobuf_expected(value)


# =============================================================================================
# JSON Schema
# =============================================================================================

JSON_PROPERTY_NAMES = identifiers(LOWER + "ABCü_", LOWER + DIGITS + "_ ü", 5)
ID_BASE = "https://example.com/schemas/"
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


def rfc3339(moment: dt.datetime, digits: int, lower: bool, offset: dt.timedelta | None) -> str:
    """The instant ``moment`` (naive, UTC) as an RFC 3339 date-time: ``digits`` fraction digits
    (past the microseconds: 789...), ``T``/``Z`` in either case, ``Z`` or a numeric offset."""
    local = moment if offset is None else moment + offset
    text = f"{local.year:04d}-{local.month:02d}-{local.day:02d}T{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    if digits:
        text += "." + (f"{local.microsecond:06d}789")[:digits]
    if offset is None:
        text += "Z"
    else:
        minutes = int(offset.total_seconds() // 60)
        text += f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return text.replace("T", "t").replace("Z", "z") if lower else text


DATE_TIMES = st.builds(
    rfc3339,
    st.datetimes(min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31)),
    st.integers(0, 9),
    st.booleans(),
    st.none() | st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: dt.timedelta(minutes=m)),
)
DATES = st.dates().map(lambda d: f"{d.year:04d}-{d.month:02d}-{d.day:02d}")
#: an integer as JSON may write one: 7, or 7.0 (an integer to JSON Schema since draft 6)
JSON_INTEGERS = st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**53), 2**53).map(float)
JSON_NUMBERS = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**80), 2**80)
JSON_PLAIN = {
    "string": st.text(max_size=6),
    "integer": JSON_INTEGERS,
    "number": JSON_NUMBERS,
    "boolean": st.booleans(),
}


@dataclass(frozen=True)
class JsonPart:
    schema: Any
    values: st.SearchStrategy[Any]
    #: whether null is one of its values (such a part in a oneOf with null would match twice)
    nullable: bool = False


@dataclass(frozen=True)
class JsonReference:
    """A schema registered under a subject of its own, referred to by ``name`` (and by its ``$id``
    when it has one); ``references``: the names of the references it uses itself."""

    name: str
    schema: dict[str, Any]
    references: tuple[str, ...]
    values: st.SearchStrategy[Any] = dataclasses.field(compare=False, repr=False)
    #: its definitions, by the JSON pointer to each (``#/definitions/D1``)
    parts: dict[str, JsonPart] = dataclasses.field(compare=False, repr=False)


@dataclass(frozen=True)
class JsonCase:
    schema: dict[str, Any]
    references: tuple[JsonReference, ...]
    values: tuple[dict[str, Any], ...]


@dataclass
class JsonDocument:
    """A document being drawn: its local definitions, the keyword they are under, its ``$id``."""

    keyword: str
    id: str | None
    definitions: dict[str, JsonPart]


class JsonBuilder:
    def __init__(self, draw: Callable, references: Sequence[JsonReference], counter: int, main: bool) -> None:
        self.draw = draw
        self.main = main
        self.references = list(references)
        self.used: set[str] = set()
        self.counter = counter

    def part(self, depth: int, document: JsonDocument, non_null: bool = False) -> JsonPart:
        draw = self.draw
        kinds = ["string", "integer", "number", "boolean", "date-time", "date", "enum", "json-text"]
        if depth < MAX_DEPTH:
            kinds += ["object", "object", "array", "map", "local-ref"]
            if not non_null:
                kinds += ["nullable", "nullable"]
            if self.references:
                kinds += ["remote-ref", "remote-ref"]
        kind = draw(st.sampled_from(kinds))
        if kind in JSON_PLAIN:
            return JsonPart({"type": kind}, JSON_PLAIN[kind])
        if kind in ("date-time", "date"):
            return JsonPart({"type": "string", "format": kind}, DATE_TIMES if kind == "date-time" else DATES)
        if kind == "enum":
            symbols = draw(st.lists(st.text(max_size=4), min_size=1, max_size=4, unique=True))
            schema = {"enum": symbols} if draw(st.booleans()) else {"type": "string", "enum": symbols}
            return JsonPart(schema, st.sampled_from(symbols))
        if kind == "json-text":
            return self.json_text(non_null)
        if kind == "object":
            return self.object(depth + 1, document)
        if kind == "array":
            items = self.part(depth + 1, document)
            return JsonPart({"type": "array", "items": items.schema}, st.lists(items.values, max_size=3))
        if kind == "map":
            inner = self.part(depth + 1, document)
            values = st.dictionaries(st.text(max_size=4), inner.values, max_size=3)
            return JsonPart({"type": "object", "additionalProperties": inner.schema}, values)
        if kind == "nullable":
            return self.nullable(depth, document)
        if kind == "local-ref":
            usable = sorted(n for n, p in document.definitions.items() if not (non_null and p.nullable))
            if usable and draw(st.booleans()):
                name = draw(st.sampled_from(usable))
            else:
                self.counter += 1
                name = f"D{self.counter}"
                document.definitions[name] = self.part(depth + 1, document, non_null)
            found = document.definitions[name]
            return JsonPart({"$ref": f"#/{document.keyword}/{name}"}, found.values, found.nullable)
        return self.remote_ref(document, non_null)

    def json_text(self, non_null: bool) -> JsonPart:
        """A part the mapping keeps as JSON text: no type, a oneOf of several types, an object
        without properties, an enum of other things than strings, a list of several types, an
        array without items."""
        choice = self.draw(st.sampled_from(["any", "oneOf", "object", "enum", "types", "array"]))
        if choice == "any" and not non_null:
            return JsonPart({}, ANY_JSON, nullable=True)
        if choice == "oneOf":
            return JsonPart(
                {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "array"}]},
                st.text(max_size=4) | st.integers() | st.lists(JSON_SCALARS, max_size=2),
            )
        if choice == "enum":
            return JsonPart({"enum": [1, "one", True, [2]]}, st.sampled_from([1, "one", True, [2]]))
        if choice == "types":
            return JsonPart({"type": ["string", "boolean"]}, st.text(max_size=4) | st.booleans())
        if choice == "array":
            return JsonPart({"type": "array"}, st.lists(JSON_SCALARS, max_size=3))
        return JsonPart({"type": "object"}, st.dictionaries(st.text(max_size=3), JSON_SCALARS, max_size=3))

    def nullable(self, depth: int, document: JsonDocument) -> JsonPart:
        """Null or a part: ``type: [T, "null"]``, ``anyOf`` or ``oneOf`` with null, either order."""
        draw = self.draw
        how = draw(st.sampled_from(["type-list", "anyOf", "oneOf"]))
        inner = self.part(depth, document, non_null=True)
        kind = inner.schema.get("type") if isinstance(inner.schema, dict) else None
        if how == "type-list" and isinstance(kind, str) and "enum" not in inner.schema:
            types = [kind, "null"] if draw(st.booleans()) else ["null", kind]
            return JsonPart({**inner.schema, "type": types}, st.none() | inner.values, nullable=True)
        how = "anyOf" if how == "type-list" else how
        branches = [inner.schema, {"type": "null"}]
        if draw(st.booleans()):
            branches.reverse()
        return JsonPart({how: branches}, st.none() | inner.values, nullable=True)

    def object(self, depth: int, document: JsonDocument, top: bool = False) -> JsonPart:
        draw = self.draw
        count = draw(st.integers(1, 5 if top else 3))
        names = unique_names(draw, JSON_PROPERTY_NAMES, count)
        properties: dict[str, Any] = {}
        required: dict[str, st.SearchStrategy[Any]] = {}
        optional: dict[str, st.SearchStrategy[Any]] = {}
        for name in names:
            inner = self.part(depth, document)
            properties[name] = inner.schema
            (required if draw(st.booleans()) else optional)[name] = inner.values
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = list(required)
        closed = draw(st.booleans())
        if closed:
            schema["additionalProperties"] = False
        values = st.fixed_dictionaries(required, optional=optional)
        if not closed:  # a property the schema does not name: not a column (names no drawn one can have)
            extra = st.dictionaries(st.sampled_from(["zz extra", "zz-other"]), JSON_SCALARS, max_size=1)
            values = st.tuples(values, extra).map(lambda parts: {**parts[1], **parts[0]})
        return JsonPart(schema, values)

    def remote_ref(self, document: JsonDocument, non_null: bool) -> JsonPart:
        """A reference to a registered schema: by its reference name (only from a document without
        ``$id``: with one, a name resolves against it), by its ``$id``, absolute or relative to the
        referring document's; with a pointer to one of its definitions or not."""
        draw = self.draw
        target = draw(st.sampled_from(self.references))
        self.used.add(target.name)
        ways = [target.name] if document.id is None else []
        target_id = target.schema.get("$id")
        if target_id:
            ways.append(target_id)
            # Relative to its $id only from the value's schema: in a referenced schema, retrieved by its
            # reference name, the referencing library (confluent-kafka's deserializer) resolves a relative
            # $ref against that name, not against its $id as JSON Schema says (our decoder does).
            if document.id is not None and self.main:
                ways.append(target_id.removeprefix(ID_BASE))
        if not ways:  # a document with $id, a target without: by name all the same, absolute
            return self.part(MAX_DEPTH, document, non_null)
        where = draw(st.sampled_from(ways))
        pointers = sorted(p for p, part in target.parts.items() if not (non_null and part.nullable))
        if pointers and draw(st.booleans()):
            pointer = draw(st.sampled_from(pointers))
            return JsonPart({"$ref": where + pointer}, target.parts[pointer].values, target.parts[pointer].nullable)
        return JsonPart({"$ref": where}, target.values)

    def document(self, own_id: str | None, top_ref: bool) -> tuple[dict[str, Any], JsonDocument, JsonPart]:
        """A document whose top is an object with properties (behind a local ``$ref`` if ``top_ref``)."""
        draw = self.draw
        document = JsonDocument(draw(st.sampled_from(["definitions", "$defs"])), own_id, {})
        top = self.object(0, document, top=True)
        schema: dict[str, Any] = {}
        if draw(st.booleans()):
            schema["$schema"] = draw(
                st.sampled_from(
                    ["http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2020-12/schema"]
                )
            )
        if own_id:
            schema["$id"] = own_id
        if top_ref:
            self.counter += 1
            document.definitions[f"Top{self.counter}"] = top
            schema["$ref"] = f"#/{document.keyword}/Top{self.counter}"
        else:
            schema.update(top.schema)
        if document.definitions:
            schema[document.keyword] = {name: part.schema for name, part in document.definitions.items()}
        return schema, document, top


@st.composite
def json_schema_cases(draw: Callable) -> JsonCase:
    """An object schema, the schemas it references (registered under subjects of their own, one
    maybe referring to another), and 1-6 values."""
    references: list[JsonReference] = []
    counter = 0
    for index in range(draw(st.integers(0, 2))):
        builder = JsonBuilder(draw, references, counter, main=False)
        own_id = f"{ID_BASE}r{index}.json" if draw(st.booleans()) else None
        schema, document, top = builder.document(own_id, top_ref=False)
        counter = builder.counter
        parts = {f"#/{document.keyword}/{name}": part for name, part in document.definitions.items()}
        references.append(JsonReference(f"addr{index}.json", schema, tuple(sorted(builder.used)), top.values, parts))
    builder = JsonBuilder(draw, references, counter, main=True)
    own_id = f"{ID_BASE}main.json" if draw(st.integers(0, 3)) == 0 else None
    # The top behind a local $ref only without $id: beside a $ref, draft 7 ignores every keyword, $id too.
    schema, _, top = builder.document(own_id, top_ref=own_id is None and draw(st.integers(0, 4)) == 0)
    count = draw(st.integers(1, 6))
    return JsonCase(schema, tuple(references), tuple(draw(st.lists(top.values, min_size=count, max_size=count))))


@dataclass(frozen=True)
class JsonText:
    """An expected column value that is JSON text: the found text must parse to ``value``."""

    value: Any


def json_resolver(schema: Mapping[str, Any], references: Sequence[tuple[str, Mapping[str, Any]]]) -> Any:
    """References resolved as confluent-kafka's JSON deserializer resolves them: the ``referencing``
    library, the referenced schemas by the names they were registered with (and, crawled, their ``$id``)."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    registry = Registry().with_resources(
        [(name, Resource.from_contents(document, default_specification=DRAFT7)) for name, document in references]
    )
    return registry.resolver_with_root(Resource.from_contents(schema, default_specification=DRAFT7))


RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)


def parse_rfc3339(text: str) -> dt.datetime:
    """An RFC 3339 date-time as the UTC instant, to the microsecond (finer digits cut off)."""
    found = RFC3339.match(text)
    assert found, f"not an RFC 3339 date-time: {text!r}"
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    micros = int((found.group(7) or "").ljust(6, "0")[:6])
    local = dt.datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)
    if found.group(8):
        return local
    offset = dt.timedelta(hours=int(found.group(10)), minutes=int(found.group(11)))
    return local - offset if found.group(9) == "+" else local + offset


def json_expected(schema: Any, value: Any, resolver: Any) -> Any:
    """The column value of what JSONDeserializer returned for ``schema``, per json_schema_types' table."""
    while isinstance(schema, Mapping) and "$ref" in schema:
        resolved = resolver.lookup(schema["$ref"])
        schema, resolver = resolved.contents, resolved.resolver
    if value is None:
        return None
    if not isinstance(schema, Mapping):
        return JsonText(value)
    kind = schema.get("type")
    if kind is None:
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list):
                others = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
                if len(others) == 1:
                    return json_expected(others[0], value, resolver)
        if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
            return value
        if not isinstance(schema.get("properties"), Mapping):
            return JsonText(value)
        kind = "object"
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) != 1:
            return JsonText(value)
        kind = others[0]
    if kind == "string":
        if schema.get("format") == "date-time":
            return parse_rfc3339(value)
        if schema.get("format") == "date":
            year, month, day = value.split("-")
            return dt.date(int(year), int(month), int(day))
        return value
    if kind == "integer":
        return int(value)
    if kind == "number":
        return float(value)
    if kind == "boolean":
        return value
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and properties:
            return {name: json_expected(part, value.get(name), resolver) for name, part in properties.items()}
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping) and values:
            return [(k, json_expected(values, v, resolver)) for k, v in value.items()]
        return JsonText(value)
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return [json_expected(schema["items"], v, resolver) for v in value]
    return JsonText(value)


def json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
