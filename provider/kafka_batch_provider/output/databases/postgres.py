"""PostgreSQL (``postgresql://USER:PASSWORD@HOST:PORT/DB``), through psycopg 3."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from kafka_batch_provider.errors import ConfigError

#: The one line for a URL that cannot be read (never quoting it: the password is in it).
UNREADABLE_URL = (
    "the database URL cannot be read as postgresql://USER:PASSWORD@HOST:PORT/DB: a password or user "
    "holding '@', '/', ':', '%' or '#' must be percent-encoded (%40, %2F, %3A, %25, %23)"
)


#: The SQLSTATE classes of refusals every retry would meet (see Postgres.terminal).
TERMINAL_CLASSES = ("28", "3D", "3F", "42", "22", "23")
#: A refused connection's reasons that every retry would meet (not "the database system is starting
#: up", "too many clients", "shutting down").
TERMINAL_FATALS = ("password authentication failed", "no pg_hba.conf entry", "database", "role", "permission denied")


#: A serialization failure (under REPEATABLE READ or SERIALIZABLE) and a deadlock: the server rolled
#: the transaction back for another's sake. (A batch's transaction runs READ COMMITTED, so of the
#: two only the deadlock reaches it.)
CONFLICT_STATES = ("40001", "40P01")

#: The Airflow ``postgres`` connection's extra keys that are libpq's TLS parameters.
SSL_KEYS = ("sslmode", "sslrootcert", "sslcert", "sslkey")


class Postgres:
    label = "PostgreSQL"
    schemes = ("postgresql", "postgres")

    @property
    def errors(self) -> type[BaseException]:
        import psycopg

        return psycopg.Error

    def url_parts(self, url: str) -> tuple[str, int, str]:
        """Read as libpq reads it; a URL libpq and a URL parser would read differently (a password
        with an unquoted ``@`` or ``/``) is refused."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            parts, libpq = urlsplit(url), conninfo_to_dict(url)
            port = parts.port or 5432
        except Exception:  # noqa: BLE001 - whatever the parsers say would quote the password
            raise ConfigError(UNREADABLE_URL) from None
        database = parts.path.strip("/")
        if parts.scheme not in self.schemes or not parts.hostname or not database:
            raise ConfigError(UNREADABLE_URL)
        if libpq.get("host") != parts.hostname or libpq.get("dbname") != unquote(database):
            raise ConfigError(UNREADABLE_URL)
        return parts.hostname, port, database

    def connect(self, url: str) -> Any:
        import psycopg

        # (UTF-8 whatever the database's default: both COPY forms send UTF-8 bytes as they are)
        return psycopg.connect(url, autocommit=True, connect_timeout=30, client_encoding="UTF8")

    def usable(self, connection: Any) -> bool:
        return not (connection.closed or connection.broken)

    def alive(self, connection: Any) -> bool:
        from psycopg.pq import TransactionStatus

        if connection.info.transaction_status != TransactionStatus.IDLE:
            return True
        try:
            connection.execute("SELECT 1")
            return True
        except self.errors:
            connection.close()
            return False

    def terminal(self, exc: BaseException) -> bool:
        # SQLSTATE classes: 28 authorization, 3D/3F a missing database or schema, 42 access rules and
        # undefined objects, 22 data that does not fit, 23 constraints; not 08 (connection), 40
        # (serialization, deadlock), 53/57 (resources, shutdown)
        state = getattr(exc, "sqlstate", None) or ""
        if not state:  # (a refused connection carries no SQLSTATE: the server's FATAL line says why)
            return any(f"FATAL:  {reason}" in str(exc) or f"FATAL: {reason}" in str(exc) for reason in TERMINAL_FATALS)
        return state[:2] in TERMINAL_CLASSES

    def conflict(self, exc: BaseException) -> bool:
        return getattr(exc, "sqlstate", None) in CONFLICT_STATES

    def tls_parameters(self, extra: Mapping[str, Any], conn_id: str) -> dict[str, str]:
        """libpq's TLS parameters from an Airflow ``postgres`` connection's extra."""
        return {key: str(extra[key]) for key in SSL_KEYS if extra.get(key)}

    def cursor(self, connection: Any) -> Any:
        # (binary results: a staged file's bytea would come as hex text, twice its size, parsed back)
        return connection.cursor(binary=True)

    def quote(self, *names: str) -> str:
        return ".".join('"' + name.replace('"', '""') + '"' for name in names)

    def create_files_table(self, connection: Any, schema: str) -> None:
        create_once(
            connection,
            schema,
            "kafka_batch_files",
            f"CREATE TABLE IF NOT EXISTS {self.quote(schema, 'kafka_batch_files')} (path text PRIMARY KEY, "
            "data bytea NOT NULL, modified timestamptz NOT NULL DEFAULT now())",
        )

    def check_file_size(self, connection: Any, size: int) -> None:
        """Nothing to check: a bytea value holds up to 1 GB, more than a staged file."""

    new_file = "INSERT INTO {table} (path, data) VALUES (%s, %s) ON CONFLICT (path) DO NOTHING"
    replace_file = (
        "INSERT INTO {table} (path, data) VALUES (%s, %s) "
        "ON CONFLICT (path) DO UPDATE SET data = excluded.data, modified = now()"
    )
    below = "starts_with(path, %s)"


def create_once(connection: Any, schema: str, table: str, create: Any) -> None:
    """Run ``create`` (a ``CREATE TABLE IF NOT EXISTS``) unless ``schema.table`` exists, under the
    schema's advisory lock: two of them at once can both fail on the catalog's unique index."""
    found = connection.execute("SELECT to_regclass(%s)", (f'"{schema}"."{table}"',)).fetchone()
    if found is not None and found[0] is not None:
        return
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"kafka_batch_schema:{schema}",))
        connection.execute(create)


POSTGRES = Postgres()
