"""An embedded, Confluent-compatible schema registry for the demo and the tests.

It runs :mod:`kafka_batch_provider.dev.schema_registry.server` as a plain process on 127.0.0.1
(memory storage: stopping it drops every schema). It serves the REST endpoints confluent-kafka's
``SchemaRegistryClient`` and its Avro, Protobuf and JSON serializers call, with the real
registry's ids, versions, soft and permanent deletes, compatibility levels and error codes.
No JVM registry installs here; any real one (Confluent, Karapace, Redpanda) can replace it: set
``SCHEMA_REGISTRY_URL``.

Credentials (basic auth users, bearer tokens, each optionally read-only) reach the process in
its environment, never on its command line; ``kafka-batch schema-registry start`` takes them
from ``$KAFKA_BATCH_SCHEMA_REGISTRY_AUTH`` (see ``auth``).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import ClassVar

from kafka_batch_provider.dev.local_servers import HOST, Detached, LocalServer, runs
from kafka_batch_provider.dev.schema_registry.auth import AUTH_ENV, Credential, parse_credentials
from kafka_batch_provider.errors import KafkaBatchError

DEFAULT_PORT = 8081  # Confluent Schema Registry's
SERVER_MODULE = "kafka_batch_provider.dev.schema_registry.server"


class RegistryStartError(KafkaBatchError):
    """The embedded schema registry did not start (one line, naming its log)."""


def registry_ready(url: str) -> bool:
    """True once ``GET /`` answers as the registry does: 200, or 401 when it wants credentials."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never via a proxy
    try:
        with opener.open(f"{url}/", timeout=1.0) as response:
            return response.status == 200 and json.loads(response.read()) == {}
    except urllib.error.HTTPError as exc:
        return exc.code == 401 and "error_code" in json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return False


@dataclass
class EmbeddedSchemaRegistry(LocalServer):
    """A schema registry process on 127.0.0.1 (memory storage).

    Use as a context manager, or ``start()`` / ``stop()``. With ``detach=True`` the process
    outlives this Python process (the ``kafka-batch schema-registry start`` command).

    :param port: port to listen on; ``0`` picks a free one.
    :param log_path: file for the server's output (default: discarded).
    :param credentials: who may call; none: anyone.
    """

    credentials: tuple[Credential, ...] = ()

    label: ClassVar[str] = "embedded schema registry"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def auth(self) -> str:
        """The kinds of credentials it asks for, for messages: ``basic``, ``bearer`` or ``none``."""
        return ", ".join(sorted({"bearer" if c.token else "basic" for c in self.credentials})) or "none"

    def command(self) -> list[str]:
        return [sys.executable, "-m", SERVER_MODULE, "--port", str(self.port)]

    def environment(self) -> dict[str, str]:
        """This process's environment, with exactly this server's credentials (secrets stay out of argv)."""
        env = {k: v for k, v in os.environ.items() if k != AUTH_ENV}
        if self.credentials:
            env[AUTH_ENV] = json.dumps(
                [{k: v for k, v in asdict(c).items() if v is not None} for c in self.credentials]
            )
        return env

    def wait_until_ready(self, timeout: float) -> None:
        """Ready means it answers the registry's API, not just an open port."""
        self.poll_until(lambda: registry_ready(self.url), timeout, RegistryStartError, "did not answer")


def is_schema_registry(pid: int) -> bool:
    """Guard against a recycled pid: only ever signal a process that runs this server."""
    return runs(pid, SERVER_MODULE)


# -- the detached server of the command line ------------------------------------------------

DETACHED = Detached("schema-registry", EmbeddedSchemaRegistry.label, marker=SERVER_MODULE, address="url")


def start_detached(port: int = DEFAULT_PORT, timeout: float = 30.0) -> dict:
    """Start a registry that keeps running after this process exits; remember it in a state file.

    Credentials come from ``$KAFKA_BATCH_SCHEMA_REGISTRY_AUTH``, checked before anything starts.
    """
    text = os.environ.get(AUTH_ENV, "")
    credentials = parse_credentials(text) if text.strip() else ()
    return DETACHED.start(
        lambda log: EmbeddedSchemaRegistry(port=port, log_path=log, detach=True, credentials=credentials).start(
            timeout
        ),
        lambda server: {"url": server.url, "auth": server.auth, "env": {"SCHEMA_REGISTRY_URL": server.url}},
    )


def status() -> dict:
    return DETACHED.status()


def stop_detached(timeout: float = 10.0) -> dict:
    return DETACHED.stop(timeout)
