"""Iceberg catalog properties from an Airflow connection (``catalog_conn_id``).

The connection's extra JSON holds pyiceberg's catalog properties as they are, e.g.
``{"type": "sql", "uri": "sqlite:////data/catalog.db", "warehouse": "s3://lake/wh",
"s3.endpoint": "...", "s3.access-key-id": "...", "s3.secret-access-key": "..."}`` or
``{"type": "rest", "uri": "https://catalog.example.com/api/catalog", "warehouse": "lake",
"credential": "client-id:client-secret"}``. The connection's own fields, when set, fill in
what the extra leaves out, the way the Apache Iceberg provider reads its connection:

* host -> ``uri`` (the whole URI, e.g. ``https://catalog.example.com/api/catalog``);
* login and password -> ``credential`` = ``login:password`` (a REST catalog's OAuth2 client
  id and secret); a password without a login -> ``token`` (a bearer token).

The properties hold secrets: they reach Spark in a private file, never XCom, logs or argv.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.config import is_secret


def catalog_properties_from_connection(conn_id: str | None) -> dict[str, str]:
    """pyiceberg catalog properties of the connection ``conn_id`` (``{}`` when ``conn_id`` is empty)."""
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    where = f"catalog connection {conn_id!r}"
    properties = {key: property_text(where, key, value) for key, value in (connection.extra_dejson or {}).items()}
    if connection.port:
        # A port beside a host URI would be silently dropped or glued on wrongly.
        raise ConfigError(f"catalog connection {conn_id!r}: put the port into the host URI, not the port field")
    if connection.host and "uri" not in properties:
        properties["uri"] = connection.host
    if connection.password and "credential" not in properties and "token" not in properties:
        if connection.login:
            properties["credential"] = f"{connection.login}:{connection.password}"
        else:
            properties["token"] = connection.password
    return {k: v for k, v in properties.items() if v != ""}


def property_text(where: str, key: str, value: Any) -> str:
    """pyiceberg properties are strings; JSON true/false/numbers become their text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or isinstance(value, (str, int, float)):
        return "" if value is None else str(value)
    raise ConfigError(
        f"{where}: key {key!r} must be a string, number or boolean "
        f"(pyiceberg catalog properties are flat), got a {type(value).__name__}"
    )


def check_public_properties(properties: Mapping[str, Any] | None) -> dict[str, str]:
    """Catalog properties given in the DAG itself (shown in the UI and the DAG file): never secrets."""
    properties = dict(properties or {})
    secret = sorted(str(k) for k, v in properties.items() if is_secret(str(k), v))
    if secret:
        raise ConfigError(
            f"catalog_properties holds {secret[0]!r}, a secret: DAG arguments are shown in the UI; "
            "put it in the extra of the catalog connection (catalog_conn_id)"
        )
    return {str(k): property_text("catalog_properties", str(k), v) for k, v in properties.items()}
