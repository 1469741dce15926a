"""Kafka Connect's ``JsonConverter`` records as typed Python values and Arrow types.

Pure. With ``schemas.enable=true`` (Connect's default) every key and value is
``{"schema": ..., "payload": ...}``: the schema types the payload, and this module turns both
into what a table holds. The mapping:

==================================================  ==========================================
Connect schema (``type`` / ``name``)                Arrow
==================================================  ==========================================
int8 / int16 / int32 / int64                        int8 / int16 / int32 / int64
float (float32) / double (float64) / boolean        float32 / float64 / bool
string / bytes                                      string / binary
struct / array / map                                struct / list / map
``org.apache.kafka.connect.data.Decimal``           decimal128(precision, scale) (decimal256 above
                                                    38 digits): the payload is
(bytes, ``parameters.scale``)                       base64 of the big-endian two's-complement
                                                    unscaled integer (Debezium's
                                                    ``decimal.handling.mode=precise``)
``...connect.data.Date``, ``io.debezium.time.Date`` date32 (days since the epoch)
``...connect.data.Timestamp``,                      timestamp(ms)
``io.debezium.time.Timestamp``
``io.debezium.time.MicroTimestamp``                 timestamp(us)
``io.debezium.time.NanoTimestamp``                  timestamp(ns)
``io.debezium.time.ZonedTimestamp``                 timestamp(us, UTC) (the payload is ISO 8601)
``io.debezium.data.Json`` / ``Uuid`` / ``Enum``     string, as sent
==================================================  ==========================================

Every column is nullable: a later schema may add a column (``ALTER TABLE ... ADD COLUMN``), and
older rows have none. Without an embedded schema (``schemas.enable=false``) the payload is
taken as JSON gives it and Arrow infers the types.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa

from kafka_batch_provider.errors import SchemaError

PRIMITIVES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),  # what JsonConverter writes (JsonSchema.FLOAT_TYPE_NAME)
    "double": pa.float64(),
    "float32": pa.float32(),  # Connect's Schema.Type names, as some producers write them
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATES = ("org.apache.kafka.connect.data.Date", "io.debezium.time.Date")
#: Named int64 timestamps and their unit.
TIMESTAMPS = {
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
}
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
EPOCH = date(1970, 1, 1)
EPOCH_TIME = datetime(1970, 1, 1)  # Connect's timestamps have no time zone: UTC wall time
#: Decimals whose schema gives no precision (Postgres ``numeric`` without one) take the widest.
DEFAULT_PRECISION = 38


def is_enveloped(document: Any) -> bool:
    """Whether a parsed record is the ``{"schema", "payload"}`` form of ``schemas.enable=true``."""
    return isinstance(document, Mapping) and set(document) == {"schema", "payload"}


def parse(raw: bytes | str | None, where: str) -> tuple[Mapping[str, Any] | None, Any]:
    """A record's bytes as ``(schema, payload)``; ``(None, payload)`` without an embedded schema."""
    if raw is None:
        return None, None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SchemaError(f"{where}: not JSON ({str(exc).splitlines()[0]})") from None
    if is_enveloped(document):
        return document["schema"], document["payload"]
    return None, document


def arrow_type(schema: Mapping[str, Any], where: str = "the record") -> pa.DataType:
    """The Arrow type of one Connect schema (see the table above)."""
    kind, name = schema.get("type"), schema.get("name")
    if name == DECIMAL:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = max(int(parameters.get("connect.decimal.precision") or DEFAULT_PRECISION), scale, 1)
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if name in DATES:
        return pa.date32()
    if name in TIMESTAMPS:
        return pa.timestamp(TIMESTAMPS[name])
    if name == ZONED_TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if kind == "struct":
        return pa.struct([pa.field(f["field"], arrow_type(f, where)) for f in schema.get("fields", [])])
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], where))
    if kind == "map":
        return pa.map_(arrow_type(schema["keys"], where), arrow_type(schema["values"], where))
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    raise SchemaError(f"{where}: Connect schema type {kind!r} has no column type")


def value_of(payload: Any, schema: Mapping[str, Any] | None) -> Any:
    """A payload as the Python value its Arrow type takes (decimals from their bytes, days as dates...)."""
    if payload is None or schema is None:
        return payload
    kind, name = schema.get("type"), schema.get("name")
    if name == DECIMAL:
        return decimal_of(payload, int((schema.get("parameters") or {}).get("scale", 0)))
    if name in DATES:
        return EPOCH + timedelta(days=int(payload))
    if name in TIMESTAMPS:
        unit = TIMESTAMPS[name]
        if unit == "ns":
            return int(payload)  # pyarrow reads an int as the count of the type's unit (a datetime has µs)
        return (
            EPOCH_TIME + timedelta(milliseconds=int(payload))
            if unit == "ms"
            else EPOCH_TIME + timedelta(microseconds=int(payload))
        )
    if name == ZONED_TIMESTAMP:
        return zoned(str(payload))
    if kind == "struct":
        return {f["field"]: value_of(payload.get(f["field"]), f) for f in schema.get("fields", [])}
    if kind == "array":
        return [value_of(item, schema["items"]) for item in payload]
    if kind == "map":  # an object for string keys; a list of [key, value] pairs for any other key type
        pairs = payload.items() if isinstance(payload, Mapping) else payload
        return [(value_of(k, schema["keys"]), value_of(v, schema["values"])) for k, v in pairs]
    if kind == "bytes":
        return base64.b64decode(payload) if isinstance(payload, str) else payload
    return payload


def decimal_of(payload: Any, scale: int) -> Decimal:
    """Connect's Decimal: base64 of the two's-complement unscaled integer (or a number with
    ``decimal.format=NUMERIC``)."""
    if isinstance(payload, (int, float)):
        return Decimal(str(payload))
    unscaled = int.from_bytes(base64.b64decode(payload), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def zoned(text: str) -> datetime:
    """Debezium's ZonedTimestamp (ISO 8601 with an offset, ``Z`` for UTC) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def struct_fields(schema: Mapping[str, Any] | None, field: str) -> Mapping[str, Any] | None:
    """The schema of the struct field ``field`` of a struct schema (``None`` when absent)."""
    for f in (schema or {}).get("fields", []):
        if f.get("field") == field:
            return f
    return None
