"""Avro field defaults as the values they stand for. Pure, no I/O.

A schema writes a field's default in JSON: ``bytes`` and ``fixed`` as a string whose code points
0-255 are the bytes, a ``decimal`` as those bytes (the unscaled number, two's complement, big
endian), a timestamp as its number of milliseconds or microseconds, a ``float`` perhaps as an
integer. When a reader schema adds a field, fastavro fills older records' field with the default
*as written*: a string where bytes belong, a bare number where a timestamp does. Read in those
records' place, the default must be what a record that carried it would read as, or the same
value lands differently in old and new rows (``"\u00ff"`` as ``b"\xc3\xbf"``, a timestamp 1000
times too early) or not at all (an integer a float32 column cannot hold exactly).

:func:`with_default_values` turns a parsed reader schema's defaults into those values, once per
decoder, so nothing is converted per record.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Mapping
from typing import Any

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
EPOCH_DATE = dt.date(1970, 1, 1)

#: logical type -> how its JSON number becomes the value fastavro reads for it
NUMBERS = {
    "date": lambda n: EPOCH_DATE + dt.timedelta(days=n),
    "time-millis": lambda n: (dt.datetime.min + dt.timedelta(milliseconds=n)).time(),
    "time-micros": lambda n: (dt.datetime.min + dt.timedelta(microseconds=n)).time(),
    "timestamp-millis": lambda n: EPOCH + dt.timedelta(milliseconds=n),
    "timestamp-micros": lambda n: EPOCH + dt.timedelta(microseconds=n),
    "local-timestamp-millis": lambda n: (EPOCH + dt.timedelta(milliseconds=n)).replace(tzinfo=None),
    "local-timestamp-micros": lambda n: (EPOCH + dt.timedelta(microseconds=n)).replace(tzinfo=None),
}


def with_default_values(schema: Any, named: Mapping[str, Any]) -> Any:
    """``schema`` (parsed by fastavro, named types in ``named``) with every field's default, in
    every record it defines and in ``named``'s, replaced by the value it stands for (in place:
    fastavro's reader looks named types up in the parsed schema's own table)."""
    for record in [schema, *named.values()]:
        defaults_of(record, named, set())
    return schema


def defaults_of(avro: Any, named: Mapping[str, Any], seen: set[int]) -> None:
    """Converts the defaults of the records ``avro`` defines (each record once)."""
    if isinstance(avro, list):
        for branch in avro:
            defaults_of(branch, named, seen)
        return
    if not isinstance(avro, dict) or id(avro) in seen:
        return
    seen.add(id(avro))
    kind = avro.get("type")
    if kind in ("record", "error"):
        for field in avro["fields"]:
            if "default" in field:
                field["default"] = default_value(field["type"], field["default"], named)
            defaults_of(field["type"], named, seen)
    elif kind == "array":
        defaults_of(avro["items"], named, seen)
    elif kind == "map":
        defaults_of(avro["values"], named, seen)
    elif isinstance(kind, (dict, list)):
        defaults_of(kind, named, seen)


def default_value(avro: Any, value: Any, named: Mapping[str, Any]) -> Any:
    """The value a default written as ``value`` (JSON) stands for, for a field of type ``avro``.
    A value already converted (or not of the JSON form the type asks) is left as it is."""
    if isinstance(avro, str):
        if avro in named:
            return default_value(named[avro], value, named)
        if avro in ("float", "double") and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # JSON's 16777217 for a float: a float, as a record would carry it
        return latin1(value) if avro == "bytes" else value
    if isinstance(avro, list):
        # The default is of the union's first branch (Avro 1.11); a later one's where it fits none.
        branches = [b for b in avro if not (b == "null" and value is not None)]
        return default_value(branches[0], value, named) if branches else value
    if not isinstance(avro, Mapping):
        return value
    kind, logical = avro.get("type"), avro.get("logicalType")
    if isinstance(kind, (Mapping, list)):
        return default_value(kind, value, named)
    if logical == "decimal" and kind in ("bytes", "fixed") and isinstance(value, str):
        unscaled = int.from_bytes(latin1(value), "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-int(avro.get("scale", 0)))
    if logical in NUMBERS and isinstance(value, int) and not isinstance(value, bool):
        return NUMBERS[logical](value)
    if kind in ("bytes", "fixed"):
        return latin1(value)
    if kind in ("float", "double", "string", "int", "long", "boolean", "null", "enum"):
        return default_value(kind if kind != "enum" else "string", value, named)
    if kind in ("record", "error") and isinstance(value, Mapping):
        types = {f["name"]: f["type"] for f in avro["fields"]}
        return {k: default_value(types[k], v, named) if k in types else v for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [default_value(avro["items"], v, named) for v in value]
    if kind == "map" and isinstance(value, Mapping):
        return {k: default_value(avro["values"], v, named) for k, v in value.items()}
    return value


def latin1(value: Any) -> Any:
    """Avro's JSON for bytes: each code point 0-255 is one byte (not UTF-8)."""
    if not isinstance(value, str):
        return value
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value  # not a bytes default at all: fastavro's own check refuses the schema
