"""The ``schema_registry`` fixture: the URL of a Confluent-compatible schema registry for the session.

``$KAFKA_BATCH_TEST_SCHEMA_REGISTRY_URL`` when set (a real registry), else the embedded one
(:class:`~kafka_batch_provider.dev.schema_registry.EmbeddedSchemaRegistry`) on a free 127.0.0.1
port, without credentials, one for the whole pytest session (its xdist workers share it), logging
into the session's temporary folder and stopped at its end.
A conftest.py makes it available with ``from tests.support.schema_registry_fixture import
schema_registry``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
from kafka_batch_provider.testing.pytest_plugin import shared_servers

EXTERNAL_URL = "KAFKA_BATCH_TEST_SCHEMA_REGISTRY_URL"


@pytest.fixture(scope="session")
def schema_registry() -> str:
    external = os.environ.get(EXTERNAL_URL)
    if external:
        return external.rstrip("/")

    def start(folder: Path) -> EmbeddedSchemaRegistry:
        folder.mkdir(parents=True, exist_ok=True)
        return EmbeddedSchemaRegistry(log_path=folder / "schema-registry.log", detach=True).start()

    info = shared_servers().get("schema-registry", start, lambda server: [server], lambda server: {"url": server.url})
    return info["url"]
