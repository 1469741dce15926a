"""PostgreSQL tables (``--format postgres --table SCHEMA.NAME``): a batch's rows and its offsets in
one database transaction, the source articles' recipe for exactly once.

Where everything lives, all in the target's database (no filesystem):

* the rows: the target table, created from the first batch's columns (:func:`column_type`);
* the offset log: ``<schema>.kafka_batch_log`` (``output``, ``seq``, ``batch_id``, ``entry`` jsonb),
  one row per batch, its primary key ``(output, seq)``;
* plans, Kafka commit records, the Spark tasks' staged Parquet files and dead letters:
  ``<schema>.kafka_batch_files`` (:mod:`kafka_batch_provider.output.database_files`).

The Spark tasks stage each attempt's rows as Parquet files in the database, as they stage them
in a bucket for the other outputs. :meth:`PostgresSink.append` then takes one transaction: it
holds the output's advisory lock, checks that the batch's entry is the next free one, copies the
sealed attempt's files into the table (``COPY``), inserts the log entry and deletes the staged
files, and commits. Two writers of one entry: the second finds the entry taken (``False``, nothing
of its rows stays); a crash before ``COMMIT`` leaves nothing but staged files, which the retry's
attempt replaces. Readers never see part of a batch. The Kafka commit follows and mirrors the
log, as for every output; the plan takes the log's offsets as the truth.

What types the columns get (:func:`column_type`): text, bytea, smallint/integer/bigint, real,
double precision, boolean, numeric(p,s), date, time, timestamp, timestamptz, arrays of those, and
jsonb for structs, maps and lists of structs (the Kafka ``headers``: their bytes as base64 text),
copied as CSV text built in compiled code (:mod:`kafka_batch_provider.output.postgres_copy`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import DELETE_OP, OP_COLUMN, ORDER_COLUMN, UPSERT_OP, MergeSpec
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError, ManifestError, StorageError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.output.database_files import FILES_TABLE, connection_of, create_once, files_uri, one_line
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.merge_source import merge_batch, prefetched
from kafka_batch_provider.output.postgres_copy import csv_text
from kafka_batch_provider.output.tables import StagedInPlace, table_merge

POSTGRES = "postgres"
LOG_TABLE = "kafka_batch_log"
CONTROL = "_kafka_batch"
#: PostgreSQL's longest name (NAMEDATALEN - 1), in bytes.
NAME_BYTES = 63
#: The temporary table a merged batch's reduced rows are copied into (dropped at commit).
SOURCE_TABLE = "kafka_batch_source"
#: Rows turned into COPY text at a time (output/postgres_copy.py): what the driver holds at once.
COPY_ROWS = 50_000


def split_table(table: str) -> tuple[str, str]:
    """``(schema, name)`` of ``SCHEMA.NAME``."""
    schema, _, name = table.strip().partition(".")
    if not schema or not name or "." in name:
        raise ConfigError(f"{Setting('table')} names a PostgreSQL table as SCHEMA.NAME, got {table!r}")
    return schema, name


class PostgresSink(StagedInPlace):
    """The sink of one PostgreSQL table (see the module docstring).

    :param url: ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (a secret: never shown).
    :param table: ``SCHEMA.NAME``.
    """

    format = POSTGRES
    dead_letter_root = f"{CONTROL}/_dead_letters"

    def __init__(self, url: str, table: str, merge: MergeSpec | None = None) -> None:
        self._url = url
        self.schema, self.table_name = split_table(table)
        self.name = f"{self.schema}.{self.table_name}"
        self.label = f"PostgreSQL table {self.name}"
        self.merge = merge
        self.partition_by = None
        self.data = Location(files_uri(url, self.name), {"url": url})

    def __repr__(self) -> str:
        return f"PostgresSink({self.data.uri!r})"

    # -- SQL -----------------------------------------------------------------------------------

    def connect(self) -> Any:
        """This thread's connection to the database (autocommitted; ``transaction()`` for more)."""
        import psycopg

        try:
            return connection_of(self._url)
        except psycopg.Error as exc:
            raise StorageError(f"{self.label}: {one_line(exc)}") from None

    def identifier(self, name: str) -> Any:
        from psycopg import sql

        return sql.Identifier(self.schema, name)

    def ensure_log(self, conn: Any) -> None:
        """The schema's log table, created by one writer (``CREATE TABLE IF NOT EXISTS`` races)."""
        from psycopg import sql

        create_once(
            conn,
            self.schema,
            LOG_TABLE,
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (output text NOT NULL, seq bigint NOT NULL, batch_id text NOT NULL, "
                "entry jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (output, seq))"
            ).format(self.identifier(LOG_TABLE)),
        )

    def query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One read of the log (an empty answer before the log table exists)."""
        import psycopg
        from psycopg import sql

        conn = self.connect()
        try:
            found = conn.execute("SELECT to_regclass(%s)", (f'"{self.schema}".{LOG_TABLE}',)).fetchone()
            if found is None or found[0] is None:
                return []
            return conn.execute(sql.SQL(statement).format(log=self.identifier(LOG_TABLE)), params).fetchall()
        except psycopg.Error as exc:
            raise StorageError(f"{self.label}: {one_line(exc)}") from None

    # -- the log -------------------------------------------------------------------------------

    def entry(self, seq: int) -> dict[str, Any] | None:
        found = self.query("SELECT entry FROM {log} WHERE output = %s AND seq = %s", (self.name, seq))
        return dict(found[0][0]) if found else None

    def tail_seq(self) -> int:
        found = self.query("SELECT max(seq) FROM {log} WHERE output = %s", (self.name,))
        return int(found[0][0]) if found and found[0][0] is not None else 0

    def tail(self) -> dict[str, Any] | None:
        found = self.query("SELECT entry FROM {log} WHERE output = %s ORDER BY seq DESC LIMIT 1", (self.name,))
        return dict(found[0][0]) if found else None

    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]:
        """Every entry (``last``: the newest ones), oldest first."""
        statement = "SELECT entry FROM {log} WHERE output = %s ORDER BY seq DESC" + (" LIMIT %s" if last else "")
        found = self.query(statement, (self.name, last) if last else (self.name,))
        return iter([dict(row[0]) for row in reversed(found)])

    def append(self, manifest: dict[str, Any]) -> bool:
        """The batch's rows and its log entry in one transaction, only while its entry is the next
        free one (``False`` when another batch took it: nothing of this one stays)."""
        import psycopg
        from psycopg import sql
        from psycopg.pq import TransactionStatus as pq_status

        seq = int(manifest["seq"])
        conn = self.connect()
        try:
            self.ensure_log(conn)
            with conn.transaction():
                # One writer at a time per output: the check below and the insert are one step.
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"kafka_batch:{self.name}",))
                [(newest,)] = conn.execute(
                    sql.SQL("SELECT coalesce(max(seq), 0) FROM {} WHERE output = %s").format(
                        self.identifier(LOG_TABLE)
                    ),
                    (self.name,),
                ).fetchall()
                if newest >= seq:
                    return False
                if newest != seq - 1:
                    raise ManifestError(f"{self.label} holds batch {newest} as its newest: cannot add {seq}")
                if self.merging:
                    self.merge_rows(conn, manifest)
                else:
                    self.copy_rows(conn, manifest)
                conn.execute(
                    sql.SQL("INSERT INTO {} (output, seq, batch_id, entry) VALUES (%s, %s, %s, %s)").format(
                        self.identifier(LOG_TABLE)
                    ),
                    (self.name, seq, manifest["batch_id"], json.dumps(manifest)),
                )
                if manifest.get("files"):  # the staged rows are the table's now (the dead letters are published next)
                    names = [f"{self.name}/{manifest['location']}/{f['name']}" for f in manifest["files"]]
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE path = ANY(%s)").format(self.identifier(FILES_TABLE)), (names,)
                    )
                if conn.info.transaction_status == pq_status.INERROR:  # (an error swallowed inside the block)
                    raise StorageError(f"{self.label}: batch {manifest['batch_id']}: its transaction failed")
                fail_point("before-database-commit")
        except psycopg.Error as exc:
            raise StorageError(f"{self.label}: {one_line(exc)}") from None
        return True

    def copy_rows(self, conn: Any, manifest: Mapping[str, Any]) -> None:
        """The sealed attempt's staged files into the table (created from the first file's columns)."""
        from psycopg import sql

        files = manifest.get("files") or []
        for f in files:
            path = f"{self.name}/{manifest['location']}/{f['name']}"
            found = conn.execute(
                sql.SQL("SELECT data FROM {} WHERE path = %s").format(self.identifier(FILES_TABLE)), (path,)
            ).fetchone()
            if found is None:
                raise ManifestError(f"batch {manifest['batch_id']}: its staged file {f['name']} is gone")
            rows = pq.ParquetFile(io.BytesIO(found[0]))
            self.ensure_table(conn, rows.schema_arrow)
            copy_csv(
                conn, self.identifier(self.table_name), rows.schema_arrow.names, rows.iter_batches(batch_size=COPY_ROWS)
            )

    def ensure_table(self, conn: Any, schema: pa.Schema, key_columns: Sequence[str] = ()) -> list[str]:
        """The table with ``schema``'s columns: created (its primary key ``key_columns``), or given the
        columns it lacks (in this transaction: a batch that adds a column adds it with its rows); its
        columns now, in order."""
        from psycopg import sql

        def declared(f: pa.Field) -> Any:
            return sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(declared_type(f)))

        target = self.identifier(self.table_name)
        found = self.table_columns(conn)
        if not found:
            columns = [declared(f) for f in schema]
            if key_columns:
                columns.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, key_columns))))
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(target, sql.SQL(", ").join(columns)))
            return schema.names
        added = [f for f in schema if f.name not in set(found)]
        for f in added:
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {}").format(target, declared(f)))
        return [*found, *(f.name for f in added)]

    def delete_older(self, conn: Any, truncated_at: str) -> None:
        """Rows older than a batch's newest truncate leave the table."""
        from psycopg import sql

        conn.execute(
            sql.SQL('DELETE FROM {} WHERE {} < %s COLLATE "C"').format(
                self.identifier(self.table_name), sql.Identifier(ORDER_COLUMN)
            ),
            (truncated_at,),
        )

    def table_columns(self, conn: Any) -> list[str]:
        """The table's columns in order (none while it does not exist)."""
        return [
            name
            for (name,) in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "ORDER BY ordinal_position",
                (self.schema, self.table_name),
            ).fetchall()
        ]

    # -- merged tables ---------------------------------------------------------------------------

    @property
    def merging(self) -> bool:
        return self.merge is not None and self.merge.merges

    def merge_rows(self, conn: Any, manifest: dict[str, Any]) -> None:
        """The batch's changes, each key's newest, applied where newer than the row (the merge engine of
        the Delta and Iceberg tables, :func:`~kafka_batch_provider.output.merge_source.merge_batch`):
        the reduced rows copied into a temporary table, then a truncate, the deletes, the updates and
        the inserts (``ON CONFLICT DO NOTHING``: a stale change never wins) in this transaction."""
        from psycopg import sql

        merged = merge_batch(self, manifest, conn)
        keys = merged.key_columns
        order = sql.Identifier(ORDER_COLUMN)
        target, source = self.identifier(self.table_name), sql.Identifier(SOURCE_TABLE)
        if not keys:  # a batch of truncates only: no rows to create a table from
            if merged.truncated_at is not None and self.table_columns(conn):
                self.delete_older(conn, merged.truncated_at)
            return
        table_columns = self.ensure_table(conn, merged.row_schema, keys)
        columns = {f.name: declared_type(f) for f in merged.source.schema}
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(
                source,
                sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in columns.items()),
            )
        )
        copy_csv(conn, source, merged.source.column_names, merged.source.to_batches(max_chunksize=COPY_ROWS))
        if merged.truncated_at is not None:
            self.delete_older(conn, merged.truncated_at)
        same_key = sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in keys)
        newer = sql.SQL('s.{0} COLLATE "C" > t.{0} COLLATE "C"').format(order)
        op = sql.Identifier(OP_COLUMN)
        conn.execute(
            sql.SQL("DELETE FROM {} t USING {} s WHERE s.{} = %s AND {} AND {}").format(
                target, source, op, same_key, newer
            ),
            (DELETE_OP,),
        )
        row_columns = merged.row_columns
        updates = []
        for name in table_columns:  # the whole row is replaced; a column the change left unavailable stays
            if name in keys:
                continue
            if name in merged.keep:
                value = sql.SQL("CASE WHEN s.{} THEN t.{} ELSE s.{} END").format(
                    sql.Identifier(merged.keep[name]), sql.Identifier(name), sql.Identifier(name)
                )
            elif name in row_columns:
                value = sql.SQL("s.{}").format(sql.Identifier(name))
            else:
                value = sql.SQL("NULL")
            updates.append(sql.SQL("{} = {}").format(sql.Identifier(name), value))
        if updates:
            conn.execute(
                sql.SQL("UPDATE {} t SET {} FROM {} s WHERE s.{} = %s AND {} AND {}").format(
                    target, sql.SQL(", ").join(updates), source, op, same_key, newer
                ),
                (UPSERT_OP,),
            )
        inserted = sql.SQL(", ").join(map(sql.Identifier, row_columns))
        conn.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} s WHERE s.{} = %s ON CONFLICT ({}) DO NOTHING").format(
                target, inserted, inserted, source, op, sql.SQL(", ").join(map(sql.Identifier, keys))
            ),
            (UPSERT_OP,),
        )

    def rows_at(self, conn: Any, key_columns: Sequence[str], keys: Collection[tuple], columns: Sequence[str]) -> dict:
        """The table's rows at ``keys`` (their key and ``columns``), as this transaction sees it."""
        from psycopg import sql

        if not keys or not key_columns:
            return {}
        have = set(self.table_columns(conn))
        if not set(key_columns) <= have:
            return {}
        wanted = [c for c in columns if c in have and c not in key_columns]
        selected = sql.SQL(", ").join(map(sql.Identifier, [*key_columns, *wanted]))
        if len(key_columns) == 1:
            match = sql.SQL("{} = ANY(%s)").format(sql.Identifier(key_columns[0]))
            params: tuple[Any, ...] = ([key[0] for key in keys],)
        else:
            row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(key_columns)))
            match = sql.SQL("({}) IN (VALUES {})").format(
                sql.SQL(", ").join(map(sql.Identifier, key_columns)), sql.SQL(", ").join([row] * len(keys))
            )
            params = tuple(value for key in keys for value in key)
        rows = conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE {}").format(selected, self.identifier(self.table_name), match), params
        ).fetchall()
        return {tuple(row[: len(key_columns)]): dict(zip(wanted, row[len(key_columns) :])) for row in rows}

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
        """Refuse, before anything is read, a column PostgreSQL cannot hold: a type it has not, or
        a name longer than its 63 bytes (it would cut the name short, silently)."""
        for f in schema:
            column_type(f.type, f.name)
            if len(f.name.encode()) > NAME_BYTES:
                raise ConfigError(
                    f"{self.label}: column {f.name[:40]!r}... is {len(f.name.encode())} bytes long, and PostgreSQL "
                    f"names hold at most {NAME_BYTES}: rename the field, or write this topic to another format"
                )


def column_type(kind: pa.DataType, name: str) -> str:
    """The PostgreSQL type of an Arrow column (see the module docstring)."""
    simple = {
        pa.binary(): "bytea", pa.large_binary(): "bytea", pa.string(): "text", pa.large_string(): "text",
        pa.int8(): "smallint", pa.int16(): "smallint", pa.int32(): "integer", pa.int64(): "bigint",
        pa.uint8(): "smallint", pa.uint16(): "integer", pa.uint32(): "bigint", pa.uint64(): "numeric(20,0)",
        pa.float32(): "real", pa.float64(): "double precision", pa.bool_(): "boolean", pa.date32(): "date",
        pa.null(): "text",
    }  # fmt: skip
    if kind in simple:
        return simple[kind]
    if pa.types.is_timestamp(kind):
        return "timestamptz" if kind.tz else "timestamp"
    if pa.types.is_time(kind):
        return "time"
    if pa.types.is_decimal(kind):
        if kind.precision > 1000:
            raise ConfigError(f"column {name}: {kind} has more digits than PostgreSQL's numeric holds (1000)")
        return f"numeric({kind.precision},{kind.scale})"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = kind.value_type
        if pa.types.is_struct(inner) or pa.types.is_map(inner) or pa.types.is_list(inner):
            return "jsonb"
        return column_type(inner, name) + "[]"
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return "jsonb"
    raise ConfigError(f"column {name}: PostgreSQL has no type for {kind}")


def copy_csv(conn: Any, target: Any, names: Sequence[str], batches: Iterable[pa.RecordBatch]) -> None:
    """``batches`` into ``target``'s ``names`` by ``COPY`` as CSV text (output/postgres_copy.py), the
    next batch's text made by a thread while this one is sent."""
    from psycopg import sql

    columns = sql.SQL(", ").join(map(sql.Identifier, names))
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, columns)) as copy:
        for text in prefetched(csv_text(batch) for batch in batches):
            copy.write(text)


def declared_type(f: pa.Field) -> str:
    """A column's declared type (the ordering values compare bytewise, whatever the database's collation)."""
    return column_type(f.type, f.name) + (' COLLATE "C"' if f.name == ORDER_COLUMN else "")


def open_postgres_store(spec: Any):
    """The store of ``spec.table`` in the database at ``spec.database_url`` (the table is created
    by its first batch's transaction); a table keeps the merge mode of its batches."""
    from kafka_batch_provider.output.store import BatchStore

    sink = PostgresSink(str(spec.database_url), str(spec.table), spec.merge)
    sink.merge = table_merge(sink.label, sink.tail(), sink.merge)
    return BatchStore(sink.data.uri_of(CONTROL), {"url": spec.database_url}, sink=sink)
