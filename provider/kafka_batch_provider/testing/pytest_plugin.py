"""pytest fixtures for a real Kafka-protocol broker and a real S3-protocol server.

Enable in a ``conftest.py`` with ``pytest_plugins = ["kafka_batch_provider.testing.pytest_plugin"]``.

* ``kafka_bootstrap_servers`` (session): ``$KAFKA_BOOTSTRAP_SERVERS`` when set (an external
  broker), else a broker started on a free 127.0.0.1 port for the session and stopped at its
  end: Apache Kafka itself (single-node KRaft, :class:`~kafka_batch_provider.dev.kafka.KafkaBroker`,
  the jars of ``make jvm-tools``) by default, or the embedded tansu broker with
  ``KAFKA_BATCH_TEST_BROKER=tansu``. Under pytest-xdist each worker starts its own, on its
  own ports, in its own folder under the worker's ``tmp_path_factory`` (data and log).
* ``kafka_broker_kind`` (session): which broker that is, ``"kafka"``, ``"tansu"`` or
  ``"external"`` (taken for a real Kafka); for tests that hold only where Kafka is real
  (aborted transactions filtered for ``read_committed`` readers, time-to-offset lookups).
  :func:`local_broker` starts either kind, e.g. behind a proxy (``advertised_port``).
* ``kafka_config``: a librdkafka config dict for that broker.
* ``new_topic``: a factory creating uniquely named topics, ``new_topic(partitions=3)``.
* ``s3_server`` (session): the S3/MinIO at ``$AWS_ENDPOINT_URL`` when it and
  ``$AWS_ACCESS_KEY_ID`` are set (bucket ``$KAFKA_BATCH_TEST_BUCKET``, default ``lake``, must
  exist), else an embedded moto S3 server on a free 127.0.0.1 port for the session. Either
  has ``endpoint_url``, ``bucket``, ``storage_options()`` and ``env()``.
* ``s3_storage_options``: s3fs/fsspec options for that server.
* ``new_s3_output``: a factory returning a fresh ``s3://<bucket>/<test>-<uuid8>`` URI on each
  call; ``new_s3_output("dir with space/über")`` puts that name in the key instead.
* ``spark_connect_remote`` (session): ``$KAFKA_BATCH_TEST_SPARK_REMOTE`` when set (its workers
  need this package), else the ``sc://`` URL of ``spark_connect_server``, a local Spark
  Connect server (``local[2]``) from the installed pyspark on a free 127.0.0.1 port for the
  session (``None`` with an external one; its ``log_path`` is the server's log).

The broker and the S3 server are started once per pytest *session*, not once per xdist worker:
the first worker that needs one starts it and the others use it
(:mod:`~kafka_batch_provider.testing.shared_servers`); the session's own process stops them at
its end. Spark Connect stays one server per worker: a worker's Spark jobs never wait for
another's task slots.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kafka_batch_provider.dev.broker import EmbeddedBroker
from kafka_batch_provider.dev.kafka import KafkaBroker
from kafka_batch_provider.dev.s3 import ACCESS_KEY, DEFAULT_BUCKET, REGION, SECRET_KEY, EmbeddedS3, S3Endpoint
from kafka_batch_provider.testing.producers import create_topics
from kafka_batch_provider.testing.shared_servers import SharedServers, start_reaper

SHARED_ENV = "KAFKA_BATCH_TEST_SHARED_DIR"
_REAPER = pytest.StashKey[tuple]()

#: Which local broker the session starts: ``kafka`` (Apache Kafka, the default) or ``tansu``.
BROKER_ENV = "KAFKA_BATCH_TEST_BROKER"
LOCAL_BROKERS = ("kafka", "tansu")


def broker_kind(environ: Mapping[str, str] = os.environ) -> str:
    """``external`` when ``$KAFKA_BOOTSTRAP_SERVERS`` is set, else ``$KAFKA_BATCH_TEST_BROKER``
    (``kafka`` when unset); anything else is a usage error, not a silent default."""
    if environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return "external"
    kind = (environ.get(BROKER_ENV) or "kafka").strip().lower()
    if kind not in LOCAL_BROKERS:
        raise pytest.UsageError(f"{BROKER_ENV}={environ[BROKER_ENV]!r}: choose one of {', '.join(LOCAL_BROKERS)}")
    return kind


def local_broker(
    kind: str, folder: Path, advertised_port: int | None = None, detach: bool = False
) -> EmbeddedBroker | KafkaBroker:
    """A broker of ``kind`` (``kafka`` or ``tansu``) on a free 127.0.0.1 port, not started yet,
    keeping its data and log in ``folder``; ``advertised_port``: the port clients are told to
    use (a proxy's); ``detach``: it outlives this process. Use it as a context manager."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "tansu":
        return EmbeddedBroker(log_path=folder / "tansu.log", advertised_port=advertised_port, detach=detach)
    if kind == "kafka":
        return KafkaBroker(
            log_path=folder / "kafka.log", data_dir=folder / "data", advertised_port=advertised_port, detach=detach
        )
    raise ValueError(f"no local broker of kind {kind!r}: choose one of {', '.join(LOCAL_BROKERS)}")


# -- the session's shared servers ---------------------------------------------------------------


@pytest.hookimpl(trylast=True)  # after pytest's own configure made the session's temporary folder
def pytest_configure(config: pytest.Config) -> None:
    """The process that owns the session (xdist's controller, or the only one) names the folder
    of its shared servers to its workers (they inherit the environment) and starts their reaper."""
    if hasattr(config, "workerinput"):
        return
    folder = config._tmp_path_factory.getbasetemp() / "shared"
    folder.mkdir(parents=True, exist_ok=True)
    servers = SharedServers(folder)
    os.environ[SHARED_ENV] = str(folder)
    config.stash[_REAPER] = (servers, start_reaper(servers, os.getpid()))


def pytest_unconfigure(config: pytest.Config) -> None:
    found = config.stash.get(_REAPER, None)
    if found is None:
        return
    servers, reaper = found
    servers.stop_all()
    reaper.kill()
    reaper.wait()


def shared_servers() -> SharedServers:
    """The session's shared servers (set up by this plugin's ``pytest_configure``)."""
    servers = SharedServers.of_session()
    if servers is None:
        raise pytest.UsageError(
            f"${SHARED_ENV} is not set: load kafka_batch_provider.testing.pytest_plugin as a plugin"
        )
    return servers


@pytest.fixture(scope="session")
def kafka_broker_kind() -> str:
    return broker_kind()


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(kafka_broker_kind: str) -> str:
    if kafka_broker_kind == "external":
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    info = shared_servers().get(
        f"broker-{kafka_broker_kind}",
        lambda folder: local_broker(kafka_broker_kind, folder, detach=True).start(),
        lambda broker: [broker],
        lambda broker: {"bootstrap_servers": broker.bootstrap_servers},
    )
    return info["bootstrap_servers"]


@pytest.fixture
def kafka_config(kafka_bootstrap_servers: str) -> dict[str, str]:
    return {"bootstrap.servers": kafka_bootstrap_servers}


@pytest.fixture
def new_topic(kafka_config: dict[str, str], request: pytest.FixtureRequest) -> Callable[..., str]:
    def make(partitions: int = 1, prefix: str | None = None) -> str:
        base = prefix or request.node.name.split("[")[0].removeprefix("test_")[:40]
        name = f"{base}-{uuid.uuid4().hex[:8]}"
        create_topics(kafka_config, {name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def s3_server() -> S3Endpoint:
    bucket = os.environ.get("KAFKA_BATCH_TEST_BUCKET") or DEFAULT_BUCKET
    external = S3Endpoint.from_env(os.environ, bucket=bucket)
    if external is not None:
        return external

    def start(folder: Path) -> EmbeddedS3:
        folder.mkdir(parents=True, exist_ok=True)
        return EmbeddedS3(log_path=folder / "s3.log", buckets=(bucket,), detach=True).start()

    info = shared_servers().get(
        "s3", start, lambda server: [server], lambda server: {"endpoint_url": server.endpoint_url}
    )
    return S3Endpoint(info["endpoint_url"], ACCESS_KEY, SECRET_KEY, REGION, bucket)


@pytest.fixture
def s3_storage_options(s3_server: S3Endpoint) -> dict[str, Any]:
    return s3_server.storage_options()


@pytest.fixture
def new_s3_output(s3_server: S3Endpoint, request: pytest.FixtureRequest) -> Callable[..., str]:
    def make(name: str | None = None) -> str:
        base = name or request.node.name.split("[")[0].removeprefix("test_")[:40]
        return f"s3://{s3_server.bucket}/{base}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if os.environ.get("KAFKA_BATCH_TEST_SPARK_REMOTE"):
        yield None
        return
    from kafka_batch_provider.dev.spark_connect import SparkConnectServer

    log_path = Path(tmp_path_factory.mktemp("spark-connect")) / "server.log"
    # INFO: the log shows every session and execution, so tests can look for secrets in it.
    server = SparkConnectServer(master="local[2]", log_path=log_path, conf={"spark.log.level": "INFO"}, lean=True)
    server.start(timeout=180)
    try:
        yield server
    finally:
        server.stop(timeout=30)


@pytest.fixture(scope="session")
def spark_connect_remote(spark_connect_server: Any) -> str:
    return os.environ.get("KAFKA_BATCH_TEST_SPARK_REMOTE") or spark_connect_server.remote
