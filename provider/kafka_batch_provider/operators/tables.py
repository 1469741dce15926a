"""A table per topic in the Airflow tasks: what the plan, Spark and commit operators do with a template.

With ``BatchOutput(output_path="s3://lake/{topic}")`` (or ``table="lake.{topic}"``) the plan task
plans every topic into its own table (:func:`~kafka_batch_provider.steps.tables.plan_tables`) and
pushes one XCom for all of them (per table: its batch, records and plan file; the idle ones
counted); the Spark task writes every table with data in one Spark job; the commit task commits
them all and announces one asset event per committed table, each with that table's facts, so a
downstream DAG can be scheduled on one table.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from kafka_batch_provider.errors import KafkaBatchError, error_named
from kafka_batch_provider.operators.assets import emit_batch_event
from kafka_batch_provider.operators.metrics import send_airflow_metrics, send_step_metrics
from kafka_batch_provider.output.formats import OutputSpec
from kafka_batch_provider.steps.tables import TableBatch, TablesPlan, tables_of_plan_files

#: The XCom key saying the plan task planned a table per topic.
PER_TOPIC = "per_topic"


def tables_xcom(planned: TablesPlan, spec: OutputSpec) -> dict[str, Any]:
    """The plan task's XCom: every table's batch and plan file, the output's template (no secrets)."""
    return {**planned.summary(), "output": spec.describe(), "output_path": spec.output, "dry_run": False}


def is_per_topic(summary: Any) -> bool:
    return bool(summary) and bool(summary.get(PER_TOPIC))


def plan_paths(summary: dict[str, Any]) -> dict[str, str]:
    """The plan task's tables with a plan file (a batch to write or to finish), each with that file."""
    return {
        topic: facts["plan_path"] for topic, facts in (summary.get("tables") or {}).items() if facts.get("plan_path")
    }


def planned_tables(
    summary: dict[str, Any], spec: OutputSpec, purpose: str, readable: bool, failed_ok: bool = False
) -> list[TableBatch]:
    """The tables the plan task planned, their plans read back; a skip when none has work (unless
    ``failed_ok`` and some table could not be planned: the commit task then names them).

    :param readable: only the tables with records to read (the Spark task's).
    """
    paths = list(plan_paths(summary).values())
    tables = tables_of_plan_files(spec, paths) if paths else []
    if readable:
        tables = [t for t in tables if t.plan.has_data]
    if not tables and not (failed_ok and summary.get("failed")):
        raise AirflowSkipException(f"no table has a batch to {purpose} ({summary.get('idle_tables', 0)} idle)")
    return tables


def failures_of(summary: dict[str, Any]) -> dict[str, KafkaBatchError]:
    """The tables the plan task could not plan, as the errors they were (their class by name)."""
    return {
        topic: (error_named(facts.get("error", "")) or KafkaBatchError)(facts.get("message", ""))
        for topic, facts in (summary.get("failed") or {}).items()
    }


def announce_tables(
    task: Any, context: Any, kafka: Any, spec: OutputSpec, tables: list[TableBatch], emit_empty: bool
) -> dict[str, Any]:
    """One asset event per committed table (its own asset, its batch's facts) and its metrics; not
    for a batch a later run's plan task committed and announced (this task is a cleared one of a
    failed run): one event per batch."""
    events, seconds = {}, {}
    for table in tables:
        entry = table.store.entry_of(table.plan)
        record = table.store.commit_record(table.plan.seq, table.plan.batch_id) or {}
        if not entry or record.get("committed_by") == "plan":
            continue
        described = table.spec.describe()
        event = emit_batch_event(task, context, entry, described, False, emit_empty, table.spec.catalog_properties)
        if event:
            events[table.topic] = event
        send_airflow_metrics(kafka, table.plan, entry, table.name, with_steps=False)
        seconds = seconds or dict(entry.get("timings") or {})  # the one Spark job's, in every table's entry
    if tables and seconds:  # the run's seconds once, under the template
        send_step_metrics(tables[0].plan.group_id, str(spec.table or spec.output), seconds)
    return events
