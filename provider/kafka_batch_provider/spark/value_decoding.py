"""Schema-registry values (and keys) decoded inside the Spark task, between the reader and the task writer.

:class:`ValueDecoding` is picklable (the registry's credentials travel inside it, never as
options a query plan or the Spark UI could print). In the task it opens one registry client
and one decoder, so each schema id is fetched once per task, never per record
(:mod:`kafka_batch_provider.decoding.avro_decoder`). Each Arrow batch of Kafka records becomes
the Kafka columns (``key``, ``topic``, ``partition``, ``offset``, ``timestamp``,
``timestampType``, ``headers``; ``value`` too with ``keep_raw_value``) followed by the value's
fields as typed columns. With a key in a registry format (``--key-format``), ``key`` is the decoded
key: a struct of its fields, or an Avro key's own type (a string, a long). Receipt rows pass
through untouched.

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

from kafka_batch_provider.core.reader_schema import check_plan_formats
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.decoding.dead_letters import DeadLetterBatch, dead_letters_of
from kafka_batch_provider.errors import ConfigError, SchemaError

#: The Kafka columns that stay beside the value's fields.
KAFKA_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class KeyDecoding:
    """How the keys are decoded: the key reader schema the plan recorded, in the task's words.

    :param text: the schema's text (Avro or JSON Schema), or for ``protobuf`` its files, a base64
        ``FileDescriptorSet``.
    """

    key_format: str
    text: str
    #: the schemas it references, ``(name, text)``
    references: tuple[tuple[str, str], ...] = ()

    def column(self) -> pa.Field:
        """The ``key`` column: a struct of the key's fields, or (Avro) the key's own type."""
        import base64
        import json

        if self.key_format == "protobuf":
            from kafka_batch_provider.decoding.protobuf_decoder import file_of
            from kafka_batch_provider.decoding.protobuf_types import message_columns, value_message

            return pa.field("key", pa.struct(message_columns(value_message(file_of(base64.b64decode(self.text))))))
        if self.key_format == "json-schema":
            from kafka_batch_provider.decoding.json_schema_types import arrow_schema, value_columns

            columns = value_columns(json.loads(self.text), "key", self.references)
            return pa.field("key", pa.struct(arrow_schema(columns)))
        from kafka_batch_provider.decoding.avro_types import arrow_schema as avro_columns
        from kafka_batch_provider.decoding.avro_types import as_key_record

        wrapped = avro_columns(as_key_record(json.loads(self.text)), [json.loads(r) for _, r in self.references])
        return wrapped.field(0)

    def decoder(self, registry: Any) -> Any:
        """The format's decoder of keys, asking ``registry`` for each writer schema once."""
        import base64
        import json

        if self.key_format == "protobuf":
            from kafka_batch_provider.decoding.protobuf_decoder import ProtobufDecoder

            return ProtobufDecoder(base64.b64decode(self.text), registry.protobuf_files)
        if self.key_format == "json-schema":
            from kafka_batch_provider.decoding.json_schema_decoder import JsonSchemaDecoder

            return JsonSchemaDecoder(self.text, registry.writer_schema, self.references)
        from kafka_batch_provider.decoding.avro_decoder import AvroDecoder
        from kafka_batch_provider.decoding.avro_types import as_key_record

        def wrapped_writer(schema_id: int) -> tuple[str, str, list[tuple[str, str]]]:
            kind, text, references = registry.writer_schema(schema_id)
            return kind, json.dumps(as_key_record(json.loads(text))) if kind == "AVRO" else text, references

        reader = json.dumps(as_key_record(json.loads(self.text)))
        return AvroDecoder(reader, wrapped_writer, self.references)

    def key_column(self, found: Any) -> pa.Array:
        """The decoded keys as one column (null where the key was null or could not be decoded)."""
        if self.key_format == "avro":
            return found.columns.column(0)
        columns = found.columns
        missing = np.zeros(columns.num_rows, dtype=bool)
        missing[[row for row, schema_id in enumerate(found.schema_ids) if schema_id < 0]] = True
        missing[list(found.problems)] = True
        return pa.StructArray.from_arrays(
            list(columns.columns), fields=list(columns.schema), mask=pa.array(missing, pa.bool_())
        )


@dataclass(frozen=True)
class ValueDecoding:
    """The decoding of a batch's values (and keys) in a registry format, inside each Spark task.

    :param reader_schema: the batch's reader schema (Avro JSON text), as the plan recorded it;
        ``None`` when only the keys are in a registry format.
    :param registry_config: confluent-kafka ``SchemaRegistryClient`` settings (url, credentials).
    :param wait: seconds an unreachable registry is waited for (the read's stall timeout)."""

    reader_schema: str | None
    registry_config: Mapping[str, Any] = field(repr=False)
    keep_raw_value: bool = False
    wait: float = 120.0
    #: the schemas the reader schema references, ``(name, text)``, each before those that import it
    reader_references: tuple[tuple[str, str], ...] = ()
    #: ``fail`` or ``dead-letter`` (:data:`~kafka_batch_provider.core.write_options.ON_BAD_RECORD`)
    on_bad_record: str = "fail"
    #: how the refusal names the dead-letter setting, in the caller's words (worded on the driver:
    #: a Spark worker does not know whether a flag or a keyword argument set it)
    dead_letter_setting: str = "on_bad_record='dead-letter'"
    #: ``avro``, ``protobuf`` (``reader_schema`` is then its files, a base64 ``FileDescriptorSet``)
    #: or ``json-schema``
    value_format: str = "avro"
    #: the keys in a registry format (``None``: the keys stay as they are read)
    key: KeyDecoding | None = None

    def output_schema(self, kafka_schema: pa.Schema, reserved: tuple[str, ...] = ()) -> pa.Schema:
        """The columns the tasks write: the Kafka columns kept (``key`` decoded), then the value's
        fields, then the columns added on the way (``value_string``, ``key_string``).

        :param kafka_schema: the schema the reader hands over (with the added columns).
        :param reserved: other columns the batch has on its way (the receipts, a table's ``date``).
        :raises ConfigError: a field of the value is named like a column it would stand beside,
            or like another field, in any letter case (Spark and Delta do not tell case apart).
        """
        values = self.value_columns()
        kept = [f for f in kafka_schema if f.name in self.kept_columns]
        if self.key is not None:
            kept = [self.key.column() if f.name == "key" else f for f in kept]
        added = [f for f in kafka_schema if f.name not in (*KAFKA_COLUMNS, "value")]
        taken = {name.lower(): name for name in [*(f.name for f in [*kept, *added]), *reserved]}
        for name in values.names:
            if name.lower() in taken:
                raise ConfigError(
                    f"the value's field {name!r} has the name of the column {taken[name.lower()]!r} it would stand "
                    "beside (letter case does not tell columns apart): rename the field in the schema (a new "
                    "version), or read the values as bytes"
                )
            taken[name.lower()] = name
        return pa.schema([*kept, *values, *added])

    @property
    def kept_columns(self) -> tuple[str, ...]:
        """The Kafka columns that stay (``value`` too when it is not decoded, or kept raw)."""
        keep_value = self.keep_raw_value or self.reader_schema is None
        return (*KAFKA_COLUMNS, *(["value"] if keep_value else []))

    def value_columns(self) -> pa.Schema:
        """The value's columns, by the reader schema (the decoding modules' mappings)."""
        import base64
        import json

        if self.reader_schema is None:
            return pa.schema([])
        if self.value_format == "protobuf":
            from kafka_batch_provider.decoding.protobuf_decoder import file_of
            from kafka_batch_provider.decoding.protobuf_types import message_columns, value_message

            return message_columns(value_message(file_of(base64.b64decode(self.reader_schema))))
        if self.value_format == "json-schema":
            from kafka_batch_provider.decoding.json_schema_types import arrow_schema, value_columns

            return arrow_schema(value_columns(json.loads(self.reader_schema), references=self.reader_references))
        from kafka_batch_provider.decoding.avro_types import arrow_schema as avro_columns

        return avro_columns(json.loads(self.reader_schema), [json.loads(r) for _, r in self.reader_references])

    def registry(self) -> Any:
        """One registry client for the task: each schema id is fetched once per task."""
        from kafka_batch_provider.registry.client import SchemaRegistry
        from kafka_batch_provider.registry.settings import RegistrySettings

        return SchemaRegistry(RegistrySettings.from_client_config(self.registry_config), wait=self.wait)

    def decoder(self, registry: Any = None) -> Any:
        """The value format's decoder (``None`` when only the keys are decoded)."""
        import base64

        if self.reader_schema is None:
            return None
        registry = registry or self.registry()
        if self.value_format == "protobuf":
            from kafka_batch_provider.decoding.protobuf_decoder import ProtobufDecoder

            return ProtobufDecoder(base64.b64decode(self.reader_schema), registry.protobuf_files)
        if self.value_format == "json-schema":
            from kafka_batch_provider.decoding.json_schema_decoder import JsonSchemaDecoder

            return JsonSchemaDecoder(self.reader_schema, registry.writer_schema, self.reader_references)
        from kafka_batch_provider.decoding.avro_decoder import AvroDecoder

        return AvroDecoder(self.reader_schema, registry.writer_schema, self.reader_references)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch | DeadLetterBatch]:
        """The decoded batches, and with ``dead-letter`` the records that could not be decoded."""
        registry = self.registry()
        values = self.decoder(registry)
        keys = self.key.decoder(registry) if self.key is not None else None
        key_field = self.key.column() if self.key is not None else None  # once per task, not per batch
        for batch in batches:
            found = values.decode(batch.column("value")) if values is not None else None
            found_keys = keys.decode(batch.column("key")) if keys is not None else None
            problems, schema_ids = record_problems(found, found_keys)
            if problems and self.on_bad_record == "dead-letter":
                yield dead_letters_of(batch, problems, schema_ids)
            yield self.decoded(batch, found, found_keys, problems, key_field)

    def decoded(
        self,
        batch: pa.RecordBatch,
        found: Any,
        found_keys: Any = None,
        problems: Mapping[int, str] | None = None,
        key_field: pa.Field | None = None,
    ) -> pa.RecordBatch:
        """The batch's Kafka columns (``key`` decoded) and its values' columns (without the rows that
        are dead letters)."""
        if problems is None:
            problems, _ = record_problems(found, found_keys)
        if problems and self.on_bad_record != "dead-letter":
            row = min(problems)
            raise SchemaError(
                f"{batch.column('topic')[row].as_py()}[{batch.column('partition')[row].as_py()}] offset "
                f"{batch.column('offset')[row].as_py()}: {in_words(problems[row])}"
                f"{more(len(problems))}; nothing was written: fix the producer, or set such records "
                f"aside with {self.dead_letter_setting}"
            )
        names = [n for n in batch.schema.names if n in self.kept_columns]  # in the reader's order
        extra = [n for n in batch.schema.names if n not in (*KAFKA_COLUMNS, "value")]  # receipts, added columns
        columns, fields = [], []
        for name in names:
            if name == "key" and found_keys is not None and self.key is not None:
                columns.append(self.key.key_column(found_keys))
                fields.append(key_field or self.key.column())
            else:
                columns.append(batch.column(name))
                fields.append(batch.schema.field(name))
        if found is not None:
            columns += list(found.columns.columns)
            fields += list(found.columns.schema)
        columns += [batch.column(n) for n in extra]
        fields += [batch.schema.field(n) for n in extra]
        decoded = pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))
        if problems:
            keep = np.ones(batch.num_rows, dtype=bool)
            keep[list(problems)] = False
            decoded = decoded.filter(pa.array(keep))
        return decoded


#: How a dead letter's error says that the key (not the value) could not be decoded.
KEY_PROBLEM = "key: "


def record_problems(found: Any, found_keys: Any) -> tuple[dict[int, str], list[int]]:
    """Why each record that cannot be decoded cannot (its value's reason, ``key: `` and the key's,
    or both), and the schema id a dead letter records: the value's, or the key's when only the
    keys are decoded."""
    problems: dict[int, str] = dict(found.problems) if found is not None else {}
    if found_keys is not None:
        for row, why in found_keys.problems.items():
            problems[row] = f"{problems[row]}; {KEY_PROBLEM}{why}" if row in problems else f"{KEY_PROBLEM}{why}"
    schema_ids = (found if found is not None else found_keys).schema_ids
    return dict(sorted(problems.items())), schema_ids


def in_words(problem: str) -> str:
    """A record's problem in a refusal: which part cannot be decoded, and why."""
    if problem.startswith(KEY_PROBLEM):
        return f"the key cannot be decoded ({problem[len(KEY_PROBLEM) :]})"
    return f"the value cannot be decoded ({problem})"


def more(count: int) -> str:
    return f" (and {count - 1} more record(s) in this part of the batch)" if count > 1 else ""


def value_decoding(plan: Any, options: Any, settings: Any) -> ValueDecoding | None:
    """The decoding of the plan's values and keys (``None`` when neither is in a registry format).

    :param plan: the batch's :class:`~kafka_batch_provider.core.plan.OffsetPlan` (its reader schemas).
    :param options: the run's :class:`~kafka_batch_provider.core.write_options.WriteOptions`.
    :param settings: the registry's :class:`~kafka_batch_provider.registry.settings.RegistrySettings`.
    """
    pinned, pinned_key = check_plan_formats(plan.batch_id, plan.extra, options.value_format, options.key_format)
    if pinned is None and pinned_key is None:
        return None
    from kafka_batch_provider.registry.client import SchemaRegistry
    from kafka_batch_provider.registry.reader_schema import require_registry

    for part, fmt in options.registry_parts.items():
        settings = require_registry(fmt, settings, part)
    registry = SchemaRegistry(settings, wait=options.stall_timeout)
    text, references = reader_schema_text(registry, pinned) if pinned is not None else (None, ())
    key = KeyDecoding(pinned_key.value_format, *reader_schema_text(registry, pinned_key)) if pinned_key else None
    return ValueDecoding(
        text,
        settings.client_config(),
        options.keep_raw_value,
        options.stall_timeout,
        references,
        options.on_bad_record,
        str(Setting("on_bad_record", "dead-letter")),
        pinned.value_format if pinned is not None else options.value_format,
        key,
    )


def reader_schema_text(registry: Any, pinned: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A pinned schema as the tasks read it: its text and its references, or for Protobuf its
    files (base64 ``FileDescriptorSet``: protobuf's descriptors, not .proto text)."""
    from kafka_batch_provider.registry.reader_schema import fetch_reader_schema

    text, references = fetch_reader_schema(registry, pinned)
    if pinned.value_format == "protobuf":
        import base64

        return base64.b64encode(registry.protobuf_files(pinned.schema_id)).decode("ascii"), ()
    return text, tuple(references)
