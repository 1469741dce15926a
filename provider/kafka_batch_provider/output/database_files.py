"""The protocol's files kept in the output's own database: a database output needs no filesystem.

A database output (:mod:`kafka_batch_provider.output.postgres`) keeps everything the protocol
keeps beside the data (plans, Kafka commit records, the batches' staged Parquet files, dead
letters, deleted keys) in one table of the target table's schema, ``kafka_batch_files``
(``path`` text primary key, ``data`` bytea, ``modified`` timestamptz): Airflow workers and Spark
tasks on different machines share nothing but the database and Kafka.

It is an fsspec filesystem (protocol ``dbfiles``), so :class:`~kafka_batch_provider.output.location.Location`
and every part of the protocol use it as they use a bucket. Its URIs name the database without
secrets, ``dbfiles://HOST:PORT/DB/SCHEMA.TABLE/...``; the connection URL (with its password) is the
``url`` storage option, never part of a path, a URI or a message. Folders are implied by the
paths below them (as in a bucket). The guarantees the protocol asks of a filesystem hold by the
database's own: ``pipe_file(mode="create")`` is ``INSERT ... ON CONFLICT DO NOTHING`` (exactly one
of several writers creates a name), and a replace is one ``INSERT ... ON CONFLICT DO UPDATE``.
"""

from __future__ import annotations

import io
import threading
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlsplit

from fsspec.spec import AbstractFileSystem

from kafka_batch_provider.errors import ConfigError, StorageError

PROTOCOL = "dbfiles"
FILES_TABLE = "kafka_batch_files"


#: The one line for a URL that cannot be read (never quoting it: the password is in it).
UNREADABLE_URL = (
    "the database URL cannot be read as postgresql://USER:PASSWORD@HOST:PORT/DB: a password or user "
    "holding '@', '/', ':', '%' or '#' must be percent-encoded (%40, %2F, %3A, %25, %23)"
)


def url_parts(url: str) -> tuple[str, int, str]:
    """``(host, port, database)`` of a database URL, read as libpq reads it; a URL libpq and a URL
    parser would read differently (a password with an unquoted ``@`` or ``/``) is refused in one line
    that never quotes it."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts, libpq = urlsplit(url), conninfo_to_dict(url)
        port = parts.port or 5432
    except Exception:  # noqa: BLE001 - whatever the parsers say would quote the password
        raise ConfigError(UNREADABLE_URL) from None
    database = parts.path.strip("/")
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not database:
        raise ConfigError(UNREADABLE_URL)
    if libpq.get("host") != parts.hostname or libpq.get("dbname") != unquote(database):
        raise ConfigError(UNREADABLE_URL)
    return parts.hostname, port, database


def files_uri(url: str, table: str) -> str:
    """``dbfiles://HOST:PORT/DB/SCHEMA.TABLE``: where the files of ``table`` live (no secret)."""
    host, port, database = url_parts(url)
    return f"{PROTOCOL}://{host}:{port}/{database}/{table}"


class DatabaseFileSystem(AbstractFileSystem):
    """Files in ``<schema>.kafka_batch_files`` of a PostgreSQL database (see the module docstring).

    :param url: ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (a secret: never shown).
    """

    protocol = PROTOCOL
    root_marker = ""
    cachable = False  # (a new instance per Location: instances hold a connection)

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._url = url
        self._tables: set[str] = set()

    def __repr__(self) -> str:
        return f"DatabaseFileSystem({files_uri(self._url, '')!r})"

    # -- paths ---------------------------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        text = str(path)
        if text.startswith(f"{PROTOCOL}://"):
            text = text[len(PROTOCOL) + 3 :]
        return text.rstrip("/")

    def key(self, path: str) -> tuple[str, str]:
        """``(schema, the path below the database)`` of ``HOST:PORT/DB/SCHEMA.TABLE/...``."""
        parts = self._strip_protocol(path).split("/", 2)
        if len(parts) < 3 or "." not in parts[2].split("/", 1)[0]:
            raise ValueError(f"{PROTOCOL} path {path!r} does not name a table (HOST:PORT/DB/SCHEMA.TABLE/...)")
        rest = parts[2]
        return rest.split(".", 1)[0], rest

    def full(self, base: str, key: str) -> str:
        """The path of ``key`` as this filesystem spells it (beside ``base``)."""
        host_db = "/".join(self._strip_protocol(base).split("/", 2)[:2])
        return f"{host_db}/{key}"

    # -- SQL -----------------------------------------------------------------------------------

    def run(self, schema: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement on the files table of ``schema`` (created on first use), autocommitted."""
        import psycopg
        from psycopg import sql as q

        try:
            connection = connection_of(self._url)
            table = q.Identifier(schema, FILES_TABLE)
            if schema not in self._tables:
                create_once(
                    connection,
                    schema,
                    FILES_TABLE,
                    q.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (path text PRIMARY KEY, data bytea NOT NULL, "
                        "modified timestamptz NOT NULL DEFAULT now())"
                    ).format(table),
                )
                self._tables.add(schema)
            cursor = connection.execute(q.SQL(sql).format(table=table), params)
            return cursor.fetchall() if cursor.description else [(cursor.rowcount,)]
        except psycopg.Error as exc:
            raise StorageError(f"the files of schema {schema}: {one_line(exc)}") from None

    # -- reading -------------------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        schema, key = self.key(path)
        found = self.run(schema, "SELECT length(data), modified FROM {table} WHERE path = %s", (key,))
        if found:
            return self.described(path, key, found[0][0], found[0][1])
        below = self.run(schema, "SELECT 1 FROM {table} WHERE starts_with(path, %s) LIMIT 1", (key + "/",))
        if below:
            return {"name": self._strip_protocol(path), "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def described(self, base: str, key: str, size: int, modified: datetime) -> dict[str, Any]:
        return {"name": self.full(base, key), "size": int(size), "type": "file", "mtime": modified.timestamp()}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        schema, key = self.key(path)
        prefix = key + "/"
        rows = self.run(
            schema, "SELECT path, length(data), modified FROM {table} WHERE starts_with(path, %s)", (prefix,)
        )
        files, folders = {}, set()
        for name, size, modified in rows:
            child, _, deeper = name[len(prefix) :].partition("/")
            if deeper:
                folders.add(child)
            else:
                files[child] = self.described(path, name, size, modified)
        if not rows:
            entry = self.info(path)  # (a file, or nothing: FileNotFoundError)
            return [entry] if detail else [entry["name"]]
        found = list(files.values()) + [
            {"name": self.full(path, prefix + f), "size": 0, "type": "directory"} for f in sorted(folders)
        ]
        found.sort(key=lambda e: e["name"])
        return found if detail else [e["name"] for e in found]

    def find(self, path: str, maxdepth: Any = None, withdirs: bool = False, detail: bool = False, **kwargs: Any):
        schema, key = self.key(path)
        rows = self.run(
            schema, "SELECT path, length(data), modified FROM {table} WHERE starts_with(path, %s)", (key + "/",)
        )
        found = {self.full(path, name): self.described(path, name, size, modified) for name, size, modified in rows}
        return found if detail else sorted(found)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        schema, key = self.key(path)
        found = self.run(schema, "SELECT data FROM {table} WHERE path = %s", (key,))
        if not found:
            raise FileNotFoundError(path)
        return bytes(found[0][0])[start:end]

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            return io.BytesIO(self.cat_file(path))
        return _Upload(self, path)

    # -- writing -------------------------------------------------------------------------------

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Write ``value`` at ``path``; ``mode="create"``: only if absent (:class:`FileExistsError`)."""
        schema, key = self.key(path)
        if mode == "create":
            [(count,)] = self.run(
                schema, "INSERT INTO {table} (path, data) VALUES (%s, %s) ON CONFLICT (path) DO NOTHING", (key, value)
            )
            if count == 0:
                raise FileExistsError(path)
            return
        self.run(
            schema,
            "INSERT INTO {table} (path, data) VALUES (%s, %s) "
            "ON CONFLICT (path) DO UPDATE SET data = excluded.data, modified = now()",
            (key, value),
        )

    def rm_file(self, path: str) -> None:
        schema, key = self.key(path)
        [(count,)] = self.run(schema, "DELETE FROM {table} WHERE path = %s", (key,))
        if count == 0:
            raise FileNotFoundError(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Any = None) -> None:
        for one in [path] if isinstance(path, str) else path:
            schema, key = self.key(one)
            below = " OR starts_with(path, %s)" if recursive else ""
            params = (key, key + "/") if recursive else (key,)
            self.run(schema, "DELETE FROM {table} WHERE path = %s" + below, params)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        schema, key = self.key(path1)
        schema2, key2 = self.key(path2)
        if schema2 != schema:
            self.pipe_file(path2, self.cat_file(path1))
            return
        self.run(
            schema,
            "INSERT INTO {table} (path, data) SELECT %s, data FROM {table} WHERE path = %s "
            "ON CONFLICT (path) DO UPDATE SET data = excluded.data, modified = now()",
            (key2, key),
        )

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Nothing to make: folders are implied by the paths below them."""

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to make: folders are implied by the paths below them."""

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing cached: every call asks the database."""


#: One autocommitted connection per database URL and thread, for the thread's life (a Location, a
#: store, a Spark task each make a filesystem: a connection each would soon use up the server's).
_THREAD = threading.local()


def connection_of(url: str) -> Any:
    import psycopg

    connections = _THREAD.__dict__.setdefault("connections", {})
    connection = connections.get(url)
    if connection is None or connection.closed or connection.broken:
        connection = psycopg.connect(url, autocommit=True, connect_timeout=30)
        connections[url] = connection
    return connection


def create_once(connection: Any, schema: str, table: str, create: Any) -> None:
    """Run ``create`` (a ``CREATE TABLE IF NOT EXISTS``) unless ``schema.table`` exists, under the
    schema's advisory lock: two of them at once can both fail on the catalog's unique index."""
    found = connection.execute("SELECT to_regclass(%s)", (f'"{schema}"."{table}"',)).fetchone()
    if found is not None and found[0] is not None:
        return
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"kafka_batch_schema:{schema}",))
        connection.execute(create)


class _Upload(io.BytesIO):
    """A file opened for writing: its bytes become one row when it is closed."""

    def __init__(self, fs: DatabaseFileSystem, path: str) -> None:
        super().__init__()
        self.fs, self.path = fs, path

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            super().close()
            self.fs.pipe_file(self.path, data)


def one_line(exc: BaseException) -> str:
    """A database error in one line (psycopg's messages hold no password; the URL is never quoted)."""
    return " ".join(str(exc).split())
