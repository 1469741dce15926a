"""MariaDB and MySQL tables (``--format mysql``): named ``DB.NAME`` on the server the database URL
names; rows, offset log and the protocol's files all in that database
(:mod:`kafka_batch_provider.output.mariadb`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka_batch_provider.output.kinds.database import DatabaseKind

if TYPE_CHECKING:
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class MysqlKind(DatabaseKind):
    name = "mysql"
    what = "a MariaDB or MySQL table"
    url_scheme = "mysql"

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore:
        from kafka_batch_provider.output.mariadb import open_mariadb_store

        return open_mariadb_store(spec)

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        """``mysql://HOST:PORT/DB/TABLE``, as Airflow's MySQL provider names a table."""
        from kafka_batch_provider.core.assets import mysql_asset_uri

        return mysql_asset_uri(output.get("database"), output.get("table"))


MYSQL_KIND = MysqlKind()
