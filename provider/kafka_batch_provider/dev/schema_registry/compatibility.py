"""The compatibility rules of the embedded schema registry, per level and schema type.

A level says which way data must flow: BACKWARD, the new schema reads data written with the
old one; FORWARD, the old reads the new's; FULL, both. Without ``_TRANSITIVE`` only the latest
version is checked, with it every live version. NONE checks nothing. Each type answers one
question, "can a reader with schema R read what a writer with schema W wrote?":

* AVRO: the Avro specification's schema resolution (``avro_resolution``).
* JSON: is every document valid against W also valid against R? (``json_subschema``).
* PROTOBUF: Confluent's wire-level rules from W's file to R's (``protobuf_diff``).

Each problem becomes one message in Confluent's verbose shape, ``{errorType:'...', description:
'...'}``, followed by ``{oldSchemaVersion: N}`` and ``{compatibility: 'LEVEL'}`` (``store``).
"""

from __future__ import annotations

from kafka_batch_provider.dev.schema_registry.avro_resolution import AvroResolution
from kafka_batch_provider.dev.schema_registry.formats import ParsedSchema
from kafka_batch_provider.dev.schema_registry.json_subschema import JsonSubschema
from kafka_batch_provider.dev.schema_registry.problem import Problem
from kafka_batch_provider.dev.schema_registry.protobuf_diff import ProtobufDiff

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"


def is_transitive(level: str) -> bool:
    return level.endswith("_TRANSITIVE")


def problems(level: str, new: ParsedSchema, old: ParsedSchema) -> list[str]:
    """Why ``new`` may not follow ``old`` under ``level``: one message each, none when it may."""
    if level == "NONE":
        return []
    if new.schema_type != old.schema_type:
        return [f"{{errorType:'TYPE_MISMATCH', description:'{new.schema_type} cannot follow {old.schema_type}'}}"]
    found = []
    if level.startswith(("BACKWARD", "FULL")):
        found += [p.message("the new schema", "the old schema") for p in reader_problems(new, old)]
    if level.startswith(("FORWARD", "FULL")):
        found += [p.message("the old schema", "the new schema") for p in reader_problems(old, new)]
    return found


def reader_problems(reader: ParsedSchema, writer: ParsedSchema) -> list[Problem]:
    """Why data written with ``writer`` cannot be read with ``reader``."""
    if reader.schema_type == "AVRO":
        return AvroResolution(reader.context, writer.context).check(reader.model, writer.model, "")
    if reader.schema_type == "JSON":
        return JsonSubschema(reader, writer).check((writer.model, writer.model), (reader.model, reader.model), "#")
    return ProtobufDiff(writer, reader).problems()
