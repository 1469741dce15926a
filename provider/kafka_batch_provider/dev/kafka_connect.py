"""Kafka Connect with the Debezium PostgreSQL connector, for the demo and the tests: a standalone
worker as a plain ``java`` process on 127.0.0.1, writing change events to a Kafka broker.

The jars come from ``make jvm-tools`` (nothing resolves at run time): the worker from
``jvm/kafka-connect/pom.xml`` (``$KAFKA_BATCH_TOOLS_DIR/kafka-connect/jars``) and Debezium, as one
plugin folder, from ``jvm/debezium-postgres/pom.xml`` (``.../debezium-postgres``, the worker's
``plugin.path``; ``plugin.discovery=service_load`` reads the jars' service manifests instead of
scanning every class). The worker is Connect 4.3.1 beside the 4.4.0 broker: Debezium 3.6.1 fails
on a 4.4 worker (see the POM).

What the worker is set to, and why:

* **standalone** (offsets in a file; connectors added over REST, ``PUT /connectors/<name>/config``,
  which is idempotent): what a test needs, and it stops in a fraction of a second;
* Connect's ``JsonConverter`` with **schemas embedded** for keys and values: the records carry
  their Connect schema (decimals' scale, Debezium's time types), which
  :mod:`kafka_batch_provider.decoding.connect_json` reads; no schema registry server runs here;
* ready when ``GET /health`` answers 200 (KIP-1017); a connector is running when its task is:
  the connector's own state says RUNNING even when its only task failed.

:func:`debezium_postgres_config` is the connector's configuration: ``pgoutput``, a slot and a
publication of the connector's own, ``decimal.handling.mode=precise``, microsecond times,
``skipped.operations=none`` (Debezium skips truncates by default) and topics created by
Connect with one partition.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kafka_batch_provider.dev.kafka import JVM_TOOLS_TARGET, java_executable, tools_dir
from kafka_batch_provider.dev.local_servers import LocalServer
from kafka_batch_provider.errors import ConfigError

WORKER_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
JAVA_OPTIONS = (
    "-Xmx384m",
    "-Xms32m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Dlog4j2.shutdownHookEnabled=false",
    "-Djava.awt.headless=true",
)
LOG4J = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %X{connector.context}%m (%c:%L)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


def connect_jars() -> Path:
    folder = tools_dir() / "kafka-connect" / "jars"
    if not any(folder.glob("connect-runtime-*.jar")):
        raise ConfigError(f"Kafka Connect's jars are not in {folder}: fetch them with `{JVM_TOOLS_TARGET}`")
    return folder


def debezium_plugins() -> Path:
    """The worker's ``plugin.path``: the folder holding Debezium's plugin folder (``jars``)."""
    folder = tools_dir() / "debezium-postgres"
    if not any((folder / "jars").glob("debezium-connector-postgres-*.jar")):
        raise ConfigError(f"Debezium's jars are not in {folder / 'jars'}: fetch them with `{JVM_TOOLS_TARGET}`")
    return folder


def debezium_postgres_config(
    *,
    port: int,
    user: str,
    password: str,
    dbname: str,
    topic_prefix: str,
    tables: list[str],
    slot: str,
) -> dict[str, str]:
    """The Debezium PostgreSQL connector's configuration (see the module docstring)."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": dbname,
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": f"{slot}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": "initial",
        "decimal.handling.mode": "precise",
        "time.precision.mode": "adaptive_time_microseconds",
        "tombstones.on.delete": "true",
        "skipped.operations": "none",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        "poll.interval.ms": "100",
        "status.update.interval.ms": "1000",
    }


def wait_for_records(kafka_config: dict[str, Any], topic: str, count: int, timeout: float = 120.0) -> None:
    """Wait until partition 0 of ``topic`` holds ``count`` records (a connector writes them in its own time).

    :raises AssertionError: more records than ``count`` arrived, or fewer within ``timeout``.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**kafka_config, "group.id": "kafka-batch-record-probe", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    found = -1
    try:
        while time.monotonic() < deadline:
            try:
                found = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
            except KafkaException:
                found = -1  # the connector has not created the topic yet
            if found >= count:
                if found != count:
                    raise AssertionError(f"{topic}: expected {count} records from the connector, found {found}")
                return
            time.sleep(0.1)
    finally:
        consumer.close()
    raise AssertionError(f"{topic}: expected {count} records from the connector within {timeout:.0f} s, found {found}")


@dataclass
class ConnectWorker(LocalServer):
    """A standalone Kafka Connect worker in ``folder``, REST on ``port``, writing to ``bootstrap_servers``."""

    folder: Path = Path("kafka-connect")
    bootstrap_servers: str = ""
    #: more plugin folders beside Debezium's PostgreSQL connector (each holding a ``jars`` folder)
    more_plugins: tuple[Path, ...] = ()

    label: ClassVar[str] = "Kafka Connect"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.folder = Path(self.folder)
        self.log_path = self.log_path or self.folder / "stdout.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_properties(self) -> str:
        settings = {
            "bootstrap.servers": self.bootstrap_servers,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "plugin.path": ",".join(str(p) for p in (debezium_plugins(), *self.more_plugins)),
            "plugin.discovery": "service_load",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            # an explicit NULL stays NULL (the converter's default writes the column's DEFAULT instead)
            "value.converter.replace.null.with.default": "false",
            "offset.storage.file.filename": str(self.folder / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "task.shutdown.graceful.timeout.ms": "5000",
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def start(self, timeout: float = 120.0) -> ConnectWorker:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "worker.properties").write_text(self.worker_properties())
        (self.folder / "log4j2.properties").write_text(LOG4J)
        return super().start(timeout)

    def command(self) -> list[str]:
        return [
            java_executable(),
            *JAVA_OPTIONS,
            f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.folder}",
            "-cp",
            f"{connect_jars()}/*",
            WORKER_CLASS,
            str(self.folder / "worker.properties"),
        ]

    def wait_until_ready(self, timeout: float) -> None:
        self.poll_until(
            lambda: self.request("GET", "/health", quiet=True)[0] == 200, timeout, ConfigError, "was not healthy"
        )

    def request(self, method: str, path: str, body: Any = None, quiet: bool = False) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError:
            if quiet:
                return 0, None
            raise

    def add_connector(self, name: str, config: dict[str, str], timeout: float = 120.0) -> None:
        """Create (or update) the connector and wait until its task runs."""
        status, body = self.request("PUT", f"/connectors/{name}/config", config)
        if status not in (200, 201):
            raise RuntimeError(f"Kafka Connect refused connector {name}: {status} {body}")
        deadline = time.monotonic() + timeout
        while True:
            status, state = self.request("GET", f"/connectors/{name}/status")
            tasks = state.get("tasks", []) if status == 200 else []
            failed = [t for t in tasks if t.get("state") == "FAILED"]
            if failed:
                trace = str(failed[0].get("trace", "")).splitlines()[:1]
                raise RuntimeError(f"connector {name}'s task failed: {trace}")
            if tasks and all(t.get("state") == "RUNNING" for t in tasks):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"connector {name} has no running task after {timeout:.0f} s: {state}")
            time.sleep(0.1)
