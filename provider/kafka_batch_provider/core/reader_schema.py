"""Which registry schema a batch is read with, as its plan records it. Pure, no I/O.

A topic written in the schema registry's wire format holds records of several schema ids
(producers evolve while it runs). A batch is written with one *reader schema*: the subject's
latest version when the batch is planned, or a version the user pins. The plan records it
(subject, version, id), so a retry of the batch decodes exactly as the first attempt, even
if a newer version was registered in between.

The subject is the value subject of Confluent's default naming (``<topic>-value``, the
TopicNameStrategy); batches of several topics name one subject that all of them follow.
Keys in a registry format (``--key-format``) get a reader schema of their own the same way
(``<topic>-key``), recorded beside the value's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

#: The value formats that are decoded with a schema from the registry, and its schema type for each.
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
REGISTRY_FORMATS = tuple(SCHEMA_TYPES)
#: The parts of a record that can be in a registry format.
PARTS = ("value", "key")
#: Where a plan keeps the reader schema of each part.
PLAN_KEYS = {"value": "reader_schema", "key": "key_reader_schema"}
PLAN_KEY = PLAN_KEYS["value"]


@dataclass(frozen=True)
class ReaderSchema:
    """A registered schema a batch is decoded with: ``value_format`` by ``subject`` ``version`` (id ``schema_id``)."""

    value_format: str
    subject: str
    version: int
    schema_id: int

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.value_format, "subject": self.subject, "version": self.version, "id": self.schema_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReaderSchema:
        """:raises ConfigError: a damaged record (a plan file edited by hand)."""
        try:
            found = cls(str(data["format"]), str(data["subject"]), int(data["version"]), int(data["id"]))
        except (KeyError, TypeError, ValueError):
            found = None
        if found is None or found.value_format not in REGISTRY_FORMATS:
            raise ConfigError(
                f"the plan's reader schema is damaged ({dict(data) if isinstance(data, Mapping) else data!r}): "
                "discard the plan (kafka-batch discard --plan ...)"
            )
        return found

    def __str__(self) -> str:
        return f"{self.subject} version {self.version} (schema id {self.schema_id})"


def value_subject(topics: Sequence[str], subject: str | None, part: str = "value") -> str:
    """The subject a batch's values (or keys) are read by: ``subject``, or ``<topic>-value``
    (``<topic>-key``) of its one topic."""
    if subject:
        return subject
    if len(set(topics)) != 1:
        raise ConfigError(
            f"{len(set(topics))} topics have no one {part} subject: name the subject all of them follow "
            f"({Setting(f'{part}_subject')})",
            setting=Setting(f"{part}_subject"),
        )
    return f"{topics[0]}-{part}"


def check_schema_choice(value_format: str, subject: str | None, version: int | None, part: str = "value") -> None:
    """A subject or a pinned version is only for a registry format, and a version is a positive number."""
    if value_format not in REGISTRY_FORMATS and (subject or version is not None):
        chosen = Setting(f"{part}_subject") if subject else Setting(f"{part}_schema_version")
        raise ConfigError(
            f"{chosen} is only used with a schema registry format ({Setting(f'{part}_format')}: "
            f"{', '.join(REGISTRY_FORMATS)})",
            setting=Setting(f"{part}_format"),
        )
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise ConfigError(
            f"{Setting(f'{part}_schema_version')} must be a registered version number (1, 2, ...), got {version!r}",
            setting=Setting(f"{part}_schema_version"),
        )


def planned_reader_schema(extra: Mapping[str, Any], part: str = "value") -> ReaderSchema | None:
    """The reader schema a plan recorded for its values (or keys), from its ``extra``, or ``None``."""
    found = extra.get(PLAN_KEYS[part])
    if found is None:
        return None
    return ReaderSchema.from_dict(found if isinstance(found, Mapping) else {})


def planned_formats(extra: Mapping[str, Any]) -> dict[str, str]:
    """The registry format of each part a plan decodes (``{}``: none)."""
    return {part: found.value_format for part in PARTS if (found := planned_reader_schema(extra, part))}


def check_plan_decodes_as(
    batch_id: str, extra: Mapping[str, Any], value_format: str, part: str = "value"
) -> ReaderSchema | None:
    """The plan's reader schema of ``part`` when the run decodes it with the registry; the plan and
    the run must agree, or the batch would be written another way than it was planned.

    :raises ConfigError: a registry format for a plan without a reader schema, or the other way round.
    """
    recorded = planned_reader_schema(extra, part)
    wanted = value_format if value_format in REGISTRY_FORMATS else None
    if (recorded.value_format if recorded else None) == wanted:
        return recorded
    as_planned = f"{recorded.value_format} with {recorded}" if recorded else "without a schema registry format"
    raise ConfigError(
        f"batch {batch_id}'s {part}s were planned {as_planned}, but this run asks for "
        f"{Setting(f'{part}_format', value_format)}: plan and write with the same {part} format "
        "(or discard the plan: kafka-batch discard)",
        setting=Setting(f"{part}_format"),
    )


def check_plan_formats(
    batch_id: str, extra: Mapping[str, Any], value_format: str, key_format: str = "bytes"
) -> tuple[ReaderSchema | None, ReaderSchema | None]:
    """:func:`check_plan_decodes_as` for the values and the keys: their reader schemas (or ``None``)."""
    return (
        check_plan_decodes_as(batch_id, extra, value_format, "value"),
        check_plan_decodes_as(batch_id, extra, key_format, "key"),
    )
