"""The plan summary the plan operators push and the Spark and commit operators pull.

Small and secret-free: batch id, where the plan file is, ranges and counts, and the output
as :meth:`~kafka_batch_provider.output.formats.OutputSpec.describe` shows it (``output``: format,
path or table, partitioning; no credentials), from which the downstream tasks reopen it.
``output_path`` stays for readers of the Parquet layout's XCom: the folder (parquet), the
table's location (delta) or ``None`` (iceberg).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.formats import OutputSpec
from kafka_batch_provider.output.kinds import kind_of
from kafka_batch_provider.output.store import BatchStore, load_plan_file
from kafka_batch_provider.steps.plan import PlanOutcome


def plan_xcom(outcome: PlanOutcome, spec: OutputSpec, store: BatchStore, dry_run: bool = False) -> dict[str, Any]:
    plan = outcome.plan
    output_path = kind_of(spec.format).reopened_by(spec, store)
    return {
        **plan.summary(),
        "plan_path": outcome.plan_path,
        "output": spec.describe(),
        "output_path": output_path,
        "has_data": plan.has_data,
        "reused": outcome.reused,
        "repaired": outcome.repaired,
        "notes": outcome.notes,
        "dry_run": dry_run,
    }


def pull_summary(context: Any, plan_task_id: str, purpose: str) -> dict[str, Any]:
    """The upstream plan's summary, or a skip that says why there is nothing to do."""
    summary = context["ti"].xcom_pull(task_ids=plan_task_id)
    if not summary:
        raise AirflowSkipException(f"no plan from task {plan_task_id!r}: nothing to {purpose}")
    if summary.get("per_topic"):  # a table per topic: operators/tables.py reads its tables
        return summary
    if summary.get("dry_run"):
        raise AirflowSkipException(f"dry run of batch {summary['batch_id']}: nothing to {purpose}")
    if not summary.get("plan_path"):
        raise AirflowSkipException(f"batch {summary['batch_id']} is empty: nothing to {purpose}")
    return summary


def load_plan(summary: dict[str, Any], store: BatchStore) -> OffsetPlan:
    """The plan file the summary names, read with the store's credentials (an Iceberg table's
    may come from its catalog)."""
    return load_plan_file(summary["plan_path"], store.location.storage_options)


def as_list(value: Any) -> list[str]:
    """Templated list fields may arrive as a list or as a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple, set)):
        # A native template rendered "2024" as 2024: str() would turn 1e3 into "1000.0", so
        # the value is passed on as it is and the topic check names the problem.
        return [value]
    return [v if isinstance(v, (int, float)) else str(v) for v in value]


def as_int_list(value: Any) -> list[int] | None:
    items = as_list(value)
    try:
        return [int(v) for v in items] if items else None
    except (TypeError, ValueError):
        raise ConfigError(f"partitions must be partition numbers, got {value!r}") from None
