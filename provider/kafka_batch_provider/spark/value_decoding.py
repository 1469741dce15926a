"""Schema-registry values decoded inside the Spark task, between the reader and the task writer.

:class:`ValueDecoding` is picklable (the registry's credentials travel inside it, never as
options a query plan or the Spark UI could print). In the task it opens one registry client
and one decoder, so each schema id is fetched once per task, never per record
(:mod:`kafka_batch_provider.decoding.avro_decoder`). Each Arrow batch of Kafka records becomes
the Kafka columns (``key``, ``topic``, ``partition``, ``offset``, ``timestamp``,
``timestampType``, ``headers``; ``value`` too with ``keep_raw_value``) followed by the value's
fields as typed columns. Receipt rows pass through untouched.

A record that cannot be decoded fails the batch in one line naming topic, partition, offset
and why (``--on-bad-record fail``, the default), or leaves the data for the batch's dead letters
(``--on-bad-record dead-letter``: :mod:`kafka_batch_provider.decoding.dead_letters`), which the
task writer writes to files of their own.

:func:`value_decoding` is the driver's half: the plan's reader schema, fetched once by its id,
checked (an Avro record whose fields do not take the Kafka columns' names) and handed to the tasks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_batch_provider.core.reader_schema import check_plan_decodes_as
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.decoding.dead_letters import DeadLetterBatch, dead_letters_of
from kafka_batch_provider.errors import ConfigError, SchemaError

#: The Kafka columns that stay beside the value's fields.
KAFKA_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class ValueDecoding:
    """:param reader_schema: the batch's reader schema (Avro JSON text), as the plan recorded it.
    :param registry_config: confluent-kafka ``SchemaRegistryClient`` settings (url, credentials).
    :param wait: seconds an unreachable registry is waited for (the read's stall timeout)."""

    reader_schema: str
    registry_config: Mapping[str, Any] = field(repr=False)
    keep_raw_value: bool = False
    wait: float = 120.0
    #: the texts of the schemas the reader schema references (imported first)
    reader_references: tuple[str, ...] = ()
    #: ``fail`` or ``dead-letter`` (:data:`~kafka_batch_provider.core.write_options.ON_BAD_RECORD`)
    on_bad_record: str = "fail"
    #: how the refusal names the dead-letter setting, in the caller's words (worded on the driver:
    #: a Spark worker does not know whether a flag or a keyword argument set it)
    dead_letter_setting: str = "on_bad_record='dead-letter'"
    #: ``avro``, ``protobuf`` (``reader_schema`` is then its files, a base64 ``FileDescriptorSet``)
    #: or ``json-schema``
    value_format: str = "avro"

    def output_schema(self, kafka_schema: pa.Schema, reserved: tuple[str, ...] = ()) -> pa.Schema:
        """The columns the tasks write: the Kafka columns kept, then the value's fields.

        :param reserved: other columns the batch has on its way (the receipts, a table's ``date``).
        :raises ConfigError: a field of the value is named like a column it would stand beside,
            or like another field, in any letter case (Spark and Delta do not tell case apart).
        """
        values = self.value_columns()
        kept = [f for f in kafka_schema if f.name in KAFKA_COLUMNS or (self.keep_raw_value and f.name == "value")]
        taken = {name.lower(): name for name in [*(f.name for f in kept), *reserved]}
        for name in values.names:
            if name.lower() in taken:
                raise ConfigError(
                    f"the value's field {name!r} has the name of the column {taken[name.lower()]!r} it would stand "
                    "beside (letter case does not tell columns apart): rename the field in the schema (a new "
                    "version), or read the values as bytes"
                )
            taken[name.lower()] = name
        return pa.schema([*kept, *values])

    def value_columns(self) -> pa.Schema:
        """The value's columns, by the reader schema (the decoding modules' mappings)."""
        import base64
        import json

        if self.value_format == "protobuf":
            from kafka_batch_provider.decoding.protobuf_decoder import file_of
            from kafka_batch_provider.decoding.protobuf_types import message_columns, value_message

            return message_columns(value_message(file_of(base64.b64decode(self.reader_schema))))
        if self.value_format == "json-schema":
            from kafka_batch_provider.decoding.json_schema_types import arrow_schema, value_columns

            return arrow_schema(value_columns(json.loads(self.reader_schema)))
        from kafka_batch_provider.decoding.avro_types import arrow_schema as avro_columns

        return avro_columns(json.loads(self.reader_schema), [json.loads(r) for r in self.reader_references])

    def decoder(self) -> Any:
        """The format's decoder, with one registry client: each schema id fetched once per task."""
        import base64

        from kafka_batch_provider.registry.client import SchemaRegistry
        from kafka_batch_provider.registry.settings import RegistrySettings

        registry = SchemaRegistry(RegistrySettings.from_client_config(self.registry_config), wait=self.wait)
        if self.value_format == "protobuf":
            from kafka_batch_provider.decoding.protobuf_decoder import ProtobufDecoder

            return ProtobufDecoder(base64.b64decode(self.reader_schema), registry.protobuf_files)
        if self.value_format == "json-schema":
            from kafka_batch_provider.decoding.json_schema_decoder import JsonSchemaDecoder

            return JsonSchemaDecoder(self.reader_schema, registry.writer_schema)
        from kafka_batch_provider.decoding.avro_decoder import AvroDecoder

        return AvroDecoder(self.reader_schema, registry.writer_schema, self.reader_references)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch | DeadLetterBatch]:
        """The decoded batches, and with ``dead-letter`` the records that could not be decoded."""
        decoder = self.decoder()
        for batch in batches:
            found = decoder.decode(batch.column("value"))
            if found.problems and self.on_bad_record == "dead-letter":
                yield dead_letters_of(batch, found.problems, found.schema_ids)
            yield self.decoded(batch, found)

    def decoded(self, batch: pa.RecordBatch, found: Any) -> pa.RecordBatch:
        """The batch's Kafka columns and its values' columns (without the rows that are dead letters)."""
        if found.problems and self.on_bad_record != "dead-letter":
            row = min(found.problems)
            raise SchemaError(
                f"{batch.column('topic')[row].as_py()}[{batch.column('partition')[row].as_py()}] offset "
                f"{batch.column('offset')[row].as_py()}: the value cannot be decoded ({found.problems[row]})"
                f"{more(len(found.problems))}; nothing was written: fix the producer, or set such records "
                f"aside with {self.dead_letter_setting}"
            )
        kept = {*KAFKA_COLUMNS, *(["value"] if self.keep_raw_value else [])}
        names = [n for n in batch.schema.names if n in kept]  # in the reader's order
        extra = [n for n in batch.schema.names if n not in (*KAFKA_COLUMNS, "value")]  # the receipts
        columns = [batch.column(n) for n in names] + list(found.columns.columns) + [batch.column(n) for n in extra]
        fields = (
            [batch.schema.field(n) for n in names] + list(found.columns.schema) + [batch.schema.field(n) for n in extra]
        )
        decoded = pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))
        if found.problems:
            keep = np.ones(batch.num_rows, dtype=bool)
            keep[list(found.problems)] = False
            decoded = decoded.filter(pa.array(keep))
        return decoded


def more(count: int) -> str:
    return f" (and {count - 1} more record(s) in this part of the batch)" if count > 1 else ""


def value_decoding(plan: Any, options: Any, settings: Any) -> ValueDecoding | None:
    """The decoding of the plan's values (``None`` when they are not in a registry format).

    :param plan: the batch's :class:`~kafka_batch_provider.core.plan.OffsetPlan` (its reader schema).
    :param options: the run's :class:`~kafka_batch_provider.core.write_options.WriteOptions`.
    :param settings: the registry's :class:`~kafka_batch_provider.registry.settings.RegistrySettings`.
    """
    pinned = check_plan_decodes_as(plan.batch_id, plan.extra, options.value_format)
    if pinned is None:
        return None
    from kafka_batch_provider.registry.client import SchemaRegistry
    from kafka_batch_provider.registry.reader_schema import fetch_reader_schema, require_registry

    settings = require_registry(options.value_format, settings)
    registry = SchemaRegistry(settings, wait=options.stall_timeout)
    text, references = fetch_reader_schema(registry, pinned)
    if pinned.value_format == "protobuf":  # the schema as protobuf's descriptors, not .proto text
        import base64

        text, references = base64.b64encode(registry.protobuf_files(pinned.schema_id)).decode("ascii"), []
    return ValueDecoding(
        text,
        settings.client_config(),
        options.keep_raw_value,
        options.stall_timeout,
        tuple(references),
        options.on_bad_record,
        str(Setting("on_bad_record", "dead-letter")),
        pinned.value_format,
    )
