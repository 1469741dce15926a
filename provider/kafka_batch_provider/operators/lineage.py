"""OpenLineage for the tasks of a batch: the plan, Spark and commit operators.

Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``, the ``openlineage``
extra) calls ``get_openlineage_facets_on_start``, ``_on_complete`` and ``_on_failure`` of a task
it reports; without that provider nothing here is imported or called. Every method is read-only
and works from what the task already knows: its arguments, the plan's XCom and the batch's log
entry the task kept (:attr:`BatchLineage.lineage_entry`), so a lineage backend that is down or
slow never touches a batch. Names and facts come from :mod:`kafka_batch_provider.core.lineage`.

An event carries:

* inputs: the batch's topics (``kafka://host:port``, topic), and, once the Spark task wrote the
  batch, the rows read from each (input statistics);
* output: only the Spark task's, which writes the batch: the output by its store's scheme (a
  folder, a Delta table or an Iceberg table) and, once written, its statistics (rows, bytes,
  files), its version (Delta version, Iceberg snapshot id, or the log sequence number) and the
  batch files' schema. The plan and commit tasks read and commit offsets: a backend that counted
  them as writers would see three versions of the output per batch;
* the ``kafkaBatchOffsets`` run facet: batch id, log sequence number, mode and each
  partition's range (no standard facet carries Kafka offsets); none for a dry run or a plan
  with nothing new.

With a table per topic the tasks name the topics with a batch, and the Spark task each one's
table (no statistics and no offsets facet: each table's batch carries its own in its asset event).
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
    output: Mapping[str, Any] | None  # format, output, table (OutputSpec.describe()); None: writes nothing
    catalog_properties: Mapping[str, Any] = field(default_factory=dict)
    summary: Mapping[str, Any] | None = None  # the plan's XCom
    entry: Mapping[str, Any] | None = None  # the batch's log entry, once written
    wrote: bool = False  # the task that wrote the batch (Spark): its statistics, version and schema
    schema: Any = None  # the Arrow schema of the batch's files, once written
    tables: list[BatchFacts] = field(default_factory=list)  # a table per topic: each table's own


class BatchLineage:
    """OpenLineage methods of a batch's task; an operator says what it knows in :meth:`batch_facts`.

    :attr:`lineage_entry` is the batch's log entry, kept by ``execute`` once the batch is written
    (the Spark task) or committed (the commit task).
    """

    lineage_entry: Mapping[str, Any] | None = None

    def batch_facts(self, task_instance: Any) -> BatchFacts:  # pragma: no cover - each operator's own
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> Any:
        return operator_lineage(self.batch_facts(None), getattr(self, "log", None))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return operator_lineage(self.batch_facts(task_instance), getattr(self, "log", None))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return operator_lineage(self.batch_facts(task_instance), getattr(self, "log", None))


def running_task_instance(task_instance: Any) -> Any:
    """The task instance the provider passed, or (on start, when it passes none) the running one's."""
    if task_instance is not None:
        return task_instance
    from airflow.sdk import get_current_context

    return get_current_context()["ti"]


def bootstrap_servers_of(kafka_config_id: str) -> str | None:
    """The ``kafka`` connection's ``bootstrap.servers`` (no credentials are read into the event);
    ``None`` when the connection has none or cannot be read (the event then names no topics)."""
    from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook

    try:
        return KafkaOffsetsHook(kafka_config_id).kafka_config.get("bootstrap.servers") or None
    except Exception:  # noqa: BLE001 - lineage must not fail for a connection the task itself reports
        return None


def plan_task_facts(task: Any, task_instance: Any) -> BatchFacts:
    """A plan task's batch: its topics, and its plan once made (none for a dry run or a plan with
    nothing new)."""
    from kafka_batch_provider.core.validation import check_topics
    from kafka_batch_provider.operators.tables import is_per_topic
    from kafka_batch_provider.operators.xcom import as_list

    summary = getattr(task, "lineage_summary", None)
    if summary is None and task_instance is not None:
        summary = task_instance.xcom_pull(task_ids=task.task_id)
    planned = bool(summary and summary.get("plan_path") and not summary.get("dry_run"))
    if is_per_topic(summary):  # the topics with a batch, as the Spark and commit tasks name them
        return tables_facts(task, summary, bootstrap_servers_of(task.kafka_config_id), wrote=False)
    if getattr(task, "topic_pattern", None) is not None:  # the topics the pattern matched for this batch
        topics = sorted({r["topic"] for r in (summary or {}).get("ranges") or ()})
    else:
        topics = check_topics(as_list(task.topics))
    return BatchFacts(
        bootstrap_servers_of(task.kafka_config_id),
        topics,
        None,  # the plan writes no data: the Spark task names the output
        summary=summary if planned else None,
    )


def planned_task_facts(task: Any, task_instance: Any, wrote: bool) -> BatchFacts:
    """A Spark (``wrote``) or commit task's batch: the plan's XCom, and once written the batch's
    log entry (:attr:`BatchLineage.lineage_entry`); the Spark task adds the output and its files'
    schema (the only one to read the output's connections)."""
    from kafka_batch_provider.operators.tables import is_per_topic

    ti = running_task_instance(task_instance)
    summary = ti.xcom_pull(task_ids=task.plan_task_id)
    bootstrap = bootstrap_servers_of(task.kafka_config_id)
    if is_per_topic(summary):
        return tables_facts(task, summary, bootstrap, wrote)
    if not summary or not summary.get("plan_path") or summary.get("dry_run"):  # no batch to name
        return BatchFacts(bootstrap, [], None)
    topics = sorted({r["topic"] for r in summary.get("ranges") or ()})
    entry = task.lineage_entry
    if not wrote:  # the commit task writes no data
        return BatchFacts(bootstrap, topics, None, summary=summary, entry=entry)
    spec = task.batch_output.planned(summary).spec()
    return BatchFacts(
        bootstrap,
        topics,
        spec.describe(),
        spec.catalog_properties,
        summary=summary,
        entry=entry,
        wrote=True,
        schema=batch_schema(spec, entry) if entry and entry.get("files") else None,
    )


def tables_facts(task: Any, summary: Mapping[str, Any], bootstrap: str | None, wrote: bool) -> BatchFacts:
    """A table per topic: the topics with a batch and, for the Spark task, each one's table. No
    offsets facet and no statistics: each table's batch has its own, in its asset event (reading
    hundreds of tables' logs is no work for a lineage call)."""
    from kafka_batch_provider.operators.tables import plan_paths

    topics = sorted(plan_paths(summary))
    if not wrote or not topics:
        return BatchFacts(bootstrap, topics, None)
    specs = task.batch_output.planned(summary).spec().for_topics(topics)
    tables = [BatchFacts(bootstrap, [t], specs[t].describe(), specs[t].catalog_properties) for t in topics]
    return BatchFacts(bootstrap, topics, None, tables=tables)


def batch_schema(spec: Any, entry: Mapping[str, Any]) -> Any:
    """The Arrow schema of the batch's files (one Parquet footer; a table's store opens the table
    first), or ``None`` when they cannot be read (compacted away before a cleared task reran)."""
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.output.tables import files_schema

    try:
        return files_schema(open_store(spec, create=False).data, entry)
    except Exception:  # noqa: BLE001 - the event goes without its schema facet rather than not at all
        return None


def operator_lineage(facts: BatchFacts, log: Any = None) -> Any:
    """The provider's ``OperatorLineage`` of a batch's task. Each part is built on its own: one
    that fails (an unnamed scheme, say) is left out with a warning, and the rest is still sent."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    summary, entry = facts.summary, facts.entry

    def part(name: str, build: Any, empty: Any) -> Any:
        try:
            return build()
        except Exception as exc:  # noqa: BLE001 - lineage never fails a batch, and never loses all of it
            if log is not None:
                log.warning("OpenLineage: the %s of batch %s left out: %s", name, (summary or {}).get("batch_id"), exc)
            return empty

    run_facets = {}
    if summary or entry:
        record = entry or summary
        offsets = part("offsets facet", lambda: offsets_facet_class()(**offsets_run_facet(record)), None)
        if offsets is not None:
            run_facets[OFFSETS_FACET] = offsets
    return OperatorLineage(
        inputs=part("inputs", lambda: input_datasets(facts), []),
        outputs=part("output", lambda: output_datasets(facts), []),
        run_facets=run_facets,
    )


def input_datasets(facts: BatchFacts) -> list[Any]:
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet

    from kafka_batch_provider.core.assets import topic_uri

    if not facts.bootstrap_servers:
        return []
    rows = rows_by_topic(facts.entry) if facts.entry and facts.wrote else {}
    found = []
    for topic in facts.topics:
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

    if facts.tables:
        return [dataset for table in facts.tables for dataset in output_datasets(table)]
    if not facts.output or not (facts.output.get("output") or facts.output.get("table")):
        return []
    namespace, name = dataset_name(output_asset_uri(facts.output, facts.catalog_properties))
    facets: dict[str, Any] = {}
    output_facets: dict[str, Any] = {}
    if facts.entry and facts.wrote:  # the Spark task wrote them; the commit task only commits offsets
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
        mode: str
        replay: bool
        groupId: str | None  # noqa: N815
        ranges: list[dict[str, Any]]

        @staticmethod
        def _get_schema() -> str:
            return OFFSETS_FACET_SCHEMA_URL

    return KafkaBatchOffsetsRunFacet
