"""A database output's URL from an Airflow connection (``database_conn_id``), the ``postgres``
connection type of Airflow's Postgres provider: host, port, login, password, and the database in
its ``schema`` field (the provider's naming), with ``sslmode``, ``sslrootcert``, ``sslcert`` and
``sslkey`` from the extra. The URL holds the password: it reaches Spark through the environment,
never XCom, logs or argv.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from kafka_batch_provider.errors import ConfigError

#: The extra's keys that become libpq connection parameters.
SSL_KEYS = ("sslmode", "sslrootcert", "sslcert", "sslkey")


def database_url_from_connection(conn_id: str | None) -> str | None:
    """``postgresql://LOGIN:PASSWORD@HOST:PORT/DB?sslmode=...`` of the connection (``None`` without one)."""
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    if not connection.host or not connection.schema:
        raise ConfigError(
            f"database connection {conn_id!r} needs a host and the database (in its schema field, as the Postgres "
            "provider names it)"
        )
    login = quote(connection.login or "", safe="")
    password = f":{quote(connection.password, safe='')}" if connection.password else ""
    user = f"{login}{password}@" if login or password else ""
    extra = connection.extra_dejson or {}
    query = urlencode({key: str(extra[key]) for key in SSL_KEYS if extra.get(key)})
    port = f":{connection.port}" if connection.port else ""
    return f"postgresql://{user}{connection.host}{port}/{quote(connection.schema)}" + (f"?{query}" if query else "")
