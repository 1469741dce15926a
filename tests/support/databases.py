"""Databases for the database outputs' tests: ``postgres_database`` (a fresh database and role per
test) on the session's PostgreSQL, ``mariadb_database`` (a fresh database and user) on the session's
MariaDB; one server each shared by the xdist workers
(:mod:`~kafka_batch_provider.testing.shared_servers`), started as a plain process (~1-2 s)."""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafka_batch_provider.dev.mariadb import MariadbServer
from kafka_batch_provider.dev.postgres import PostgresServer
from kafka_batch_provider.testing.pytest_plugin import shared_servers

PASSWORD = "db-output-secret"


class OutputDatabase:
    """What a test asks of its database, on either server."""

    def rows(self, statement: str, params: tuple = ()) -> list[tuple]:
        raise NotImplementedError

    def has_table(self, name: str) -> bool:
        """Whether ``SCHEMA.TABLE`` exists."""
        schema, table = name.split(".")
        return bool(self.rows("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                              (schema, table)))  # fmt: skip


@dataclass(frozen=True)
class PostgresDatabase(OutputDatabase):
    """One test's database, owned by a role of the same name."""

    port: int
    name: str

    @property
    def url(self) -> str:
        """The connection URL, password included (a secret: tests check it never shows)."""
        return f"postgresql://{self.name}:{PASSWORD}@127.0.0.1:{self.port}/{self.name}"

    #: the output's format and where its test table lives
    format = "postgres"

    @property
    def table(self) -> str:
        return "public.orders"

    def connect(self):
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def quote(self, name: str) -> str:
        return f'"{name}"'

    def rows(self, statement: str, params: tuple = ()) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(statement, params).fetchall()


def session_server(kind: type, name: str):
    """The session's server of ``kind`` (PostgresServer, MariadbServer), started by the first worker
    that asks; every worker reaches it (it is not started again)."""

    def start(_: Path) -> tuple:
        # Not under pytest's temporary folder: it is 0700, and the server's OS user must reach its own.
        folder = Path(tempfile.mkdtemp(prefix=f"kafka-batch-{name}-"))
        os.chmod(folder, 0o755)
        return kind(folder=folder / name, detach=True).start(), folder

    info = shared_servers().get(
        name,
        start,
        lambda started: [started[0]],
        lambda started: {"port": started[0].port, "folder": str(started[0].folder)},
        leftovers=lambda started: [started[1]],
    )
    return kind(port=int(info["port"]), folder=Path(info["folder"]))  # (reached, not started)


@pytest.fixture(scope="session")
def postgres_server() -> PostgresServer:
    return session_server(PostgresServer, "postgres")


@pytest.fixture
def postgres_database(postgres_server: PostgresServer) -> PostgresDatabase:
    name = f"out_{uuid.uuid4().hex[:10]}"
    postgres_server.create_database(name, owner=name, password=PASSWORD)
    return PostgresDatabase(postgres_server.port, name)


@dataclass(frozen=True)
class MariaDatabase(OutputDatabase):
    """One test's MariaDB database, reached by a user of the same name."""

    port: int
    name: str

    @property
    def url(self) -> str:
        """The connection URL, password included (a secret: tests check it never shows)."""
        return f"mysql://{self.name}:{PASSWORD}@127.0.0.1:{self.port}/{self.name}"

    format = "mysql"

    @property
    def table(self) -> str:
        return f"{self.name}.orders"

    def quote(self, name: str) -> str:
        return f"`{name}`"

    def connect(self):
        import pymysql

        return pymysql.connect(
            host="127.0.0.1", port=self.port, user=self.name, password=PASSWORD, database=self.name, autocommit=True
        )

    def rows(self, statement: str, params: tuple = ()) -> list[tuple]:
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement, params)
                return list(cursor.fetchall())
        finally:
            conn.close()


@pytest.fixture(scope="session")
def mariadb_server() -> MariadbServer:
    return session_server(MariadbServer, "mariadb")


@pytest.fixture
def mariadb_database(mariadb_server: MariadbServer) -> MariaDatabase:
    name = f"out_{uuid.uuid4().hex[:10]}"
    mariadb_server.create_database(name, owner=name, password=PASSWORD)
    return MariaDatabase(mariadb_server.port, name)


@pytest.fixture(params=["postgres", "mysql"])
def output_database(request):
    """Each database output's test database in turn (PostgreSQL, MariaDB)."""
    return request.getfixturevalue("postgres_database" if request.param == "postgres" else "mariadb_database")
