"""A committed batch as an Airflow asset event (its URI and extra: :mod:`kafka_batch_provider.core.assets`).

The task that ends a batch (the commit task of an ingestion; the Spark task of a replay, which
commits no group) has an :class:`~airflow.sdk.AssetAlias` among its outlets and adds one event
on the output's asset through it, only after the batch is committed. An alias, not the asset
itself: Airflow emits an event for every plain asset outlet of a successful task, and a batch
that wrote nothing should emit none; the output is also known only when the task runs (a
templated path, a backfill run's replay output).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias

from kafka_batch_provider.core.assets import batch_event_extra, emits_event, iceberg_asset_uri, topic_uris


def batch_alias(group_id: str) -> AssetAlias:
    """The alias a task group's batches are announced through (one per consumer group or replay)."""
    return AssetAlias(name=f"kafka-batch:{group_id}")


def topic_assets(bootstrap_servers: str | None, topics: Sequence[str] | str) -> list[Asset]:
    """The topics as inlets (``kafka://host:port/topic``); none when the servers or the topics are
    not known when the DAG is parsed (a Jinja template)."""
    if not bootstrap_servers or isinstance(topics, str) and "{{" in topics:
        return []
    names = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else [str(t) for t in topics]
    if any("{{" in n for n in names):
        return []
    return [Asset(uri=uri) for uri in topic_uris(bootstrap_servers, [n for n in names if n])]


def output_asset_uri(output: Mapping[str, Any], catalog_properties: Mapping[str, Any] | None = None) -> str:
    """The asset URI of an output as the plan's XCom describes it (format, output, table): a
    location by its canonical URI (:class:`~kafka_batch_provider.output.location.Location`)."""
    from kafka_batch_provider.output.kinds import kind_of

    return kind_of(str(output.get("format") or "parquet")).asset_uri(output, (catalog_properties or {}).get("name"))


def asset_of(uri: str) -> Any:
    """The active asset with ``uri``, whatever its name (a DAG may declare ``Asset(name="orders",
    uri=...)``: an event must reach that one), or a new one named by its URI."""
    try:
        from airflow.sdk.execution_time.context import OutletEventAccessors

        OutletEventAccessors._get_asset_from_db(uri=uri)  # raises when no asset has the URI
        return Asset.ref(uri=uri)
    except Exception:  # noqa: BLE001 - no such asset yet (or no metadata DB to ask): one named by its URI
        return Asset(uri=uri)


def emit_batch_event(
    task: Any,
    context: Mapping[str, Any],
    entry: Mapping[str, Any],
    output: Mapping[str, Any],
    replay: bool,
    emit_empty: bool = False,
    catalog_properties: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Add the batch's event through each of the task's alias outlets; the event (its ``uri`` and
    extra), or ``None`` when the task has no alias or the batch wrote nothing (``emit_empty``)."""
    aliases = [o for o in getattr(task, "outlets", None) or () if isinstance(o, AssetAlias)]
    if not aliases:
        return None
    extra = batch_event_extra(entry, output, replay)
    if not emits_event(extra, emit_empty):
        task.log.info("batch %s wrote nothing: no asset event", extra["batch_id"])
        return None
    uri = output_asset_uri(output, catalog_properties)
    for alias in aliases:
        context["outlet_events"][alias].add(asset_of(uri), extra=extra)
    task.log.info("batch %s: asset event on %s (%d rows)", extra["batch_id"], uri, extra["rows"])
    return {"uri": uri, **extra}


# -- the iceberg:// scheme, as get_provider_info() registers it with Airflow ---------------------


def sanitize_iceberg_uri(uri: Any) -> Any:
    """Airflow's check of an ``iceberg://<catalog>/<namespace>/<table>`` asset (a ``SplitResult``)."""
    from kafka_batch_provider.core.assets import check_iceberg_uri

    check_iceberg_uri(uri.geturl())
    return uri


def create_iceberg_asset(*, catalog: str, table: str, extra: dict | None = None) -> Asset:
    """The asset of the Iceberg table ``NAMESPACE.NAME`` in ``catalog``."""
    return Asset(uri=iceberg_asset_uri(table, catalog), extra=extra)


def iceberg_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """An Iceberg asset as an OpenLineage dataset: namespace ``iceberg://<catalog>``, name ``<namespace>.<table>``."""
    from urllib.parse import unquote, urlsplit

    from airflow.providers.common.compat.openlineage.facet import Dataset

    parts = urlsplit(asset.uri)
    return Dataset(namespace=f"iceberg://{parts.netloc}", name=".".join(unquote(p) for p in parts.path.split("/") if p))
