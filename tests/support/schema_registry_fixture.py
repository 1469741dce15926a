"""The ``schema_registry`` fixture: the URL of a Confluent-compatible schema registry for the session.

``$KAFKA_BATCH_TEST_SCHEMA_REGISTRY_URL`` when set (a real registry), else the embedded one
(:class:`~kafka_batch_provider.dev.schema_registry.EmbeddedSchemaRegistry`) on a free 127.0.0.1
port, without credentials, logging into the session's temporary folder and stopped at its end.
A conftest.py makes it available with ``from tests.support.schema_registry_fixture import
schema_registry``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry

EXTERNAL_URL = "KAFKA_BATCH_TEST_SCHEMA_REGISTRY_URL"


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get(EXTERNAL_URL)
    if external:
        yield external.rstrip("/")
        return
    log_path = Path(tmp_path_factory.mktemp("schema-registry")) / "schema-registry.log"
    with EmbeddedSchemaRegistry(log_path=log_path) as server:
        yield server.url
