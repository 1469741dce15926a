"""A real change-data-capture source for tests: ``cdc_source`` (session), PostgreSQL
(:mod:`kafka_batch_provider.dev.postgres`) and a Kafka Connect worker with Debezium
(:mod:`kafka_batch_provider.dev.kafka_connect`) writing to the session's Apache Kafka.

Each test takes a database of its own (:meth:`CdcSource.new_database`) and a connector with its
own slot and topic prefix, so tests share the two processes and nothing else. Measured on 2
cores: Postgres ~1 s, the worker ~2-5 s to healthy, a connector's snapshot in Kafka ~1-2 s later.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafka_batch_provider.dev.kafka_connect import ConnectWorker, debezium_postgres_config
from kafka_batch_provider.dev.postgres import PostgresServer

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

    def capture(self, tables: list[str]) -> None:
        """Start Debezium on ``tables`` (``schema.table``): it snapshots them, then streams."""
        config = debezium_postgres_config(
            port=self.source.postgres.port, user=self.name, password=PASSWORD, dbname=self.name,
            topic_prefix=self.name, tables=tables, slot=self.name,
        )  # fmt: skip
        self.source.connect.add_connector(self.name, config)


class CdcSource:
    def __init__(self, folder: Path, bootstrap_servers: str) -> None:
        self.postgres = PostgresServer(folder=folder / "postgres")
        self.connect = ConnectWorker(folder=folder / "connect", bootstrap_servers=bootstrap_servers)

    def start(self) -> CdcSource:
        # Both start at once: on 2 cores the JVM's start and initdb overlap well.
        failures: list[BaseException] = []

        def start_connect() -> None:
            try:
                self.connect.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                failures.append(exc)

        worker = threading.Thread(target=start_connect)
        worker.start()
        try:
            self.postgres.start()
        finally:
            worker.join()
        if failures:
            raise failures[0]
        return self

    def new_database(self, prefix: str = "cdc") -> CdcDatabase:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        self.postgres.create_database(name, owner=name, password=PASSWORD)
        return CdcDatabase(self, name)

    def stop(self) -> None:
        self.connect.stop()  # first: a connected walsender holds Postgres's shutdown
        try:
            self.postgres.drop_inactive_slots()
        except Exception:  # noqa: BLE001 - the server may be gone already
            pass
        self.postgres.stop()


@pytest.fixture(scope="session")
def cdc_source(kafka_bootstrap_servers: str) -> Iterator[CdcSource]:
    folder = Path(tempfile.mkdtemp(prefix="kafka-batch-cdc-"))
    os.chmod(folder, 0o755)  # the postgres user must reach its folder
    source = CdcSource(folder, kafka_bootstrap_servers)
    try:
        yield source.start()
    finally:
        source.stop()
        shutil.rmtree(folder, ignore_errors=True)
