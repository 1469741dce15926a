"""The protocol's files kept in the output's own database: a database output needs no filesystem.

A database output (:mod:`kafka_batch_provider.output.postgres`, :mod:`kafka_batch_provider.output.mariadb`)
keeps everything the protocol keeps beside the data (plans, Kafka commit records, the batches'
staged Parquet files, dead letters, deleted keys) in one table of the target table's schema (a
MariaDB database), ``kafka_batch_files`` (``path`` primary key, ``data`` bytes, ``modified``):
Airflow workers and Spark tasks on different machines share nothing but the database and Kafka.

It is an fsspec filesystem (protocol ``dbfiles``), so :class:`~kafka_batch_provider.output.location.Location`
and every part of the protocol use it as they use a bucket. Its URIs name the database without
secrets, ``dbfiles://HOST:PORT/DB/SCHEMA.TABLE/...``; the connection URL (with its password) is the
``url`` storage option, never part of a path, a URI or a message. Folders are implied by the
paths below them (as in a bucket). The guarantees the protocol asks of a filesystem hold by the
database's own: ``pipe_file(mode="create")`` is one insert that changes nothing when the path is
taken (exactly one of several writers creates a name), and a replace is one upsert. What differs
between servers comes from :mod:`kafka_batch_provider.output.databases`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from fsspec.spec import AbstractFileSystem

from kafka_batch_provider.output.databases import connection_of, database_of, failure

PROTOCOL = "dbfiles"
FILES_TABLE = "kafka_batch_files"


def files_uri(url: str, table: str) -> str:
    """``dbfiles://HOST:PORT/DB/SCHEMA.TABLE``: where the files of ``table`` live (no secret)."""
    host, port, database = database_of(url).url_parts(url)
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
        self._checked = False

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

    def run(self, schema: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement on the files table of ``schema`` (created on first use), autocommitted;
        ``{table}`` in it is that table, ``{below}`` "``path`` starts with ``%s``"."""

        def execute(database: Any, connection: Any) -> list[tuple[Any, ...]]:
            if schema not in self._tables:
                database.create_files_table(connection, schema)
                self._tables.add(schema)
            cursor = database.cursor(connection)
            cursor.execute(statement.format(table=database.quote(schema, FILES_TABLE), below=database.below), params)
            return list(cursor.fetchall()) if cursor.description else [(cursor.rowcount,)]

        return self.on_database(schema, execute)

    def check_size(self, schema: str, size: int) -> None:
        """A file the server cannot store in one value: refused in one line (a ConfigError)."""
        self.on_database(schema, lambda database, connection: database.check_file_size(connection, size))

    def on_database(self, schema: str, work: Callable[[Any, Any], Any]) -> Any:
        """``work(database, connection)``, its failure one line about the files of ``schema``. Each
        new filesystem (a Spark task's, a step's) first asks the server whether this thread's
        connection is still held."""
        database = database_of(self._url)
        try:
            connection = connection_of(self._url, check=not self._checked)
            self._checked = True
            return work(database, connection)
        except database.errors as exc:
            raise failure(database, f"the files of schema {schema}", exc) from None

    # -- reading -------------------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        schema, key = self.key(path)
        found = self.run(schema, "SELECT length(data), modified FROM {table} WHERE path = %s", (key,))
        if found:
            return self.described(path, key, found[0][0], found[0][1])
        below = self.run(schema, "SELECT 1 FROM {table} WHERE {below} LIMIT 1", (key + "/",))
        if below:
            return {"name": self._strip_protocol(path), "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def described(self, base: str, key: str, size: int, modified: datetime) -> dict[str, Any]:
        if modified.tzinfo is None:  # (MariaDB's TIMESTAMP, read in the connection's UTC)
            modified = modified.replace(tzinfo=timezone.utc)
        return {"name": self.full(base, key), "size": int(size), "type": "file", "mtime": modified.timestamp()}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        schema, key = self.key(path)
        prefix = key + "/"
        rows = self.run(schema, "SELECT path, length(data), modified FROM {table} WHERE {below}", (prefix,))
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
        rows = self.run(schema, "SELECT path, length(data), modified FROM {table} WHERE {below}", (key + "/",))
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
        self.check_size(schema, len(value))
        if mode == "create":
            [(count,)] = self.run(schema, database_of(self._url).new_file, (key, value))
            if count == 0:
                raise FileExistsError(path)
            return
        self.run(schema, database_of(self._url).replace_file, (key, value))

    def rm_file(self, path: str) -> None:
        schema, key = self.key(path)
        [(count,)] = self.run(schema, "DELETE FROM {table} WHERE path = %s", (key,))
        if count == 0:
            raise FileNotFoundError(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Any = None) -> None:
        for one in [path] if isinstance(path, str) else path:
            schema, key = self.key(one)
            below = " OR {below}" if recursive else ""
            params = (key, key + "/") if recursive else (key,)
            self.run(schema, "DELETE FROM {table} WHERE path = %s" + below, params)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        self.pipe_file(path2, self.cat_file(path1))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Nothing to make: folders are implied by the paths below them."""

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to make: folders are implied by the paths below them."""

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing cached: every call asks the database."""


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
