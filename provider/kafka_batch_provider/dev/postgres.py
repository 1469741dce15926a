"""PostgreSQL for the demo and the tests: a real server as a plain process on 127.0.0.1, the
source that Debezium (:mod:`kafka_batch_provider.dev.kafka_connect`) captures changes from.

Debian's binaries (``/usr/lib/postgresql/<n>/bin``, ``scripts/check-postgres.sh`` installs the
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
import time
from pathlib import Path
from typing import Any

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


class PostgresServer:
    """One PostgreSQL server in ``folder``, listening on ``port`` (``start`` / ``stop``).

    As root, every folder above ``folder`` must let the ``postgres`` user through
    (``tempfile.mkdtemp`` makes a 0700 folder: ``chmod 0755`` it).
    """

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = Path(folder)
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._bin = postgres_bin()
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:  # postgres will not run as root
            self._as_user = {"user": OS_USER, "group": OS_USER, "extra_groups": []}

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def socket_dir(self) -> str:
        return str(self.folder)

    def start(self, timeout: float = 60.0) -> PostgresServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._as_user:
            owner = pwd.getpwnam(OS_USER)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)  # (its parents must let that user through)
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(
                [str(self._bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                 "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.folder, **self._as_user,
            )  # fmt: skip
        settings = {**SETTINGS, "port": str(self.port), "unix_socket_directories": self.socket_dir}
        command = [str(self._bin / "postgres"), "-D", str(self.data)]
        command += [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        log = open(self.folder / "postgres.log", "ab")  # noqa: SIM115 - the server writes it while it runs
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.folder, **self._as_user
        )
        log.close()
        self.wait_until_ready(timeout)
        return self

    def wait_until_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(**self.admin_params(), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"postgres exited ({self.process.returncode}): {self.log_tail()}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"postgres on port {self.port} not ready after {timeout:.0f} s: {exc}") from None
                time.sleep(0.05)

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

    def log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join((self.folder / "postgres.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def drop_inactive_slots(self) -> None:
        """Replication slots left by stopped connectors hold WAL: drop them."""
        with self.admin() as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active")

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # fast shutdown (see the module docstring)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
