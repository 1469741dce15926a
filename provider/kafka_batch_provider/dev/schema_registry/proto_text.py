"""A small ``.proto`` parser for the embedded schema registry: text in, ``FileDescriptorProto`` out.

The registry needs a descriptor for every Protobuf schema: confluent-kafka's deserializer asks
for it (``?format=serialized``), and the compatibility rules compare descriptors. protoc is not
a Python package, so this reads the part of the language schemas use: ``syntax`` (proto2,
proto3), ``package``, ``import`` (``public``/``weak`` too), messages (nested), fields with
``optional``/``required``/``repeated``, ``map<K, V>``, ``oneof``, enums, ``reserved``.
Options, ``extensions``, ``extend`` and ``service`` blocks are read and dropped (they change
no field's number or type); ``group`` and ``edition`` are refused with a one-line error.
Type names are resolved with protobuf's scoping rules by :func:`resolve_type_names`; the
result is then checked by protobuf's own ``DescriptorPool`` (``formats``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from google.protobuf import descriptor_pb2

Field = descriptor_pb2.FieldDescriptorProto

SCALARS = {
    "double": Field.TYPE_DOUBLE,
    "float": Field.TYPE_FLOAT,
    "int64": Field.TYPE_INT64,
    "uint64": Field.TYPE_UINT64,
    "int32": Field.TYPE_INT32,
    "fixed64": Field.TYPE_FIXED64,
    "fixed32": Field.TYPE_FIXED32,
    "bool": Field.TYPE_BOOL,
    "string": Field.TYPE_STRING,
    "bytes": Field.TYPE_BYTES,
    "uint32": Field.TYPE_UINT32,
    "sfixed32": Field.TYPE_SFIXED32,
    "sfixed64": Field.TYPE_SFIXED64,
    "sint32": Field.TYPE_SINT32,
    "sint64": Field.TYPE_SINT64,
}
LABELS = {"optional": Field.LABEL_OPTIONAL, "required": Field.LABEL_REQUIRED, "repeated": Field.LABEL_REPEATED}
MAX_FIELD_NUMBER = 536_870_911

_TOKEN = re.compile(
    r"""(?P<skip>\s+|//[^\n]*|/\*.*?\*/)
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
    |(?P<name>\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
    |(?P<symbol>[{}\[\]()<>;,=:./-])""",
    re.S | re.X,
)


class ProtoSyntaxError(ValueError):
    """The text is no ``.proto`` file this parser reads (one line, with the line number)."""


def tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """``(kind, text, line)`` for each token; comments and spaces dropped."""
    position, line = 0, 1
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ProtoSyntaxError(f"line {line}: unexpected character {text[position]!r}")
        if match.lastgroup != "skip":
            yield match.lastgroup or "", match.group(), line
        line += match.group().count("\n")
        position = match.end()


def camel_case(name: str) -> str:
    """protoc's name for a map field's entry message: ``my_field`` -> ``MyField``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = list(tokens(text))
        self.at = 0
        self.proto3 = False

    # -- tokens ---------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        return self.tokens[index][1] if index < len(self.tokens) else ""

    def line(self) -> int:
        return self.tokens[min(self.at, len(self.tokens) - 1)][2] if self.tokens else 1

    def fail(self, what: str) -> ProtoSyntaxError:
        return ProtoSyntaxError(f"line {self.line()}: {what}")

    def take(self, kind: str | None = None) -> str:
        if self.at >= len(self.tokens):
            raise self.fail("unexpected end of the file")
        found_kind, text, _ = self.tokens[self.at]
        if kind is not None and found_kind != kind:
            raise self.fail(f"expected a {kind}, found {text!r}")
        self.at += 1
        return text

    def expect(self, symbol: str) -> None:
        if self.peek() != symbol:
            raise self.fail(f"expected {symbol!r}, found {self.peek() or 'the end'!r}")
        self.at += 1

    def string(self) -> str:
        return self.take("string")[1:-1].encode().decode("unicode_escape")

    def number(self) -> int:
        text = self.take()
        if text == "max":
            return MAX_FIELD_NUMBER
        try:
            return int(text, 0)
        except ValueError:
            raise self.fail(f"expected an integer, found {text!r}") from None

    def skip_statement(self) -> None:
        """Up to and with the next ``;`` outside brackets (an option's value may be ``{...}``)."""
        depth = 0
        while True:
            text = self.take()
            depth += (text in ("{", "[", "(")) - (text in ("}", "]", ")"))
            if text == ";" and depth == 0:
                return

    def skip_block(self) -> None:
        """Up to and with the ``}`` that closes the next ``{``."""
        while self.take() != "{":
            pass
        depth = 1
        while depth:
            text = self.take()
            depth += (text == "{") - (text == "}")

    def skip_options(self) -> None:
        if self.peek() == "[":
            depth = 0
            while True:
                text = self.take()
                depth += (text == "[") - (text == "]")
                if depth == 0:
                    return

    # -- the grammar ----------------------------------------------------------------------

    def file(self) -> descriptor_pb2.FileDescriptorProto:
        fd = descriptor_pb2.FileDescriptorProto()
        while self.at < len(self.tokens):
            word = self.take()
            if word == "syntax":
                self.expect("=")
                syntax = self.string()
                if syntax not in ("proto2", "proto3"):
                    raise self.fail(f"unknown syntax {syntax!r}")
                self.proto3 = syntax == "proto3"
                if self.proto3:
                    fd.syntax = "proto3"
                self.expect(";")
            elif word == "edition":
                raise self.fail("editions are not supported, only proto2 and proto3")
            elif word == "package":
                fd.package = self.take("name")
                self.expect(";")
            elif word == "import":
                kind = self.take() if self.peek() in ("public", "weak") else ""
                if kind == "public":
                    fd.public_dependency.append(len(fd.dependency))
                elif kind == "weak":
                    fd.weak_dependency.append(len(fd.dependency))
                fd.dependency.append(self.string())
                self.expect(";")
            elif word == "option":
                self.skip_statement()
            elif word == "message":
                self.message(fd.message_type.add())
            elif word == "enum":
                self.enum(fd.enum_type.add())
            elif word in ("service", "extend"):
                self.skip_block()
            elif word != ";":
                raise self.fail(f"unexpected {word!r} at the top level")
        return fd

    def message(self, message: descriptor_pb2.DescriptorProto) -> None:
        message.name = self.take("name")
        self.expect("{")
        while self.peek() != "}":
            word = self.peek()
            if word in ("message", "enum", "oneof", "reserved", "option", "extensions", "extend", ";"):
                self.take()
            if word == "message":
                self.message(message.nested_type.add())
            elif word == "enum":
                self.enum(message.enum_type.add())
            elif word == "oneof":
                self.oneof(message)
            elif word == "reserved":
                self.reserved(message.reserved_range, message.reserved_name, end_inclusive=False)
            elif word in ("option", "extensions"):
                self.skip_statement()
            elif word == "extend":
                self.skip_block()
            elif word == "map" and self.peek(1) == "<":
                self.map_field(message)
            elif word == "group" or self.peek(1) == "group":
                raise self.fail("proto2 groups are not supported")
            elif word != ";":
                self.field(message, message.field.add(), oneof_index=None)
        self.expect("}")
        # proto3 ``optional``: protoc gives each such field a synthetic oneof, after the real ones.
        for field in message.field:
            if field.proto3_optional:
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add().name = f"_{field.name}"

    def field(self, message: descriptor_pb2.DescriptorProto, field: Field, oneof_index: int | None) -> None:
        label = self.take() if self.peek() in LABELS else None
        if oneof_index is not None and label is not None:
            raise self.fail(f"a oneof's field has no label, found {label!r}")
        if label == "required" and self.proto3:
            raise self.fail("proto3 has no required fields")
        if label is None and oneof_index is None and not self.proto3:
            raise self.fail("a proto2 field needs a label: optional, required or repeated")
        self.typed(field, self.take("name"))
        field.name = self.take("name")
        self.expect("=")
        field.number = self.number()
        field.label = LABELS[label or "optional"]
        if oneof_index is not None:
            field.oneof_index = oneof_index
        elif label == "optional" and self.proto3:
            field.proto3_optional = True
        self.skip_options()
        self.expect(";")

    def typed(self, field: Field, type_name: str) -> None:
        if type_name in SCALARS:
            field.type = SCALARS[type_name]
        else:
            field.type_name = type_name  # a message or an enum: resolve_type_names decides

    def map_field(self, message: descriptor_pb2.DescriptorProto) -> None:
        self.take()
        self.expect("<")
        key_type = self.take("name")
        self.expect(",")
        value_type = self.take("name")
        self.expect(">")
        field = message.field.add()
        field.name = self.take("name")
        self.expect("=")
        field.number = self.number()
        self.skip_options()
        self.expect(";")
        entry = message.nested_type.add()
        entry.name = f"{camel_case(field.name)}Entry"
        entry.options.map_entry = True
        for number, name, type_name in ((1, "key", key_type), (2, "value", value_type)):
            part = entry.field.add()
            part.name, part.number, part.label = name, number, Field.LABEL_OPTIONAL
            self.typed(part, type_name)
        field.label = Field.LABEL_REPEATED
        field.type = Field.TYPE_MESSAGE
        field.type_name = entry.name

    def oneof(self, message: descriptor_pb2.DescriptorProto) -> None:
        index = len(message.oneof_decl)
        message.oneof_decl.add().name = self.take("name")
        self.expect("{")
        while self.peek() != "}":
            if self.peek() == "option":
                self.take()
                self.skip_statement()
            elif self.peek() == ";":
                self.take()
            else:
                self.field(message, message.field.add(), oneof_index=index)
        self.expect("}")

    def enum(self, enum: descriptor_pb2.EnumDescriptorProto) -> None:
        enum.name = self.take("name")
        self.expect("{")
        while self.peek() != "}":
            word = self.take()
            if word == "option":
                self.skip_statement()
            elif word == "reserved":
                self.reserved(enum.reserved_range, enum.reserved_name, end_inclusive=True)
            elif word != ";":
                value = enum.value.add()
                value.name = word
                self.expect("=")
                value.number = self.number()
                self.skip_options()
                self.expect(";")
        self.expect("}")

    def reserved(self, ranges, names, end_inclusive: bool) -> None:
        while True:
            if self.tokens[self.at][0] == "string":
                names.append(self.string())
            else:
                start = self.number()
                end = start
                if self.peek() == "to":
                    self.take()
                    end = self.number()
                added = ranges.add()
                added.start, added.end = start, end if end_inclusive else end + 1
            if self.peek() != ",":
                break
            self.take()
        self.expect(";")


def parse_proto(text: str) -> descriptor_pb2.FileDescriptorProto:
    """The file's descriptor, its type names still as written (see :func:`resolve_type_names`)."""
    return _Parser(text).file()


def declared_types(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, int]:
    """Every message and enum the file declares, by full name: ``TYPE_MESSAGE`` or ``TYPE_ENUM``."""
    found: dict[str, int] = {}

    def walk(scope: str, messages, enums) -> None:
        for enum in enums:
            found[f"{scope}{enum.name}"] = Field.TYPE_ENUM
        for message in messages:
            found[f"{scope}{message.name}"] = Field.TYPE_MESSAGE
            walk(f"{scope}{message.name}.", message.nested_type, message.enum_type)

    walk(f"{fd.package}." if fd.package else "", fd.message_type, fd.enum_type)
    return found


def resolve_type_names(fd: descriptor_pb2.FileDescriptorProto, imported: Mapping[str, int]) -> None:
    """Make every field's type name absolute (``.pkg.Msg``) and say whether it is a message or an enum.

    A name is looked up from the innermost scope outwards, as protoc does. ``imported`` holds
    the types of the imported files (see :func:`declared_types`).
    """
    known = {**imported, **declared_types(fd)}
    namespaces = {name.rsplit(".", i)[0] for name in known for i in range(1, name.count(".") + 1)}

    def resolve(name: str, scope: str) -> str:
        if name.startswith("."):
            if name[1:] in known:
                return name[1:]
            raise ProtoSyntaxError(f"unknown type {name!r}")
        first = name.split(".")[0]
        parts = scope.split(".") if scope else []
        while True:
            prefix = ".".join(parts)
            head = f"{prefix}.{first}" if prefix else first
            full = f"{prefix}.{name}" if prefix else name
            if (head in known or head in namespaces) and full in known:
                return full
            if not parts:
                raise ProtoSyntaxError(f"unknown type {name!r} in {scope or 'the file'}")
            parts.pop()

    def walk(scope: str, messages) -> None:
        for message in messages:
            inner = f"{scope}.{message.name}" if scope else message.name
            for field in message.field:
                if field.type_name:
                    full = resolve(field.type_name, inner)
                    field.type_name = f".{full}"
                    field.type = known[full]
            walk(inner, message.nested_type)

    walk(fd.package, fd.message_type)
