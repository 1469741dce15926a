"""Airflow's own metrics (``Stats``): StatsD or OpenTelemetry as the deployment's ``[metrics]``
section configures, nothing when it is off. Used by the operators."""

from __future__ import annotations

from datetime import timedelta

from kafka_batch_provider.core.metrics import COUNT, GAUGE, Metric


class AirflowStatsSink:
    label = "Airflow's metrics"

    def send(self, metrics: list[Metric]) -> None:
        from airflow.sdk.observability.stats import Stats

        for m in metrics:
            name, tags = m.name, dict(m.tags)
            if m.kind == COUNT:
                Stats.incr(name, int(m.value), tags=tags)
            elif m.kind == GAUGE:
                Stats.gauge(name, m.value, tags=tags)
            else:
                Stats.timing(name, timedelta(seconds=m.value), tags=tags)
