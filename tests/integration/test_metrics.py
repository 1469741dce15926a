"""Every committed batch's metrics reach the receivers a platform runs: a StatsD server (a UDP
listener in the test) and an OpenTelemetry receiver (an OTLP/HTTP endpoint in the test, decoding
the protobuf the SDK's exporter sends), from ``kafka-batch run``. The figures must be the batch's:
records per topic, rows, files, seconds."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.bad_input.scene import cli

pytestmark = pytest.mark.check  # in make check's tier


class OtlpReceiver:
    """A minimal OTLP/HTTP metrics endpoint: keeps every data point it is sent."""

    def __init__(self) -> None:
        self.points: list[tuple[str, float, dict]] = []
        self.kinds: dict[str, str] = {}  # each name's OTLP data kind: sum, gauge, histogram
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

                request = ExportMetricsServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                for resource in request.resource_metrics:
                    for scope in resource.scope_metrics:
                        for metric in scope.metrics:
                            kind = metric.WhichOneof("data")
                            receiver.kinds[metric.name] = kind
                            for point in getattr(metric, kind).data_points:
                                value = point.sum if kind == "histogram" else (point.as_int or point.as_double)
                                tags = {a.key: a.value.string_value for a in point.attributes}
                                receiver.points.append((metric.name, value, tags))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def test_a_run_sends_the_batch_in_numbers_to_statsd_and_to_an_otlp_receiver(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, spark_connect_remote, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 30))
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    statsd.settimeout(10)
    otlp = OtlpReceiver()
    try:
        result = cli(
            "run", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id,
            "--output", str(tmp_path / "lake"), "--spark-remote", spark_connect_remote,
            "--metrics-statsd", f"127.0.0.1:{statsd.getsockname()[1]}", "--metrics-otlp", otlp.url, timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-1500:]
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        lines = []
        while not any(line.startswith("kafka_batch.lag.after") for line in lines):  # the last one sent
            lines.append(statsd.recv(65536).decode())
    finally:
        statsd.close()
        otlp.server.shutdown()
    by_name = {line.split(":", 1)[0]: line for line in lines}
    assert by_name["kafka_batch.records.read"].startswith("kafka_batch.records.read:30|c|#group:"), by_name
    assert f"topic:{topic}" in by_name["kafka_batch.records.read"], by_name["kafka_batch.records.read"]
    assert by_name["kafka_batch.rows.written"].startswith(f"kafka_batch.rows.written:{summary['records']}|c"), by_name
    assert by_name["kafka_batch.batches"].startswith("kafka_batch.batches:1|c"), by_name
    # The group had committed nothing: 30 records behind when planned, none right after the commit.
    assert by_name["kafka_batch.lag.before"].startswith("kafka_batch.lag.before:30|g|#group:"), by_name
    assert by_name["kafka_batch.lag.after"].startswith("kafka_batch.lag.after:0|g|#group:"), by_name
    points = {name: (value, point_tags) for name, value, point_tags in otlp.points}
    assert points["kafka_batch.records.read"][0] == 30 and points["kafka_batch.records.read"][1]["topic"] == topic, (
        points
    )
    assert points["kafka_batch.rows.written"][0] == 30, points
    assert points["kafka_batch.plan.seconds"][0] > 0, points
    assert "metrics sent to 2 of 2 receiver(s)" in result.stderr, result.stderr[-800:]


def stop_global_meter_provider() -> None:
    """Shut the process's OpenTelemetry meter provider (Airflow's logger set it) down, so no export
    outlives the test's receiver."""
    import atexit

    from airflow.sdk._shared.observability.metrics import otel_logger
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()
    atexit.unregister(otel_logger.flush_otel_metrics)  # its flush at exit would find the provider shut


@contextmanager
def stall_sent_through_airflow_stats(monkeypatch, metrics_settings: dict[str, str]) -> Iterator[None]:
    """Airflow's ``Stats`` set up from ``[metrics]`` settings as the task runner does, a STALL lag
    check of 7 records on ``orders`` sent through it (what the operators' sink does), then, after
    the block, Stats back to nothing."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk.observability.metrics import stats_utils

    from kafka_batch_provider.core.metrics import health_metrics
    from kafka_batch_provider.metrics import emit
    from kafka_batch_provider.metrics.airflow_stats import AirflowStatsSink

    for key, value in metrics_settings.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    try:
        report = {"group_id": "g", "status": "STALL", "partitions": [{"topic": "orders", "lag": 7}]}
        assert emit(health_metrics(report, "s3://lake/orders"), [AirflowStatsSink()]) == 1
        yield
    finally:
        stats.initialize(factory=stats_utils.NoStatsLogger, export_legacy_names=False)


def test_the_operators_metrics_reach_an_otlp_receiver_through_airflows_own_stats(monkeypatch):
    """Airflow's ``[metrics] otel_on``: what the operators send through ``Stats`` (as the task runner
    sets it up from the deployment's configuration) reaches an OpenTelemetry receiver."""
    import time

    otlp = OtlpReceiver()
    host, port = otlp.url.removeprefix("http://").split(":")
    settings = {"OTEL_ON": "True", "OTEL_HOST": host, "OTEL_PORT": port, "OTEL_INTERVAL_MILLISECONDS": "300",
                "OTEL_PREFIX": "airflow"}  # fmt: skip
    try:
        with stall_sent_through_airflow_stats(monkeypatch, settings):
            deadline = time.monotonic() + 30
            while not any(name.endswith("kafka_batch.lag.health") for name, _, _ in otlp.points):
                assert time.monotonic() < deadline, f"no lag.health point in 30 s; received {otlp.points[:5]}"
                time.sleep(0.2)
    finally:
        stop_global_meter_provider()  # Airflow's OTel logger set it for the process: its exports stop here
        otlp.server.shutdown()
    points = {name: (value, tags) for name, value, tags in otlp.points}
    assert points["airflow.kafka_batch.lag.health"][0] == 3, points
    assert points["airflow.kafka_batch.lag.health"][1].get("status") == "STALL", points
    assert points["airflow.kafka_batch.lag.records"][0] == 7, points


def test_the_operators_metrics_reach_a_statsd_server_through_airflows_own_stats(monkeypatch):
    """Airflow's ``[metrics] statsd_on`` (its StatsD client, the ``statsd`` package): what the
    operators send through ``Stats`` reaches a StatsD server under the deployment's prefix, without
    its tags (plain StatsD has none: docs/many-topics.md says to use OpenTelemetry or DogStatsD)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(10)
    settings = {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(server.getsockname()[1]),
                "STATSD_PREFIX": "airflow"}  # fmt: skip
    lines: list[str] = []
    try:
        with stall_sent_through_airflow_stats(monkeypatch, settings):
            wanted = {"airflow.kafka_batch.lag.records", "airflow.kafka_batch.lag.health"}
            while not wanted <= {line.split(":")[0] for line in lines}:
                try:
                    lines.extend(server.recv(65536).decode().splitlines())
                except TimeoutError:
                    raise AssertionError(
                        f"expected airflow.kafka_batch.lag.* lines within 10 s, received {lines}"
                    ) from None
    finally:
        server.close()
    gauges = {name: value.split("|") for name, value in (line.split(":", 1) for line in lines)}
    health, records = gauges["airflow.kafka_batch.lag.health"], gauges["airflow.kafka_batch.lag.records"]
    assert (float(health[0]), health[1]) == (3, "g"), f"expected the gauge lag.health 3 (STALL), found {lines}"
    assert (float(records[0]), records[1]) == (7, "g"), f"expected the gauge lag.records 7, found {lines}"
