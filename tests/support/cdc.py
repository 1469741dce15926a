"""A real change-data-capture source for tests: ``cdc_source`` (session), PostgreSQL
(:mod:`kafka_batch_provider.dev.postgres`) and a Kafka Connect worker with Debezium
(:mod:`kafka_batch_provider.dev.kafka_connect`) writing to the session's Apache Kafka.

One pair for the whole pytest session, shared by its xdist workers
(:mod:`~kafka_batch_provider.testing.shared_servers`). Each test takes a database of its own
(:meth:`CdcSource.new_database`) and a connector with its own slot and topic prefix, so tests
share the two processes and nothing else. Measured on 2 cores: Postgres ~1 s, the worker ~2-5 s
to healthy, a connector's snapshot in Kafka ~1-2 s later.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_batch_provider.dev.kafka_connect import ConnectWorker, debezium_postgres_config
from kafka_batch_provider.dev.postgres import PostgresServer
from kafka_batch_provider.testing.pytest_plugin import shared_servers

PASSWORD = "cdc-test-secret"


@dataclass
class CdcDatabase:
    """One test's database, its role, and its connector's topic prefix."""

    source: CdcSource
    name: str

    def connect(self):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.source.postgres.port, dbname=self.name, user=self.name,
            password=PASSWORD, autocommit=True,
        )  # fmt: skip

    def topic(self, table: str, schema: str = "public") -> str:
        return f"{self.name}.{schema}.{table}"

    def capture(self, tables: list[str], **settings: str) -> None:
        """Start Debezium on ``tables`` (``schema.table``): it snapshots them, then streams.
        ``settings``: more of the connector's configuration (dots as underscores)."""
        config = debezium_postgres_config(
            port=self.source.postgres.port, user=self.name, password=PASSWORD, dbname=self.name,
            topic_prefix=self.name, tables=tables, slot=self.name,
        )  # fmt: skip
        config.update({name.replace("_", "."): value for name, value in settings.items()})
        self.source.connect.add_connector(self.name, config)


@dataclass
class CdcSource:
    """The Postgres server and the Kafka Connect worker (started, or reached by their ports)."""

    postgres: PostgresServer
    connect: ConnectWorker

    @classmethod
    def start_in(cls, folder: Path, bootstrap_servers: str) -> CdcSource:
        """Both started at once, detached (they outlive the worker that starts them): on 2 cores the
        JVM's start and initdb overlap well."""
        source = cls(
            PostgresServer(folder=folder / "postgres", detach=True),
            ConnectWorker(folder=folder / "connect", bootstrap_servers=bootstrap_servers, detach=True),
        )
        failures: list[BaseException] = []

        def start_connect() -> None:
            try:
                source.connect.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                failures.append(exc)

        worker = threading.Thread(target=start_connect)
        worker.start()
        try:
            source.postgres.start()
        except BaseException:
            worker.join()
            source.connect.stop()
            raise
        worker.join()
        if failures:
            source.postgres.stop()
            raise failures[0]
        return source

    def describe(self) -> dict[str, Any]:
        return {
            "postgres": {"port": self.postgres.port, "folder": str(self.postgres.folder)},
            "connect": {
                "port": self.connect.port,
                "folder": str(self.connect.folder),
                "bootstrap_servers": self.connect.bootstrap_servers,
            },
        }

    @classmethod
    def reach(cls, info: dict[str, Any]) -> CdcSource:
        """The running pair that :meth:`describe` described (another worker started it)."""
        postgres = PostgresServer(port=info["postgres"]["port"], folder=Path(info["postgres"]["folder"]))
        connect = ConnectWorker(
            port=info["connect"]["port"],
            folder=Path(info["connect"]["folder"]),
            bootstrap_servers=info["connect"]["bootstrap_servers"],
        )
        return cls(postgres, connect)

    def new_database(self, prefix: str = "cdc") -> CdcDatabase:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        self.postgres.create_database(name, owner=name, password=PASSWORD)
        return CdcDatabase(self, name)


@pytest.fixture(scope="session")
def cdc_source(kafka_bootstrap_servers: str) -> CdcSource:
    def start(_: Path) -> tuple[CdcSource, Path]:
        # Not under pytest's temporary folder: it is 0700, and the postgres user must reach its own.
        folder = Path(tempfile.mkdtemp(prefix="kafka-batch-cdc-"))
        os.chmod(folder, 0o755)
        return CdcSource.start_in(folder, kafka_bootstrap_servers), folder

    info = shared_servers().get(
        "cdc",
        start,
        # Kafka Connect first: a connected walsender holds Postgres's shutdown.
        lambda started: [started[0].connect, started[0].postgres],
        lambda started: started[0].describe(),
        leftovers=lambda started: [started[1]],
    )
    return CdcSource.reach(info)
