"""MariaDB and MySQL (``mysql://USER:PASSWORD@HOST:PORT/DB``), through PyMySQL.

PyMySQL is pure Python (no client library to build) and speaks ``LOAD DATA LOCAL INFILE``, the
servers' fastest bulk path (a connection sends the one file its statement names, and only then:
:mod:`~kafka_batch_provider.output.databases.mariadb_local_files`). Every connection runs in UTC
(``time_zone = '+00:00'``: ``DATETIME`` has no zone) with strict SQL modes (a value that does not
fit is an error, not a silent cut), and ``utf8mb4``. TLS comes from the URL's query: ``ssl_ca``,
``ssl_cert``, ``ssl_key`` (files) and ``ssl_verify_cert`` / ``ssl_verify_identity``
(``true``/``false``).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_to_bytes, urlsplit

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.databases.mariadb_local_files import pinned_connection

UNREADABLE_URL = (
    "the database URL cannot be read as mysql://USER:PASSWORD@HOST:PORT/DB: a password or user "
    "holding '@', '/', ':', '%', '?' or '#' must be percent-encoded (%40, %2F, %3A, %25, %3F, %23)"
)
#: The URL query's TLS settings, passed to PyMySQL as they are named.
SSL_FILES = ("ssl_ca", "ssl_cert", "ssl_key")
SSL_FLAGS = ("ssl_verify_cert", "ssl_verify_identity")
#: Strict: a value that does not fit its column is an error (for LOAD DATA LOCAL, a warning the
#: sink turns into one: see output/mariadb.py).
#: Each connection's max_allowed_packet (a global setting: read once per connection).
PACKET_LIMITS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
#: What a packet holds besides the file (the statement, the path).
PACKET_ROOM = 64 * 1024
SQL_MODE = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


#: Server errors every retry would meet: access denied (1044, 1045, 1142, 1143, 1227), an unknown
#: database, table or column (1049, 1146, 1054), a value that does not fit (1048, 1264, 1292, 1366,
#: 1406), a duplicate key (1062), LOCAL INFILE refused (1148, 3948); not a lost connection (2006,
#: 2013), a lock's timeout (1205) or a deadlock (1213).
TERMINAL_CODES = (1044, 1045, 1142, 1143, 1227, 1049, 1146, 1054, 1048, 1264, 1292, 1366, 1406, 1062, 1148, 3948)

#: A deadlock (1213, the transaction rolled back by InnoDB) and a row changed since the transaction's
#: snapshot read it (1020, ``innodb_snapshot_isolation``, on by default from MariaDB 11.6.2): the
#: same transaction again may pass. Not a lock's timeout (1205): InnoDB rolls back only the
#: statement, after waiting its whole ``innodb_lock_wait_timeout``.
CONFLICT_CODES = (1213, 1020)
#: LOAD DATA LOCAL refused by the server's settings.
LOCAL_INFILE_REFUSED = (1148, 3948)


def error_code(exc: BaseException) -> int:
    """The server's (or PyMySQL's) error number of a PyMySQL error (0 when it carries none)."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0


class MariaDB:
    label = "MariaDB"
    schemes = ("mysql", "mariadb")

    @property
    def errors(self) -> type[BaseException]:
        import pymysql

        return pymysql.Error

    def url_parts(self, url: str) -> tuple[str, int, str]:
        try:
            parts = urlsplit(url)
            port = parts.port or 3306
        except Exception:  # noqa: BLE001 - whatever the parser says would quote the password
            raise ConfigError(UNREADABLE_URL) from None
        database = unquote(parts.path.strip("/"))
        if parts.scheme not in self.schemes or not parts.hostname or not database or "/" in database:
            raise ConfigError(UNREADABLE_URL)
        if "@" in parts.path or "@" in parts.query:  # (a '/' in the password moved the rest of it there)
            raise ConfigError(UNREADABLE_URL)
        return parts.hostname, port, parts.path.strip("/")

    def connect(self, url: str) -> Any:
        host, port, database = self.url_parts(url)
        parts = urlsplit(url)
        options: dict[str, Any] = {}
        for key, value in parse_qsl(parts.query):
            if key in SSL_FILES:
                options[key] = value
            elif key in SSL_FLAGS:
                options[key] = value.lower() in ("1", "true", "yes")
            else:
                raise ConfigError(
                    f"the database URL's query may set {', '.join(SSL_FILES + SSL_FLAGS)}; {key[:40]!r} is not one"
                )
        try:
            # (local_infile: the capability LOAD DATA LOCAL needs; which file goes is pinned per statement)
            return pinned_connection()(
                host=host,
                port=port,
                user=unquote(parts.username or ""),
                # (bytes: PyMySQL would encode a str as latin-1, and the server hashed UTF-8)
                password=unquote_to_bytes(parts.password or ""),
                database=unquote(database),
                charset="utf8mb4",
                autocommit=True,
                local_infile=True,
                connect_timeout=30,
                init_command=f"SET time_zone = '+00:00', sql_mode = '{SQL_MODE}'",
                **options,
            )
        except (OSError, ValueError) as exc:  # (a TLS file missing; never the exception's words: they may quote)
            raise ConfigError(f"cannot connect to {self.label} at {host}:{port}: {type(exc).__name__}") from None

    def usable(self, connection: Any) -> bool:
        return bool(connection.open)

    def alive(self, connection: Any) -> bool:
        from pymysql.constants import SERVER_STATUS

        if connection.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
            return True
        try:
            connection.ping(reconnect=False)
            return True
        except self.errors:
            connection.close()
            return False

    def terminal(self, exc: BaseException) -> bool:
        return error_code(exc) in TERMINAL_CODES

    def conflict(self, exc: BaseException) -> bool:
        return error_code(exc) in CONFLICT_CODES

    def tls_parameters(self, extra: Mapping[str, Any], conn_id: str) -> dict[str, str]:
        """The URL's TLS parameters from an Airflow ``mysql`` connection's extra, as the MySQL provider
        names them: ``ssl`` as ``{"ca", "cert", "key"}`` (or its JSON text), or ``ssl_ca``, ``ssl_cert``,
        ``ssl_key``, and ``ssl_verify_cert`` / ``ssl_verify_identity``."""
        ssl = extra.get("ssl") or {}
        if isinstance(ssl, str):
            try:
                ssl = json.loads(ssl)
            except ValueError:
                raise ConfigError(f"database connection {conn_id!r}: its extra's ssl is not JSON") from None
        names = dict(zip(("ca", "cert", "key"), SSL_FILES))
        found = {param: str(ssl[key]) for key, param in names.items() if isinstance(ssl, dict) and ssl.get(key)}
        found.update({param: str(extra[param]) for param in SSL_FILES if extra.get(param)})
        found.update({flag: str(extra[flag]).lower() for flag in SSL_FLAGS if flag in extra})
        return found

    def cursor(self, connection: Any) -> Any:
        return connection.cursor()

    def quote(self, *names: str) -> str:
        return ".".join("`" + name.replace("`", "``") + "`" for name in names)

    def create_files_table(self, connection: Any, schema: str) -> None:
        # (concurrent CREATE TABLE IF NOT EXISTS are safe here: the server's metadata locks order them)
        connection.cursor().execute(
            f"CREATE TABLE IF NOT EXISTS {self.quote(schema, 'kafka_batch_files')} ("
            f"path VARCHAR(700) CHARACTER SET utf8mb4 COLLATE {binary_collation(connection)} PRIMARY KEY, "
            "data LONGBLOB NOT NULL, modified DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
        )

    def check_file_size(self, connection: Any, size: int) -> None:
        """A file larger than one packet the server takes cannot be stored: refused in one line
        (the server's limit asked once per connection)."""
        limit = PACKET_LIMITS.get(connection)
        if limit is None:
            cursor = connection.cursor()
            cursor.execute("SELECT @@max_allowed_packet")
            [(limit,)] = cursor.fetchall()
            PACKET_LIMITS[connection] = limit = int(limit)
        if size > limit - PACKET_ROOM:
            raise ConfigError(
                f"a staged file of {size / 2**20:.0f} MB is larger than the server's max_allowed_packet "
                f"({limit / 2**20:.0f} MB): raise it (SET GLOBAL max_allowed_packet = 1073741824), "
                "or write smaller files (--target-file-mb)"
            )

    # (without CLIENT_FOUND_ROWS, a duplicate that changes nothing affects 0 rows)
    new_file = "INSERT INTO {table} (path, data) VALUES (%s, %s) ON DUPLICATE KEY UPDATE path = path"
    replace_file = (
        "INSERT INTO {table} (path, data) VALUES (%s, %s) "
        "ON DUPLICATE KEY UPDATE data = VALUES(data), modified = CURRENT_TIMESTAMP(6)"
    )
    below = "LOCATE(%s, path) = 1"


def binary_collation(connection: Any) -> str:
    """The collation that compares text bytewise, trailing spaces included ("a" != "a "): MariaDB's
    ``utf8mb4_nopad_bin``, MySQL 8's ``utf8mb4_0900_bin`` (``utf8mb4_bin`` pads: it ignores them)."""
    return "utf8mb4_nopad_bin" if "MariaDB" in connection.get_server_info() else "utf8mb4_0900_bin"


MARIADB = MariaDB()
