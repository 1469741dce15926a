"""A database output's URL from an Airflow ``postgres`` connection (hooks/database.py)."""

from __future__ import annotations

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.hooks.database import database_url_from_connection

pytestmark = pytest.mark.check


def test_a_postgres_connection_becomes_the_outputs_url(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_PG_OUT", "postgresql://ingest:p%40ss%2Fword@db.internal:5433/shop?sslmode=require")
    assert database_url_from_connection("pg_out") == (
        "postgresql://ingest:p%40ss%2Fword@db.internal:5433/shop?sslmode=require"
    )
    assert database_url_from_connection(None) is None


def test_a_connection_without_its_database_is_one_line_naming_the_schema_field(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_PG_NODB", "postgresql://ingest:secret@db.internal:5433")
    with pytest.raises(ConfigError, match="needs a host and the database") as refused:
        database_url_from_connection("pg_nodb")
    assert "secret" not in str(refused.value)


def test_a_batch_output_in_postgres_reads_its_connection_and_shows_no_password(monkeypatch):
    from kafka_batch_provider.operators.output import BatchOutput

    monkeypatch.setenv("AIRFLOW_CONN_PG_OUT", "postgresql://ingest:hunter2@db.internal:5433/shop")
    output = BatchOutput(output_format="postgres", table="public.orders", database_conn_id="pg_out")
    output.check()
    spec = output.spec()
    assert spec.database_url == "postgresql://ingest:hunter2@db.internal:5433/shop"
    assert "hunter2" not in repr(spec) and "hunter2" not in str(spec.describe()) and "hunter2" not in repr(output)
    with pytest.raises(ConfigError, match="needs the database's URL"):
        BatchOutput(output_format="postgres", table="public.orders").check()


def test_a_mysql_connection_becomes_a_mysql_url_with_its_tls_files(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_OUT",
        '{"conn_type": "mysql", "host": "db.internal", "port": 3307, "login": "ingest", "password": "p@ss/word", '
        '"schema": "shop", "extra": {"ssl": {"ca": "/etc/ca.pem", "cert": "/etc/c.pem"}, "ssl_verify_cert": true}}',
    )
    assert database_url_from_connection("my_out") == (
        "mysql://ingest:p%40ss%2Fword@db.internal:3307/shop?ssl_ca=%2Fetc%2Fca.pem&ssl_cert=%2Fetc%2Fc.pem"
        "&ssl_verify_cert=true"
    )


def test_a_connection_of_another_type_is_one_line_naming_the_types_taken(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_HTTP_OUT", "http://ingest:secret@db.internal:80/shop")
    with pytest.raises(ConfigError, match="takes a postgres or mysql connection") as refused:
        database_url_from_connection("http_out")
    assert "secret" not in str(refused.value)


def test_a_batch_output_in_mariadb_reads_its_connection_and_checks_at_parse_time(monkeypatch):
    from kafka_batch_provider.operators.output import BatchOutput

    monkeypatch.setenv("AIRFLOW_CONN_MY_OUT", "mysql://ingest:hunter2@db.internal:3306/shop")
    output = BatchOutput(output_format="mysql", table="shop.orders", database_conn_id="my_out")
    output.check()
    spec = output.spec()
    assert spec.database_url == "mysql://ingest:hunter2@db.internal:3306/shop"
    assert spec.describe()["database"] == "mysql://db.internal:3306/shop"
    assert "hunter2" not in repr(spec) and "hunter2" not in str(spec.describe()) and "hunter2" not in repr(output)
    monkeypatch.setenv("AIRFLOW_CONN_PG_OUT", "postgresql://ingest:hunter2@db.internal:5433/shop")
    wrong = BatchOutput(output_format="mysql", table="shop.orders", database_conn_id="pg_out")
    with pytest.raises(ConfigError, match="writes to a mysql:// database"):
        wrong.spec()


@pytest.mark.parametrize(
    "server, error, terminal",
    [
        ("postgres", "connection failed: at 127.0.0.1 failed: FATAL:  password authentication failed for user", True),
        ("postgres", 'connection failed: at 127.0.0.1 failed: FATAL:  database "shop" does not exist', True),
        ("postgres", "connection failed: at 127.0.0.1 failed: FATAL:  the database system is starting up", False),
        ("postgres", "connection failed: at 127.0.0.1 failed: Connection refused", False),
        ("mysql", (1045, "Access denied for user 'u'@'h' (using password: YES)"), True),
        ("mysql", (1406, "Data too long for column 'name' at row 1"), True),
        ("mysql", (2013, "Lost connection to MySQL server during query"), False),
        ("mysql", (1213, "Deadlock found when trying to get lock"), False),
    ],
)
def test_a_refusal_every_retry_would_meet_is_terminal_and_a_passing_failure_is_not(server, error, terminal):
    import psycopg
    import pymysql

    from kafka_batch_provider.errors import StorageError
    from kafka_batch_provider.output.databases import failure
    from kafka_batch_provider.output.databases.mariadb import MARIADB
    from kafka_batch_provider.output.databases.postgres import POSTGRES

    database = POSTGRES if server == "postgres" else MARIADB
    exc = psycopg.OperationalError(error) if server == "postgres" else pymysql.err.OperationalError(*error)
    found = failure(database, "a table", exc)
    assert isinstance(found, ConfigError if terminal else StorageError), f"{error!r}: got {type(found).__name__}"
    assert "\n" not in str(found)


def test_a_failure_with_a_sqlstate_is_judged_by_its_class():
    import psycopg

    from kafka_batch_provider.output.databases.postgres import POSTGRES

    class Refused(psycopg.Error):
        sqlstate = "42501"  # insufficient_privilege

    class Serialization(psycopg.Error):
        sqlstate = "40001"

    assert POSTGRES.terminal(Refused("permission denied for schema public"))
    assert not POSTGRES.terminal(Serialization("could not serialize access"))


@pytest.mark.parametrize(
    "server, error, conflict",
    [
        ("postgres", "40001", True),  # serialization_failure
        ("postgres", "40P01", True),  # deadlock_detected
        ("postgres", "55P03", False),  # lock_not_available (a lock_timeout: the statement alone failed)
        ("postgres", "08006", False),  # connection_failure: not the same transaction again
        ("postgres", None, False),
        ("mysql", 1213, True),  # ER_LOCK_DEADLOCK
        ("mysql", 1020, True),  # ER_CHECKREAD (innodb_snapshot_isolation)
        ("mysql", 1205, False),  # ER_LOCK_WAIT_TIMEOUT: InnoDB rolled back the statement only, after a long wait
        ("mysql", 2013, False),
    ],
)
def test_only_a_deadlock_or_serialization_failure_runs_the_transaction_again(server, error, conflict):
    import psycopg
    import pymysql

    from kafka_batch_provider.output.databases.mariadb import MARIADB
    from kafka_batch_provider.output.databases.postgres import POSTGRES

    if server == "postgres":
        exc = type("Refused", (psycopg.Error,), {"sqlstate": error})("refused")
        found = POSTGRES.conflict(exc)
    else:
        found = MARIADB.conflict(pymysql.err.OperationalError(error, "refused"))
    assert found is conflict, f"{server} {error}: expected conflict={conflict}, found {found}"


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_conflict_runs_the_transaction_again_even_when_a_merge_read_wrapped_it(monkeypatch, wrapped):
    # (review: the merge's own reads of the files table turn a driver error into a StorageError)
    import contextlib

    import psycopg

    from kafka_batch_provider.errors import StorageError
    from kafka_batch_provider.output import database_sink
    from kafka_batch_provider.output.databases import failure
    from kafka_batch_provider.output.postgres import PostgresSink

    sink = PostgresSink("postgresql://u:secret@db.internal:5432/shop", "public.orders")
    attempts: list[int] = []

    def commit_batch(conn, seq, manifest, prepared):
        attempts.append(seq)
        if len(attempts) < 3:
            deadlock = type("Deadlock", (psycopg.Error,), {"sqlstate": "40P01"})("deadlock detected")
            if not wrapped:
                raise deadlock
            try:
                raise deadlock
            except psycopg.Error as exc:
                raise failure(sink.database, sink.label, exc) from None
        return True

    monkeypatch.setattr(sink, "connect", lambda check=False: None)
    monkeypatch.setattr(sink, "writer_lock", lambda conn: contextlib.nullcontext())
    monkeypatch.setattr(sink, "ensure_log", lambda conn: None)
    monkeypatch.setattr(sink, "commit_batch", commit_batch)
    monkeypatch.setattr(database_sink.time, "sleep", lambda seconds: None)
    assert sink.append({"seq": 7, "batch_id": "b-7"}) is True
    assert attempts == [7, 7, 7], f"expected three attempts, found {attempts}"
    attempts.clear()
    monkeypatch.setattr(database_sink, "CONFLICT_ATTEMPTS", 2)
    with pytest.raises(StorageError, match="deadlock detected") as failed:
        sink.append({"seq": 7, "batch_id": "b-7"})
    assert len(attempts) == 2 and "secret" not in str(failed.value)
