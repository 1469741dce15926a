"""Where a batch's metrics (:mod:`kafka_batch_provider.core.metrics`) go: one small interface,
one module per receiver.

* :mod:`~kafka_batch_provider.metrics.statsd`: DogStatsD lines over UDP (``--metrics-statsd HOST:PORT``);
* :mod:`~kafka_batch_provider.metrics.otlp`: OpenTelemetry's OTLP over HTTP (``--metrics-otlp URL``);
* :mod:`~kafka_batch_provider.metrics.airflow_stats`: Airflow's own ``Stats`` (StatsD or
  OpenTelemetry, whatever ``[metrics]`` configures; nothing when it is off), from the operators.

Metrics never fail a batch: a receiver that is down costs a warning in the log, nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from kafka_batch_provider.core.metrics import Metric

log = logging.getLogger(__name__)


class MetricsSink(Protocol):
    #: how the receiver is named in a warning (no secrets: an address)
    label: str

    def send(self, metrics: list[Metric]) -> None: ...


def emit(metrics: list[Metric], sinks: Iterable[MetricsSink]) -> int:
    """Send ``metrics`` to every sink; how many sinks took them."""
    sent = 0
    for sink in sinks:
        try:
            sink.send(metrics)
            sent += 1
        except Exception as exc:  # noqa: BLE001 - a metrics receiver must never fail a batch
            log.warning("metrics to %s not sent: %s", sink.label, str(exc).splitlines()[0] if str(exc) else exc)
    return sent
