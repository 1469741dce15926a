"""OpenTelemetry metrics over OTLP/HTTP (an OpenTelemetry Collector, Grafana Alloy, Prometheus's
OTLP receiver), with the OpenTelemetry SDK: counts as counters, timings as histograms (seconds)."""

from __future__ import annotations

from kafka_batch_provider.core.metrics import COUNT, GAUGE, Metric
from kafka_batch_provider.errors import ConfigError


class OtlpSink:
    def __init__(self, endpoint: str) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"--metrics-otlp takes the receiver's URL (e.g. http://127.0.0.1:4318), got {endpoint!r}")
        base = endpoint.rstrip("/")
        self.endpoint = base if base.endswith("/v1/metrics") else f"{base}/v1/metrics"
        self.label = f"OTLP at {self.endpoint}"

    def send(self, metrics: list[Metric]) -> None:
        """One export of the batch's metrics, its answer checked (a reader that exports on a timer
        would send them again when it shuts down)."""
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
        from opentelemetry.sdk.resources import Resource

        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "kafka-batch"}))
        meter = provider.get_meter("kafka_batch_provider")
        exporter = OTLPMetricExporter(endpoint=self.endpoint, timeout=10)
        try:
            for m in metrics:
                attributes = dict(m.tags)
                if m.kind == COUNT:
                    meter.create_counter(m.name).add(m.value, attributes)
                elif m.kind == GAUGE:
                    meter.create_gauge(m.name).set(m.value, attributes)
                else:
                    meter.create_histogram(m.name, unit="s").record(m.value, attributes)
            collected = reader.get_metrics_data()
            if collected is not None and exporter.export(collected) is not MetricExportResult.SUCCESS:
                raise OSError(f"the OTLP receiver at {self.endpoint} did not take the metrics")
        finally:
            exporter.shutdown()
            provider.shutdown()
