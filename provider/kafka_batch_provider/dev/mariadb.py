"""MariaDB for the demo and the tests: a real server as a plain process on 127.0.0.1, the server of
the MariaDB/MySQL output (:mod:`kafka_batch_provider.output.mariadb`).

Debian's ``mariadbd`` (``scripts/debian-packages.sh`` installs ``mariadb-server``;
``$KAFKA_BATCH_MARIADB_BIN`` names another folder). The package's own server is never used: each
server gets a fresh data folder (``mariadb-install-db``, ~1 s) and runs ``mariadbd --no-defaults``
with:

* ``innodb_flush_log_at_trx_commit=0`` and a small buffer pool: a throwaway server's speed (a
  crash loses it anyway);
* the superuser over a Unix socket in the folder (socket authentication), and password logins over
  TCP, which is how the output connects.

As root it runs as the OS user ``mysql`` (the package creates it), and the folder is handed to it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kafka_batch_provider.dev.local_servers import HOST, LocalServer
from kafka_batch_provider.errors import ConfigError

OS_USER = "mysql"
#: Settings a test or demo server runs with (see the module docstring).
SETTINGS = {
    "innodb-buffer-pool-size": "64M",
    "innodb-log-file-size": "64M",
    "innodb-flush-log-at-trx-commit": "0",
    "max-connections": "200",
    "max-allowed-packet": "1G",  # (a staged file is one value: up to --target-file-mb)
    "skip-name-resolve": "1",
    "local-infile": "1",
}


def mariadb_bin(name: str) -> str:
    """A MariaDB program: in ``$KAFKA_BATCH_MARIADB_BIN``, else on the PATH (Debian's ``/usr/sbin``)."""
    folder = os.environ.get("KAFKA_BATCH_MARIADB_BIN")
    found = os.path.join(folder, name) if folder else shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")
    if not found or not os.path.exists(found):
        raise ConfigError(
            f"MariaDB's {name} not found: run `make debian-prereqs` (apt-get install mariadb-server) "
            "or set KAFKA_BATCH_MARIADB_BIN"
        )
    return found


@dataclass
class MariadbServer(LocalServer):
    """One MariaDB server in ``folder`` (created, ``mariadb-install-db`` on first start), on ``port``."""

    folder: Path = Path("mariadb")

    label: ClassVar[str] = "MariaDB"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.folder = Path(self.folder)
        self.log_path = self.log_path or self.folder / "mariadb.log"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def socket(self) -> str:
        return str(self.folder / "mariadb.sock")

    def run_as(self) -> dict[str, Any]:
        return {"user": OS_USER, "group": OS_USER, "extra_groups": []} if os.geteuid() == 0 else {}

    def start(self, timeout: float = 60.0) -> MariadbServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.run_as():
            owner = pwd.getpwnam(OS_USER)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        if not (self.data / "mysql").exists():
            user = ["--user=" + OS_USER] if self.run_as() else []
            done = subprocess.run(
                [mariadb_bin("mariadb-install-db"), "--no-defaults", f"--datadir={self.data}", "--skip-test-db",
                 "--auth-root-authentication-method=socket", *user],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.folder,
            )  # fmt: skip
            if done.returncode != 0:
                last = (done.stderr.decode(errors="replace").strip().splitlines() or ["(nothing)"])[-1]
                raise ConfigError(f"mariadb-install-db failed: {last}")
        return super().start(timeout)

    def command(self) -> list[str]:
        user = ["--user=" + OS_USER] if self.run_as() else []
        return [
            mariadb_bin("mariadbd"), "--no-defaults", *user, f"--datadir={self.data}", f"--socket={self.socket}",
            f"--port={self.port}", f"--bind-address={HOST}", f"--pid-file={self.folder / 'mariadb.pid'}",
            *(f"--{key}={value}" for key, value in SETTINGS.items()),
        ]  # fmt: skip

    def popen_options(self) -> dict[str, Any]:
        return {"cwd": self.folder}

    def wait_until_ready(self, timeout: float) -> None:
        import pymysql

        def answers() -> bool:
            try:
                self.admin().close()
                return True
            except pymysql.Error:
                return False

        self.poll_until(answers, timeout, ConfigError, "did not accept connections")

    def admin(self):
        """The superuser's connection, over the Unix socket."""
        import pymysql

        return pymysql.connect(unix_socket=self.socket, user="root", autocommit=True, connect_timeout=2)

    def create_database(self, name: str, owner: str, password: str) -> None:
        """A database and a user of the same name, allowed everything in it (over TCP)."""
        conn = self.admin()
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
                cursor.execute(f"CREATE USER '{owner}'@'{HOST}' IDENTIFIED BY %s", (password,))
                cursor.execute(f"GRANT ALL ON `{name}`.* TO '{owner}'@'{HOST}'")
        finally:
            conn.close()
