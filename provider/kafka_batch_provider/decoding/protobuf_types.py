"""Protobuf messages as Arrow types: the columns a ``--value-format protobuf`` batch is written with.

Pure: a message descriptor (protobuf's own, built from the registry's schema) in, a ``pyarrow``
type out. The mapping:

==============================================  ==================================================
Protobuf                                        Arrow
==============================================  ==================================================
double / float                                  float64 / float32
int32, sint32, sfixed32 / int64, sint64, ...    int32 / int64
uint32, fixed32                                 int64 (Spark, Delta and Iceberg have no unsigned)
uint64, fixed64                                 decimal128(20, 0) (all of its range)
bool / string / bytes                           bool / string / binary
enum                                            string (the value's name; an unknown number as
                                                its digits)
message                                         struct (nested messages too)
repeated T / map<K, V>                          list<T> / map<K, V>
oneof                                           its fields, each nullable: only the one set is
                                                not null
google.protobuf.Timestamp                       timestamp(us, UTC)
google.protobuf.*Value (wrappers)               the wrapped type, null when the wrapper is unset
==============================================  ==================================================

A field without presence (a proto3 scalar) holds its default when unset, as protobuf reads it;
a field with presence (``optional``, a message, a oneof member, proto2) is null when unset. The
columns are nullable (a tombstone's row is null). A message that contains itself (a tree) has
no Arrow type: it is refused in one line.

The value's message is the schema file's top-level message that no other message of the file
uses (the first of them where there are several): Confluent's serializers register the file of
the message they write, with that message's helpers beside it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from google.protobuf.descriptor import FieldDescriptor as FD

from kafka_batch_provider.errors import ConfigError

TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}


def scalar_types() -> dict[int, pa.DataType]:
    fd = FD
    return {
        fd.TYPE_DOUBLE: pa.float64(),
        fd.TYPE_FLOAT: pa.float32(),
        fd.TYPE_INT32: pa.int32(),
        fd.TYPE_SINT32: pa.int32(),
        fd.TYPE_SFIXED32: pa.int32(),
        fd.TYPE_INT64: pa.int64(),
        fd.TYPE_SINT64: pa.int64(),
        fd.TYPE_SFIXED64: pa.int64(),
        fd.TYPE_UINT32: pa.int64(),
        fd.TYPE_FIXED32: pa.int64(),
        fd.TYPE_UINT64: pa.decimal128(20, 0),
        fd.TYPE_FIXED64: pa.decimal128(20, 0),
        fd.TYPE_BOOL: pa.bool_(),
        fd.TYPE_STRING: pa.string(),
        fd.TYPE_BYTES: pa.binary(),
        fd.TYPE_ENUM: pa.string(),
    }


def message_columns(message: Any) -> pa.Schema:
    """The columns of a message: one per field, all nullable."""
    return pa.schema([pa.field(f.name, field_type(f, (message.full_name,))) for f in message.fields])


def is_map(field: Any) -> bool:
    return field.is_repeated and field.message_type is not None and field.message_type.GetOptions().map_entry


def field_type(field: Any, seen: tuple[str, ...]) -> pa.DataType:
    if is_map(field):
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return pa.map_(single_type(key, seen), pa.field("value", single_type(value, seen)))
    if field.is_repeated:
        return pa.list_(pa.field("element", single_type(field, seen)))
    return single_type(field, seen)


def single_type(field: Any, seen: tuple[str, ...]) -> pa.DataType:
    message = field.message_type
    if message is None:
        return scalar_types()[field.type]
    if message.full_name == TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if message.full_name in WRAPPERS:
        return single_type(message.fields_by_name["value"], seen)
    if message.full_name in seen:
        raise ConfigError(
            f"Protobuf message {message.full_name} contains itself: a recursive message has no column type"
        )
    inner = (*seen, message.full_name)
    return pa.struct([pa.field(f.name, field_type(f, inner)) for f in message.fields])


def value_message(file: Any) -> Any:
    """The message a schema file's values are: the top-level message no other message uses."""
    top = list(file.message_types_by_name.values())
    if not top:
        raise ConfigError(f"Protobuf schema {file.name} defines no message")
    used: set[str] = set()
    for message in top:
        used |= {name for name in used_messages(message, set()) if name != message.full_name}
    roots = [message for message in top if message.full_name not in used]
    return (roots or top)[0]


def used_messages(message: Any, seen: set[str]) -> set[str]:
    """The full names of the messages a message's fields use, nested ones too."""
    for field in message.fields:
        inner = field.message_type
        if inner is not None and inner.full_name not in seen:
            seen.add(inner.full_name)
            used_messages(inner, seen)
    return seen
