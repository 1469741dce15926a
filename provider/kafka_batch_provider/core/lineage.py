"""OpenLineage names and facts of a batch, as plain data. Pure, no I/O, no OpenLineage import.

Datasets are named by the OpenLineage naming spec (``namespace``, ``name``), from the asset URIs
of :mod:`kafka_batch_provider.core.assets`, so the lineage graph and Airflow's asset graph name
the same things:

==========================================  ==========================================  =====================
asset URI                                   namespace                                   name
==========================================  ==========================================  =====================
``kafka://host:port/orders``                ``kafka://host:port``                       ``orders``
``file:///lake/orders``                     ``file``                                    ``/lake/orders``
``s3://bucket/lake/orders``                 ``s3://bucket``                             ``lake/orders``
``gs://bucket/lake/orders``                 ``gs://bucket``                             ``lake/orders``
``abfs://c@acct.dfs.core.windows.net/p``    ``abfss://c@acct.dfs.core.windows.net``     ``p``
``iceberg://catalog/ns/orders``             ``iceberg://catalog``                       ``ns.orders``
``postgres://host:5432/shop/public/orders``  ``postgres://host:5432``                    ``shop.public.orders``
``mysql://host:3306/shop/orders``            ``mysql://host:3306``                       ``shop.orders``
==========================================  ==========================================  =====================

No standard facet carries Kafka offsets, so a batch's are in a run facet of this package's own,
``kafkaBatchOffsets`` (:func:`offsets_run_facet`): batch id, log sequence number, mode, and each
partition's range ``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from kafka_batch_provider.core.assets import offset_ranges
from kafka_batch_provider.core.manifest import entry_files
from kafka_batch_provider.core.plan import INCREMENTAL

#: The run facet's key in an OpenLineage event, and where its JSON schema is documented.
OFFSETS_FACET = "kafkaBatchOffsets"
OFFSETS_FACET_SCHEMA_URL = (
    "https://github.com/airflow-provider-kafka-batch/airflow-provider-kafka-batch/blob/main/docs/"
    "KafkaBatchOffsetsRunFacet.json#/$defs/KafkaBatchOffsetsRunFacet"
)

#: The facet's JSON Schema (draft 2020-12), in OpenLineage's form: a ``RunFacet`` (``_producer``,
#: ``_schemaURL``) with the batch's fields, under ``$defs`` as ``_schemaURL`` names it.
#: docs/KafkaBatchOffsetsRunFacet.json is this (a test keeps them equal); the tests validate
#: every emitted facet against it.
OFFSETS_FACET_DEFINITION: dict[str, Any] = {
    "title": "KafkaBatchOffsetsRunFacet",
    "type": "object",
    "required": ["_producer", "_schemaURL", "batchId", "seq", "mode", "replay", "ranges"],
    "properties": {
        "_producer": {"type": "string", "format": "uri"},
        "_schemaURL": {"type": "string", "format": "uri"},
        "batchId": {"type": "string", "minLength": 1},
        "seq": {"type": "integer", "minimum": 0},
        "mode": {"type": "string", "enum": ["incremental", "replay"]},
        "replay": {"type": "boolean"},
        "groupId": {"type": ["string", "null"]},
        "ranges": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["topic", "partition", "start", "end"],
                "additionalProperties": False,
                "properties": {
                    "topic": {"type": "string", "minLength": 1},
                    "partition": {"type": "integer", "minimum": 0},
                    "start": {"type": "integer", "minimum": 0},
                    "end": {"type": "integer", "minimum": 0},
                },
            },
        },
    },
    "additionalProperties": False,
}
OFFSETS_FACET_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": OFFSETS_FACET_SCHEMA_URL.split("#")[0],
    "$ref": "#/$defs/KafkaBatchOffsetsRunFacet",
    "$defs": {"KafkaBatchOffsetsRunFacet": OFFSETS_FACET_DEFINITION},
}


def dataset_name(asset_uri: str) -> tuple[str, str]:
    """``(namespace, name)`` of an asset URI by the OpenLineage naming spec (the table above).

    :raises ValueError: a scheme the spec has no naming for here.
    """
    parts = urlsplit(asset_uri)
    path = unquote(parts.path)
    if parts.scheme == "kafka":
        return f"kafka://{parts.netloc}", path.lstrip("/")
    if parts.scheme == "file":
        return "file", path
    if parts.scheme in ("s3", "gs"):
        return f"{parts.scheme}://{parts.netloc}", path.lstrip("/")
    if parts.scheme in ("abfs", "abfss"):
        return f"abfss://{parts.netloc}", path.lstrip("/")
    if parts.scheme == "iceberg":
        return f"iceberg://{unquote(parts.netloc)}", ".".join(p for p in path.split("/") if p)
    if parts.scheme in ("postgres", "mysql"):  # postgres://HOST:PORT, DATABASE.SCHEMA.TABLE; mysql: DATABASE.TABLE
        return f"{parts.scheme}://{parts.netloc}", ".".join(p for p in path.split("/") if p)
    raise ValueError(f"no OpenLineage dataset name for {asset_uri!r}")


def offsets_run_facet(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of the ``kafkaBatchOffsets`` run facet, from a plan's summary or a log entry
    (a batch that does not commit the group, ``mode`` ``replay``, is a replay)."""
    return {
        "batchId": summary["batch_id"],
        "seq": int(summary["seq"]),
        "mode": summary.get("mode"),
        "replay": summary.get("mode") != INCREMENTAL,
        "groupId": summary.get("group_id"),
        "ranges": offset_ranges(summary.get("ranges") or ()),
    }


def rows_by_topic(entry: Mapping[str, Any]) -> dict[str, int]:
    """The rows a logged batch wrote from each topic (its ranges' ``rows``)."""
    found: dict[str, int] = {}
    for r in entry.get("ranges") or ():
        found[r["topic"]] = found.get(r["topic"], 0) + int(r.get("rows") or 0)
    return found


def output_statistics(entry: Mapping[str, Any]) -> dict[str, int]:
    """``rowCount``, ``size`` (bytes) and ``fileCount`` of the files a logged batch wrote (dead
    letters are in their own folder and not counted)."""
    files = entry_files(entry)
    return {"rowCount": int(entry.get("rows") or 0), "size": sum(files.values()), "fileCount": len(files)}


def dataset_version(entry: Mapping[str, Any]) -> str:
    """The output's version after a batch: the Delta table's version, the Iceberg snapshot's id,
    or (the Parquet layout) the batch's log sequence number."""
    for key in ("table_version", "snapshot_id"):
        if entry.get(key) is not None:
            return str(entry[key])
    return str(entry["seq"])


def schema_fields(schema: Any) -> list[dict[str, Any]]:
    """An Arrow schema as the schema facet's fields: ``name``, ``type`` and nested ``fields``
    (structs' children, a list's or map's element type)."""
    return [_field(f.name, f.type) for f in schema]


def _field(name: str, kind: Any) -> dict[str, Any]:
    import pyarrow as pa

    field: dict[str, Any] = {"name": name, "type": str(kind)}
    if pa.types.is_struct(kind):
        field["fields"] = [_field(kind.field(i).name, kind.field(i).type) for i in range(kind.num_fields)]
    elif any(
        check(kind)
        for check in (
            pa.types.is_list,
            pa.types.is_large_list,
            pa.types.is_fixed_size_list,
            pa.types.is_list_view,
            pa.types.is_large_list_view,
        )
    ):
        field["fields"] = [_field("_element", kind.value_type)]
    elif pa.types.is_map(kind):
        field["fields"] = [_field("key", kind.key_type), _field("value", kind.item_type)]
    return field
