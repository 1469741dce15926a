"""A check of Spark DDL schema strings (``--value-schema``) without Spark. Pure, no I/O.

Spark parses the schema only inside the Spark job, after the batch was planned and Spark
started; this check refuses a malformed one up front, in one line. It follows Spark's
grammar for column lists (``name type [NOT NULL] [COMMENT '...']``, ``struct<...>``,
``array<...>``, ``map<...>``, ``decimal(p, s)``, back-quoted names), and is deliberately
lenient about anything it does not model (interval qualifiers), so it never refuses a
schema Spark accepts for the types listed in :data:`PRIMITIVE_TYPES`.
"""

from __future__ import annotations

import re

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

SCHEMA = Setting("value_schema")

PRIMITIVE_TYPES = frozenset(
    "boolean tinyint byte smallint short int integer bigint long float real double date timestamp "
    "timestamp_ntz timestamp_ltz string binary void variant".split()
)
PARAMETRIZED_TYPES = frozenset("decimal dec numeric char character varchar".split())
INTERVAL_UNITS = frozenset("year month day hour minute second to".split())

_TOKEN = re.compile(r"\s*(`(?:[^`]|``)+`|'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


def _tokens(text: str) -> list[str]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            raise ConfigError(f"{SCHEMA}: unexpected {text[position:].strip()[:20]!r} in {text!r}", setting=SCHEMA)
        tokens.append(match.group(1))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0

    def fail(self, expected: str):
        found = self.tokens[self.i] if self.i < len(self.tokens) else "the end"
        raise ConfigError(
            f"{SCHEMA} {self.text!r} is not a Spark DDL schema: expected {expected} at {found!r} "
            "(e.g. 'id long, name string, tags array<string>')",
            setting=SCHEMA,
        )

    def peek(self) -> str | None:
        return self.tokens[self.i].lower() if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            self.fail(repr(expected) if expected else "more")
        self.i += 1
        return self.tokens[self.i - 1]

    def name(self) -> None:
        token = self.peek()
        if token is None or not (token[0] == "`" or token[0].isalpha() or token[0] == "_"):
            self.fail("a column name")
        self.i += 1

    def fields(self, end: str | None, colon: bool) -> None:
        """``name type, ...`` up to ``end`` (``None``: the end of the text)."""
        while True:
            self.name()
            if colon and self.peek() == ":":
                self.take(":")
            self.data_type()
            while self.peek() in ("not", "comment"):
                if self.take().lower() == "not":
                    self.take("null")
                elif not (self.peek() or "").startswith("'"):
                    self.fail("a quoted comment")
                else:
                    self.take()
            if self.peek() == ",":
                self.take(",")
                continue
            if self.peek() == end:
                return
            self.fail("',' or the end of the schema" if end is None else f"',' or {end!r}")

    def data_type(self) -> None:
        token = self.peek()
        if token is None:
            self.fail("a type")
        self.i += 1
        if token in PRIMITIVE_TYPES:
            return
        if token in PARAMETRIZED_TYPES:
            if self.peek() == "(":
                self.take("(")
                self.number()
                if self.peek() == ",":
                    self.take(",")
                    self.number()
                self.take(")")
            elif token not in ("decimal", "dec", "numeric"):
                self.fail(f"a length, {token}(n)")
            return
        if token == "interval":
            while self.peek() in INTERVAL_UNITS:
                self.take()
            return
        if token == "array":
            self.take("<")
            self.data_type()
            self.take(">")
            return
        if token == "map":
            self.take("<")
            self.data_type()
            self.take(",")
            self.data_type()
            self.take(">")
            return
        if token == "struct":
            self.take("<")
            if self.peek() != ">":
                self.fields(">", colon=True)
            self.take(">")
            return
        self.i -= 1
        self.fail(f"a type ({', '.join(sorted(PRIMITIVE_TYPES))}, decimal(p,s), array<>, map<>, struct<>)")

    def number(self) -> None:
        if not (self.peek() or "").isdigit():
            self.fail("a number")
        self.i += 1


def check_ddl_schema(text: str) -> str:
    """``text`` when it is a Spark DDL column list (or ``struct<...>``), else a one-line ConfigError."""
    parser = _Parser(text)
    if not parser.tokens:
        parser.fail("at least one column")
    if parser.peek() == "struct" and parser.i + 1 < len(parser.tokens) and parser.tokens[1] == "<":
        parser.data_type()
        if parser.peek() is not None:
            parser.fail("the end of the schema")
    else:
        parser.fields(None, colon=True)
    return text
