"""Every committed batch's metrics reach the receivers a platform runs: a StatsD server (a UDP
listener in the test) and an OpenTelemetry receiver (an OTLP/HTTP endpoint in the test, decoding
the protobuf the SDK's exporter sends), from ``kafka-batch run``. The figures must be the batch's:
records per topic, rows, files, seconds."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.bad_input.scene import cli


class OtlpReceiver:
    """A minimal OTLP/HTTP metrics endpoint: keeps every data point it is sent."""

    def __init__(self) -> None:
        self.points: list[tuple[str, float, dict]] = []
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
        while not any(line.startswith("kafka_batch.commit.seconds") for line in lines):
            lines.append(statsd.recv(65536).decode())
    finally:
        statsd.close()
        otlp.server.shutdown()
    by_name = {line.split(":", 1)[0]: line for line in lines}
    assert by_name["kafka_batch.records.read"].startswith("kafka_batch.records.read:30|c|#group:"), by_name
    assert f"topic:{topic}" in by_name["kafka_batch.records.read"], by_name["kafka_batch.records.read"]
    assert by_name["kafka_batch.rows.written"].startswith(f"kafka_batch.rows.written:{summary['records']}|c"), by_name
    assert by_name["kafka_batch.batches"].startswith("kafka_batch.batches:1|c"), by_name
    points = {name: (value, point_tags) for name, value, point_tags in otlp.points}
    assert points["kafka_batch.records.read"][0] == 30 and points["kafka_batch.records.read"][1]["topic"] == topic, (
        points
    )
    assert points["kafka_batch.rows.written"][0] == 30, points
    assert points["kafka_batch.plan.seconds"][0] > 0, points
    assert "metrics sent to 2 of 2 receiver(s)" in result.stderr, result.stderr[-800:]
