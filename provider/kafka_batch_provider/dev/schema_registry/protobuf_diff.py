"""Protobuf compatibility for the embedded schema registry: Confluent's rules over two descriptors.

The rules look at the wire, from the writer's file to the reader's. Incompatible: a message
the writer has missing in the reader, a field's kind (scalar, message, map) or scalar group
changed (int32/int64/uint32/uint64/bool/enum, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64,
string/bytes, float, double), a field's message type renamed or itself incompatible, a required
field added or removed, a writer's oneof member missing from that oneof in the reader, several
fields moved into one oneof. Fields and messages added, fields removed, renamed or renumbered (a
removal and an addition), enum changes and the package: compatible. Options, reserved ranges and
labels other than ``required`` are not compared.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from kafka_batch_provider.dev.schema_registry.formats import ParsedSchema
from kafka_batch_provider.dev.schema_registry.problem import Problem

FieldProto = descriptor_pb2.FieldDescriptorProto
SCALAR_GROUPS = {
    FieldProto.TYPE_INT32: "number",
    FieldProto.TYPE_INT64: "number",
    FieldProto.TYPE_UINT32: "number",
    FieldProto.TYPE_UINT64: "number",
    FieldProto.TYPE_BOOL: "number",
    FieldProto.TYPE_ENUM: "number",
    FieldProto.TYPE_SINT32: "signed number",
    FieldProto.TYPE_SINT64: "signed number",
    FieldProto.TYPE_STRING: "string or bytes",
    FieldProto.TYPE_BYTES: "string or bytes",
    FieldProto.TYPE_FIXED32: "fixed32",
    FieldProto.TYPE_SFIXED32: "fixed32",
    FieldProto.TYPE_FIXED64: "fixed64",
    FieldProto.TYPE_SFIXED64: "fixed64",
    FieldProto.TYPE_FLOAT: "float",
    FieldProto.TYPE_DOUBLE: "double",
}


class _ProtoTypes:
    """The messages one side can see (its file and its imports) by full name, and which file holds each."""

    def __init__(self, schema: ParsedSchema) -> None:
        self.file = schema.model
        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.packages: dict[str, str] = {}
        for file in [*schema.context.values(), schema.model]:
            self._walk(file.package, file.package, file.message_type)

    def _walk(self, package: str, scope: str, messages) -> None:
        for message in messages:
            name = f"{scope}.{message.name}" if scope else message.name
            self.messages[name] = message
            self.packages[name] = package
            self._walk(package, name, message.nested_type)

    def local_name(self, full_name: str) -> str:
        package = self.packages.get(full_name, "")
        return full_name[len(package) + 1 :] if package else full_name


class ProtobufDiff:
    """Confluent's Protobuf rules: the changes from ``original`` (the writer) to ``update`` (the reader)."""

    def __init__(self, original: ParsedSchema, update: ParsedSchema) -> None:
        self.original, self.update = _ProtoTypes(original), _ProtoTypes(update)
        self.found: list[Problem] = []
        self.compared: set[tuple[str, str]] = set()

    def problems(self) -> list[Problem]:
        self.compare_messages(self.original.file.message_type, self.update.file.message_type, "#")
        return self.found

    def add(self, kind: str, path: str, text: str) -> None:
        self.found.append(Problem(kind, path, text))

    def compare_messages(self, original, update, path: str) -> None:
        updated = {message.name: message for message in update}
        for message in original:
            where = f"{path}/{message.name}"
            if message.name not in updated:
                if not message.options.map_entry:
                    self.add("MESSAGE_REMOVED", where, f"message {message.name} is missing in the reader")
            else:
                self.compare_message(message, updated[message.name], where)

    def compare_message(self, original, update, path: str) -> None:
        def real_oneof(field) -> int | None:
            return field.oneof_index if field.HasField("oneof_index") and not field.proto3_optional else None

        original_fields = {field.number: field for field in original.field}
        update_fields = {field.number: field for field in update.field}
        original_oneof = {n: real_oneof(f) for n, f in original_fields.items()}
        update_oneof = {n: real_oneof(f) for n, f in update_fields.items()}
        for index, oneof in enumerate(update.oneof_decl):
            members = [n for n, i in update_oneof.items() if i == index]
            moved = [n for n in members if n in original_fields and original_oneof[n] is None]
            existing = [n for n in members if n in original_fields and original_oneof[n] is not None]
            if len(moved) > 1:
                self.add(
                    "MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{path}/{oneof.name}", "several fields moved into one oneof"
                )
            elif moved and existing:
                self.add(
                    "FIELD_MOVED_TO_EXISTING_ONEOF", f"{path}/{oneof.name}", "a field moved into an existing oneof"
                )
        update_oneofs = {oneof.name: index for index, oneof in enumerate(update.oneof_decl)}
        for index, oneof in enumerate(original.oneof_decl):
            if oneof.name not in update_oneofs:
                continue
            for number, field in original_fields.items():
                if original_oneof[number] == index and update_oneof.get(number) != update_oneofs[oneof.name]:
                    text = f"field {field.name} ({number}) left oneof {oneof.name}"
                    self.add("ONEOF_FIELD_REMOVED", f"{path}/{oneof.name}", text)
        for number in sorted(original_fields.keys() | update_fields.keys()):
            where = f"{path}/{number}"
            before, after = original_fields.get(number), update_fields.get(number)
            if after is None or before is None:
                field = before or after
                if field.label == FieldProto.LABEL_REQUIRED:
                    kind = "REQUIRED_FIELD_REMOVED" if after is None else "REQUIRED_FIELD_ADDED"
                    self.add(kind, where, f"required field {field.name} ({number}) is added or removed")
            else:
                self.compare_field_types(before, after, where)
        self.compare_messages(original.nested_type, update.nested_type, path)

    def map_entry(self, side: _ProtoTypes, field) -> descriptor_pb2.DescriptorProto | None:
        if field.type != FieldProto.TYPE_MESSAGE:
            return None
        message = side.messages.get(field.type_name.lstrip("."))
        return message if message is not None and message.options.map_entry else None

    def kind(self, side: _ProtoTypes, field) -> str:
        if self.map_entry(side, field) is not None:
            return "map"
        return "message" if field.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_GROUP) else "scalar"

    def compare_field_types(self, before, after, path: str) -> None:
        before_kind, after_kind = self.kind(self.original, before), self.kind(self.update, after)
        if before_kind != after_kind:
            self.add("FIELD_KIND_CHANGED", path, f"field {after.name} changed from a {before_kind} to a {after_kind}")
        elif before_kind == "scalar" and SCALAR_GROUPS[before.type] != SCALAR_GROUPS[after.type]:
            text = f"field {after.name} changed from {SCALAR_GROUPS[before.type]} to {SCALAR_GROUPS[after.type]}"
            self.add("FIELD_SCALAR_KIND_CHANGED", path, text)
        elif before_kind == "map":
            before_entry, after_entry = self.map_entry(self.original, before), self.map_entry(self.update, after)
            for part in (0, 1):
                self.compare_field_types(before_entry.field[part], after_entry.field[part], path)
        elif before_kind == "message":
            self.compare_named_types(before.type_name.lstrip("."), after.type_name.lstrip("."), path)

    def compare_named_types(self, before: str, after: str, path: str) -> None:
        if self.original.local_name(before) != self.update.local_name(after):
            self.add("FIELD_NAMED_TYPE_CHANGED", path, f"a field's type changed from {before} to {after}")
            return
        local = before in declared_messages(self.original.file) and after in declared_messages(self.update.file)
        if local or (before, after) in self.compared:
            return  # a message of the file itself is compared on its own; a cycle is compared once
        self.compared.add((before, after))
        known = len(self.found)
        self.compare_message(self.original.messages[before], self.update.messages[after], f"#/{after}")
        if len(self.found) > known:
            self.add("FIELD_NAMED_TYPE_CHANGED", path, f"the field's message type {after} is incompatible")


def declared_messages(fd: descriptor_pb2.FileDescriptorProto) -> set[str]:
    found: set[str] = set()

    def walk(scope: str, messages) -> None:
        for message in messages:
            name = f"{scope}.{message.name}" if scope else message.name
            found.add(name)
            walk(name, message.nested_type)

    walk(fd.package, fd.message_type)
    return found
