"""PostgreSQL tables (``--format postgres --table SCHEMA.NAME``): the database output
(:mod:`kafka_batch_provider.output.database_sink`) in PostgreSQL.

The log and the files tables live in the target's schema. The batch's transaction runs READ
COMMITTED and holds a transaction-level advisory lock on the output's name, its writer lock; rows
reach the table by ``COPY``, built in compiled code: in the binary format where the table's columns
are of the types it encodes (:mod:`kafka_batch_provider.output.postgres_binary`), as CSV text
otherwise (:mod:`kafka_batch_provider.output.postgres_copy`); a new column is added inside the
batch's transaction (PostgreSQL's DDL is transactional).

What types the columns get (:func:`column_type`): text, bytea, smallint/integer/bigint, real,
double precision, boolean, numeric(p,s), date, time, timestamp, timestamptz, arrays of those, and
jsonb for structs, maps and lists of structs (the Kafka ``headers``: their bytes as base64 text).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.merging import DELETE_OP, OP_COLUMN, ORDER_COLUMN, UPSERT_OP
from kafka_batch_provider.errors import ConfigError, StorageError
from kafka_batch_provider.output import postgres_binary
from kafka_batch_provider.output.database_sink import LOAD_ROWS, LOG_TABLE, DatabaseSink, open_database_store
from kafka_batch_provider.output.databases.postgres import POSTGRES as POSTGRES_DATABASE
from kafka_batch_provider.output.databases.postgres import create_once
from kafka_batch_provider.output.merge_source import merge_batch, prefetched
from kafka_batch_provider.output.postgres_copy import csv_text

POSTGRES = "postgres"
#: The temporary table a merged batch's reduced rows are copied into (dropped at commit).
SOURCE_TABLE = "kafka_batch_source"


class PostgresSink(DatabaseSink):
    """The sink of one PostgreSQL table (see the module docstring)."""

    database = POSTGRES_DATABASE
    format = POSTGRES
    #: PostgreSQL's longest name (NAMEDATALEN - 1)
    name_bytes = 63

    def identifier(self, name: str) -> Any:
        from psycopg import sql

        return sql.Identifier(self.schema, name)

    def ensure_log(self, conn: Any) -> None:
        create_once(
            conn,
            self.schema,
            LOG_TABLE,
            f"CREATE TABLE IF NOT EXISTS {self.quoted(LOG_TABLE)} (output text NOT NULL, seq bigint NOT NULL, "
            "batch_id text NOT NULL, entry jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (output, seq))",
        )

    @contextmanager
    def transaction(self, conn: Any) -> Iterator[Any]:
        from psycopg.pq import TransactionStatus

        with conn.transaction():
            # READ COMMITTED whatever the database's default: the lock is the guard, and the check after it
            # must see the last holder's commit (under REPEATABLE READ or SERIALIZABLE the lock's own
            # statement would fix the snapshot before the wait). A transaction-level lock: nothing of it
            # outlives the transaction (a session's lock would outlive it on a pooled server connection).
            conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"kafka_batch:{self.name}",))
            yield conn
            if conn.info.transaction_status == TransactionStatus.INERROR:  # (an error swallowed inside the block)
                raise StorageError(f"{self.label}: its transaction failed")

    def load_rows(self, conn: Any, manifest: dict[str, Any], prepared: Any = None) -> None:
        """The sealed attempt's staged files into the table (created from the first file's columns)."""
        for rows in self.staged_files(conn, manifest):
            self.ensure_table(conn, rows.schema_arrow)
            target = self.identifier(self.table_name)
            copy_rows(conn, target, rows.schema_arrow, rows.iter_batches(batch_size=LOAD_ROWS))

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

    # -- merged tables ---------------------------------------------------------------------------

    def merge_rows(self, conn: Any, manifest: dict[str, Any], prepared: Any = None) -> None:
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
        copy_rows(conn, source, merged.source.schema, merged.source.to_batches(max_chunksize=LOAD_ROWS))
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

    def column_type(self, kind: pa.DataType, name: str) -> str:
        return column_type(kind, name)


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


def copy_rows(conn: Any, target: Any, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> None:
    """``batches`` (of ``schema``) into ``target`` by ``COPY``: in the binary format where every column
    has one and the table's columns are of the types it encodes (output/postgres_binary.py), as CSV
    text otherwise (output/postgres_copy.py: the server converts text to whatever type a column has);
    the next chunk made by a thread while this one is sent."""
    from psycopg import sql

    columns = sql.SQL(", ").join(map(sql.Identifier, schema.names))
    types = column_types(conn, target) if postgres_binary.encodable(schema) else {}
    if types and all(types.get(f.name) == declared_name(f) for f in schema):
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(target, columns)
        with conn.cursor().copy(statement) as copy:
            copy.write(postgres_binary.SIGNATURE)
            for data in prefetched(postgres_binary.binary_rows(batch) for batch in batches):
                copy.write(data)
            copy.write(postgres_binary.TRAILER)
        return
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, columns)) as copy:
        for text in prefetched(csv_text(batch) for batch in batches):
            copy.write(text)


def column_types(conn: Any, target: Any) -> dict[str, str]:
    """The table's columns and their types as PostgreSQL names them (``format_type``)."""
    return dict(
        conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped",
            (target.as_string(conn),),
        ).fetchall()
    )


#: How format_type spells the types column_type names otherwise.
FORMAT_TYPE_NAMES = {"timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone"}


def declared_name(f: pa.Field) -> str:
    kind = column_type(f.type, f.name)
    return FORMAT_TYPE_NAMES.get(kind, kind)


def declared_type(f: pa.Field) -> str:
    """A column's declared type (the ordering values compare bytewise, whatever the database's collation)."""
    return column_type(f.type, f.name) + (' COLLATE "C"' if f.name == ORDER_COLUMN else "")


def open_postgres_store(spec: Any):
    """The store of ``spec.table`` in the PostgreSQL database at ``spec.database_url``."""
    return open_database_store(PostgresSink(str(spec.database_url), str(spec.table), spec.merge), spec)
