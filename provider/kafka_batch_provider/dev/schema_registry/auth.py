"""Who may call the embedded schema registry: credentials from the environment or a file, never argv.

A JSON list of ``{"user": ..., "password": ...}`` (HTTP basic auth) and ``{"token": ...}`` (a
bearer token), each optionally ``"read_only": true``.
"""

from __future__ import annotations

import base64
import hmac
import json
from dataclasses import dataclass, field

from kafka_batch_provider.errors import ConfigError

AUTH_ENV = "KAFKA_BATCH_SCHEMA_REGISTRY_AUTH"


@dataclass(frozen=True)
class Credential:
    """Who may call: a user and password (basic auth) or a bearer token."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    read_only: bool = False

    def matches(self, authorization: str) -> bool:
        scheme, _, value = authorization.partition(" ")
        if self.token is not None and scheme.lower() == "bearer":
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if self.user is not None and scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return user == self.user and hmac.compare_digest(password.encode(), (self.password or "").encode())
        return False


def parse_credentials(text: str) -> tuple[Credential, ...]:
    """Credentials from their JSON (see the module's doc); one line on a wrong shape, never the secret."""
    try:
        entries = json.loads(text)
        if not isinstance(entries, list):
            raise ValueError
        credentials = tuple(Credential(**entry) for entry in entries)
    except (ValueError, TypeError):
        raise ConfigError(
            'schema registry credentials must be a JSON list of {"user", "password"} or {"token"} objects, '
            'each with an optional "read_only"'
        ) from None
    for credential in credentials:
        basic = credential.user is not None or credential.password is not None
        token = credential.token is not None
        texts = [v for v in (credential.user, credential.password, credential.token) if v is not None]
        if (
            basic == token
            or (basic and (credential.user is None or credential.password is None))
            or not all(isinstance(v, str) for v in texts)
            or not isinstance(credential.read_only, bool)
        ):
            raise ConfigError(
                "each schema registry credential needs either a user and a password, or a token (strings), "
                'and "read_only" is true or false'
            )
    return credentials
