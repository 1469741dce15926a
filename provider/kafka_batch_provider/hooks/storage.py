"""Storage credentials from an Airflow connection, as fsspec storage options.

The operators take ``storage_conn_id``: an ``aws`` connection (s3fs), a
``google_cloud_platform`` connection (gcsfs) or a ``wasb`` connection (adlfs), read the way
the Amazon, Google and Microsoft providers read them, without needing those providers
installed. Without a connection, the filesystem's own defaults apply (``AWS_*`` variables,
instance roles, application default credentials, ...). The options hold secrets: they go to
Spark in a private file, never into XCom, logs, plans or manifests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kafka_batch_provider.errors import ConfigError


def storage_options_from_connection(conn_id: str | None) -> dict[str, Any]:
    """fsspec options for the connection ``conn_id`` (``{}`` when ``conn_id`` is empty)."""
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    extra = connection.extra_dejson or {}
    conn_type = (connection.conn_type or "").replace("-", "_")
    if conn_type == "aws":
        return aws_options(connection.login, connection.password, extra)
    if conn_type in ("google_cloud_platform", "gcp"):
        return gcp_options(extra)
    if conn_type in ("wasb", "azure_data_lake", "adls"):
        return azure_options(connection.login or connection.host, connection.password, extra)
    raise ConfigError(
        f"connection {conn_id!r} is of type {connection.conn_type!r}; storage connections must be of type "
        "aws, google_cloud_platform or wasb"
    )


def aws_options(login: str | None, password: str | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """s3fs options from an ``aws`` connection (login/password or extra keys, endpoint, region)."""
    options: dict[str, Any] = {}
    key = login or extra.get("aws_access_key_id")
    secret = password or extra.get("aws_secret_access_key")
    if key and secret:
        options.update(key=key, secret=secret)
    if extra.get("aws_session_token"):
        options["token"] = extra["aws_session_token"]
    endpoint = extra.get("endpoint_url") or (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
    if endpoint:
        options["endpoint_url"] = endpoint
    if extra.get("region_name"):
        options["client_kwargs"] = {"region_name": extra["region_name"]}
    return options


def gcp_options(extra: Mapping[str, Any]) -> dict[str, Any]:
    """gcsfs options from a ``google_cloud_platform`` connection (key file path or JSON, project)."""

    def get(name: str) -> Any:
        return extra.get(name) or extra.get(f"extra__google_cloud_platform__{name}")

    options: dict[str, Any] = {}
    if get("keyfile_dict"):
        keyfile = get("keyfile_dict")
        options["token"] = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
    elif get("key_path"):
        options["token"] = get("key_path")
    if get("project"):
        options["project"] = get("project")
    return options


def azure_options(account: str | None, key: str | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """adlfs options from a ``wasb`` connection (account key, connection string, SAS or service principal)."""
    options: dict[str, Any] = {}
    if extra.get("connection_string"):
        options["connection_string"] = extra["connection_string"]
    if account:
        options["account_name"] = account
    if key:
        options["account_key"] = key
    for name in ("sas_token", "tenant_id", "client_id", "client_secret"):
        if extra.get(name):
            options[name] = extra[name]
    return options
