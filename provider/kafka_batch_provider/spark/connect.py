"""Running the Spark step through Spark Connect: this process is the driver, a server runs the tasks.

``kafka-batch run|write --spark-remote sc://host:port`` (or ``$SPARK_REMOTE``) and
``KafkaSparkConnectBatchOperator`` call :func:`write_through_connect`. The steps, checks,
plan and manifest are those of the spark-submit path (:func:`~kafka_batch_provider.spark.ingest.write_batch`
runs here instead of in a spark-submit driver); only the tasks run on the server. What the
server sees: the plan's slices and, inside the pickled reader and writer functions, the Kafka
settings and storage options. Nothing secret is set as a session conf or a source option, so
neither the session's visible conf nor the query plan's text shows any.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from kafka_batch_provider import __version__
from kafka_batch_provider.batch_store import BatchStore
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, SparkStepError
from kafka_batch_provider.local_servers import port_open
from kafka_batch_provider.plan import OffsetPlan
from kafka_batch_provider.spark.error_lines import missing_package, spark_error_line
from kafka_batch_provider.spark.options import WriteOptions

log = logging.getLogger(__name__)

#: Batches share a server-side session for this long, so they find its Python workers warm
#: (each new session starts its own: ~5 s measured on a busy 2-core machine, 0.7 s warm).
#: Half an hour stays below the server's default idle timeout (60 min), after which a
#: session's id is refused for good.
SHARED_SESSION_SECONDS = 1800
SESSION_NAMESPACE = uuid.UUID("5b0c7d5e-6f0a-4d8e-9a51-7c1c2b4e9f30")

#: How long the client keeps retrying a server that stopped answering (~25 s in all): long
#: enough for a network blip, short enough that the task fails and is retried by its scheduler
#: instead of waiting out pyspark's default of 10 minutes.
RETRY_POLICY = {"max_retries": 6, "backoff_multiplier": 4.0, "initial_backoff": 50, "max_backoff": 10_000}


def remote_address(remote: str) -> str:
    """``sc://host:port`` without its parameters (a token may be among them): safe to print."""
    parts = urlsplit(remote)
    if parts.scheme != "sc" or not parts.hostname:
        raise ConfigError(f"--spark-remote must look like sc://host:port, got {remote.split(';')[0]!r}")
    return f"sc://{parts.hostname}:{parts.port or 15002}"


def check_reachable(remote: str) -> str:
    """Fail in one line unless a server listens at ``remote``; returns its printable address."""
    address = remote_address(remote)
    parts = urlsplit(remote)
    if not port_open(parts.port or 15002, parts.hostname, timeout=5.0):
        raise SparkStepError(
            f"no Spark Connect server answers at {address}: start one (kafka-batch spark-connect start) "
            "or fix --spark-remote / SPARK_REMOTE"
        )
    return address


def shared_session_id(now: float | None = None) -> str:
    """The session id batches of this version share during the current half hour."""
    bucket = int((time.time() if now is None else now) // SHARED_SESSION_SECONDS)
    return str(uuid.uuid5(SESSION_NAMESPACE, f"kafka-batch/{__version__}/{bucket}"))


def connect_session(remote: str) -> Any:
    """A Spark Connect session, after checking a server answers (a missing one would be retried for minutes).

    It joins the shared session of this half hour (see :data:`SHARED_SESSION_SECONDS`) unless
    ``remote`` names its own ``session_id``, and starts a fresh one if the server closed it.
    """
    address = check_reachable(remote)
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    def session(url: str) -> Any:
        spark = SparkSession.builder.remote(url).create()
        spark.client.set_retry_policies([DefaultPolicy(**RETRY_POLICY)])
        spark.conf.set("spark.sql.session.timeZone", "UTC")  # the first call: fails if the session was closed
        return spark

    if "session_id=" in remote:
        return session(remote)
    base = remote.rstrip("/")
    shared = f"{base};session_id={shared_session_id()}" if ";" in base else f"{base}/;session_id={shared_session_id()}"
    try:
        return session(shared)
    except Exception as exc:
        if "SESSION_CLOSED" not in str(exc):
            raise SparkStepError(f"Spark Connect at {address}: {spark_error_line(exc)}") from None
        log.info("the shared Spark Connect session was closed on the server; using a new one")
        return session(remote)


def write_through_connect(
    remote: str,
    plan: OffsetPlan,
    store: BatchStore,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    progress: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """Write the plan's batch with the tasks on the Spark Connect server at ``remote``.

    :returns: the batch's log entry (its manifest).
    :raises SparkStepError: a task failed or the server went away (a retry may pass).
    :raises ConfigError: the server's workers lack this package (or run another version).
    """
    from kafka_batch_provider.spark.ingest import write_batch

    spark = connect_session(remote)
    try:
        return write_batch(spark, plan, store, kafka_config, options, progress)
    except KafkaBatchError:
        raise
    except Exception as exc:
        line = spark_error_line(exc)
        if missing_package(str(exc)):
            raise ConfigError(line) from None
        raise SparkStepError(
            f"batch {plan.batch_id} through Spark Connect at {remote_address(remote)}: {line}"
        ) from None
    finally:
        # The server-side session stays for the next batch (warm workers); the client's channel goes.
        spark.client.close()
