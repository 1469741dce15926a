"""pytest fixtures for a real Kafka-protocol broker and a real S3-protocol server.

Enable in a ``conftest.py`` with ``pytest_plugins = ["kafka_batch_provider.testing.pytest_plugin"]``.

* ``kafka_bootstrap_servers`` (session): ``$KAFKA_BOOTSTRAP_SERVERS`` when set, else an
  embedded tansu broker started on a free 127.0.0.1 port for the session.
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
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_batch_provider.dev.broker import EmbeddedBroker
from kafka_batch_provider.dev.s3 import DEFAULT_BUCKET, EmbeddedS3, S3Endpoint
from kafka_batch_provider.testing.producers import create_topics


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    log_path = Path(tmp_path_factory.mktemp("broker")) / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap_servers


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
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint | EmbeddedS3]:
    bucket = os.environ.get("KAFKA_BATCH_TEST_BUCKET") or DEFAULT_BUCKET
    external = S3Endpoint.from_env(os.environ, bucket=bucket)
    if external is not None:
        yield external
        return
    log_path = Path(tmp_path_factory.mktemp("s3")) / "s3.log"
    with EmbeddedS3(log_path=log_path, buckets=(bucket,)) as server:
        yield server


@pytest.fixture
def s3_storage_options(s3_server: S3Endpoint | EmbeddedS3) -> dict[str, Any]:
    return s3_server.storage_options()


@pytest.fixture
def new_s3_output(s3_server: S3Endpoint | EmbeddedS3, request: pytest.FixtureRequest) -> Callable[..., str]:
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
    server = SparkConnectServer(master="local[2]", log_path=log_path, conf={"spark.log.level": "INFO"})
    server.start(timeout=180)
    try:
        yield server
    finally:
        server.stop(timeout=30)


@pytest.fixture(scope="session")
def spark_connect_remote(spark_connect_server: Any) -> str:
    return os.environ.get("KAFKA_BATCH_TEST_SPARK_REMOTE") or spark_connect_server.remote
