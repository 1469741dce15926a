"""DogStatsD lines over UDP: what a StatsD server, the Datadog agent or Telegraf's StatsD input takes."""

from __future__ import annotations

import socket

from kafka_batch_provider.core.metrics import Metric, statsd_lines
from kafka_batch_provider.errors import ConfigError


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--metrics-statsd takes HOST:PORT (e.g. 127.0.0.1:8125), got {address!r}")
    return host, int(port)


class StatsdSink:
    def __init__(self, address: str) -> None:
        self.host, self.port = parse_address(address)
        self.label = f"StatsD at {self.host}:{self.port}"

    def send(self, metrics: list[Metric]) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for line in statsd_lines(metrics):
                sock.sendto(line.encode(), (self.host, self.port))
