"""The fault matrix: break the broker, the S3 server, Spark and the process, then count the output.

The scenarios run ``kafka-batch run`` through the worker's Spark Connect server (a batch costs
seconds, not a JVM start) against a broker and an S3 server that sit behind
:class:`FaultProxy` ports, so a test can make either go dark and come back with its data: one
Apache Kafka for the session's fault scenarios, with a listener and a proxy per xdist worker
(a proxy going dark cuts its own worker's clients only), and the worker's own proxy in front of
the session's S3 server.
Every scenario checks the output with its format's own reader; the terminal summary ends with
``faults survived: N/M, records lost: L, duplicated: D``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from kafka_batch_provider.dev.broker import EmbeddedBroker
from kafka_batch_provider.dev.kafka import KafkaBroker
from kafka_batch_provider.dev.s3 import S3Endpoint
from kafka_batch_provider.testing.pytest_plugin import local_broker, shared_servers
from tests.faults.harness import Lake, reap
from tests.faults.tally import MATRIX, Outcome
from tests.support.fault_proxy import FaultProxy

#: The formats every scenario runs with: the Parquet layout and a table format.
FORMATS = ("parquet", "delta")


@dataclass
class FaultBroker:
    """The fault matrix's broker and this worker's proxy, which every client of it goes through.

    :param server: the broker process, when this worker owns it (a private one); ``None`` for the
        session's shared one, which no test may stop.
    """

    kind: str
    server: EmbeddedBroker | KafkaBroker | None
    proxy: FaultProxy


@contextmanager
def private_fault_broker(kind: str, folder: Path) -> Iterator[FaultBroker]:
    """A broker of its own behind a proxy that can go dark (its advertised port is the proxy's)."""
    proxy = FaultProxy(target_port=0)
    with local_broker(kind, folder, advertised_port=proxy.port) as broker:
        proxy.target_port = broker.port
        with proxy:
            yield FaultBroker(kind, broker, proxy)


def xdist_worker() -> tuple[int, int]:
    """This worker's index and the session's number of workers (``0, 1`` without xdist)."""
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return index, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def start_shared_fault_broker(folder: Path, workers: int) -> tuple[KafkaBroker, list[FaultProxy]]:
    """One Apache Kafka for every worker's fault scenarios, with a listener per worker that
    advertises that worker's proxy: a proxy going dark cuts only its own worker's clients."""
    proxies = [FaultProxy(target_port=0, detach=True) for _ in range(workers)]
    names = [f"WORKER{i}" for i in range(workers)]
    broker = KafkaBroker(
        log_path=folder / "kafka.log",
        data_dir=folder / "data",
        extra_listeners=dict.fromkeys(names, "PLAINTEXT"),
        advertised_ports={name: proxy.port for name, proxy in zip(names, proxies)},
        detach=True,
    ).start()
    try:
        for name, proxy in zip(names, proxies):
            proxy.target_port = broker.listener_ports[name]
            proxy.start()
    except BaseException:
        for proxy in proxies:
            proxy.stop()
        broker.stop()
        raise
    return broker, proxies


@pytest.fixture(scope="session")
def fault_broker(kafka_broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultBroker]:
    """The session's fault broker (not the session's broker), reachable only through this worker's
    proxy: Apache Kafka shared by the workers (a listener each), or tansu of the worker's own when
    the session runs on tansu (it has one listener). An external broker cannot sit behind the
    proxy (its metadata names its own address): the fault broker is then Apache Kafka too."""
    if kafka_broker_kind == "tansu":
        with private_fault_broker("tansu", tmp_path_factory.mktemp("fault-broker")) as broker:
            yield broker
        return
    index, workers = xdist_worker()
    info = shared_servers().get(
        "fault-broker",
        lambda folder: start_shared_fault_broker(folder, workers),
        lambda started: [*started[1], started[0]],
        lambda started: {"proxies": [{"port": p.port, "target": p.target_port, "pid": p.pid} for p in started[1]]},
        handed_over=workers,  # each worker stops and starts its own proxy
    )
    if index >= len(info["proxies"]):  # a worker started in place of a crashed one: a new number
        with private_fault_broker("kafka", tmp_path_factory.mktemp("fault-broker")) as broker:
            yield broker
        return
    mine = info["proxies"][index]
    proxy = FaultProxy(port=mine["port"], target_port=mine["target"], pid=mine["pid"])
    try:
        yield FaultBroker("kafka", None, proxy)
    finally:
        proxy.stop()  # the one this worker started last, if it went dark and came back


@pytest.fixture
def broker_proxy(fault_broker: FaultBroker) -> FaultProxy:
    return fault_broker.proxy


@pytest.fixture
def kafka_process(fault_broker: FaultBroker) -> Iterator[KafkaBroker]:
    """The fault broker's Apache Kafka process, for a scenario that stops it (a module that uses it
    gives itself a private ``fault_broker``): started again after the test whatever the test did
    (same port and data folder: every topic is still there)."""
    if fault_broker.kind != "kafka":
        pytest.skip(
            "stopping and restarting the broker process needs Apache Kafka (the default broker): the embedded "
            "broker (tansu, KAFKA_BATCH_TEST_BROKER=tansu) keeps its records in memory and would come back empty"
        )
    server = fault_broker.server
    assert isinstance(server, KafkaBroker), "the session's shared fault broker is never stopped: use a private one"
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
