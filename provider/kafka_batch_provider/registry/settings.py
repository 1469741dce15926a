"""Where the schema registry is and how to log in to it, from flags, a settings file or an
Airflow connection; the credentials never leave this value except into the registry client.

The settings are confluent-kafka's ``SchemaRegistryClient`` configuration: ``url`` plus
``basic.auth.user.info`` (``user:password``), ``bearer.auth.*`` (a static token or OAuth),
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location`` and the client's own
``timeout`` and ``max.retries``. The URL is shown in messages; nothing else is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.settings_file import read_settings_file


@dataclass(frozen=True)
class RegistrySettings:
    """:param url: the registry's base URL (``http://host:8081``), no credentials in it.
    :param config: the rest of the client's configuration (credentials, TLS files)."""

    url: str
    config: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_url(self.url)
        if "url" in self.config:
            raise ConfigError(
                f"the schema registry's URL belongs in {Setting('schema_registry_url')} (a connection: its host), "
                "not among the client's settings",
                setting=Setting("schema_registry_url"),
            )

    def client_config(self) -> dict[str, Any]:
        """The configuration of confluent-kafka's ``SchemaRegistryClient`` (with the secrets)."""
        return {**self.config, "url": self.url}

    @classmethod
    def from_client_config(cls, config: Mapping[str, Any]) -> RegistrySettings:
        """The settings back from :meth:`client_config` (as they travel to the Spark tasks)."""
        rest = {k: v for k, v in config.items() if k != "url"}
        return cls(str(config.get("url") or ""), rest)

    @property
    def shown_url(self) -> str:
        """The URL as messages show it (:func:`check_url` made sure it carries no credentials)."""
        return self.url


def check_url(url: str) -> None:
    """Every URL of the (comma-separated) list is http(s) and carries no credentials. The
    credentials are looked for first, anywhere in the text (a URL with a slash too few or too many
    has them outside its authority), so no refusal repeats them."""
    for one in url.split(","):
        if "@" in one:
            raise ConfigError(
                "the schema registry URL carries credentials, which would show in logs and the process table: "
                "put them in the settings file as basic.auth.user.info (--schema-registry-config-file)",
                setting=Setting("schema_registry_url"),
            )
        try:
            parts = urlsplit(one.strip())
            parts.port  # noqa: B018 - parses the port: a bad one raises here, not in the client
        except ValueError:
            raise ConfigError(
                f"schema registry URL {one.strip()!r} is not a valid URL ({Setting('schema_registry_url')})",
                setting=Setting("schema_registry_url"),
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"schema registry URL {one.strip()!r} is not an http:// or https:// URL "
                f"({Setting('schema_registry_url')})",
                setting=Setting("schema_registry_url"),
            )


def settings_from(
    url: str | None, config_file: str | None = None, extra: Mapping[str, Any] | None = None
) -> RegistrySettings | None:
    """Settings from a URL and an optional settings file; ``None`` without a URL."""
    config = {**(read_settings_file(config_file, "schema registry settings") if config_file else {}), **(extra or {})}
    if not url:
        if config_file:
            raise ConfigError(
                f"{Setting('schema_registry_url')} is required with a schema registry settings file",
                setting=Setting("schema_registry_url"),
            )
        return None
    return RegistrySettings(str(url), config)


def settings_from_connection(conn: Any) -> RegistrySettings:
    """Settings from an Airflow connection of type ``schema_registry``: host (with its scheme and
    path, if any) and port are the URL, login and password the basic-auth credentials, extra
    any other client setting."""
    host = str(conn.host or "")
    if "://" not in host:
        host = f"{(conn.schema or '').strip() or 'http'}://{host}"
    parts = urlsplit(host)
    netloc = parts.netloc if parts.port or not conn.port else f"{parts.netloc}:{conn.port}"
    url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    extra = dict(conn.extra_dejson or {})
    if conn.login:
        extra["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
    return RegistrySettings(url, extra)
