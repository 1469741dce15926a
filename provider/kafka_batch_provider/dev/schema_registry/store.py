"""The state of the embedded schema registry: subjects, versions, schema ids, compatibility and mode.

In memory, behind one lock. It keeps the real registry's rules: one id per distinct schema
(registering it again, under any subject, gives the same id), versions numbered per subject,
a soft delete before a permanent one, a compatibility check before a new version, and the
error codes of Confluent's REST API (:class:`RegistryError`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.dev.schema_registry.compatibility import DEFAULT_LEVEL, LEVELS, is_transitive, problems
from kafka_batch_provider.dev.schema_registry.formats import InvalidSchema, ParsedSchema, parse_schema

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")


class RegistryError(Exception):
    """An answer other than success: the HTTP status and Confluent's ``error_code``."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: Any) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(what: str = "Schema") -> RegistryError:
    return RegistryError(404, 40403, f"{what} not found")


def invalid_schema(reason: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {reason}")


@dataclass
class StoredSchema:
    """One schema id: the text first registered for it, its type and references."""

    id: int
    guid: str
    schema_type: str
    text: str
    references: list[dict[str, Any]]
    parsed: ParsedSchema

    def body(self, fmt: str | None = None) -> dict[str, Any]:
        """Confluent's JSON: ``schemaType`` only when not AVRO, ``references`` only when any."""
        text = self.parsed.serialized() if fmt == "serialized" and self.schema_type == "PROTOBUF" else self.text
        body: dict[str, Any] = {"schema": text}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = self.references
        return body


@dataclass
class Version:
    subject: str
    version: int
    schema: StoredSchema
    deleted: bool = False


@dataclass
class Store:
    """The registry's state; every public method takes the lock."""

    compatibility: str = DEFAULT_LEVEL
    mode: str = "READWRITE"
    subjects: dict[str, list[Version]] = field(default_factory=dict)
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    subject_compatibility: dict[str, str] = field(default_factory=dict)
    subject_mode: dict[str, str] = field(default_factory=dict)
    last_id: int = 0  # ids are never reused, even after a permanent delete
    lock: threading.RLock = field(default_factory=threading.RLock)

    # -- reading ----------------------------------------------------------------------------

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first; 40401 when it has none (live ones unless ``deleted``)."""
        with self.lock:
            found = [v for v in self.subjects.get(subject, []) if deleted or not v.deleted]
            if not found:
                raise subject_not_found(subject)
            return found

    def version(self, subject: str, version: str | int, deleted: bool = False) -> Version:
        number = parse_version(version)
        with self.lock:
            if number == -1:  # latest: the newest live version, whatever ``deleted`` says (as Confluent)
                live = self.versions(subject)
                return live[-1]
            versions = self.versions(subject, deleted)
            for found in versions:
                if found.version == number:
                    return found
            raise version_not_found(subject, number)

    def schema(self, schema_id: int) -> StoredSchema:
        with self.lock:
            if schema_id not in self.schemas:
                raise schema_not_found()
            return self.schemas[schema_id]

    def schema_by_guid(self, guid: str) -> StoredSchema:
        with self.lock:
            for stored in self.schemas.values():
                if stored.guid == guid:
                    return stored
            raise schema_not_found()

    def uses(self, schema_id: int, deleted: bool = False) -> list[Version]:
        """The subject versions of schema ``schema_id``."""
        with self.lock:
            self.schema(schema_id)
            return [
                v
                for vs in self.subjects.values()
                for v in vs
                if v.schema.id == schema_id and (deleted or not v.deleted)
            ]

    def subject_names(self, deleted: bool = False, deleted_only: bool = False) -> list[str]:
        with self.lock:
            names = []
            for subject, versions in sorted(self.subjects.items()):
                live = any(not v.deleted for v in versions)
                if (deleted_only and not live) or (not deleted_only and (live or deleted)):
                    names.append(subject)
            return names

    def referenced_by(self, subject: str, version: str | int) -> list[int]:
        with self.lock:
            target = self.version(subject, version)
            return sorted(
                {
                    v.schema.id
                    for vs in self.subjects.values()
                    for v in vs
                    if not v.deleted
                    and any(r["subject"] == subject and r["version"] == target.version for r in v.schema.references)
                }
            )

    def lookup(self, subject: str, body: dict[str, Any], deleted: bool = False) -> Version:
        """The subject's version holding the schema in ``body``: 40401 no subject, 40403 no such schema."""
        with self.lock:
            versions = self.versions(subject, deleted)
            parsed = self.parse(body)
            for version in reversed(versions):
                if self.same(version.schema, parsed, body):
                    return version
            raise schema_not_found()

    # -- writing ----------------------------------------------------------------------------

    def register(self, subject: str, body: dict[str, Any]) -> Version:
        """The version holding the schema in ``body``: the existing one, else a new one if compatible."""
        with self.lock:
            self.check_writable(subject)
            parsed = self.parse(body)
            live = [v for v in self.subjects.get(subject, []) if not v.deleted]
            for version in live:
                if self.same(version.schema, parsed, body):
                    return version
            level = self.compatibility_of(subject)
            found = self.incompatibilities(level, parsed, live)
            if found:
                details = "; ".join(found)
                raise RegistryError(
                    409,
                    409,
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f'"{subject}", details: [{details}]',
                )
            stored = self.stored(parsed, body)
            versions = self.subjects.setdefault(subject, [])
            version = Version(subject, max((v.version for v in versions), default=0) + 1, stored)
            versions.append(version)
            return version

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        with self.lock:
            self.check_writable(subject)
            versions = self.subjects.get(subject, [])
            if not versions:
                raise subject_not_found(subject)
            live = [v for v in versions if not v.deleted]
            if permanent and live:
                raise RegistryError(
                    404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
                )
            if not permanent and not live:
                raise RegistryError(
                    404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
                )
            for version in versions:
                self.check_not_referenced(version)
            if permanent:
                del self.subjects[subject]
                self.subject_compatibility.pop(subject, None)
                self.subject_mode.pop(subject, None)
                self.forget_unused_schemas()
                return [v.version for v in versions]
            for version in live:
                version.deleted = True
            return [v.version for v in live]

    def delete_version(self, subject: str, version: str | int, permanent: bool = False) -> int:
        with self.lock:
            self.check_writable(subject)
            target = self.version(subject, version, deleted=True)
            if permanent and not target.deleted:
                raise RegistryError(
                    404,
                    40407,
                    f"Subject '{subject}' Version {target.version} was not deleted first before being "
                    "permanently deleted",
                )
            if not permanent and target.deleted:
                raise RegistryError(
                    404,
                    40406,
                    f"Subject '{subject}' Version {target.version} was soft deleted.Set permanent=true to "
                    "delete permanently",
                )
            self.check_not_referenced(target)
            if permanent:
                self.subjects[subject].remove(target)
                if not self.subjects[subject]:
                    del self.subjects[subject]
                self.forget_unused_schemas()
            else:
                target.deleted = True
            return target.version

    # -- compatibility and mode -------------------------------------------------------------

    def compatibility_of(self, subject: str | None, default_to_global: bool = True) -> str:
        with self.lock:
            if subject is None:
                return self.compatibility
            if subject in self.subject_compatibility:
                return self.subject_compatibility[subject]
            if default_to_global:
                return self.compatibility
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    def set_compatibility(self, subject: str | None, level: Any) -> str:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RegistryError(
                422,
                42203,
                "Invalid compatibility level. Valid values are none, backward, forward, full, "
                "backward_transitive, forward_transitive, and full_transitive",
            )
        with self.lock:
            if subject is None:
                self.compatibility = level.upper()
            else:
                self.subject_compatibility[subject] = level.upper()
            return level.upper()

    def delete_compatibility(self, subject: str | None) -> str:
        with self.lock:
            if subject is None:
                previous, self.compatibility = self.compatibility, DEFAULT_LEVEL
                return previous
            if subject not in self.subjects:
                raise subject_not_found(subject)
            return self.subject_compatibility.pop(subject, self.compatibility)

    def mode_of(self, subject: str | None, default_to_global: bool = True) -> str:
        with self.lock:
            if subject is not None and subject in self.subject_mode:
                return self.subject_mode[subject]
            if subject is None or default_to_global:
                return self.mode
            raise RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")

    def set_mode(self, subject: str | None, mode: Any) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(422, 42204, f"Invalid mode. Valid values are {', '.join(MODES)}")
        with self.lock:
            if subject is None:
                self.mode = mode.upper()
            else:
                self.subject_mode[subject] = mode.upper()
            return mode.upper()

    def test_compatibility(self, subject: str, body: dict[str, Any], version: str | int | None) -> list[str]:
        """Why the schema in ``body`` may not follow ``version`` (``None``: the versions its level checks)."""
        with self.lock:
            parsed = self.parse(body)
            level = self.compatibility_of(subject)
            live = [v for v in self.subjects.get(subject, []) if not v.deleted]
            if version is None:
                return self.incompatibilities(level, parsed, live)
            if parse_version(version) == -1:  # a subject with no version yet takes any first schema
                return self.incompatibilities(level, parsed, live[-1:])
            found = [v for v in live if v.version == parse_version(version)]
            if not found:
                raise version_not_found(subject, parse_version(version))
            return self.incompatibilities(level, parsed, found)

    # -- helpers (called with the lock held) ------------------------------------------------

    def check_writable(self, subject: str) -> None:
        if self.mode_of(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")

    def check_not_referenced(self, version: Version) -> None:
        for versions in self.subjects.values():
            for other in versions:
                for reference in other.schema.references:
                    if (reference["subject"], reference["version"]) == (version.subject, version.version):
                        raise RegistryError(
                            422,
                            42206,
                            f"One or more references exist to the schema "
                            f"{{subject={version.subject},version={version.version}}}",
                        )

    def parse(self, body: dict[str, Any]) -> ParsedSchema:
        schema_type = body.get("schemaType") or "AVRO"
        references = []
        for reference in body.get("references") or []:
            try:
                target = self.version(reference["subject"], reference["version"])
            except (KeyError, TypeError):
                raise invalid_schema(f"a reference needs name, subject and version, found {reference}") from None
            except RegistryError:
                raise invalid_schema(
                    f"reference {reference.get('name')!r} to subject {reference['subject']!r} version "
                    f"{reference['version']} not found"
                ) from None
            references.append((reference.get("name") or reference["subject"], target.schema.parsed))
        try:
            return parse_schema(schema_type, body.get("schema"), references)
        except InvalidSchema as exc:
            raise invalid_schema(str(exc)) from None

    @staticmethod
    def references_of(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"name": r.get("name"), "subject": r["subject"], "version": r["version"]}
            for r in body.get("references") or []
        ]

    def same(self, stored: StoredSchema, parsed: ParsedSchema, body: dict[str, Any]) -> bool:
        return (stored.parsed.schema_type, stored.parsed.canonical, stored.references) == (
            parsed.schema_type,
            parsed.canonical,
            self.references_of(body),
        )

    def stored(self, parsed: ParsedSchema, body: dict[str, Any]) -> StoredSchema:
        """The existing id of this schema, under any subject, or a new one."""
        for stored in self.schemas.values():
            if self.same(stored, parsed, body):
                return stored
        self.last_id += 1
        stored = StoredSchema(
            self.last_id, str(uuid.uuid4()), parsed.schema_type, body["schema"], self.references_of(body), parsed
        )
        self.schemas[stored.id] = stored
        return stored

    def incompatibilities(self, level: str, parsed: ParsedSchema, live: Sequence[Version]) -> list[str]:
        checked = live if is_transitive(level) else live[-1:]
        found = []
        for version in reversed(checked):
            reasons = problems(level, parsed, version.schema.parsed)
            if reasons:
                found += [*reasons, f"{{oldSchemaVersion: {version.version}}}"]
        return [*found, f"{{compatibility: '{level}'}}"] if found else []

    def forget_unused_schemas(self) -> None:
        used = {v.schema.id for vs in self.subjects.values() for v in vs}
        for schema_id in [i for i in self.schemas if i not in used]:
            del self.schemas[schema_id]


def parse_version(version: str | int) -> int:
    """A version number, ``-1`` for ``latest``; 42202 for anything else."""
    if isinstance(version, str) and version.lower() == "latest":
        return -1
    try:
        number = int(version)
    except (TypeError, ValueError):
        number = 0
    if number == -1 or 0 < number <= 2**31 - 1:
        return number
    raise RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. Allowed values are between "
        '[1, 2^31-1] and the string "latest"',
    )
