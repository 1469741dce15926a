"""PostgreSQL for the demo and the tests: a real server as a plain process on 127.0.0.1, the
source that Debezium (:mod:`kafka_batch_provider.dev.kafka_connect`) captures changes from.

Debian's binaries (``/usr/lib/postgresql/<n>/bin``, ``scripts/debian-packages.sh`` installs the
package; ``$KAFKA_BATCH_POSTGRES_BIN`` names others). The package's own cluster is never used:
each server gets a fresh data folder (``initdb``, ~0.7 s) and runs ``postgres`` directly, with:

* ``wal_level=logical`` and room for a few replication slots: what logical decoding (Debezium's
  ``pgoutput``) needs;
* ``fsync``, ``synchronous_commit`` and ``full_page_writes`` off: a throwaway server's speed
  (a crash loses it anyway);
* superuser access over a Unix socket in the folder (trust, nothing listens for it on TCP) and
  password logins (SCRAM) over TCP, which is how Debezium connects.

Postgres refuses to run as root: as root it runs as the OS user ``postgres`` (the package
creates it), and the folder is handed to that user. Stop it with SIGINT (a *fast* shutdown):
SIGTERM is a *smart* one, which waits for every client, and Debezium's idle sessions never leave.
Stop Kafka Connect first; a connected walsender delays even the fast one by seconds.
"""

from __future__ import annotations

import glob
import os
import pwd
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kafka_batch_provider.dev.local_servers import LocalServer
from kafka_batch_provider.errors import ConfigError

#: Settings a test or demo server runs with (see the module docstring).
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "max_connections": "50",
    "shared_buffers": "32MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
OS_USER = "postgres"


def postgres_bin() -> Path:
    """The folder of ``postgres``, ``initdb`` and ``psql``: ``$KAFKA_BATCH_POSTGRES_BIN`` or Debian's newest."""
    if os.environ.get("KAFKA_BATCH_POSTGRES_BIN"):
        return Path(os.environ["KAFKA_BATCH_POSTGRES_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise ConfigError(
            "PostgreSQL not found (/usr/lib/postgresql/*/bin): run `make postgres-prereqs` "
            "(apt-get install postgresql) or set KAFKA_BATCH_POSTGRES_BIN"
        )
    return Path(found[-1]).parent


@dataclass
class PostgresServer(LocalServer):
    """One PostgreSQL server in ``folder`` (created, ``initdb`` on first start), on ``port``.

    As root, every folder above ``folder`` must let the ``postgres`` user through
    (``tempfile.mkdtemp`` makes a 0700 folder: ``chmod 0755`` it).
    """

    folder: Path = Path("postgres")

    label: ClassVar[str] = "PostgreSQL"
    stop_signal: ClassVar[int] = signal.SIGINT  # a fast shutdown (see the module docstring)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.folder = Path(self.folder)
        self.log_path = self.log_path or self.folder / "postgres.log"
        self._bin = postgres_bin()

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def socket_dir(self) -> str:
        return str(self.folder)

    def run_as(self) -> dict[str, Any]:
        """Postgres will not run as root: as root, it runs as the OS user ``postgres``."""
        return {"user": OS_USER, "group": OS_USER, "extra_groups": []} if os.geteuid() == 0 else {}

    def start(self, timeout: float = 60.0) -> PostgresServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.run_as():
            owner = pwd.getpwnam(OS_USER)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(
                [str(self._bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                 "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.folder, **self.run_as(),
            )  # fmt: skip
        return super().start(timeout)

    def command(self) -> list[str]:
        settings = {**SETTINGS, "port": str(self.port), "unix_socket_directories": self.socket_dir}
        return [str(self._bin / "postgres"), "-D", str(self.data)] + [
            arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")
        ]

    def popen_options(self) -> dict[str, Any]:
        return {"cwd": self.folder, **self.run_as()}

    def wait_until_ready(self, timeout: float) -> None:
        import psycopg

        def answers() -> bool:
            try:
                with psycopg.connect(**self.admin_params(), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                return False

        self.poll_until(answers, timeout, ConfigError, "did not accept connections")

    def admin_params(self, dbname: str = "postgres") -> dict[str, Any]:
        """The superuser's connection: over the Unix socket (trust)."""
        return {"host": self.socket_dir, "port": self.port, "user": "postgres", "dbname": dbname}

    def admin(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(**self.admin_params(dbname), autocommit=True)

    def create_database(self, name: str, owner: str, password: str) -> None:
        """A login role allowed to replicate (what Debezium needs) owning a new database."""
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} WITH LOGIN REPLICATION PASSWORD {}").format(
                    sql.Identifier(owner), sql.Literal(password)
                )
            )
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(owner)))

    def drop_inactive_slots(self) -> None:
        """Replication slots left by stopped connectors hold WAL: drop them."""
        with self.admin() as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active")
