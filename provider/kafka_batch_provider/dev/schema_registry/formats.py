"""How the embedded schema registry reads a schema of each type: AVRO, PROTOBUF and JSON.

Reading checks the schema as the real registry does (422 "invalid schema" otherwise) and gives
what the compatibility rules compare and what makes two texts the same schema:

* AVRO: fastavro parses it, with the named types of its references.
* JSON: a JSON Schema document, checked against its own draft's meta-schema (default draft 7).
* PROTOBUF: ``.proto`` text (see ``proto_text``) or, as confluent-kafka's serializer sends it,
  a base64 ``FileDescriptorProto``. Imports are the references' names or protobuf's well-known
  types (``google/protobuf/*.proto``, ``google/type/*.proto``); protobuf's ``DescriptorPool``
  then has the final word on whether the file is valid.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from kafka_batch_provider.dev.schema_registry.proto_text import (
    ProtoSyntaxError,
    declared_types,
    parse_proto,
    resolve_type_names,
)

SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
AVRO_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


class InvalidSchema(ValueError):
    """The text is no valid schema of its type (one line)."""


@dataclass(frozen=True, eq=False)
class ParsedSchema:
    """A schema as the rules see it.

    :param canonical: the same for two texts of one schema (spacing, comments, the encoding of
        a Protobuf file), so registering it again finds the same id.
    :param model: AVRO: fastavro's parsed schema; JSON: the document; PROTOBUF: the
        ``FileDescriptorProto`` with absolute type names.
    :param context: what the model's names point to. AVRO: named types by full name; JSON:
        referenced documents by reference name; PROTOBUF: imported files by import path.
    """

    schema_type: str
    canonical: str
    model: Any
    context: Mapping[str, Any]

    def serialized(self) -> str:
        """PROTOBUF's ``?format=serialized``: the base64 ``FileDescriptorProto`` clients decode."""
        return base64.standard_b64encode(self.model.SerializeToString()).decode("ascii")


def parse_schema(schema_type: str, text: str, references: Sequence[tuple[str, ParsedSchema]] = ()) -> ParsedSchema:
    """Read ``text`` as a ``schema_type`` schema; ``references`` are ``(name, referenced schema)``."""
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchema(f"unknown schema type {schema_type!r}; expected one of {', '.join(SCHEMA_TYPES)}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("the schema is empty")
    for name, referenced in references:
        if referenced.schema_type != schema_type:
            raise InvalidSchema(f"reference {name!r} is a {referenced.schema_type} schema, not {schema_type}")
    return {"AVRO": _avro, "JSON": _json, "PROTOBUF": _protobuf}[schema_type](text, references)


def _compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def _avro(text: str, references: Sequence[tuple[str, ParsedSchema]]) -> ParsedSchema:
    import fastavro

    try:
        document = json.loads(text)
    except ValueError:
        if text.strip() not in AVRO_PRIMITIVES:
            raise InvalidSchema("an Avro schema is JSON, or the name of a primitive type") from None
        document = text.strip()
    named: dict[str, Any] = {}
    for _, referenced in references:
        named.update(referenced.context)
    try:
        parsed = fastavro.parse_schema(document, named_schemas=named)
    except Exception as exc:  # noqa: BLE001 - fastavro raises several kinds; each means "invalid"
        raise InvalidSchema(f"invalid Avro schema: {type(exc).__name__}: {exc}") from None
    # The identity (and the text served back) is the schema's canonical form, as Confluent's:
    # reordered keys or {"type": "int"} for "int" are the same schema, not a new version.
    return ParsedSchema("AVRO", _compact(canonical_avro(parsed)), parsed, named)


def canonical_avro(parsed: Any) -> Any:
    """The parsed schema (names fully qualified) without fastavro's hints, keys in a fixed order
    and a bare primitive where ``{"type": primitive}`` says no more."""
    if isinstance(parsed, list):
        return [canonical_avro(branch) for branch in parsed]
    if not isinstance(parsed, dict):
        return parsed
    kept = {k: canonical_avro(v) for k, v in parsed.items() if not k.startswith("__")}
    if set(kept) == {"type"} and isinstance(kept["type"], str):
        return kept["type"]
    if "fields" in kept:
        kept["fields"] = [{k: canonical_avro(v) for k, v in sorted(f.items())} for f in kept["fields"]]
    return dict(sorted(kept.items()))


def _json(text: str, references: Sequence[tuple[str, ParsedSchema]]) -> ParsedSchema:
    import jsonschema

    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"a JSON schema must be JSON: {exc}") from None
    if not isinstance(document, (dict, bool)):
        raise InvalidSchema("a JSON schema is an object or a boolean")
    validator = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(document)
    except jsonschema.SchemaError as exc:
        raise InvalidSchema(f"invalid JSON schema at {'/'.join(map(str, exc.path)) or '/'}: {exc.message}") from None
    documents: dict[str, Any] = {}
    for name, referenced in references:
        documents.update(referenced.context)
        documents[name] = referenced.model
    return ParsedSchema("JSON", _compact(document), document, documents)


# -- Protobuf -------------------------------------------------------------------------------


def _well_known(path: str) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The file protobuf (or googleapis-common-protos) ships at import path ``path``, with its imports."""
    if not path.startswith(("google/protobuf/", "google/type/")) or not path.endswith(".proto"):
        return {}
    try:
        module = importlib.import_module(path[: -len(".proto")].replace("/", ".") + "_pb2")
    except ImportError:
        return {}
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for dependency in module.DESCRIPTOR.dependencies:
        files.update(_well_known(dependency.name))
    files[path] = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    return files


def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor if ``text`` is base64 of one (``.proto`` text never is: it has spaces)."""
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
        fd = descriptor_pb2.FileDescriptorProto.FromString(data)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fd if fd.message_type or fd.enum_type or fd.package or fd.syntax else None


def _protobuf(text: str, references: Sequence[tuple[str, ParsedSchema]]) -> ParsedSchema:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for name, referenced in references:
        files.update(referenced.context)
        own = descriptor_pb2.FileDescriptorProto()
        own.CopyFrom(referenced.model)
        own.name = name  # a file is known by the path that imports it
        files[name] = own
    fd = _from_base64(text)
    from_text = fd is None
    if fd is None:
        try:
            fd = parse_proto(text)
        except ProtoSyntaxError as exc:
            raise InvalidSchema(f"invalid Protobuf schema: {exc}") from None
        fd.name = "schema.proto"
    for dependency in fd.dependency:
        if dependency not in files:
            files.update(_well_known(dependency))
        if dependency not in files:
            raise InvalidSchema(f"import {dependency!r} is neither a reference nor a well-known type")
    if from_text:
        imported: dict[str, int] = {}
        for file in files.values():
            imported.update(declared_types(file))
        try:
            resolve_type_names(fd, imported)
        except ProtoSyntaxError as exc:
            raise InvalidSchema(f"invalid Protobuf schema: {exc}") from None
    _check_with_protobuf(fd, files)
    identity = descriptor_pb2.FileDescriptorProto()
    identity.CopyFrom(fd)
    identity.ClearField("name")
    canonical = hashlib.sha256(identity.SerializeToString(deterministic=True)).hexdigest()
    return ParsedSchema("PROTOBUF", canonical, fd, files)


def _check_with_protobuf(fd: descriptor_pb2.FileDescriptorProto, files: Mapping[str, Any]) -> None:
    """Build the file in a fresh ``DescriptorPool``: protobuf's own validation (numbers, names, types)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: descriptor_pb2.FileDescriptorProto) -> None:
        for dependency in file.dependency:
            if dependency in files and dependency not in added:
                added.add(dependency)
                add(files[dependency])
        pool.AddSerializedFile(file.SerializeToString())

    try:
        add(fd)
        pool.FindFileByName(fd.name)
    except Exception as exc:  # noqa: BLE001 - TypeError or KeyError: either way the file is invalid
        raise InvalidSchema(f"invalid Protobuf schema: {' '.join(str(exc).split())}") from None
