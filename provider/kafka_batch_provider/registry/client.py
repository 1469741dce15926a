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
        """Built once, outside the retries: a missing CA file or a bad key is a configuration error."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        # max.retries 0: this class retries, up to ``wait`` (the client's own backoff would outlast it).
        config = {"timeout": self.request_timeout, **self.settings.client_config(), "max.retries": 0}
        try:
            return SchemaRegistryClient(config)
        except (ValueError, TypeError, OSError) as exc:  # OSError: a TLS file missing or not PEM
            raise ConfigError(f"schema registry settings refused: {first_line(exc)}") from None

    def writer_schema(self, schema_id: int) -> tuple[str, str, list[tuple[str, str]]]:
        """What the decoders need of an id: its type, its text and its references (:meth:`referenced`)."""
        schema = self.by_id(schema_id)
        return schema.schema_type, schema.text, self.referenced(schema.references)

    @cached_property
    def serialized_client(self) -> Any:
        """A client of its own for the ``serialized`` form: confluent-kafka caches a schema by id (and
        a version by subject and number) whatever the format asked, so on the same client a
        serialized fetch after a text one would get the text back."""
        _ = self.client  # its errors are configuration errors, raised once
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient(
            {"timeout": self.request_timeout, **self.settings.client_config(), "max.retries": 0}
        )

    def protobuf_files(self, schema_id: int) -> bytes:
        """A Protobuf schema as protobuf's own ``FileDescriptorSet`` (serialized): the files it imports
        through references first, each before those that import it, the schema's file last (named
        ``schema-<id>.proto``). Asked in the registry's ``serialized`` form (base64 descriptors), as
        confluent-kafka's Protobuf deserializer asks, so no .proto text is parsed here."""
        import base64

        from google.protobuf import descriptor_pb2

        def file_of(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
            found = descriptor_pb2.FileDescriptorProto()
            try:
                found.ParseFromString(base64.standard_b64decode(text.encode("ascii")))
            except Exception as exc:  # not base64, not a descriptor: a registry that ignored ?format=serialized
                raise SchemaError(
                    f"schema id {schema_id}: the registry's serialized Protobuf schema is not one ({exc})"
                ) from None
            found.name = name
            return found

        files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

        def add_references(references: tuple[tuple[str, str, int], ...]) -> None:
            for name, subject, version in references:
                if name in files:
                    continue
                found = self.call(
                    f"version {version} of {subject!r}",
                    lambda subject=subject, version=version: self.serialized_client.get_version(
                        subject, version, fmt="serialized"
                    ),
                )
                add_references(refs(found.schema))
                files[name] = file_of(found.schema.schema_str, name)

        schema = self.call(
            f"schema id {schema_id}", lambda: self.serialized_client.get_schema(schema_id, fmt="serialized")
        )
        if (schema.schema_type or "AVRO") != "PROTOBUF":
            raise SchemaError(f"schema id {schema_id} is a {schema.schema_type or 'AVRO'} schema, not Protobuf")
        add_references(refs(schema))
        files[f"schema-{schema_id}.proto"] = file_of(schema.schema_str, f"schema-{schema_id}.proto")
        return descriptor_pb2.FileDescriptorSet(file=list(files.values())).SerializeToString()

    def referenced(
        self, references: tuple[tuple[str, str, int], ...], seen: frozenset[str] = frozenset()
    ) -> list[tuple[str, str]]:
        """The referenced schemas and theirs as ``(name, text)``, each before the schemas that import
        it: the name is the one the reference was registered with (JSON Schema's ``$ref`` uses it)."""
        found_all: list[tuple[str, str]] = []
        for name, subject, version in references:
            key = f"{subject}/{version}"
            if key in seen:
                continue
            found = self.version(subject, version)
            found_all += [*self.referenced(found.references, seen | {key}), (name, found.text)]
        return list(dict.fromkeys(found_all))

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
        """One registry request, retried while the registry is out of reach, at most ``wait`` seconds.

        Only the registry's own "not found" codes (40401-40403) are :class:`SchemaError`; a 404
        without one (a proxy, a wrong path) or another 4xx is a configuration error of the batch.
        """
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        _ = self.client  # built before the retries: its errors are configuration errors
        url = self.settings.shown_url
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return fn()
            except SchemaRegistryError as exc:
                status, code = exc.http_status_code, exc.error_code
                if status in (401, 403):
                    raise RegistryRefusedError(
                        f"schema registry at {url} refused {what}: HTTP {status} "
                        f"({'wrong or missing credentials' if status == 401 else 'not allowed'}); check the "
                        "credentials in its settings file or connection"
                    ) from None
                if code in NOT_FOUND:
                    raise SchemaError(f"schema registry at {url}: {NOT_FOUND[code]} not found ({what})") from None
                if not (status >= 500 or status in (408, 429)):
                    raise ConfigError(
                        f"schema registry at {url} answered {what} with HTTP {status} "
                        f"({first_line(exc)}); is the URL the registry's?"
                    ) from None
                problem = f"HTTP {status}"
            except Exception as exc:  # connections refused, timeouts, TLS (httpx's TransportError)
                if is_tls_failure(exc):
                    raise ConfigError(
                        f"schema registry at {url}: the TLS handshake failed ({first_line(exc)}); check "
                        "ssl.ca.location and the certificate settings"
                    ) from None
                if not (is_transport_error(exc) or is_token_error(exc) or isinstance(exc, OSError)):
                    raise
                problem = type(exc).__name__
            if time.monotonic() + RETRY_SECONDS > deadline:
                raise RegistryUnavailableError(
                    f"schema registry at {url} did not answer {what} within {self.wait:g}s "
                    f"({problem}); is it running and reachable?"
                )
            time.sleep(RETRY_SECONDS)


def is_transport_error(exc: BaseException) -> bool:
    from confluent_kafka.schema_registry.common._httpx_compat import httpx

    return isinstance(exc, httpx.TransportError)


def is_tls_failure(exc: BaseException) -> bool:
    import ssl

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_token_error(exc: BaseException) -> bool:
    """An OAuth token endpoint that did not answer (confluent-kafka's OAuthTokenError)."""
    return type(exc).__name__ == "OAuthTokenError"


def refs(schema: Any) -> tuple[tuple[str, str, int], ...]:
    return tuple((r.name, r.subject, int(r.version)) for r in (schema.references or []))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
