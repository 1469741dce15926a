"""The schemas a batch needs, fetched through confluent-kafka's ``SchemaRegistryClient`` (so the
product works against Confluent Schema Registry, Karapace, Redpanda's and Apicurio's compatible
API alike), with one-line errors:

* unreachable, or a 5xx / 429 answer: :class:`~kafka_batch_provider.errors.RegistryUnavailableError`
  (transient) once ``wait`` seconds have passed in retries;
* 401 / 403: :class:`~kafka_batch_provider.errors.RegistryRefusedError` at once (no retry helps);
* an unknown subject, version or schema id: :class:`~kafka_batch_provider.errors.SchemaError`.

Messages name the registry by its URL; credentials never appear in them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from kafka_batch_provider.errors import ConfigError, RegistryRefusedError, RegistryUnavailableError, SchemaError
from kafka_batch_provider.registry.settings import RegistrySettings

T = TypeVar("T")

#: Seconds between attempts while the registry is unreachable.
RETRY_SECONDS = 1.0
#: The registry's "not found" codes (subject, version, schema).
NOT_FOUND = {40401: "subject", 40402: "version", 40403: "schema"}


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it.

    :param schema_type: ``AVRO``, ``PROTOBUF`` or ``JSON``.
    :param references: ``[(name, subject, version)]`` of the schemas it imports.
    """

    schema_id: int
    schema_type: str
    text: str
    subject: str | None = None
    version: int | None = None
    references: tuple[tuple[str, str, int], ...] = ()


class SchemaRegistry:
    """:param wait: seconds an unreachable registry is waited for before the call fails."""

    def __init__(self, settings: RegistrySettings, wait: float = 30.0, request_timeout: float = 10.0) -> None:
        self.settings = settings
        self.wait = wait
        self.request_timeout = request_timeout

    @cached_property
    def client(self) -> Any:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        config = {"timeout": self.request_timeout, "max.retries": 0, **self.settings.client_config()}
        try:
            return SchemaRegistryClient(config)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"schema registry settings refused: {first_line(exc)}") from None

    def latest(self, subject: str) -> RegisteredSchema:
        return self.registered(
            self.call(f"the latest version of {subject!r}", lambda: self.client.get_latest_version(subject))
        )

    def version(self, subject: str, version: int) -> RegisteredSchema:
        return self.registered(
            self.call(f"version {version} of {subject!r}", lambda: self.client.get_version(subject, version))
        )

    def by_id(self, schema_id: int) -> RegisteredSchema:
        schema = self.call(f"schema id {schema_id}", lambda: self.client.get_schema(schema_id))
        return RegisteredSchema(schema_id, schema.schema_type or "AVRO", schema.schema_str, references=refs(schema))

    def registered(self, found: Any) -> RegisteredSchema:
        schema = found.schema
        return RegisteredSchema(
            int(found.schema_id),
            schema.schema_type or "AVRO",
            schema.schema_str,
            found.subject,
            int(found.version),
            refs(schema),
        )

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """One registry request, retried while the registry is out of reach, at most ``wait`` seconds."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        deadline = time.monotonic() + self.wait
        while True:
            try:
                return fn()
            except SchemaRegistryError as exc:
                status, code = exc.http_status_code, exc.error_code
                if status in (401, 403):
                    raise RegistryRefusedError(
                        f"schema registry at {self.settings.url} refused {what}: HTTP {status} "
                        f"({'wrong or missing credentials' if status == 401 else 'not allowed'}); check the "
                        "credentials in its settings file or connection"
                    ) from None
                if code in NOT_FOUND or status == 404:
                    raise SchemaError(
                        f"schema registry at {self.settings.url} has no {what} "
                        f"({NOT_FOUND.get(code, 'not found')} not found)"
                    ) from None
                if not (status >= 500 or status == 429):
                    raise SchemaError(
                        f"schema registry at {self.settings.url} refused {what}: {first_line(exc)}"
                    ) from None
                problem = f"HTTP {status}"
            except (OSError, ConnectionError) as exc:
                problem = type(exc).__name__
            except Exception as exc:  # httpx's transport errors (connect, read timeouts)
                if not is_transport_error(exc):
                    raise
                problem = type(exc).__name__
            if time.monotonic() + RETRY_SECONDS > deadline:
                raise RegistryUnavailableError(
                    f"schema registry at {self.settings.url} did not answer {what} within {self.wait:g}s "
                    f"({problem}); is it running and reachable?"
                )
            time.sleep(RETRY_SECONDS)


def is_transport_error(exc: BaseException) -> bool:
    from confluent_kafka.schema_registry.common._httpx_compat import httpx

    return isinstance(exc, httpx.TransportError)


def refs(schema: Any) -> tuple[tuple[str, str, int], ...]:
    return tuple((r.name, r.subject, int(r.version)) for r in (schema.references or []))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
