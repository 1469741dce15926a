"""The reader schema of a batch, asked of the registry: pinned by the plan step, fetched by the write step.

What is pinned and how a plan records it is :mod:`kafka_batch_provider.core.reader_schema`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_batch_provider.core.reader_schema import (
    PLAN_KEYS,
    SCHEMA_TYPES,
    ReaderSchema,
    check_schema_choice,
    value_subject,
)
from kafka_batch_provider.core.settings import Advice
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.registry.client import SchemaRegistry
from kafka_batch_provider.registry.settings import RegistrySettings

#: How the caller names the registry's setting.
REGISTRY_SETTING = Advice("schema_registry_conn_id", "--schema-registry-url")


def require_registry(value_format: str, settings: RegistrySettings | None, part: str = "value") -> RegistrySettings:
    """The registry a registry format needs (refused in one line without one)."""
    if settings is None:
        raise ConfigError(f"{part} format {value_format} decodes with a schema registry: set {REGISTRY_SETTING}")
    return settings


@dataclass(frozen=True)
class ReaderSchemaRequest:
    """What the plan step pins: ``value_format``'s schema of ``subject`` (``None``: ``<topic>-value``,
    or ``<topic>-key`` for the keys' ``part``) at ``version`` (``None``: the latest). Checked when
    made, before anything is planned."""

    value_format: str
    settings: RegistrySettings | None
    subject: str | None = None
    version: int | None = None
    #: seconds an unreachable registry is waited for
    wait: float = 30.0
    #: ``value`` or ``key``
    part: str = "value"

    def __post_init__(self) -> None:
        check_schema_choice(self.value_format, self.subject, self.version, self.part)
        require_registry(self.value_format, self.settings, self.part)

    def pin(self, topics: Sequence[str]) -> ReaderSchema:
        """The schema the batch will be read with, as the registry has it now."""
        subject = value_subject(topics, self.subject, self.part)
        registry = SchemaRegistry(require_registry(self.value_format, self.settings, self.part), wait=self.wait)
        found = registry.version(subject, self.version) if self.version else registry.latest(subject)
        check_type(found.schema_type, self.value_format, f"{subject} version {found.version}")
        return ReaderSchema(self.value_format, found.subject or subject, int(found.version or 0), found.schema_id)

    @property
    def formats(self) -> Mapping[str, str]:
        """The registry format of the part it pins (the plan step's protocol, as :class:`ReaderSchemas`)."""
        return {self.part: self.value_format}

    def pins(self, topics: Sequence[str]) -> dict[str, Any]:
        """The plan's entry: this part's reader schema."""
        return {PLAN_KEYS[self.part]: self.pin(topics).to_dict()}


@dataclass(frozen=True)
class ReaderSchemas:
    """What the plan step pins for a batch: one :class:`ReaderSchemaRequest` per part in a registry
    format (the values, the keys, or both)."""

    requests: tuple[ReaderSchemaRequest, ...]

    @classmethod
    def of(cls, *requests: ReaderSchemaRequest | None) -> ReaderSchemas | None:
        """The requests given (``None``: no part is in a registry format)."""
        found = tuple(r for r in requests if r is not None)
        return cls(found) if found else None

    @property
    def formats(self) -> Mapping[str, str]:
        """The registry format of each part."""
        return {r.part: r.value_format for r in self.requests}

    def pins(self, topics: Sequence[str]) -> dict[str, Any]:
        """The plan's entries: each part's reader schema, as the registry has it now."""
        return {k: v for r in self.requests for k, v in r.pins(topics).items()}


def fetch_reader_schema(registry: SchemaRegistry, pinned: ReaderSchema) -> tuple[str, list[tuple[str, str]]]:
    """The pinned schema's text and its references, ``(name, text)`` (by id: the id never changes meaning)."""
    found = registry.by_id(pinned.schema_id)
    check_type(found.schema_type, pinned.value_format, str(pinned))
    return found.text, registry.referenced(found.references)


def check_type(schema_type: str, value_format: str, what: str) -> None:
    if schema_type != SCHEMA_TYPES[value_format]:
        raise ConfigError(f"schema registry: {what} is a {schema_type} schema, not {value_format}")
