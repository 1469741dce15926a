"""What the database outputs share (PostgreSQL: :mod:`kafka_batch_provider.output.postgres`, MariaDB and
MySQL: :mod:`kafka_batch_provider.output.mariadb`): a batch's rows and its offsets in one database
transaction, the source articles' recipe for exactly once.

Where everything lives, all in the target's database (no filesystem):

* the rows: the target table, created from the first batch's columns (each sink's ``column_type``);
* the offset log: ``kafka_batch_log`` beside it (``output``, ``seq``, ``batch_id``, ``entry`` JSON),
  one row per batch, its primary key ``(output, seq)``;
* plans, Kafka commit records, the Spark tasks' staged Parquet files and dead letters:
  ``kafka_batch_files`` beside it (:mod:`kafka_batch_provider.output.database_files`).

The Spark tasks stage each attempt's rows as Parquet files in the database, as they stage them in
a bucket for the other outputs. :meth:`DatabaseSink.append` then takes one transaction holding the
output's writer lock: it checks that the batch's entry is the next free one (a compare-and-set on
the log's newest entry; the log's primary key refuses a second row besides), loads the sealed
attempt's files into the table (or merges them), inserts the log entry, deletes the staged files,
and commits. Two writers of one entry: the second finds the entry taken (``False``, nothing of its
rows stays). A crash before ``COMMIT`` leaves nothing but staged files, which the retry's attempt
replaces; a transaction the server rolls back for another's sake (a deadlock, a serialization
failure) runs again in place. Readers never see part of a batch. The Kafka commit follows and
mirrors the log, as for every output; the plan takes the log's offsets as the truth.
"""

from __future__ import annotations

import io
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError, ManifestError, StorageError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.output.database_files import FILES_TABLE, files_uri
from kafka_batch_provider.output.databases import Database, connection_of, failure, one_line
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.tables import StagedInPlace, table_merge

log = logging.getLogger(__name__)

LOG_TABLE = "kafka_batch_log"
CONTROL = "_kafka_batch"
#: Rows loaded at a time: what the driver holds at once.
LOAD_ROWS = 50_000
#: How many times a batch's transaction runs when the server rolls it back for another's sake, and
#: the first pause between (seconds, x4 each time, jittered: two transactions that deadlocked once
#: must not meet again in step).
CONFLICT_ATTEMPTS = 4
CONFLICT_PAUSE = 0.2


def split_table(table: str, what: str) -> tuple[str, str]:
    """``(schema, name)`` of ``SCHEMA.NAME`` (``what``: how the database names the first part)."""
    schema, _, name = table.strip().partition(".")
    if not schema or not name or "." in name:
        raise ConfigError(f"{Setting('table')} names the table as {what}.NAME, got {table!r}")
    return schema, name


class DatabaseSink(StagedInPlace):
    """The sink of one database table (see the module docstring); a subclass per database says how
    its log is created, how its writer lock is taken, how rows are loaded and merged, and what
    types its columns get.

    :param url: ``SCHEME://USER:PASSWORD@HOST:PORT/DB`` (a secret: never shown).
    :param table: ``SCHEMA.NAME`` (MariaDB: ``DB.NAME``).
    """

    database: Database
    #: the output's ``--format``
    format: str
    #: how the first part of a table's name is called (SCHEMA, DB)
    schema_word = "SCHEMA"
    #: the longest column name, in bytes
    name_bytes: int
    #: whether column names are case-insensitive (MariaDB's are)
    names_ignore_case = False
    dead_letter_root = f"{CONTROL}/_dead_letters"

    def __init__(self, url: str, table: str, merge: MergeSpec | None = None) -> None:
        self._url = url
        self.schema, self.table_name = split_table(table, self.schema_word)
        self.name = f"{self.schema}.{self.table_name}"
        self.label = f"{self.database.label} table {self.name}"
        self.merge = merge
        self.partition_by = None
        self.data = Location(files_uri(url, self.name), {"url": url})
        self._log_seen = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.data.uri!r})"

    # -- what each database does its own way -----------------------------------------------------

    def ensure_log(self, conn: Any) -> None:
        """The log table beside the target, unless it exists (safe for writers racing)."""
        raise NotImplementedError

    def writer_lock(self, conn: Any) -> AbstractContextManager[Any]:
        """This output's writer lock, held around everything :meth:`append` does, where the database
        takes it outside a transaction (none where :meth:`transaction` takes it)."""
        return nullcontext()

    def transaction(self, conn: Any) -> AbstractContextManager[Any]:
        """The batch's transaction, holding the writer lock (committed when the block ends, rolled
        back when it raises)."""
        raise NotImplementedError

    def before_transaction(self, conn: Any, manifest: dict[str, Any]) -> Any:
        """What must happen before the transaction, under the writer lock (DDL a database commits
        implicitly); what it returns is handed to :meth:`load_rows` or :meth:`merge_rows`."""
        return None

    def load_rows(self, conn: Any, manifest: dict[str, Any], prepared: Any) -> None:
        """The sealed attempt's rows into the table (appended)."""
        raise NotImplementedError

    def merge_rows(self, conn: Any, manifest: dict[str, Any], prepared: Any) -> None:
        """The batch's changes merged into the table (``--mode upsert|changes``)."""
        raise NotImplementedError

    def column_type(self, kind: pa.DataType, name: str) -> str:
        """The database's type of an Arrow column (a :class:`ConfigError` when it has none)."""
        raise NotImplementedError

    # -- SQL -----------------------------------------------------------------------------------

    def connect(self, check: bool = False) -> Any:
        """This thread's connection to the database (autocommitted; ``check``: the server asked first)."""
        try:
            return connection_of(self._url, check)
        except self.database.errors as exc:
            raise failure(self.database, f"{self.label}", exc) from None

    def quoted(self, name: str) -> str:
        """A table of this output's schema, quoted."""
        return self.database.quote(self.schema, name)

    def run(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement; ``{log}``, ``{files}`` and ``{target}`` in it are those tables."""
        cursor = self.database.cursor(conn)
        cursor.execute(
            statement.format(
                log=self.quoted(LOG_TABLE), files=self.quoted(FILES_TABLE), target=self.quoted(self.table_name)
            ),
            tuple(params),
        )
        return list(cursor.fetchall()) if cursor.description else []

    def query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One read of the log (an empty answer before the log table exists)."""
        conn = self.connect()
        try:
            if not self._log_seen:
                if not self.has_table(conn, LOG_TABLE):
                    return []
                self._log_seen = True  # (a log table, once there, stays: no need to ask again)
            return self.run(conn, statement, params)
        except self.database.errors as exc:
            raise failure(self.database, f"{self.label}", exc) from None

    def has_table(self, conn: Any, name: str) -> bool:
        return bool(
            self.run(
                conn,
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (self.schema, name),
            )
        )

    def table_columns(self, conn: Any) -> list[str]:
        """The table's columns in order (none while it does not exist)."""
        rows = self.run(
            conn,
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "ORDER BY ordinal_position",
            (self.schema, self.table_name),
        )
        return [name for (name,) in rows]

    # -- the log -------------------------------------------------------------------------------

    def entry(self, seq: int) -> dict[str, Any] | None:
        found = self.query("SELECT entry FROM {log} WHERE output = %s AND seq = %s", (self.name, seq))
        return entry_of(found[0][0]) if found else None

    def tail_seq(self) -> int:
        found = self.query("SELECT max(seq) FROM {log} WHERE output = %s", (self.name,))
        return int(found[0][0]) if found and found[0][0] is not None else 0

    def tail(self) -> dict[str, Any] | None:
        found = self.query("SELECT entry FROM {log} WHERE output = %s ORDER BY seq DESC LIMIT 1", (self.name,))
        return entry_of(found[0][0]) if found else None

    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]:
        """Every entry (``last``: the newest ones), oldest first."""
        statement = "SELECT entry FROM {log} WHERE output = %s ORDER BY seq DESC" + (" LIMIT %s" if last else "")
        found = self.query(statement, (self.name, last) if last else (self.name,))
        return iter([entry_of(row[0]) for row in reversed(found)])

    def append(self, manifest: dict[str, Any]) -> bool:
        """The batch's rows and its log entry in one transaction, only while its entry is the next
        free one (``False`` when another batch took it: nothing of this one stays). A transaction the
        server rolled back for another's sake (a deadlock, a serialization failure) runs again, up to
        :data:`CONFLICT_ATTEMPTS` times in all: it changed nothing, and the staged rows are still there."""
        seq = int(manifest["seq"])
        conn = self.connect(check=True)
        try:
            with self.writer_lock(conn):
                self.ensure_log(conn)
                prepared = self.before_transaction(conn, manifest)
                attempt = 1
                while True:
                    try:
                        return self.commit_batch(conn, seq, manifest, prepared)
                    except (self.database.errors, StorageError) as exc:
                        # (a statement of the merge's own reads fails as a StorageError: its cause says why)
                        cause = exc if isinstance(exc, self.database.errors) else exc.__context__
                        if cause is None or not self.database.conflict(cause) or attempt == CONFLICT_ATTEMPTS:
                            raise
                        pause = CONFLICT_PAUSE * 4 ** (attempt - 1) * random.uniform(0.5, 1.5)
                        log.warning(
                            "%s: batch %s's transaction rolled back for another's sake (%s): runs again in %.1f s "
                            "(attempt %d of %d)", self.label, manifest["batch_id"], one_line(cause), pause, attempt + 1,
                            CONFLICT_ATTEMPTS,
                        )  # fmt: skip
                        time.sleep(pause)
                        attempt += 1
        except self.database.errors as exc:
            raise failure(self.database, f"{self.label}", exc) from None

    def commit_batch(self, conn: Any, seq: int, manifest: dict[str, Any], prepared: Any) -> bool:
        """One transaction of :meth:`append`: the compare-and-set on the log, the rows, the entry."""
        with self.transaction(conn):
            [(newest,)] = self.run(conn, "SELECT coalesce(max(seq), 0) FROM {log} WHERE output = %s", (self.name,))
            if newest >= seq:
                return False
            if newest != seq - 1:
                raise ManifestError(f"{self.label} holds batch {newest} as its newest: cannot add {seq}")
            if self.merging:
                self.merge_rows(conn, manifest, prepared)
            else:
                self.load_rows(conn, manifest, prepared)
            self.run(
                conn,
                "INSERT INTO {log} (output, seq, batch_id, entry) VALUES (%s, %s, %s, %s)",
                (self.name, seq, manifest["batch_id"], json.dumps(manifest)),
            )
            for name in self.staged_paths(manifest):  # the rows are the table's now
                self.run(conn, "DELETE FROM {files} WHERE path = %s", (name,))
            fail_point("before-database-commit")
        return True

    def rows_in_ranges(self, ranges: Sequence[Mapping[str, Any]], columns: Sequence[str] | None) -> pa.Table:
        """The table's rows of ``ranges`` (``topic``, ``partition``, ``[start, end)``): a batch read back."""
        q = self.database.quote
        one = f"({q('topic')} = %s AND {q('partition')} = %s AND {q('offset')} >= %s AND {q('offset')} < %s)"
        params = [v for r in ranges for v in (r["topic"], int(r["partition"]), int(r["start"]), int(r["end"]))]
        conn = self.connect()
        try:
            if not self.table_columns(conn):
                return pa.table({name: pa.array([], pa.string()) for name in columns or ["topic"]})
            selected = ", ".join(q(c) for c in columns) if columns else "*"
            cursor = self.database.cursor(conn)
            cursor.execute(
                f"SELECT {selected} FROM {self.quoted(self.table_name)} WHERE "
                + (" OR ".join([one] * len(ranges)) if ranges else "1 = 0"),
                tuple(params),
            )
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        except self.database.errors as exc:
            raise failure(self.database, f"{self.label}", exc) from None
        if not rows:
            return pa.table({name: pa.array([], pa.string()) for name in names})
        try:  # (types as the driver reads them back: nested columns come as their JSON's values)
            return pa.table({name: list(column) for name, column in zip(names, zip(*rows))})
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise failure(self.database, f"{self.label}: its rows cannot be read back as columns", exc) from None

    # -- the staged rows -------------------------------------------------------------------------

    def staged_paths(self, manifest: dict[str, Any]) -> list[str]:
        return [f"{self.name}/{manifest['location']}/{f['name']}" for f in manifest.get("files") or []]

    def staged_files(self, conn: Any, manifest: dict[str, Any]) -> Iterator[pq.ParquetFile]:
        """The sealed attempt's staged Parquet files, read in this transaction."""
        for path in self.staged_paths(manifest):
            found = self.run(conn, "SELECT data FROM {files} WHERE path = %s", (path,))
            if not found:
                raise ManifestError(f"batch {manifest['batch_id']}: its staged file {path.rsplit('/', 1)[-1]} is gone")
            yield pq.ParquetFile(io.BytesIO(found[0][0]))

    # -- merged tables ---------------------------------------------------------------------------

    @property
    def merging(self) -> bool:
        return self.merge is not None and self.merge.merges

    def rows_before(
        self, seq: int, key_columns: Sequence[str], keys: Collection[tuple], columns: Sequence[str]
    ) -> dict:
        """Nothing: a database table has no earlier versions to read (a moved row whose old key an
        earlier batch deleted gets null for its unchanged TOASTed columns, counted as ``unresolved``)."""
        return {}

    # -- staging -------------------------------------------------------------------------------

    def publish(self, entry: dict[str, Any]) -> None:
        """Nothing to do: the batch's transaction made its rows visible."""

    def check_published(self, entry: dict[str, Any]) -> None:
        """Nothing to check: the rows and the entry committed together."""

    def drop_saved_manifest(self, manifest: dict[str, Any]) -> None:
        """Nothing saved: the log entry is the manifest."""

    def check_columns(self, schema: pa.Schema) -> None:
        """Refuse, before anything is read, a column the database cannot hold: a type it has not, a
        name longer than it takes (it would cut the name short, or refuse the table), or a name the
        statements cannot carry (``{``, ``}``, ``%``: templates and the drivers' placeholders)."""
        names = Counter(f.name.lower() for f in schema)
        for f in schema:
            self.column_type(f.type, f.name)
            if any(c in f.name for c in "{}%") or not f.name.strip() or f.name != f.name.rstrip():
                raise ConfigError(
                    f"{self.label}: column {f.name[:40]!r}: a name that is empty, ends in a space or holds "
                    "'{', '}' or '%' cannot be a column here: rename the field, or write this topic to another format"
                )
            if self.names_ignore_case and names[f.name.lower()] > 1:
                raise ConfigError(
                    f"{self.label}: columns {f.name[:40]!r} and another differ only in case, which "
                    f"{self.database.label} names do not tell apart"
                )
            if len(f.name.encode()) > self.name_bytes:
                raise ConfigError(
                    f"{self.label}: column {f.name[:40]!r}... is {len(f.name.encode())} bytes long, and "
                    f"{self.database.label} names hold at most {self.name_bytes}: rename the field, or write this "
                    "topic to another format"
                )


def entry_of(value: Any) -> dict[str, Any]:
    """A log entry as read (PostgreSQL's jsonb arrives parsed, MariaDB's JSON as text)."""
    return dict(value) if isinstance(value, dict) else json.loads(value)


def open_database_store(sink: DatabaseSink, spec: Any):
    """The store of ``sink`` (the table is created by its first batch's transaction); a table keeps
    the merge mode of its batches."""
    from kafka_batch_provider.output.store import BatchStore

    sink.merge = table_merge(sink.label, sink.tail(), sink.merge)
    return BatchStore(sink.data.uri_of(CONTROL), {"url": spec.database_url}, sink=sink)
