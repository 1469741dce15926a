"""A database output's URL from an Airflow connection (``database_conn_id``): a ``postgres``
connection (Airflow's Postgres provider) or a ``mysql`` one (Airflow's MySQL provider), read as those
providers read them: host, port, login, password, and the database in the ``schema`` field.

TLS comes from the extra as each provider names it: ``sslmode``, ``sslrootcert``, ``sslcert``,
``sslkey`` (postgres); ``ssl`` as ``{"ca": ..., "cert": ..., "key": ...}`` or ``ssl_ca``, ``ssl_cert``,
``ssl_key`` (mysql), with ``ssl_verify_cert`` / ``ssl_verify_identity``. The URL holds the password:
it reaches Spark through the environment, never XCom, logs or argv.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from kafka_batch_provider.errors import ConfigError

#: The postgres extra's keys that become libpq connection parameters.
SSL_KEYS = ("sslmode", "sslrootcert", "sslcert", "sslkey")
#: The mysql extra's ``ssl`` keys and the URL parameters they become (output/databases/mariadb.py).
MYSQL_SSL = {"ca": "ssl_ca", "cert": "ssl_cert", "key": "ssl_key"}
MYSQL_FLAGS = ("ssl_verify_cert", "ssl_verify_identity")
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
    query = urlencode(postgres_tls(extra) if scheme == "postgresql" else mysql_tls(extra, conn_id))
    port = f":{connection.port}" if connection.port else ""
    return f"{scheme}://{user}{connection.host}{port}/{quote(connection.schema)}" + (f"?{query}" if query else "")


def postgres_tls(extra: dict[str, Any]) -> dict[str, str]:
    return {key: str(extra[key]) for key in SSL_KEYS if extra.get(key)}


def mysql_tls(extra: dict[str, Any], conn_id: str) -> dict[str, str]:
    ssl = extra.get("ssl") or {}
    if isinstance(ssl, str):
        try:
            ssl = json.loads(ssl)
        except ValueError:
            raise ConfigError(f"database connection {conn_id!r}: its extra's ssl is not JSON") from None
    found = {param: str(ssl[key]) for key, param in MYSQL_SSL.items() if isinstance(ssl, dict) and ssl.get(key)}
    found.update({param: str(extra[param]) for param in MYSQL_SSL.values() if extra.get(param)})
    found.update({flag: str(extra[flag]).lower() for flag in MYSQL_FLAGS if flag in extra})
    return found
