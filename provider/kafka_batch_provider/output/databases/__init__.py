"""The databases a database output can live in: one small interface (:class:`Database`), one module
per server (PostgreSQL, MariaDB/MySQL), and :func:`database_of`, which picks one by the URL's scheme.

A :class:`Database` is what differs between servers below the sinks: how a URL is read (without ever
quoting it: the password is in it), how a connection is made, how names are quoted, and the few
statements of the protocol's files table (:mod:`kafka_batch_provider.output.database_files`). Both
drivers take ``%s`` placeholders, so the statements the sinks share are plain text.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from kafka_batch_provider.errors import ConfigError


class Database(Protocol):
    #: the server's name in messages ("PostgreSQL")
    label: str
    #: the URL schemes it is reached by, the canonical one first
    schemes: tuple[str, ...]
    #: the driver's base exception (a failure of the database or the connection)
    errors: type[BaseException]

    def url_parts(self, url: str) -> tuple[str, int, str]:
        """``(host, port, database)`` of a URL; one line that never quotes it when it cannot be read."""
        ...

    def connect(self, url: str) -> Any:
        """A new autocommitted connection."""
        ...

    def usable(self, connection: Any) -> bool:
        """Whether a connection made earlier can still be used, as far as the driver knows."""
        ...

    def alive(self, connection: Any) -> bool:
        """Whether the server still answers an idle connection (one round trip; ``True`` inside a
        transaction, which must not move to another connection)."""
        ...

    def terminal(self, exc: BaseException) -> bool:
        """Whether the server's refusal would refuse every retry alike (a wrong password, a missing
        privilege, schema or table, a value that does not fit), not a passing failure (a lost
        connection, a restart, a deadlock or serialization failure, a lock's timeout)."""
        ...

    def conflict(self, exc: BaseException) -> bool:
        """Whether the server rolled the transaction back for another transaction's sake (a deadlock,
        a serialization failure), so that the same transaction run again may pass."""
        ...

    def tls_parameters(self, extra: Mapping[str, Any], conn_id: str) -> dict[str, str]:
        """The URL's TLS parameters from an Airflow connection's extra, as the server's own Airflow
        provider names them."""
        ...

    def cursor(self, connection: Any) -> Any:
        """A cursor of ``connection`` that reads bytes as bytes (no text form in between)."""
        ...

    def quote(self, *names: str) -> str:
        """``names`` as one qualified, quoted identifier."""
        ...

    def create_files_table(self, connection: Any, schema: str) -> None:
        """``<schema>.kafka_batch_files`` (``path``, ``data``, ``modified``), unless it exists; safe
        for writers racing."""
        ...

    def check_file_size(self, connection: Any, size: int) -> None:
        """Refuse, in one line, a file larger than the server stores in one value."""
        ...

    #: the statements of the files table (``{table}`` is its quoted name): a new file only if its
    #: path is free (affects no row otherwise), a file written whatever was there, and the
    #: condition "``path`` starts with ``%s``"
    new_file: str
    replace_file: str
    below: str


def database_of(url: str) -> Database:
    """The database a URL's scheme names (one line listing the schemes otherwise, never quoting the URL)."""
    from kafka_batch_provider.output.databases.mariadb import MARIADB
    from kafka_batch_provider.output.databases.postgres import POSTGRES

    scheme = str(url).split("://", 1)[0].lower() if "://" in str(url) else ""
    for database in (POSTGRES, MARIADB):
        if scheme in database.schemes:
            return database
    raise ConfigError(
        "the database URL must start with postgresql:// (PostgreSQL) or mysql:// (MariaDB or MySQL), "
        "as SCHEME://USER:PASSWORD@HOST:PORT/DB"
    )


#: One autocommitted connection per database URL and thread, for the thread's life (a Location, a
#: store, a Spark task each make a filesystem: a connection each would soon use up the server's).
_THREAD = threading.local()
#: A connection idle longer than this is asked whether the server still holds it (one round trip).
IDLE_SECONDS = 30.0


def connection_of(url: str, check: bool = False) -> Any:
    """This thread's connection to the database at ``url``. Before it is used, the server is asked
    whether it still holds it when ``check`` (a new filesystem's first use: a Spark worker's
    connection outlives its batches) or when it sat idle for :data:`IDLE_SECONDS` (the driver's,
    through a long Spark stage): a restart, a failover or a proxy's idle timeout in between would
    fail the next statement, and the driver learns it only then."""
    database = database_of(url)
    connections = _THREAD.__dict__.setdefault("connections", {})
    connection, used = connections.get(url, (None, 0.0))
    now = time.monotonic()
    ask = check or now - used > IDLE_SECONDS
    if connection is not None and not (database.usable(connection) and (not ask or database.alive(connection))):
        connection = None
    if connection is None:
        connection = database.connect(url)
    connections[url] = (connection, now)
    return connection


def failure(database: Database, where: str, exc: BaseException) -> Exception:
    """The one-line error of a database's refusal: a :class:`ConfigError` (terminal, never retried)
    when every retry would meet it, else a :class:`StorageError` (a retry may pass)."""
    from kafka_batch_provider.errors import StorageError

    line = f"{where}: {one_line(exc)}"
    return ConfigError(line) if database.terminal(exc) else StorageError(line)


def one_line(exc: BaseException) -> str:
    """A database error in one line (the drivers' messages hold no password; the URL is never quoted)."""
    return " ".join(str(exc).split())
