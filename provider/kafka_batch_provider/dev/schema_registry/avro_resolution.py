"""Avro compatibility for the embedded schema registry: the Avro specification's schema resolution.

Records match by name (or a reader alias); a reader
field missing in the writer needs a default; writer fields the reader lacks are skipped;
promotions int -> long -> float -> double and string <-> bytes; enum symbols the writer has need
a place in the reader (or the reader enum's default); fixed sizes must match; arrays, maps and
unions resolve branch by branch; recursive types terminate. Logical types are compared by their
underlying type only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_batch_provider.dev.schema_registry.formats import AVRO_PRIMITIVES
from kafka_batch_provider.dev.schema_registry.problem import Problem

PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}


def _simple_name(full_name: str) -> str:
    return full_name.rsplit(".", 1)[-1]


class AvroResolution:
    """Avro schema resolution of a reader against a writer (named types from ``*_named``)."""

    def __init__(self, reader_named: Mapping[str, Any], writer_named: Mapping[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        self.in_progress: set[tuple[str, str]] = set()

    @staticmethod
    def resolve(schema: Any, named: Mapping[str, Any]) -> Any:
        """A primitive's name, a union's list, or a complex type's dict: names and wrappers removed."""
        while True:
            if isinstance(schema, str):
                if schema in AVRO_PRIMITIVES or schema not in named:
                    return schema
                schema = named[schema]
            elif isinstance(schema, dict) and not isinstance(schema.get("type"), str):
                schema = schema.get("type")  # {"type": {...}} or {"type": [...]}
            elif isinstance(schema, dict) and schema["type"] in AVRO_PRIMITIVES:
                return schema["type"]  # a logical type: compared as its underlying type
            elif isinstance(schema, dict) and schema["type"] in named:
                schema = named[schema["type"]]
            else:
                return schema

    @staticmethod
    def kind(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        return schema if isinstance(schema, str) else schema["type"]

    def check(self, reader: Any, writer: Any, path: str) -> list[Problem]:
        reader = self.resolve(reader, self.reader_named)
        writer = self.resolve(writer, self.writer_named)
        reader_kind, writer_kind = self.kind(reader), self.kind(writer)
        if writer_kind == "union":
            found = []
            for index, branch in enumerate(writer):
                found += self.check(reader, branch, f"{path}/{index}")
            return found
        if reader_kind == "union":
            if any(not self.check(branch, writer, path) for branch in reader):
                return []
            return [Problem("MISSING_UNION_BRANCH", path or "/", f"the reader has no union branch for {writer_kind}")]
        if reader_kind != writer_kind:
            if (writer_kind, reader_kind) in PROMOTIONS:
                return []
            text = f"the reader's type {reader_kind} cannot read the writer's type {writer_kind}"
            return [Problem("TYPE_MISMATCH", path or "/", text)]
        if reader_kind in ("record", "error", "enum", "fixed"):
            if not self.same_name(reader, writer):
                text = f"the reader's {reader_kind} {reader['name']} is not the writer's {writer['name']}"
                return [Problem("NAME_MISMATCH", path or "/", text)]
            pair = (reader["name"], writer["name"])
            if pair in self.in_progress:
                return []  # a recursive type: this pair is being checked further up
            self.in_progress.add(pair)
            try:
                return getattr(self, f"check_{'record' if reader_kind == 'error' else reader_kind}")(
                    reader, writer, path
                )
            finally:
                self.in_progress.discard(pair)
        if reader_kind == "array":
            return self.check(reader["items"], writer["items"], f"{path}/items")
        if reader_kind == "map":
            return self.check(reader["values"], writer["values"], f"{path}/values")
        return []

    @staticmethod
    def same_name(reader: dict, writer: dict) -> bool:
        """As Avro's Java resolution: equal unqualified names, or the writer's name among the reader's aliases."""
        if _simple_name(reader["name"]) == _simple_name(writer["name"]):
            return True
        namespace = reader["name"].rsplit(".", 1)[0] if "." in reader["name"] else ""
        aliases = {
            alias if "." in alias or not namespace else f"{namespace}.{alias}" for alias in reader.get("aliases", ())
        }
        return writer["name"] in aliases or _simple_name(writer["name"]) in reader.get("aliases", ())

    def check_record(self, reader: dict, writer: dict, path: str) -> list[Problem]:
        written = {field["name"]: field for field in writer["fields"]}
        found = []
        for index, field in enumerate(reader["fields"]):
            names = [field["name"], *field.get("aliases", ())]
            match = next((written[name] for name in names if name in written), None)
            where = f"{path}/fields/{index}"
            if match is not None:
                found += self.check(field["type"], match["type"], f"{where}/type")
            elif "default" not in field:
                text = f"field {field['name']} has no default value in the reader and is missing in the writer"
                found.append(Problem("READER_FIELD_MISSING_DEFAULT_VALUE", where, text))
        return found

    def check_enum(self, reader: dict, writer: dict, path: str) -> list[Problem]:
        missing = [symbol for symbol in writer["symbols"] if symbol not in reader["symbols"]]
        if not missing or "default" in reader:
            return []
        text = f"the reader's enum {reader['name']} lacks the writer's symbols {', '.join(missing)}"
        return [Problem("MISSING_ENUM_SYMBOLS", f"{path}/symbols", text)]

    def check_fixed(self, reader: dict, writer: dict, path: str) -> list[Problem]:
        if reader["size"] == writer["size"]:
            return []
        text = f"the reader's fixed size {reader['size']} is not the writer's {writer['size']}"
        return [Problem("FIXED_SIZE_MISMATCH", f"{path}/size", text)]
