"""Airflow assets of an ingestion: what the topics and the output are called, and what a batch's
asset event says. Pure, no I/O.

The names follow the URI conventions of Airflow's providers, so an asset declared here is the
same asset another DAG, a provider's OpenLineage converter or the UI knows:

* a topic: ``kafka://<first bootstrap server>/<topic>`` (apache-airflow-providers-apache-kafka);
* a folder or Delta table: its URI (``s3://bucket/path``, ``gs://``, ``abfs://``, ...), or
  ``file:///absolute/path`` for a local one (apache-airflow-providers-common-io);
* an Iceberg table: ``iceberg://<catalog name>/<namespace>/<table>`` (no provider defines one;
  this package registers the scheme and its OpenLineage converter).

An asset event's ``extra`` carries the facts of one committed batch (:func:`batch_event_extra`),
taken from its log entry: a downstream DAG reads exactly that batch from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from kafka_batch_provider.errors import ConfigError

#: The scheme of Iceberg tables' assets.
ICEBERG_SCHEME = "iceberg"
#: The ``catalog`` name of an Iceberg table's asset when the catalog properties name none.
DEFAULT_CATALOG = "kafka_batch"


def topic_uri(bootstrap_servers: str, topic: str) -> str:
    """``kafka://host:port/topic`` by the first bootstrap server (the Kafka provider's form)."""
    servers = [s.strip() for s in str(bootstrap_servers or "").split(",") if s.strip()]
    if not servers:
        raise ConfigError(f"topic {topic!r} has no Kafka asset without bootstrap.servers")
    server = servers[0].split("://", 1)[-1]  # SASL_SSL://host:port lists name the listener first
    return f"kafka://{server}/{quote(topic, safe='')}"


def iceberg_asset_uri(table: str | None, catalog: str | None = None) -> str:
    """``iceberg://<catalog>/<namespace>/<table>``: an Iceberg table's asset URI."""
    if not table or "." not in table:
        raise ConfigError(f"an Iceberg output's asset needs its table as NAMESPACE.NAME, got {table!r}")
    namespace, name = table.rsplit(".", 1)
    return f"{ICEBERG_SCHEME}://{quote(catalog or DEFAULT_CATALOG, safe='')}/{quote(namespace)}/{quote(name)}"


def postgres_asset_uri(database: str | None, table: str | None) -> str:
    """``postgres://HOST:PORT/DB/SCHEMA/TABLE`` (Airflow's Postgres provider's form) of ``table``
    (``SCHEMA.NAME``) in ``database`` (``postgresql://HOST:PORT/DB``, no credentials)."""
    parts = urlsplit(database or "")
    name = parts.path.strip("/")
    if not parts.hostname or not name or not table or "." not in table:
        raise ConfigError(f"a PostgreSQL output's asset needs its database and table, got {table!r}")
    schema, relation = table.split(".", 1)
    return f"postgres://{parts.hostname}:{parts.port or 5432}/{quote(name)}/{quote(schema)}/{quote(relation)}"


def mysql_asset_uri(database: str | None, table: str | None) -> str:
    """``mysql://HOST:PORT/DB/TABLE`` (Airflow's MySQL provider's form) of ``table`` (``DB.NAME``) on
    the server of ``database`` (``mysql://HOST:PORT/DB``, no credentials)."""
    parts = urlsplit(database or "")
    if not parts.hostname or not table or "." not in table:
        raise ConfigError(f"a MariaDB/MySQL output's asset needs its server and table, got {table!r}")
    schema, relation = table.split(".", 1)
    return f"mysql://{parts.hostname}:{parts.port or 3306}/{quote(schema)}/{quote(relation)}"


def location_asset_uri(output_format: str, location_uri: str | None) -> str:
    """The asset URI of an output named by its location: the location's canonical URI
    (``Location.uri``: ``file:///abs/path``, ``s3://bucket/path``; the same location spelled
    ``s3a://`` or with a trailing slash is the same asset)."""
    if not location_uri:
        raise ConfigError(f"a {output_format} output's asset needs its location")
    return location_uri.rstrip("/")


def batch_event_extra(entry: Mapping[str, Any], output: Mapping[str, Any], replay: bool) -> dict[str, Any]:
    """What a batch's asset event says (JSON): batch id, log sequence number, rows, dead letters,
    the per-partition offset ranges ``[start, end)``, the table's version (Delta) or snapshot
    (Iceberg), whether it was a replay, the output it went to (format, path or table), and the
    offsets it skipped as deleted (``gaps``), if any.

    :param entry: the batch's log entry.
    :param output: the output as :meth:`~kafka_batch_provider.output.formats.OutputSpec.describe` shows it.
    """
    dead = entry.get("dead_letters") or {}
    extra: dict[str, Any] = {
        "batch_id": entry["batch_id"],
        "seq": int(entry["seq"]),
        "mode": entry.get("mode"),
        "replay": bool(replay),
        "rows": int(entry.get("rows") or 0),
        "dead_letters": int(dead.get("rows") or 0),
        "ranges": offset_ranges(entry.get("ranges") or ()),
        "output": {k: output.get(k) for k in ("format", "output", "table")},
    }
    for key in ("table_version", "snapshot_id"):
        if entry.get(key) is not None:
            extra[key] = int(entry[key])
    if entry.get("gaps"):  # offsets skipped on purpose (data-loss policy earliest): gone, not in the batch
        extra["gaps"] = offset_ranges(entry["gaps"])
    return extra


def offset_ranges(ranges: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A plan's or log entry's ranges as plain ``{topic, partition, start, end}`` (end exclusive)."""
    return [
        {"topic": r["topic"], "partition": int(r["partition"]), "start": int(r["start"]), "end": int(r["end"])}
        for r in ranges
    ]


def emits_event(extra: Mapping[str, Any], emit_empty: bool) -> bool:
    """A batch that wrote nothing (no rows, no dead letters) emits no event unless asked to."""
    return emit_empty or bool(extra["rows"] or extra["dead_letters"])


def check_iceberg_uri(uri: str) -> None:
    """``iceberg://<catalog>/<namespace>/<table>``: a catalog and a table in a namespace.

    :raises ValueError: (what Airflow's URI handlers raise) otherwise.
    """
    parts = urlsplit(uri)
    path = [p for p in parts.path.split("/") if p]
    if parts.scheme != ICEBERG_SCHEME or not parts.netloc or len(path) < 2:
        raise ValueError(f"an Iceberg asset is iceberg://<catalog>/<namespace>/<table>, got {uri!r}")


def ranges_by_topic(extra: Mapping[str, Any]) -> dict[str, list[tuple[int, int, int]]]:
    """An event's ranges per topic: ``[(partition, start, end)]`` (what a downstream reader filters by)."""
    found: dict[str, list[tuple[int, int, int]]] = {}
    for r in extra.get("ranges") or ():
        found.setdefault(r["topic"], []).append((int(r["partition"]), int(r["start"]), int(r["end"])))
    return found


def topic_uris(bootstrap_servers: str, topics: Sequence[str]) -> list[str]:
    return [topic_uri(bootstrap_servers, t) for t in topics]
