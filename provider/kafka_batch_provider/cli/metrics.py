"""A committed batch's metrics to the receivers the command line named (``--metrics-statsd``,
``--metrics-otlp``); a receiver that is down never fails the run."""

from __future__ import annotations

from typing import Any

from kafka_batch_provider.cli.console import progress


def send_metrics(
    sinks: list,
    kafka: Any,
    store: Any,
    plan: Any,
    entry: dict[str, Any] | None,
    timings: dict[str, float],
    with_steps: bool = True,
) -> None:
    """The committed batch's metrics, with its topics' lag before and after, to the receivers the
    command line named (never fails the run)."""
    if not sinks or not entry:
        return
    from kafka_batch_provider.metrics import emit
    from kafka_batch_provider.steps.batch_metrics import committed_batch_metrics

    metrics = committed_batch_metrics(kafka, plan, entry, store.root, timings, with_steps)
    sent = emit(metrics, sinks)
    progress(f"batch {entry['batch_id']}: {len(metrics)} metrics sent to {sent} of {len(sinks)} receiver(s)")


def send_step_metrics(sinks: list, group: str, output: str, timings: dict[str, float]) -> None:
    """A table per topic: the run's steps' seconds once, under the template."""
    if not sinks:
        return
    from kafka_batch_provider.core.metrics import step_metrics
    from kafka_batch_provider.metrics import emit

    emit(step_metrics(group, output, timings), sinks)
