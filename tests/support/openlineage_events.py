"""Check OpenLineage run events as a lineage backend would read them.

openlineage-python (1.54) ships the spec's model as Python classes generated from the
OpenLineage JSON schemas (``openlineage.client.generated``), not the schema files themselves.
So an event's keys must be a RunEvent's and its datasets', and its fields are built back into
those classes, whose constructors refuse a missing or unknown field and whose validators check
the event time and the run id; every facet must carry ``_producer`` and ``_schemaURL`` as URIs; the facets this
package sets are built into their own classes, and its ``kafkaBatchOffsets`` run facet is
validated against its JSON Schema (:data:`~kafka_batch_provider.core.lineage.OFFSETS_FACET_JSON_SCHEMA`)
with ``jsonschema``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kafka_batch_provider.core.lineage import OFFSETS_FACET, OFFSETS_FACET_JSON_SCHEMA

EVENT_KEYS = {"eventType", "eventTime", "run", "job", "producer", "schemaURL", "inputs", "outputs"}
DATASET_KEYS = {"namespace", "name", "facets", "inputFacets", "outputFacets"}


def read_events(folder: Path) -> list[dict[str, Any]]:
    """The events the file transport wrote (one JSON file per event), in emission order."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def check_run_event(event: Mapping[str, Any]) -> None:
    """Raise ``AssertionError`` (saying what is wrong) unless ``event`` is a valid run event."""
    import jsonschema
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet
    from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet

    where = f"{event.get('eventType')} event of {event.get('job', {}).get('name')}"
    unknown = set(event) - EVENT_KEYS
    assert not unknown, f"{where}: keys a RunEvent does not have: {sorted(unknown)}"
    for dataset in [*(event.get("inputs") or ()), *(event.get("outputs") or ())]:
        assert not set(dataset) - DATASET_KEYS, f"{where}: unknown dataset keys {sorted(set(dataset) - DATASET_KEYS)}"
    try:
        RunEvent(
            eventType=RunState(event["eventType"]),
            eventTime=event["eventTime"],
            run=Run(runId=event["run"]["runId"]),
            job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]),
            producer=event["producer"],
            inputs=[InputDataset(namespace=d["namespace"], name=d["name"]) for d in event.get("inputs") or ()],
            outputs=[OutputDataset(namespace=d["namespace"], name=d["name"]) for d in event.get("outputs") or ()],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AssertionError(f"{where}: not a valid RunEvent ({type(exc).__name__}: {exc})") from None
    assert uri(event.get("producer")) and uri(event.get("schemaURL")), f"{where}: producer and schemaURL must be URIs"

    facets = [("run", k, v) for k, v in (event["run"].get("facets") or {}).items()]
    facets += [("job", k, v) for k, v in (event["job"].get("facets") or {}).items()]
    typed = {
        "schema": SchemaDatasetFacet,
        "version": DatasetVersionDatasetFacet,
        "inputStatistics": InputStatisticsInputDatasetFacet,
        "outputStatistics": OutputStatisticsOutputDatasetFacet,
    }
    for side in ("inputs", "outputs"):
        for dataset in event.get(side) or ():
            for group in ("facets", "inputFacets", "outputFacets"):
                facets += [(f"{side} {dataset['name']}", k, v) for k, v in (dataset.get(group) or {}).items()]
    for owner, key, facet in facets:
        assert isinstance(facet, dict), f"{where}: {owner} facet {key} is not an object: {facet!r}"
        if facet.get("_deleted"):
            continue
        assert uri(facet.get("_producer")) and uri(facet.get("_schemaURL")), (
            f"{where}: {owner} facet {key} needs _producer and _schemaURL URIs, found {sorted(facet)}"
        )
        if key in typed and owner != "run":
            fields = {k: v for k, v in facet.items() if not k.startswith("_")}
            if key == "schema":
                fields["fields"] = [schema_field(f) for f in fields.get("fields") or ()]
            try:
                typed[key](**fields)
            except TypeError as exc:
                raise AssertionError(f"{where}: {owner} facet {key} does not fit its spec class: {exc}") from None
    offsets = (event["run"].get("facets") or {}).get(OFFSETS_FACET)
    if offsets is not None:
        errors = sorted(jsonschema.Draft202012Validator(OFFSETS_FACET_JSON_SCHEMA).iter_errors(offsets), key=str)
        assert not errors, f"{where}: {OFFSETS_FACET} does not validate: {[e.message for e in errors]}"


def schema_field(found: Mapping[str, Any]) -> Any:
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacetFields

    children = [schema_field(f) for f in found.get("fields") or ()]
    return SchemaDatasetFacetFields(**{**found, "fields": children or None})


def uri(value: Any) -> bool:
    return isinstance(value, str) and bool(urlsplit(value).scheme)
