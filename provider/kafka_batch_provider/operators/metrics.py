"""The operators' metrics through Airflow's own ``Stats`` (StatsD or OpenTelemetry, as the deployment's
``[metrics]`` configures; nothing when it is off). A receiver that is down never fails a task."""

from __future__ import annotations

from typing import Any

from kafka_batch_provider.core.metrics import health_metrics, step_metrics
from kafka_batch_provider.metrics import emit
from kafka_batch_provider.metrics.airflow_stats import AirflowStatsSink
from kafka_batch_provider.steps.batch_metrics import committed_batch_metrics


def send_airflow_metrics(kafka: Any, plan: Any, entry: dict[str, Any], output: str, with_steps: bool = True) -> None:
    """A committed batch's ``kafka_batch.*`` metrics, with its topics' lag before and after (a table
    per topic: ``with_steps=False``, the run's seconds go once, :func:`send_step_metrics`)."""
    emit(committed_batch_metrics(kafka, plan, entry, output, with_steps=with_steps), [AirflowStatsSink()])


def send_step_metrics(group: str, output: str, seconds: dict[str, float]) -> None:
    """A run's ``plan``/``write``/``commit`` seconds, once."""
    emit(step_metrics(group, output, seconds), [AirflowStatsSink()])


def send_health_metrics(report: dict[str, Any], output: str) -> None:
    """A lag health check's ``kafka_batch.lag.records`` and ``kafka_batch.lag.health``."""
    emit(health_metrics(report, output), [AirflowStatsSink()])
