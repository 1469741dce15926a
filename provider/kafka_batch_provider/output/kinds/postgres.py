"""PostgreSQL tables (``--format postgres``): named ``SCHEMA.NAME`` in the database the database URL
names; rows, offset log and the protocol's files all in that database
(:mod:`kafka_batch_provider.output.postgres`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka_batch_provider.output.kinds.database import DatabaseKind

if TYPE_CHECKING:
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class PostgresKind(DatabaseKind):
    name = "postgres"
    what = "a PostgreSQL table"
    url_scheme = "postgresql"

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore:
        from kafka_batch_provider.output.postgres import open_postgres_store

        return open_postgres_store(spec)

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        """``postgres://HOST:PORT/DB/SCHEMA/TABLE``, as Airflow's Postgres provider names a table."""
        from kafka_batch_provider.core.assets import postgres_asset_uri

        return postgres_asset_uri(output.get("database"), output.get("table"))


POSTGRES_KIND = PostgresKind()
