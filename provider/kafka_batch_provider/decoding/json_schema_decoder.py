"""JSON Schema values in the registry's wire format -> typed Arrow columns of the reader schema.

Each value is JSON text after the magic byte and the schema id. It is checked against its
*writer's* schema (the one its producer registered; the ``jsonschema`` library, the schema's
own draft), as confluent-kafka's JSON deserializer does, then its properties become the reader
schema's columns (:mod:`~kafka_batch_provider.decoding.json_schema_types`): a property the
reader does not know is left out, one the writer did not send is null.

A value that cannot be decoded (not framed, an unknown schema id, not JSON, JSON that breaks
its schema, a property whose type the reader's column cannot take) is reported with its reason,
like the Avro decoder's (:class:`~kafka_batch_provider.decoding.avro_decoder.Decoded`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from kafka_batch_provider.decoding.avro_decoder import Decoded, Reference, WriterSchema, one_line
from kafka_batch_provider.decoding.json_schema_types import arrow_schema, value_columns
from kafka_batch_provider.decoding.wire import HEADER_BYTES, schema_ids
from kafka_batch_provider.errors import KafkaBatchError, SchemaError


def validator(text: str, references: Sequence[Reference]) -> Any:
    """A ``jsonschema`` validator of a registered schema; its references resolve by the name they
    were registered with (as confluent-kafka's deserializer resolves them) and by their ``$id``."""
    from jsonschema.validators import validator_for
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    schema = json.loads(text)
    resources = [(name, Resource.from_contents(json.loads(r), default_specification=DRAFT7)) for name, r in references]
    by_id = [(resource.id(), resource) for _, resource in resources if resource.id()]
    registry = Registry().with_resources([*by_id, *resources])
    cls = validator_for(schema, default=validator_for({"$schema": "http://json-schema.org/draft-07/schema#"}))
    return cls(schema, registry=registry)


class JsonSchemaDecoder:
    """:param reader_schema: the batch's reader schema (JSON Schema text).
    :param writer_schema: schema id -> :data:`~kafka_batch_provider.decoding.avro_decoder.WriterSchema`.
    :param references: the schemas the reader schema references."""

    def __init__(
        self, reader_schema: str, writer_schema: Callable[[int], WriterSchema], references: Sequence[Reference] = ()
    ) -> None:
        self.columns = value_columns(json.loads(reader_schema), references=references)
        self.arrow = arrow_schema(self.columns)
        self._writer_schema = writer_schema
        self._validators: dict[int, Any] = {}
        self._unknown: dict[int, str] = {}
        self.counts = {"one_by_one": 0}

    def validator(self, schema_id: int) -> Any:
        """The writer schema's validator of an id, fetched and built once."""
        if schema_id in self._unknown:
            raise SchemaError(self._unknown[schema_id])
        if schema_id not in self._validators:
            try:
                # The registry's ConfigError (TLS, settings refused) is nobody's record's: it raises.
                kind, text, references = self._writer_schema(schema_id)
                if kind != "JSON":
                    raise SchemaError(f"schema id {schema_id} is a {kind} schema, not JSON Schema")
                self._validators[schema_id] = validator(text, references)
            except (SchemaError, ValueError, LookupError) as exc:  # LookupError: jsonschema's refusals
                text = str(exc)
                self._unknown[schema_id] = text if "schema id" in text else f"schema id {schema_id}: {text}"
                raise SchemaError(self._unknown[schema_id]) from None
        return self._validators[schema_id]

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
                check = self.validator(schema_id)
                document = json.loads(value[HEADER_BYTES:])
                broken = next(iter(check.iter_errors(document)), None)
                if broken is not None:
                    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in broken.absolute_path)
                    raise SchemaError(
                        f"schema id {schema_id}: the JSON breaks its schema at ${where}: "
                        f"{one_line_text(broken.message)}"
                    )
                if not isinstance(document, dict):
                    raise SchemaError(f"schema id {schema_id}: the value is not a JSON object")
                rows[row] = {
                    n: None if document.get(n) is None else c.convert(document[n]) for n, c in self.columns.items()
                }
            except SchemaError as exc:
                problems[row] = str(exc)
            except KafkaBatchError:  # the registry out of reach or refusing: nobody's record's fault
                raise
            except Exception as exc:  # not JSON, not UTF-8, a property of another type than its column's
                problems[row] = f"schema id {schema_id}: {one_line(exc)}"
        return Decoded(self.batch(rows, problems), ids, problems)

    def batch(self, rows: list[dict[str, Any] | None], problems: dict[int, str]) -> pa.RecordBatch:
        try:
            return self.arrays(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            for row, found in enumerate(rows):
                if found is None:
                    continue
                try:
                    self.arrays([found])
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    problems[row] = f"the value does not fit its columns: {one_line(exc)}"
                    rows[row] = None
            return self.arrays(rows)

    def arrays(self, rows: list[dict[str, Any] | None]) -> pa.RecordBatch:
        arrays = [pa.array([None if r is None else r[f.name] for r in rows], type=f.type) for f in self.arrow]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)


def one_line_text(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
