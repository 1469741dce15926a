"""Protobuf values in the registry's wire format -> typed Arrow columns of the reader schema's message.

After the magic byte and the schema id comes the index path of the message within its writer
schema's file (:func:`~kafka_batch_provider.decoding.wire.message_indexes`). The writer's
schema tells which message that is; it must be the reader schema's value message
(:func:`~kafka_batch_provider.decoding.protobuf_types.value_message`), by full name. The payload
is then parsed with the *reader's* message: Protobuf's own evolution rules (fields are matched
by number; fields the reader does not know are skipped, fields the writer did not send read as
unset), exactly what a consumer compiled against the newer schema does.

A value that cannot be decoded (not framed, an unknown schema id, a message index out of range
or naming another message, a payload protobuf cannot parse) is reported with its reason, like
the Avro decoder's (:class:`~kafka_batch_provider.decoding.avro_decoder.Decoded`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf.descriptor import FieldDescriptor as FD

from kafka_batch_provider.decoding.avro_decoder import Decoded, one_line
from kafka_batch_provider.decoding.protobuf_types import TIMESTAMP, WRAPPERS, is_map, message_columns, value_message
from kafka_batch_provider.decoding.wire import message_indexes, schema_ids
from kafka_batch_provider.errors import KafkaBatchError, SchemaError

#: schema id -> its type (``PROTOBUF``, ...) and its files as a serialized ``FileDescriptorSet``
#: (:meth:`~kafka_batch_provider.registry.client.SchemaRegistry.protobuf_files`).
WriterFiles = Callable[[int], bytes]
UNSIGNED_64 = (FD.TYPE_UINT64, FD.TYPE_FIXED64)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def file_of(file_set: bytes) -> Any:
    """The last file of a serialized ``FileDescriptorSet`` (the schema), built in a pool of its own
    with protobuf's and googleapis' well-known files, which schemas import without references.

    :raises SchemaError: an import this installation does not ship.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool

    files = descriptor_pb2.FileDescriptorSet.FromString(file_set).file
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    for file in files:
        for dependency in file.dependency:
            add_well_known(pool, dependency, added)
        pool.Add(file)
        added.add(file.name)
    return pool.FindFileByName(files[-1].name)


def add_well_known(pool: Any, name: str, added: set[str]) -> None:
    """A well-known file (``google/protobuf/timestamp.proto``, ``google/type/date.proto``) and what it imports."""
    if name in added or not name.startswith(("google/protobuf/", "google/type/")):
        return
    import_well_known()
    from google.protobuf import descriptor_pb2, descriptor_pool

    try:
        found = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise SchemaError(f"Protobuf schema imports {name}, which this installation does not ship") from None
    for dependency in found.dependencies:
        add_well_known(pool, dependency.name, added)
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    pool.Add(proto)
    added.add(name)


def import_well_known() -> None:
    """protobuf's and googleapis' well-known modules register their files in the default pool when imported."""
    import importlib

    for module in (
        *(f"google.protobuf.{n}_pb2" for n in ("any", "duration", "empty", "field_mask", "struct", "timestamp")),
        "google.protobuf.wrappers_pb2",
        *(f"google.type.{n}_pb2" for n in ("date", "datetime", "dayofweek", "latlng", "money", "timeofday")),
    ):
        try:
            importlib.import_module(module)
        except ImportError:  # googleapis-common-protos missing: its files are refused by name above
            pass


class ProtobufDecoder:
    """:param reader_files: the reader schema as a serialized ``FileDescriptorSet``.
    :param writer_files: schema id -> its serialized ``FileDescriptorSet`` (the registry; called
        once per id, raising :class:`SchemaError` for an id it does not know or not Protobuf)."""

    def __init__(self, reader_files: bytes, writer_files: WriterFiles) -> None:
        from google.protobuf import message_factory

        self.message = value_message(file_of(reader_files))
        self.arrow = message_columns(self.message)
        self._parse = message_factory.GetMessageClass(self.message).FromString
        self._writer_files = writer_files
        self._writers: dict[int, Any] = {}
        self._unknown: dict[int, str] = {}
        self.counts = {"one_by_one": 0}

    def writer(self, schema_id: int) -> Any:
        """The writer schema's file of an id, fetched and built once."""
        if schema_id in self._unknown:
            raise SchemaError(self._unknown[schema_id])
        if schema_id not in self._writers:
            try:
                # The registry's ConfigError (TLS, settings refused) is nobody's record's: it raises.
                files = self._writer_files(schema_id)
                self._writers[schema_id] = file_of(files)
            except (SchemaError, TypeError, ValueError) as exc:
                text = str(exc)
                self._unknown[schema_id] = text if "schema id" in text else f"schema id {schema_id}: {text}"
                raise SchemaError(self._unknown[schema_id]) from None
        return self._writers[schema_id]

    def written_message(self, schema_id: int, indexes: list[int]) -> str:
        """The full name of the message an index path names in the writer's file."""
        messages = list(self.writer(schema_id).message_types_by_name.values())
        found = None
        for depth, index in enumerate(indexes):
            if not 0 <= index < len(messages):
                path = "".join(f"[{i}]" for i in indexes[: depth + 1])
                raise SchemaError(
                    f"schema id {schema_id}: message index {path} is out of range (the schema has "
                    f"{len(messages)} message(s) there)"
                )
            found = messages[index]
            messages = list(found.nested_types)
        return found.full_name

    def decode(self, values: pa.Array) -> Decoded:
        framing = schema_ids(values)
        ids = framing.ids.tolist()
        problems = dict(framing.problems)
        rows: list[dict[str, Any] | None] = [None] * len(ids)
        for row, value in enumerate(values.to_pylist()):
            schema_id = ids[row]
            if schema_id < 0:
                continue
            self.counts["one_by_one"] += 1
            try:
                indexes, start = message_indexes(value)
                name = self.written_message(schema_id, indexes)
                if name != self.message.full_name:
                    raise SchemaError(
                        f"schema id {schema_id}: the value is a {name}, "
                        f"not the reader schema's {self.message.full_name}"
                    )
                rows[row] = message_row(self._parse(value[start:]))
            except SchemaError as exc:
                problems[row] = str(exc)
            except KafkaBatchError:  # the registry out of reach or refusing: nobody's record's fault
                raise
            except Exception as exc:  # protobuf's DecodeError, a message index that is not a varint
                problems[row] = f"schema id {schema_id}: {one_line(exc)}"
        arrays = [pa.array([None if r is None else r[f.name] for r in rows], type=f.type) for f in self.arrow]
        return Decoded(pa.RecordBatch.from_arrays(arrays, schema=self.arrow), ids, problems)


def message_row(message: Any) -> dict[str, Any]:
    """A parsed message as the values pyarrow takes for its columns (protobuf_types' mapping)."""
    row = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            row[field.name] = None
        else:
            row[field.name] = field_value(field, getattr(message, field.name))
    return row


def field_value(field: Any, value: Any) -> Any:
    if is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        return [(key, single_value(value_field, item)) for key, item in value.items()]
    if field.is_repeated:
        return [single_value(field, item) for item in value]
    return single_value(field, value)


def single_value(field: Any, value: Any) -> Any:
    message = field.message_type
    if message is None:
        if field.type == FD.TYPE_ENUM:
            named = field.enum_type.values_by_number.get(value)
            return named.name if named is not None else str(value)  # an open enum's unknown number
        return Decimal(value) if field.type in UNSIGNED_64 else value
    if message.full_name == TIMESTAMP:
        if not 0 <= value.nanos < 1_000_000_000:  # the well-known type's own rule
            raise ValueError(f"a Timestamp with nanos {value.nanos}, outside 0..999,999,999")
        return EPOCH + dt.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
    if message.full_name in WRAPPERS:
        return single_value(message.fields_by_name["value"], value.value)
    return message_row(value)
