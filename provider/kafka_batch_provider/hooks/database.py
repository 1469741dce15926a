"""A database output's URL from an Airflow connection (``database_conn_id``): a ``postgres``
connection (Airflow's Postgres provider) or a ``mysql`` one (Airflow's MySQL provider), read as those
providers read them: host, port, login, password, and the database in the ``schema`` field; TLS
from the extra as each provider names it (``output/databases/``: each server's ``tls_parameters``).
The URL holds the password: it reaches Spark through the environment, never XCom, logs or argv.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.databases import database_of

#: Connection type -> the URL's scheme.
SCHEMES = {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


def database_url_from_connection(conn_id: str | None) -> str | None:
    """``SCHEME://LOGIN:PASSWORD@HOST:PORT/DB?...`` of the connection (``None`` without one)."""
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    scheme = SCHEMES.get((connection.conn_type or "").lower())
    if scheme is None:
        raise ConfigError(
            f"database connection {conn_id!r} is of type {connection.conn_type!r}; a database output takes a "
            "postgres or mysql connection"
        )
    if not connection.host or not connection.schema:
        raise ConfigError(
            f"database connection {conn_id!r} needs a host and the database (in its schema field, as the "
            "Postgres and MySQL providers name it)"
        )
    login = quote(connection.login or "", safe="")
    password = f":{quote(connection.password, safe='')}" if connection.password else ""
    user = f"{login}{password}@" if login or password else ""
    extra = connection.extra_dejson or {}
    query = urlencode(database_of(f"{scheme}://").tls_parameters(extra, conn_id))
    port = f":{connection.port}" if connection.port else ""
    return f"{scheme}://{user}{connection.host}{port}/{quote(connection.schema)}" + (f"?{query}" if query else "")
