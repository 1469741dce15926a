"""A local Spark Connect server from the installed pyspark, for the demo, the tests and laptops.

``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer spark-internal``
as a plain process on 127.0.0.1 (like the embedded broker), ``kafka-batch spark-connect
start|status|stop`` and the ``spark_connect_remote`` pytest fixture. A batch sent to a warm
server pays no JVM, session or Python-worker start.

It starts with Spark's Kafka connector when ``make jvm-tools`` fetched it (``spark.jars``), so
batches may use the ``jvm`` reader, and with :data:`~kafka_batch_provider.spark.jvm_options.REDACTION_CONF`.
Its Python workers run this interpreter (``PYSPARK_PYTHON``), which has this package: a
server elsewhere needs ``airflow-provider-kafka-batch`` (the same version) in the Python its
workers run, and says so in one line when it is missing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from kafka_batch_provider.dev.local_servers import HOST, Detached, LocalServer, port_open
from kafka_batch_provider.errors import SparkStepError
from kafka_batch_provider.spark.jvm_options import REDACTION_CONF
from kafka_batch_provider.spark.jvm_start import lean_submit_conf
from kafka_batch_provider.spark.kafka_connector import connector_jars, with_jars
from kafka_batch_provider.spark.submit import conf_args, spark_submit_executable

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002


@dataclass
class SparkConnectServer(LocalServer):
    """A Spark Connect server on 127.0.0.1.

    :param master: the server's Spark master (default ``local[*]``).
    :param conf: more Spark settings of the server.
    :param lean: a JVM like a batch's driver (C1 only, the serial collector) for a server that
        lives minutes, not days (a test session, the demo): there the optimising compiler's
        threads cost more CPU than they return. Measured on 2 cores over three test modules
        (73 tests): the server's CPU 52 s -> 25 s, the machine's 178 -> 137 CPU s.
    """

    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)
    lean: bool = False

    label: ClassVar[str] = "Spark Connect server"

    def start(self, timeout: float = 180.0):
        """A JVM and a SparkContext: tens of seconds on a busy machine."""
        return super().start(timeout)

    @property
    def remote(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def command(self) -> list[str]:
        settings = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false",
            "spark.log.level": "WARN",
            # Keep secret-looking settings and options (the jvm reader's) out of plans, the UI and logs.
            **REDACTION_CONF,
            **self.conf,
        }
        # Spark's Kafka connector from `make jvm-tools`, for batches with the jvm reader.
        settings = with_jars(settings, [str(jar) for jar in connector_jars()])
        # The class archive and the worker daemon; the batches' lean JVM only for a short-lived server.
        settings = lean_submit_conf(self.master, settings, short_lived=self.lean)
        command = [spark_submit_executable(), "--master", self.master, "--class", SERVER_CLASS]
        return [*command, *conf_args(settings), "spark-internal"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The workers run this interpreter, which has this package and its dependencies.
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", HOST)
        env.pop("SPARK_REMOTE", None)  # the server itself is a classic Spark application
        return env

    def wait_until_ready(self, timeout: float) -> None:
        """Ready once gRPC listens: the server binds its port after the SparkContext is up."""
        self.poll_until(lambda: port_open(self.port), timeout, SparkStepError, "did not listen")


# -- the detached server of the command line ------------------------------------------------

DETACHED = Detached("spark-connect", SparkConnectServer.label, marker=SERVER_CLASS, address="remote")


def start_detached(
    port: int = DEFAULT_PORT, master: str = "local[*]", conf: Mapping[str, str] | None = None, timeout: float = 120.0
) -> dict:
    """Start a server that keeps running after this process exits; remember it in a state file."""
    return DETACHED.start(
        lambda log: SparkConnectServer(
            port=port, log_path=log, detach=True, master=master, conf=dict(conf or {})
        ).start(timeout),
        lambda server: {"remote": server.remote, "master": server.master},
    )


def status() -> dict:
    return DETACHED.status()


def stop_detached() -> dict:
    return DETACHED.stop(timeout=30.0)
