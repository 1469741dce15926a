"""pytest fixtures for a real Kafka-protocol broker.

Enable in a ``conftest.py`` with ``pytest_plugins = ["kafka_batch_provider.testing.pytest_plugin"]``.

* ``kafka_bootstrap_servers`` (session): ``$KAFKA_BOOTSTRAP_SERVERS`` when set, else an
  embedded tansu broker started on a free 127.0.0.1 port for the session.
* ``kafka_config``: a librdkafka config dict for that broker.
* ``new_topic``: a factory creating uniquely named topics, ``new_topic(partitions=3)``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafka_batch_provider.broker.embedded import EmbeddedBroker
from kafka_batch_provider.testing.producers import create_topics


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    log_path = Path(tmp_path_factory.mktemp("broker")) / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap_servers


@pytest.fixture
def kafka_config(kafka_bootstrap_servers: str) -> dict[str, str]:
    return {"bootstrap.servers": kafka_bootstrap_servers}


@pytest.fixture
def new_topic(kafka_config: dict[str, str], request: pytest.FixtureRequest) -> Callable[..., str]:
    def make(partitions: int = 1, prefix: str | None = None) -> str:
        base = prefix or request.node.name.split("[")[0].removeprefix("test_")[:40]
        name = f"{base}-{uuid.uuid4().hex[:8]}"
        create_topics(kafka_config, {name: partitions})
        return name

    return make
