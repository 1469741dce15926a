"""The plan summary the plan operators push and the Spark and commit operators pull.

Small and secret-free: batch id, where the plan file is, ranges and counts.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from kafka_batch_provider.batch_store import load_plan_file
from kafka_batch_provider.plan import OffsetPlan
from kafka_batch_provider.protocol import PlanOutcome


def plan_xcom(outcome: PlanOutcome, output_path: str, dry_run: bool = False) -> dict[str, Any]:
    plan = outcome.plan
    return {
        **plan.summary(),
        "plan_path": outcome.plan_path,
        "output_path": output_path,
        "has_data": plan.has_data,
        "reused": outcome.reused,
        "repaired": outcome.repaired,
        "notes": outcome.notes,
        "dry_run": dry_run,
    }


def pull_plan(
    context: Any, plan_task_id: str, purpose: str, storage_options: dict[str, Any] | None = None
) -> tuple[dict[str, Any], OffsetPlan]:
    """The upstream plan (summary and file), or a skip that says why there is nothing to do."""
    summary = context["ti"].xcom_pull(task_ids=plan_task_id)
    if not summary:
        raise AirflowSkipException(f"no plan from task {plan_task_id!r}: nothing to {purpose}")
    if summary.get("dry_run"):
        raise AirflowSkipException(f"dry run of batch {summary['batch_id']}: nothing to {purpose}")
    if not summary.get("plan_path"):
        raise AirflowSkipException(f"batch {summary['batch_id']} is empty: nothing to {purpose}")
    return summary, load_plan_file(summary["plan_path"], storage_options)


def as_list(value: Any) -> list[str]:
    """Templated list fields may arrive as a list or as a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def as_int_list(value: Any) -> list[int] | None:
    items = as_list(value)
    return [int(v) for v in items] if items else None
