"""The fault matrix: break the broker, the S3 server, Spark and the process, then count the output.

The scenarios run ``kafka-batch run`` through the session's Spark Connect server (a batch costs
seconds, not a JVM start) against a broker and an S3 server that sit behind
:class:`FaultProxy` ports, so a test can make either go dark and come back with its data.
Every scenario checks the output with its format's own reader; the terminal summary ends with
``faults survived: N/M, records lost: L, duplicated: D``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from kafka_batch_provider.dev.broker import EmbeddedBroker
from kafka_batch_provider.dev.kafka import KafkaBroker
from kafka_batch_provider.dev.s3 import S3Endpoint
from kafka_batch_provider.testing.pytest_plugin import local_broker
from tests.faults.harness import Lake, reap
from tests.faults.tally import MATRIX, Outcome
from tests.support.fault_proxy import FaultProxy

#: The formats every scenario runs with: the Parquet layout and a table format.
FORMATS = ("parquet", "delta")


@dataclass
class FaultBroker:
    """The fault matrix's broker process and the proxy every client of it goes through."""

    kind: str
    server: EmbeddedBroker | KafkaBroker
    proxy: FaultProxy


@pytest.fixture(scope="session")
def fault_broker(kafka_broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultBroker]:
    """A broker of its own (not the session's), reachable only through a proxy that can go dark:
    tansu when the session runs on tansu, else Apache Kafka (an external broker cannot sit
    behind the proxy: its metadata names its own address)."""
    proxy = FaultProxy(target_port=0)
    kind = "tansu" if kafka_broker_kind == "tansu" else "kafka"
    with local_broker(kind, tmp_path_factory.mktemp("fault-broker"), advertised_port=proxy.port) as broker:
        proxy.target_port = broker.port
        with proxy:
            yield FaultBroker(kind, broker, proxy)


@pytest.fixture(scope="session")
def broker_proxy(fault_broker: FaultBroker) -> FaultProxy:
    return fault_broker.proxy


@pytest.fixture
def kafka_process(fault_broker: FaultBroker) -> Iterator[KafkaBroker]:
    """The fault broker's Apache Kafka process, for a scenario that stops it: started again after the
    test whatever the test did (same port and data folder: every topic is still there)."""
    if fault_broker.kind != "kafka":
        pytest.skip(
            "stopping and restarting the broker process needs Apache Kafka (the default broker): the embedded "
            "broker (tansu, KAFKA_BATCH_TEST_BROKER=tansu) keeps its records in memory and would come back empty"
        )
    server = fault_broker.server
    assert isinstance(server, KafkaBroker)
    yield server
    if server.pid is None or server.exit_code() is not None:
        server.stop()  # reaps a process that died
        server.start()


def back_up_afterwards(proxy: FaultProxy) -> Iterator[FaultProxy]:
    """A session proxy for one test, listening again after it whatever the test did to it."""
    yield proxy
    if proxy.dark:
        proxy.restore()


@pytest.fixture
def kafka_proxy(broker_proxy: FaultProxy) -> Iterator[FaultProxy]:
    yield from back_up_afterwards(broker_proxy)


@pytest.fixture
def kafka_config(kafka_proxy: FaultProxy) -> dict[str, str]:
    """Overrides the plugin's: every client here (``new_topic`` too) goes through the proxy."""
    return {"bootstrap.servers": f"127.0.0.1:{kafka_proxy.port}"}


@pytest.fixture(scope="session")
def storage_proxy(s3_server) -> Iterator[FaultProxy]:
    target = urlparse(s3_server.endpoint_url)
    if target.hostname not in ("127.0.0.1", "localhost"):
        pytest.skip("the storage faults put a proxy in front of a local S3 server")
    with FaultProxy(target_port=target.port or 80) as proxy:
        yield proxy


@pytest.fixture
def s3_proxy(storage_proxy: FaultProxy) -> Iterator[FaultProxy]:
    yield from back_up_afterwards(storage_proxy)


#: Storage client settings of every scenario: fewer retries of a dark S3 server than the
#: clients' defaults (botocore's and delta-rs's), so an outage fails the run sooner; the failure
#: and its one line are the same. Users set these the same way (storage options).
FAIL_FAST = {
    "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}},
    "delta_options": {"max_retries": "2", "retry_timeout": "10s"},
}


@pytest.fixture(params=FORMATS)
def lake(request: pytest.FixtureRequest, s3_server, s3_proxy: FaultProxy, tmp_path: Path) -> Lake:
    endpoint = S3Endpoint(
        f"http://127.0.0.1:{s3_proxy.port}",
        s3_server.access_key,
        s3_server.secret_key,
        s3_server.region,
        s3_server.bucket,
    )
    name = request.node.name.split("[")[0].removeprefix("test_")[:40]
    options_file = tmp_path / "storage-options.json"
    options_file.write_text(json.dumps({**endpoint.storage_options(), **FAIL_FAST}))
    return Lake(
        request.param, f"s3://{endpoint.bucket}/{name}-{uuid.uuid4().hex[:8]}", endpoint, s3_proxy, options_file
    )


@pytest.fixture
def outcome(request: pytest.FixtureRequest) -> Iterator[Outcome]:
    yield MATRIX.new_case(request)
    reap()
