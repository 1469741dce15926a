"""``SchemaRegistryHook``: the schema registry of ``--value-format avro`` from an Airflow connection.

A connection of type ``schema_registry`` (declared in the provider info, with its form):

* host -> the registry's URL (``https://registry.example.com`` or just the host name; the
  schema field, ``http`` by default, is the scheme then), port -> its port;
* login and password -> basic auth (``basic.auth.user.info``: Confluent Cloud's API key and secret);
* extra -> any other setting of confluent-kafka's ``SchemaRegistryClient``: ``bearer.auth.*``
  (a static token or OAuth client credentials), ``ssl.ca.location``,
  ``ssl.certificate.location``, ``ssl.key.location``.

The settings hold secrets: they reach the Spark tasks in a private file (spark-submit) or inside
the pickled function (Spark Connect), never XCom, logs, plans or argv.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow.sdk import BaseHook

from kafka_batch_provider.connection_forms import REGISTRY_FORM
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.registry.settings import RegistrySettings, settings_from_connection


class SchemaRegistryHook(BaseHook):
    """A Confluent-compatible schema registry's URL and client settings, from a ``schema_registry``
    connection; ``get_conn`` is the registry client the plan and Spark steps use.

    :param schema_registry_conn_id: a ``schema_registry`` connection.
    """

    conn_name_attr = "schema_registry_conn_id"
    default_conn_name = "schema_registry_default"
    conn_type = "schema_registry"
    hook_name = "Schema Registry (Confluent-compatible)"

    def __init__(self, schema_registry_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.schema_registry_conn_id = schema_registry_conn_id

    def settings(self) -> RegistrySettings:
        """The registry's URL and client settings (credentials included)."""
        connection = self.get_connection(self.schema_registry_conn_id)
        if not connection.host:
            raise ConfigError(
                f"schema registry connection {self.schema_registry_conn_id!r} has no host: set the registry's URL"
            )
        try:
            return settings_from_connection(connection)
        except ConfigError as exc:
            raise ConfigError(f"schema registry connection {self.schema_registry_conn_id!r}: {exc}") from None

    def get_conn(self) -> Any:
        from kafka_batch_provider.registry.client import SchemaRegistry

        return SchemaRegistry(self.settings())

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: what the fields mean for a schema registry."""
        return copy.deepcopy(REGISTRY_FORM)


def registry_conn_for(value_format: str, conn_id: str | None, key_format: str = "bytes") -> str | None:
    """The ``schema_registry`` connection a task of ``value_format`` and ``key_format`` uses: refused
    without one for a registry format (when the DAG is parsed), ``None`` when neither is one (the
    other formats never open it)."""
    from kafka_batch_provider.core.reader_schema import REGISTRY_FORMATS
    from kafka_batch_provider.registry.reader_schema import require_registry

    parts = [(part, fmt) for part, fmt in (("value", value_format), ("key", key_format)) if fmt in REGISTRY_FORMATS]
    if not parts:
        return None
    if not conn_id:
        require_registry(parts[0][1], None, parts[0][0])
    return conn_id


def registry_settings(conn_id: str | None) -> RegistrySettings | None:
    """The settings of the connection ``conn_id`` (``None`` without one)."""
    return SchemaRegistryHook(conn_id).settings() if conn_id else None
