"""OpenLineage for the tasks of a batch: the plan, Spark and commit operators.

Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``, the ``openlineage``
extra) calls ``get_openlineage_facets_on_start``, ``_on_complete`` and ``_on_failure`` of a task
it reports; without that provider nothing here is imported or called. Every method is read-only
and works from what the task already knows: its arguments, the plan's XCom and the batch's log
entry the task kept (:attr:`BatchLineage.lineage_entry`), so a lineage backend that is down or
slow never touches a batch. Names and facts come from :mod:`kafka_batch_provider.core.lineage`.

An event carries:

* inputs: the batch's topics (``kafka://host:port``, topic), with the offsets it spans per topic
  and, once written, the rows read from each (input statistics);
* output: the output by its store's scheme (a folder, a Delta table or an Iceberg table), and,
  once written, its statistics (rows, bytes, files), its version (Delta version, Iceberg
  snapshot id, or the log sequence number) and the batch files' schema;
* the ``kafkaBatchOffsets`` run facet: batch id, log sequence number, mode and each
  partition's range (no standard facet carries Kafka offsets).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kafka_batch_provider.core.lineage import (
    OFFSETS_FACET,
    dataset_name,
    dataset_version,
    offsets_by_topic,
    offsets_run_facet,
    output_statistics,
    rows_by_topic,
    schema_fields,
)


@dataclass
class BatchFacts:
    """What a task knows of its batch when the OpenLineage provider asks."""

    bootstrap_servers: str | None
    topics: list[str]
    output: Mapping[str, Any] | None  # format, output, table (OutputSpec.describe())
    catalog_properties: Mapping[str, Any] = field(default_factory=dict)
    summary: Mapping[str, Any] | None = None  # the plan's XCom
    entry: Mapping[str, Any] | None = None  # the batch's log entry, once written
    schema: Any = None  # the Arrow schema of the batch's files, once written


class BatchLineage:
    """OpenLineage methods of a batch's task; an operator says what it knows in :meth:`batch_facts`.

    :attr:`lineage_entry` is the batch's log entry, kept by ``execute`` once the batch is written
    (the Spark task) or committed (the commit task); :attr:`lineage_schema` the Arrow schema of its files.
    """

    lineage_entry: Mapping[str, Any] | None = None
    lineage_schema: Any = None

    def batch_facts(self, task_instance: Any) -> BatchFacts:  # pragma: no cover - each operator's own
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> Any:
        return operator_lineage(self.batch_facts(None))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return operator_lineage(self.batch_facts(task_instance))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return operator_lineage(self.batch_facts(task_instance))


def running_task_instance(task_instance: Any) -> Any:
    """The task instance the provider passed, or (on start, when it passes none) the running one's."""
    if task_instance is not None:
        return task_instance
    from airflow.sdk import get_current_context

    return get_current_context()["ti"]


def bootstrap_servers_of(kafka_config_id: str) -> str | None:
    """The ``kafka`` connection's ``bootstrap.servers`` (no credentials are read into the event)."""
    from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook

    return KafkaOffsetsHook(kafka_config_id).kafka_config.get("bootstrap.servers")


def plan_task_facts(task: Any, task_instance: Any, output_of_run: Any) -> BatchFacts:
    """A plan task's batch: its topics and the output this run plans into; its plan once made."""
    from kafka_batch_provider.core.validation import check_topics
    from kafka_batch_provider.operators.xcom import as_list

    ti = running_task_instance(task_instance)
    spec = output_of_run(ti.get_template_context()).spec()
    summary = getattr(task, "lineage_summary", None)
    if summary is None and task_instance is not None:
        summary = ti.xcom_pull(task_ids=task.task_id)
    return BatchFacts(
        bootstrap_servers_of(task.kafka_config_id),
        check_topics(as_list(task.topics)),
        spec.describe(),
        spec.catalog_properties,
        summary=summary or None,
    )


def planned_task_facts(task: Any, task_instance: Any) -> BatchFacts:
    """A Spark or commit task's batch: the plan's XCom, and once written the batch's log entry
    (:attr:`BatchLineage.lineage_entry`) and its files' schema."""
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.output.tables import files_schema

    ti = running_task_instance(task_instance)
    summary = ti.xcom_pull(task_ids=task.plan_task_id)
    bootstrap = bootstrap_servers_of(task.kafka_config_id)
    if not summary or not summary.get("plan_path"):  # no batch: the topics are not even known
        return BatchFacts(bootstrap, [], None)
    spec = task.batch_output.planned(summary).spec()
    entry = task.lineage_entry
    schema = files_schema(open_store(spec, create=False).data, entry) if entry and entry.get("files") else None
    return BatchFacts(
        bootstrap,
        sorted({r["topic"] for r in summary.get("ranges") or ()}),
        spec.describe(),
        spec.catalog_properties,
        summary=summary,
        entry=entry,
        schema=schema,
    )


def operator_lineage(facts: BatchFacts) -> Any:
    """The provider's ``OperatorLineage`` of a batch's task."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    summary, entry = facts.summary, facts.entry
    ranges = (entry or summary or {}).get("ranges") or ()
    run_facets = {}
    if summary or entry:
        replay = (entry or summary or {}).get("mode") != "incremental"
        run_facets[OFFSETS_FACET] = offsets_facet_class()(**offsets_run_facet(entry or summary, replay))
    return OperatorLineage(
        inputs=input_datasets(facts, ranges),
        outputs=output_datasets(facts),
        run_facets=run_facets,
    )


def input_datasets(facts: BatchFacts, ranges: Any) -> list[Any]:
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet

    from kafka_batch_provider.core.assets import topic_uri

    if not facts.bootstrap_servers:
        return []
    spans = offsets_by_topic(ranges)
    rows = rows_by_topic(facts.entry) if facts.entry else {}
    found = []
    for topic in facts.topics or sorted(spans):
        namespace, name = dataset_name(topic_uri(facts.bootstrap_servers, topic))
        facets = {}
        if topic in rows:
            facets["inputStatistics"] = InputStatisticsInputDatasetFacet(rowCount=rows[topic])
        found.append(InputDataset(namespace=namespace, name=name, inputFacets=facets))
    return found


def output_datasets(facts: BatchFacts) -> list[Any]:
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet

    from kafka_batch_provider.operators.assets import output_asset_uri

    if not facts.output or not (facts.output.get("output") or facts.output.get("table")):
        return []
    namespace, name = dataset_name(output_asset_uri(facts.output, facts.catalog_properties))
    facets: dict[str, Any] = {}
    output_facets: dict[str, Any] = {}
    if facts.entry:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=dataset_version(facts.entry))
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(**output_statistics(facts.entry))
    if facts.schema is not None:
        facets["schema"] = SchemaDatasetFacet(fields=[schema_field(f) for f in schema_fields(facts.schema)])
    return [OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets)]


def schema_field(found: Mapping[str, Any]) -> Any:
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacetFields

    children = [schema_field(f) for f in found.get("fields") or ()]
    return SchemaDatasetFacetFields(name=found["name"], type=found["type"], fields=children or None)


@cache
def offsets_facet_class() -> type:
    """The ``kafkaBatchOffsets`` run facet's class (built once, when the provider first asks)."""
    import attr
    from openlineage.client.generated.base import RunFacet

    from kafka_batch_provider.core.lineage import OFFSETS_FACET_SCHEMA_URL

    @attr.define
    class KafkaBatchOffsetsRunFacet(RunFacet):
        """A batch's Kafka offsets: ``ranges`` of ``{topic, partition, start, end}`` (end exclusive)."""

        batchId: str  # noqa: N815 - OpenLineage's camelCase
        seq: int
        mode: str | None
        replay: bool
        groupId: str | None  # noqa: N815
        ranges: list[dict[str, Any]]

        @staticmethod
        def _get_schema() -> str:
            return OFFSETS_FACET_SCHEMA_URL

    return KafkaBatchOffsetsRunFacet
