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
