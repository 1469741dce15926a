"""Schema evolution as a chain of changes, in one model for the three registry formats. Pure, no I/O.

A :class:`Model` is a record of fields (scalars, enums, nested records; each required or
optional) with a stable ``id``. A change (:data:`CHANGES`) turns one version into the next the
way producers evolve schemas: a field added (optional, at the top or nested), an optional field
removed, a required field made optional, an enum symbol added, a number promoted (int to long,
float to double). Which changes a subject takes is the registry's word under its compatibility
level: the test registers each version and keeps only the accepted ones.

Each model is rendered as an Avro schema, a Protobuf file and a JSON Schema (closed objects, so a
version may add an optional property under BACKWARD), values are drawn for it, and
:func:`expected_row` says what a row must hold once a record written with one version is read
with another: the reader's fields, each with the writer's value or null where the writer had no
such field, in the form ``pyarrow``'s ``to_pylist`` gives the column.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

NAMESPACE = "evo"
SCALARS = ("long", "int", "double", "float", "string", "boolean")
PROMOTIONS = {"int": "long", "float": "double"}


@dataclass(frozen=True)
class Field:
    """:param number: the Protobuf field number, kept for the field's life and never reused."""

    name: str
    kind: str  # a scalar, "enum" or "record"
    number: int
    optional: bool = False
    symbols: tuple[str, ...] = ()
    fields: tuple[Field, ...] = ()


@dataclass(frozen=True)
class Model:
    fields: tuple[Field, ...]
    #: the next Protobuf field number and field name suffix to hand out
    next_number: int = 100
    #: what the last change did, in words (for messages)
    change: str = "the first version"


def base_model(rng: random.Random) -> Model:
    """``id`` (never changed), a few scalars, an enum and a nested record."""
    scalars = rng.sample(SCALARS, 3)
    nested = (
        Field("sku", "string", 1),
        Field("qty", rng.choice(["int", "long"]), 2),
    )
    fields = (
        Field("id", "long", 1),
        *(Field(f"f_{kind}", kind, 2 + i, optional=rng.random() < 0.3) for i, kind in enumerate(scalars)),
        Field("status", "enum", 10, symbols=("status_new", "status_paid")),
        Field("line", "record", 11, fields=nested),
    )
    return Model(fields)


# -- changes ---------------------------------------------------------------------------------


def paths(fields: tuple[Field, ...], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Field]]:
    found = []
    for f in fields:
        found.append(((*prefix, f.name), f))
        if f.kind == "record":
            found += paths(f.fields, (*prefix, f.name))
    return found


def edited(fields: tuple[Field, ...], path: tuple[str, ...], edit: Callable[[Field], Field | None]) -> tuple:
    """``fields`` with the field at ``path`` replaced by ``edit(field)`` (removed when ``None``)."""
    out = []
    for f in fields:
        if f.name != path[0]:
            out.append(f)
        elif len(path) == 1:
            new = edit(f)
            if new is not None:
                out.append(new)
        else:
            out.append(replace(f, fields=edited(f.fields, path[1:], edit)))
    return tuple(out)


def add_field(model: Model, rng: random.Random) -> Model | None:
    records = [((), None)] + [(p, f) for p, f in paths(model.fields) if f.kind == "record"]
    where, _ = rng.choice(records)
    n = model.next_number
    new = Field(f"added_{n}", rng.choice(SCALARS), n, optional=True)
    if not where:
        fields = (*model.fields, new)
    else:
        fields = edited(model.fields, where, lambda r: replace(r, fields=(*r.fields, new)))
    return Model(fields, n + 1, f"field {'.'.join((*where, new.name))} added ({new.kind}, optional)")


def remove_field(model: Model, rng: random.Random) -> Model | None:
    found = [(p, f) for p, f in paths(model.fields) if f.optional]
    if not found:
        return None
    path, _ = rng.choice(found)
    return Model(edited(model.fields, path, lambda f: None), model.next_number, f"field {'.'.join(path)} removed")


def make_optional(model: Model, rng: random.Random) -> Model | None:
    found = [(p, f) for p, f in paths(model.fields) if not f.optional and p != ("id",) and f.kind != "record"]
    if not found:
        return None
    path, _ = rng.choice(found)
    fields = edited(model.fields, path, lambda f: replace(f, optional=True))
    return Model(fields, model.next_number, f"field {'.'.join(path)} made optional")


def add_symbol(model: Model, rng: random.Random) -> Model | None:
    found = [(p, f) for p, f in paths(model.fields) if f.kind == "enum"]
    path, enum = rng.choice(found)
    symbol = f"{enum.name}_{len(enum.symbols)}"
    fields = edited(model.fields, path, lambda f: replace(f, symbols=(*f.symbols, symbol)))
    return Model(fields, model.next_number, f"enum {'.'.join(path)} gained {symbol}")


def promote(model: Model, rng: random.Random) -> Model | None:
    found = [(p, f) for p, f in paths(model.fields) if f.kind in PROMOTIONS]
    if not found:
        return None
    path, f = rng.choice(found)
    fields = edited(model.fields, path, lambda f: replace(f, kind=PROMOTIONS[f.kind]))
    return Model(fields, model.next_number, f"field {'.'.join(path)} promoted from {f.kind} to {PROMOTIONS[f.kind]}")


CHANGES: tuple[Callable[[Model, random.Random], Model | None], ...] = (
    add_field,
    remove_field,
    make_optional,
    add_symbol,
    promote,
)


def promoted(before: Model, after: Model) -> list[str]:
    """The fields whose number kind ``after`` promoted (``a.b`` paths)."""
    kinds = {p: f.kind for p, f in paths(before.fields)}
    return [".".join(p) for p, f in paths(after.fields) if p in kinds and kinds[p] in PROMOTIONS and f.kind != kinds[p]]


# -- the three formats -----------------------------------------------------------------------

AVRO_SCALARS = {"long": "long", "int": "int", "double": "double", "float": "float", "string": "string"}


def avro(model: Model) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "namespace": NAMESPACE, "fields": [avro_field(f) for f in model.fields]}


def avro_field(f: Field) -> dict[str, Any]:
    if f.kind == "enum":
        kind: Any = {"type": "enum", "name": f"E_{f.name}", "symbols": list(f.symbols)}
    elif f.kind == "record":
        kind = {"type": "record", "name": f"R_{f.name}", "fields": [avro_field(g) for g in f.fields]}
    else:
        kind = AVRO_SCALARS.get(f.kind, f.kind)
    return {"name": f.name, "type": ["null", kind], "default": None} if f.optional else {"name": f.name, "type": kind}


PROTO_SCALARS = {"long": "int64", "int": "int32", "double": "double", "float": "float", "string": "string"}


def proto(model: Model) -> str:
    """The .proto text: the value message first (the one no other message uses), its helpers after."""
    helpers: list[str] = []

    def message(name: str, fields: tuple[Field, ...]) -> str:
        lines = []
        for f in fields:
            if f.kind == "enum":
                values = " ".join(f"{s} = {i};" for i, s in enumerate(f.symbols))
                helpers.append(f"enum E_{f.name} {{ {values} }}")
                kind = f"E_{f.name}"
            elif f.kind == "record":
                helpers.append(message(f"R_{f.name}", f.fields))
                kind = f"R_{f.name}"
            else:
                kind = PROTO_SCALARS.get(f.kind, "bool" if f.kind == "boolean" else f.kind)
            label = "optional " if f.optional and f.kind != "record" else ""
            lines.append(f"  {label}{kind} {f.name} = {f.number};")
        return f"message {name} {{\n" + "\n".join(lines) + "\n}"

    order = message("Order", model.fields)
    return "\n".join(['syntax = "proto3";', f"package {NAMESPACE};", order, *helpers]) + "\n"


JSON_SCALARS = {"long": "integer", "int": "integer", "double": "number", "float": "number", "string": "string"}


def json_schema(model: Model) -> dict[str, Any]:
    return {"$schema": "http://json-schema.org/draft-07/schema#", **json_object(model.fields)}


def json_object(fields: tuple[Field, ...]) -> dict[str, Any]:
    properties = {}
    for f in fields:
        if f.kind == "enum":
            part: dict[str, Any] = {"type": "string", "enum": list(f.symbols)}
        elif f.kind == "record":
            part = json_object(f.fields)
        else:
            part = {"type": JSON_SCALARS.get(f.kind, f.kind)}
        if f.optional:
            part = {**part, "type": [part["type"], "null"]}
            if "enum" in part:
                part["enum"] = [*part["enum"], None]
        properties[f.name] = part
    required = [f.name for f in fields if not f.optional]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def rendered(value_format: str, model: Model) -> str:
    """The schema's text as it is registered (Protobuf: .proto text)."""
    if value_format == "avro":
        return json.dumps(avro(model))
    if value_format == "protobuf":
        return proto(model)
    return json.dumps(json_schema(model))


# -- values ----------------------------------------------------------------------------------


def draw_value(f: Field, rng: random.Random) -> Any:
    """A value of the field, exact in every format (floats in quarters, ints within int32)."""
    if f.optional and rng.random() < 0.3:
        return None
    if f.kind == "record":
        return {g.name: draw_value(g, rng) for g in f.fields}
    if f.kind == "enum":
        return rng.choice(f.symbols)
    if f.kind in ("long", "int"):
        return rng.randint(-1000, 1000)
    if f.kind in ("double", "float"):
        return rng.randint(-400, 400) / 4
    if f.kind == "boolean":
        return rng.random() < 0.5
    return rng.choice(["", "a", "é", "long text " * 3])


def draw_record(model: Model, record_id: int, rng: random.Random) -> dict[str, Any]:
    return {"id": record_id, **{f.name: draw_value(f, rng) for f in model.fields if f.name != "id"}}


def producer_value(value_format: str, record: dict[str, Any]) -> dict[str, Any]:
    """What the format's serializer takes: JSON leaves an unset optional property out."""
    if value_format != "json-schema":
        return record
    return {
        k: producer_value(value_format, v) if isinstance(v, dict) else v for k, v in record.items() if v is not None
    }


def expected_row(writer: Model, reader: Model, record: dict[str, Any], value_format: str) -> dict[str, Any]:
    """The reader's columns of a record written with ``writer``: the writer's value, or null where
    the writer had no such field (Protobuf: a scalar without presence reads its default, and one
    that gained presence reads a default the writer left off the wire as unset)."""
    return expected_fields(writer.fields, reader.fields, record, value_format)


def expected_fields(
    writer: tuple[Field, ...], reader: tuple[Field, ...], record: dict[str, Any] | None, value_format: str
) -> dict[str, Any]:
    written = {f.name: f for f in writer}
    row = {}
    for f in reader:
        w = written.get(f.name)
        value = None if record is None or w is None else record.get(f.name)
        if f.kind == "record":
            value = None if value is None else expected_fields(w.fields, f.fields, value, value_format)
        elif value_format == "protobuf" and w is not None:
            default = PROTO_DEFAULTS[f.kind](f)
            if value is None and not f.optional:
                value = default  # a proto3 scalar without presence reads its default
            elif value == default and f.optional and not w.optional:
                value = None  # the writer had no presence: it sent nothing, which now reads as unset
        row[f.name] = value
    return row


PROTO_DEFAULTS: dict[str, Callable[[Field], Any]] = {
    "long": lambda f: 0,
    "int": lambda f: 0,
    "double": lambda f: 0.0,
    "float": lambda f: 0.0,
    "string": lambda f: "",
    "boolean": lambda f: False,
    "enum": lambda f: f.symbols[0],
}


@dataclass
class Chain:
    """A subject's versions, each with the change that made it (accepted by the registry)."""

    versions: list[Model] = field(default_factory=list)

    @property
    def latest(self) -> Model:
        return self.versions[-1]
