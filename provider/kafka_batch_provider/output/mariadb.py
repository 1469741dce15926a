"""MariaDB and MySQL tables (``--format mysql --table DB.NAME``): the database output
(:mod:`kafka_batch_provider.output.database_sink`) in MariaDB or MySQL.

Where they differ from PostgreSQL, and what this sink does about it:

* **DDL commits implicitly.** ``CREATE TABLE`` and ``ALTER TABLE ... ADD COLUMN`` end any open
  transaction, so they run before the batch's transaction, under the writer lock, and only when
  the table lacks what the batch brings: a crash between the DDL and the data loses nothing, and
  the retry finds the column there and skips it.
* **The writer lock is a named lock** (``GET_LOCK``), held by the connection around the DDL and the
  transaction (released by ``RELEASE_LOCK``, or by the server when the connection dies). Inside,
  the compare-and-set on the log's newest entry and the log's primary key guard as in PostgreSQL.
* **The bulk path is ``LOAD DATA LOCAL INFILE``** (:mod:`kafka_batch_provider.output.mariadb_load`):
  each chunk of rows written to a temporary file of the committing process, then loaded. The
  server turns a value that does not fit into a warning there, not an error (``LOCAL`` implies
  ``IGNORE``), so every load is followed by ``SHOW WARNINGS``: a warning refuses the batch in one
  line naming the column, and the transaction rolls back.
* **Merged tables**: the reduced changes are loaded into a temporary table, then applied by a
  ``DELETE ... JOIN``, an ``UPDATE ... JOIN`` and an ``INSERT ... SELECT`` of the keys the table
  lacks, each only where the change is newer than the row (the same ordering guard as PostgreSQL's).

What types the columns get (:func:`column_type`): ``LONGBLOB``, ``LONGTEXT``, the integer types
(unsigned ones for unsigned integers), ``FLOAT``, ``DOUBLE``, ``BOOLEAN``, ``DECIMAL(p,s)``,
``DATE``, ``TIME(6)``, ``DATETIME(6)`` (UTC: it has no zone) and ``JSON`` for structs, maps and
lists. A key column must be indexable: text keys are ``VARCHAR(255)``, bytes ``VARBINARY(255)``
(a longer key is refused in one line). Text compares bytewise (``utf8mb4_bin``), as in the lakes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import DELETE_OP, OP_COLUMN, ORDER_COLUMN, UPSERT_OP
from kafka_batch_provider.errors import ConfigError, ManifestError, StorageError
from kafka_batch_provider.output.database_sink import LOAD_ROWS, DatabaseSink, open_database_store
from kafka_batch_provider.output.databases.mariadb import LOCAL_INFILE_REFUSED, MARIADB, binary_collation, error_code
from kafka_batch_provider.output.databases.mariadb_local_files import sending
from kafka_batch_provider.output.mariadb_load import load_text
from kafka_batch_provider.output.merge_source import MergeSource, merge_batch, prefetched

MYSQL = "mysql"
#: The temporary table a merged batch's reduced rows are loaded into (dropped after the merge).
SOURCE_TABLE = "kafka_batch_source"
#: How long a writer waits for another's batch to commit before it gives up (and is retried).
LOCK_SECONDS = 3600
#: The length of a key column (an index holds at most 3,072 bytes: 255 characters of 4 bytes, three keys).
KEY_LENGTH = 255
#: The last bytes of a staged file read for its schema (the Parquet footer; more when it is longer).
FOOTER_BYTES = 65_536
#: Keys asked for at once when the merge reads rows back.
KEYS_AT_ONCE = 1000
#: Text key columns an index holds (3,072 bytes: three of 255 characters of 4 bytes).
TEXT_KEYS = 3


class MariadbSink(DatabaseSink):
    """The sink of one MariaDB or MySQL table (see the module docstring)."""

    database = MARIADB
    format = MYSQL
    schema_word = "DB"
    #: MariaDB's and MySQL's longest name (64 characters; counted here in bytes, the stricter)
    name_bytes = 64
    names_ignore_case = True

    def table_options(self, conn: Any) -> str:
        """Every table transactional (InnoDB, whatever the server's default), text compared bytewise."""
        return f"ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={binary_collation(conn)}"

    def ensure_log(self, conn: Any) -> None:
        self.run(
            conn,
            "CREATE TABLE IF NOT EXISTS {log} (output VARCHAR(512) NOT NULL, seq BIGINT NOT NULL, "
            "batch_id VARCHAR(255) NOT NULL, entry LONGTEXT NOT NULL, "
            "committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (output, seq)) "
            + self.table_options(conn),
        )

    @contextmanager
    def writer_lock(self, conn: Any) -> Iterator[None]:
        # (a lock's name holds at most 64 characters: the table's name is hashed)
        name = "kafka_batch:" + hashlib.sha1(self.name.encode()).hexdigest()
        [(got,)] = self.run(conn, "SELECT GET_LOCK(%s, %s)", (name, LOCK_SECONDS))
        if got != 1:
            raise StorageError(f"{self.label}: another writer held it for {LOCK_SECONDS} s")
        try:
            yield
        except BaseException:
            if conn.open:  # (a refused local file closed it already; PyMySQL's close() twice raises)
                conn.close()  # (the server releases the lock; the next use connects again, in a known state)
            raise
        self.run(conn, "SELECT RELEASE_LOCK(%s)", (name,))

    @contextmanager
    def transaction(self, conn: Any) -> Iterator[Any]:
        conn.begin()
        try:
            yield conn
        except BaseException:
            if conn.open:
                conn.rollback()
            raise
        conn.commit()

    def before_transaction(self, conn: Any, manifest: dict[str, Any]) -> MergeSource | None:
        """The table made ready for the batch's columns (DDL commits implicitly); a merged batch's
        changes reduced (under the writer lock: no other batch moves the rows read back)."""
        if self.tail_seq() >= int(manifest["seq"]):
            return None  # (taken: the transaction says so)
        if not self.merging:
            for path in self.staged_paths(manifest):
                self.ensure_table(conn, self.staged_schema(conn, path))
            return None
        merged = merge_batch(self, manifest, conn)
        if merged.key_columns:
            self.ensure_table(conn, merged.row_schema, merged.key_columns)
        return merged

    def staged_schema(self, conn: Any, path: str) -> pa.Schema:
        """A staged file's schema, from its footer (the file's last bytes)."""
        found = self.run(
            conn, "SELECT LENGTH(data), SUBSTRING(data, GREATEST(1, LENGTH(data) - %s)) FROM {files} WHERE path = %s",
            (FOOTER_BYTES - 1, path),
        )  # fmt: skip
        if not found:
            raise ManifestError(f"{self.label}: a staged file of the batch is gone: {path.rsplit('/', 1)[-1]}")
        size, tail = found[0]
        footer = int.from_bytes(tail[-8:-4], "little") + 8
        if footer > len(tail) and footer <= size:
            [(tail,)] = self.run(conn, "SELECT data FROM {files} WHERE path = %s", (path,))
        return pq.read_schema(pa.BufferReader(tail))

    def ensure_table(self, conn: Any, schema: pa.Schema, key_columns: Sequence[str] = ()) -> list[str]:
        """The table with ``schema``'s columns: created (its primary key ``key_columns``), or given the
        columns it lacks; its columns now, in order."""
        found = self.table_columns(conn)
        if not found:
            texts = [k for k in key_columns if declared_type(schema.field(k), True).startswith("VARCHAR")]
            if len(texts) > TEXT_KEYS:
                raise ConfigError(
                    f"{self.label}: {len(texts)} text key columns ({', '.join(texts)}); an index of "
                    f"{self.database.label} holds at most {TEXT_KEYS}"
                )
            columns = [f"{self.database.quote(f.name)} {declared_type(f, f.name in key_columns)}" for f in schema]
            if key_columns:
                columns.append(f"PRIMARY KEY ({', '.join(self.database.quote(k) for k in key_columns)})")
            self.run(conn, f"CREATE TABLE IF NOT EXISTS {{target}} ({', '.join(columns)}) {self.table_options(conn)}")
            return self.table_columns(conn)
        self.check_engine(conn)
        have = {name.lower() for name in found}  # (column names are case-insensitive here)
        added = [f for f in schema if f.name.lower() not in have]
        for f in added:
            self.run(conn, f"ALTER TABLE {{target}} ADD COLUMN {self.database.quote(f.name)} {declared_type(f)}")
        return [*found, *(f.name for f in added)]

    def check_engine(self, conn: Any) -> None:
        """An existing table must be transactional, or a refused batch would leave rows behind."""
        [(engine,)] = self.run(
            conn,
            "SELECT coalesce(e.transactions, 'NO') FROM information_schema.tables t "
            "LEFT JOIN information_schema.engines e ON e.engine = t.engine "
            "WHERE t.table_schema = %s AND t.table_name = %s",
            (self.schema, self.table_name),
        )
        if engine != "YES":
            raise ConfigError(f"{self.label} is not transactional (its engine has no transactions): make it InnoDB")

    def load_rows(self, conn: Any, manifest: dict[str, Any], prepared: Any = None) -> None:
        for rows in self.staged_files(conn, manifest):
            self.load(conn, self.quoted(self.table_name), rows.schema_arrow, rows.iter_batches(batch_size=LOAD_ROWS))

    def load(self, conn: Any, table: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> None:
        """``batches`` (of ``schema``) into ``table`` (quoted) by ``LOAD DATA LOCAL INFILE``, one chunk at
        a time (the next chunk's text made by a thread while this one loads); a warning, or a row the
        server skipped, refuses them."""
        statement = load_statement(self.database.quote, table, schema)
        with tempfile.TemporaryDirectory(prefix="kafka-batch-load-") as folder:
            path = os.path.join(folder, "rows")
            for rows, text in prefetched((batch.num_rows, load_text(batch)) for batch in batches):
                if not text:
                    continue
                with open(path, "wb") as f:
                    f.write(text)
                try:
                    with sending(conn, path):
                        loaded = conn.cursor().execute(statement, (path,))
                except self.database.errors as exc:
                    if error_code(exc) in LOCAL_INFILE_REFUSED:
                        raise ConfigError(
                            f"{self.label}: the server refuses LOAD DATA LOCAL: set local_infile=ON"
                        ) from None
                    raise
                self.refuse_warnings(conn)
                if loaded != rows:  # (LOCAL skips a row whose key is taken, and says so only here)
                    raise ConfigError(f"{self.label}: {loaded} of {rows} rows loaded: the batch was not committed")

    def refuse_warnings(self, conn: Any) -> None:
        """A value the server cut, rounded, changed or dropped while loading (a warning or a note): the
        batch is refused in the server's words (they name the column and the row), and every retry
        would be refused alike."""
        found = self.run(conn, "SHOW WARNINGS")
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise ConfigError(f"{self.label}: {found[0][2]}{more}: the batch was not committed")

    def delete_older(self, conn: Any, truncated_at: str) -> None:
        """Rows older than a batch's newest truncate leave the table."""
        self.run(conn, f"DELETE FROM {{target}} WHERE {self.database.quote(ORDER_COLUMN)} < %s", (truncated_at,))

    # -- merged tables ---------------------------------------------------------------------------

    def merge_rows(self, conn: Any, manifest: dict[str, Any], prepared: MergeSource | None = None) -> None:
        """The reduced changes (:meth:`before_transaction`) loaded into a temporary table, then a
        truncate, the deletes, the updates and the inserts, each only where newer than the row."""
        if prepared is None:  # (reducing here would write deleted keys in the transaction, where DDL commits it)
            raise StorageError(f"{self.label}: batch {manifest['batch_id']} was not reduced before its transaction")
        merged = prepared
        keys = merged.key_columns
        if not keys:  # a batch of truncates only: no rows to create a table from
            if merged.truncated_at is not None and self.table_columns(conn):
                self.delete_older(conn, merged.truncated_at)
            return
        q = self.database.quote
        table_columns = self.table_columns(conn)
        source = q(SOURCE_TABLE)
        declared = ", ".join(f"{q(f.name)} {declared_type(f, f.name in keys)}" for f in merged.source.schema)
        self.run(conn, f"DROP TEMPORARY TABLE IF EXISTS {source}")
        self.run(conn, f"CREATE TEMPORARY TABLE {source} ({declared}) {self.table_options(conn)}")
        self.load(conn, source, merged.source.schema, merged.source.to_batches(max_chunksize=LOAD_ROWS))
        if merged.truncated_at is not None:
            self.delete_older(conn, merged.truncated_at)
        same_key = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)
        newer = f"s.{q(ORDER_COLUMN)} > t.{q(ORDER_COLUMN)}"
        op = q(OP_COLUMN)
        self.run(
            conn,
            f"DELETE t FROM {{target}} t JOIN {source} s ON {same_key} WHERE s.{op} = %s AND {newer}",
            (DELETE_OP,),
        )
        row_columns = merged.row_columns
        updates = []
        for name in table_columns:  # the whole row is replaced; a column the change left unavailable stays
            if name in keys:
                continue
            if name in merged.keep:
                value = f"CASE WHEN s.{q(merged.keep[name])} THEN t.{q(name)} ELSE s.{q(name)} END"
            elif name in row_columns:
                value = f"s.{q(name)}"
            else:
                value = "NULL"
            updates.append(f"t.{q(name)} = {value}")
        if updates:
            self.run(
                conn,
                f"UPDATE {{target}} t JOIN {source} s ON {same_key} SET {', '.join(updates)} "
                f"WHERE s.{op} = %s AND {newer}",
                (UPSERT_OP,),
            )
        inserted = ", ".join(q(c) for c in row_columns)
        self.run(
            conn,
            f"INSERT INTO {{target}} ({inserted}) SELECT {', '.join(f's.{q(c)}' for c in row_columns)} "
            f"FROM {source} s LEFT JOIN {{target}} t ON {same_key} WHERE s.{op} = %s AND t.{q(keys[0])} IS NULL",
            (UPSERT_OP,),
        )
        self.refuse_warnings(conn)
        self.run(conn, f"DROP TEMPORARY TABLE {source}")

    def rows_at(self, conn: Any, key_columns: Sequence[str], keys: Collection[tuple], columns: Sequence[str]) -> dict:
        """The table's rows at ``keys`` (their key and ``columns``)."""
        if not keys or not key_columns:
            return {}
        have = set(self.table_columns(conn))
        if not set(key_columns) <= have:
            return {}
        q = self.database.quote
        wanted = [c for c in columns if c in have and c not in key_columns]
        selected = ", ".join(q(c) for c in [*key_columns, *wanted])
        row = "(" + ", ".join(["%s"] * len(key_columns)) + ")"
        listed = list(keys)
        found: dict = {}
        for start in range(0, len(listed), KEYS_AT_ONCE):
            chunk = listed[start : start + KEYS_AT_ONCE]
            match = f"({', '.join(q(k) for k in key_columns)}) IN ({', '.join([row] * len(chunk))})"
            rows = self.run(conn, f"SELECT {selected} FROM {{target}} WHERE {match}", [v for key in chunk for v in key])
            for values in rows:
                found[tuple(values[: len(key_columns)])] = dict(zip(wanted, values[len(key_columns) :]))
        return found

    def column_type(self, kind: pa.DataType, name: str) -> str:
        return column_type(kind, name)


def column_type(kind: pa.DataType, name: str, key: bool = False) -> str:
    """The MariaDB/MySQL type of an Arrow column (see the module docstring)."""
    if key and kind in (pa.string(), pa.large_string()):
        return f"VARCHAR({KEY_LENGTH})"
    if key and kind in (pa.binary(), pa.large_binary()):
        return f"VARBINARY({KEY_LENGTH})"
    if key and (pa.types.is_nested(kind) or pa.types.is_null(kind)):
        raise ConfigError(f"column {name}: a key column of type {kind} cannot be indexed by MariaDB")
    simple = {
        pa.binary(): "LONGBLOB", pa.large_binary(): "LONGBLOB", pa.string(): "LONGTEXT", pa.large_string(): "LONGTEXT",
        pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
        pa.uint8(): "TINYINT UNSIGNED", pa.uint16(): "SMALLINT UNSIGNED", pa.uint32(): "INT UNSIGNED",
        pa.uint64(): "BIGINT UNSIGNED", pa.float32(): "DOUBLE", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN",
        pa.date32(): "DATE", pa.null(): "LONGTEXT",
    }  # fmt: skip
    if kind in simple:
        return simple[kind]
    if pa.types.is_timestamp(kind):
        return "DATETIME(6)"
    if pa.types.is_time(kind):
        return "TIME(6)"
    if pa.types.is_decimal(kind):
        if kind.precision > 65 or not 0 <= kind.scale <= 38:
            raise ConfigError(f"column {name}: {kind} does not fit MariaDB's DECIMAL (65 digits, 38 after the point)")
        return f"DECIMAL({kind.precision},{kind.scale})"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_struct(kind) or pa.types.is_map(kind):
        return "JSON"
    raise ConfigError(f"column {name}: MariaDB has no type for {kind}")


def load_statement(quote: Any, table: str, schema: pa.Schema) -> str:
    """``LOAD DATA`` of ``schema``'s columns into ``table``; a JSON column reads its text through a
    variable, converted from the file's bytes (MySQL takes no JSON in the binary character set)."""
    targets, converted = [], []
    for i, f in enumerate(schema):
        if column_type(f.type, f.name) == "JSON":
            targets.append(f"@v{i}")
            converted.append(f"{quote(f.name)} = CONVERT(@v{i} USING utf8mb4)")
        else:
            targets.append(quote(f.name))
    statement = f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET binary ({', '.join(targets)})"
    return statement + (f" SET {', '.join(converted)}" if converted else "")


def declared_type(f: pa.Field, key: bool = False) -> str:
    """A column's declared type (the ordering values compare bytewise, as ASCII)."""
    if f.name == ORDER_COLUMN:
        return f"VARCHAR({KEY_LENGTH}) CHARACTER SET ascii COLLATE ascii_bin"
    return column_type(f.type, f.name, key)


def open_mariadb_store(spec: Any):
    """The store of ``spec.table`` in the MariaDB/MySQL server at ``spec.database_url``."""
    return open_database_store(MariadbSink(str(spec.database_url), str(spec.table), spec.merge), spec)
