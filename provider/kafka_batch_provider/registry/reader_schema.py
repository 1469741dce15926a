"""The reader schema of a batch, asked of the registry: pinned by the plan step, fetched by the write step.

What is pinned and how a plan records it is :mod:`kafka_batch_provider.core.reader_schema`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafka_batch_provider.core.reader_schema import SCHEMA_TYPES, ReaderSchema, check_schema_choice, value_subject
from kafka_batch_provider.core.settings import Advice
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.registry.client import SchemaRegistry
from kafka_batch_provider.registry.settings import RegistrySettings

#: How the caller names the registry's setting.
REGISTRY_SETTING = Advice("schema_registry_conn_id", "--schema-registry-url")


def require_registry(value_format: str, settings: RegistrySettings | None) -> RegistrySettings:
    """The registry a registry format needs (refused in one line without one)."""
    if settings is None:
        raise ConfigError(f"value format {value_format} decodes with a schema registry: set {REGISTRY_SETTING}")
    return settings


@dataclass(frozen=True)
class ReaderSchemaRequest:
    """What the plan step pins: ``value_format``'s schema of ``subject`` (``None``: ``<topic>-value``)
    at ``version`` (``None``: the latest). Checked when made, before anything is planned."""

    value_format: str
    settings: RegistrySettings | None
    subject: str | None = None
    version: int | None = None
    #: seconds an unreachable registry is waited for
    wait: float = 30.0

    def __post_init__(self) -> None:
        check_schema_choice(self.value_format, self.subject, self.version)
        require_registry(self.value_format, self.settings)

    def pin(self, topics: Sequence[str]) -> ReaderSchema:
        """The schema the batch will be read with, as the registry has it now."""
        subject = value_subject(topics, self.subject)
        registry = SchemaRegistry(require_registry(self.value_format, self.settings), wait=self.wait)
        found = registry.version(subject, self.version) if self.version else registry.latest(subject)
        check_type(found.schema_type, self.value_format, f"{subject} version {found.version}")
        return ReaderSchema(self.value_format, found.subject or subject, int(found.version or 0), found.schema_id)


def fetch_reader_schema(registry: SchemaRegistry, pinned: ReaderSchema) -> tuple[str, list[str]]:
    """The pinned schema's text and its references' texts (by id: the id never changes meaning)."""
    found = registry.by_id(pinned.schema_id)
    check_type(found.schema_type, pinned.value_format, str(pinned))
    return found.text, registry.referenced(found.references)


def check_type(schema_type: str, value_format: str, what: str) -> None:
    if schema_type != SCHEMA_TYPES[value_format]:
        raise ConfigError(f"schema registry: {what} is a {schema_type} schema, not {value_format}")
