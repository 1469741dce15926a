"""Running the Spark step through Spark Connect: this process is the driver, a server runs the tasks.

``kafka-batch run|write --spark-remote sc://host:port`` (or ``$SPARK_REMOTE``) and
``KafkaSparkConnectBatchOperator`` call :func:`write_through_connect`. The steps, checks,
plan and manifest are those of the spark-submit path (:func:`~kafka_batch_provider.steps.write.write_batch`
runs here instead of in a spark-submit driver); only the tasks run on the server. What the
server sees: the plan's slices and, inside the pickled reader and writer functions, the Kafka
settings and storage options. Nothing secret is set as a session conf or a source option, so
neither the session's visible conf nor the query plan's text shows any.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

from kafka_batch_provider import __version__
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.core.settings import Advice
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, SparkStepError
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.spark.error_lines import missing_package, spark_error_line, task_error_class
from kafka_batch_provider.spark.jvm_options import SESSION_REDACTION_CONF

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_PORT = 15002
#: Where the server's address comes from, and what to do when none answers, in the caller's words.
REMOTE = Advice(keywords="the spark_connect connection's URL", flags="--spark-remote")
NO_SERVER = Advice(
    keywords="start it, or fix the spark_connect connection's host and port",
    flags="start one (kafka-batch spark-connect start), or fix --spark-remote / SPARK_REMOTE",
)

#: Batches share a server-side session for this long, so they find its Python workers warm
#: (each new session starts its own: ~5 s measured on a busy 2-core machine, 0.7 s warm).
#: Below the server's default idle timeout (60 min): no session is idle longer than this
#: between two of its batches, so none is closed under a batch (a closed id is refused for good).
SHARED_SESSION_SECONDS = 55 * 60
SESSION_NAMESPACE = uuid.UUID("5b0c7d5e-6f0a-4d8e-9a51-7c1c2b4e9f30")
#: Settings the batch relies on, set on every (shared) session before it runs.
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.useLargeVarTypes": "false",
    # The jvm reader's secret options out of the statement text (the server's UI, event log) and plans.
    **SESSION_REDACTION_CONF,
}
#: Errors no retry can fix: the task fails at once instead of spending its retries.
NOT_RETRYABLE = ("UNAUTHENTICATED", "PERMISSION_DENIED", "INVALID_CONNECT_URL", "INVALID_HANDLE")

#: How long the client keeps retrying a server that stopped answering (~25 s in all): long
#: enough for a network blip, short enough that the task fails and is retried by its scheduler
#: instead of waiting out pyspark's default of 10 minutes.
RETRY_POLICY = {"max_retries": 6, "backoff_multiplier": 4.0, "initial_backoff": 50, "max_backoff": 10_000}


def retry_while_server_listens(host: str, port: int) -> Any:
    """pyspark's default retry rules within :data:`RETRY_POLICY`, and none once the server's port
    refuses connections: its process is gone, and the batch's Spark job with it, so retrying only
    delays the one line (pyspark's release calls would also hold the process ~25 s at its exit).
    A server still listening (a network blip, a busy server) is retried as before."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class RetryWhileServerListens(DefaultPolicy):
        def can_retry(self, exception: BaseException) -> bool:
            return super().can_retry(exception) and not port_refuses(host, port)

    return RetryWhileServerListens(**RETRY_POLICY)


def probe(host: str, port: int, timeout: float) -> str:
    """``open`` (something listens), ``refused`` (the host says nothing listens: the server's
    process is gone) or ``unreachable`` (no answer or no such name: a network problem)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "unreachable"


def port_refuses(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether retrying is pointless: only a refusal says so, a retry may outlast the rest."""
    return probe(host, port, timeout) == "refused"


def remote_address(remote: str) -> str:
    """``sc://host:port`` without its parameters (a token may be among them): safe to print."""
    try:
        parts = urlsplit(remote.split(";")[0])
        host, port = parts.hostname, parts.port or DEFAULT_PORT
    except ValueError:
        host = None
    if not remote.startswith("sc://") or not host:
        shown = remote.split(";")[0]
        raise ConfigError(f"{REMOTE} must look like sc://host:port, got {shown!r}")
    return f"sc://[{host}]:{port}" if ":" in host else f"sc://{host}:{port}"


def check_reachable(remote: str) -> str:
    """Fail in one line unless a server listens at ``remote``; returns its printable address."""
    address = remote_address(remote)
    parts = urlsplit(remote.split(";")[0])
    if probe(parts.hostname, parts.port or DEFAULT_PORT, timeout=5.0) != "open":
        raise SparkStepError(f"no Spark Connect server answers at {address}: {NO_SERVER}")
    return address


def shared_session_id(now: float | None = None) -> str:
    """The session id batches of this version share during the current :data:`SHARED_SESSION_SECONDS`."""
    bucket = int((time.time() if now is None else now) // SHARED_SESSION_SECONDS)
    return str(uuid.uuid5(SESSION_NAMESPACE, f"kafka-batch/{__version__}/{bucket}"))


def with_session_id(remote: str, session_id: str) -> str:
    """``remote`` with its ``session_id`` parameter set (the other parameters kept)."""
    base, _, params = remote.partition(";")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    return f"{base.rstrip('/')}/;" + ";".join([*kept, f"session_id={session_id}"])


def scrub(text: str, remote: str) -> str:
    """``text`` without the values of ``remote``'s parameters (``token=...``)."""
    for param in remote.split(";")[1:]:
        value = param.partition("=")[2]
        if value:
            text = text.replace(value, "***")
    return text


def connect_error(remote: str, exc: BaseException) -> KafkaBatchError:
    """A pyspark error as one line that names the address only (pyspark may quote the URL)."""
    address = remote_address(remote)
    text = str(exc)
    code = next((c for c in NOT_RETRYABLE if c in text), None)
    if code:
        return ConfigError(
            f"Spark Connect at {address} refused the session ({code}): check the URL, the token and the user"
        )
    return SparkStepError(f"Spark Connect at {address}: {scrub(spark_error_line(exc), remote)}")


@contextmanager
def connect_mode_kept_out_of_environment() -> Iterator[None]:
    """pyspark marks the whole process as Spark Connect (``SPARK_CONNECT_MODE_ENABLED=1`` in
    ``os.environ``) when a Connect session is created: every spark-submit this process starts
    afterwards (another task in the same Airflow worker, ``dag.test``) would inherit it and turn
    its classic session into a Connect client. Put the variables back as they were."""
    names = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def connect_session(remote: str) -> Any:
    """A Spark Connect session, after checking a server answers (a missing one would be retried for minutes).

    It joins the shared session (see :data:`SHARED_SESSION_SECONDS`) unless ``remote`` names its
    own ``session_id``, and starts a fresh one if the server closed the shared one.
    """
    check_reachable(remote)
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    parts = urlsplit(remote.split(";")[0])
    policy = retry_while_server_listens(parts.hostname, parts.port or DEFAULT_PORT)

    def session(url: str) -> Any:
        with connect_mode_kept_out_of_environment():
            spark = ConnectSession.builder.remote(url).create()
        try:
            spark.client.set_retry_policies([policy])
            for key, value in SESSION_CONF.items():  # the first call fails if the session was closed
                spark.conf.set(key, value)
        except BaseException:
            spark.client.close()
            raise
        return spark

    try:
        if "session_id=" in remote:
            return session(remote)
        try:
            return session(with_session_id(remote, shared_session_id()))
        except Exception as exc:
            if "SESSION_CLOSED" not in str(exc):
                raise
            log.info("the shared Spark Connect session was closed on the server; using a new one")
            return session(remote)
    except Exception as exc:
        raise connect_error(remote, exc) from None


def write_through_connect(
    remote: str,
    plan: OffsetPlan,
    store: BatchStore,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    progress: Callable[[str], None] = log.info,
    on_session: Callable[[str], None] | None = None,
    registry: Any = None,
) -> dict[str, Any]:
    """Write the plan's batch with the tasks on the Spark Connect server at ``remote``.

    :param registry: the schema registry's settings, for values in a registry format (they
        reach the tasks inside the pickled function, like the Kafka settings).
    :param on_session: told the id of the server-side session the batch runs in, before it
        starts (what :func:`interrupt_batch` needs to stop it from elsewhere).
    :returns: the batch's log entry (its manifest).
    :raises SparkStepError: a task failed or the server went away (a retry may pass).
    :raises ConfigError: the server's workers lack this package (or run another version).
    """
    from kafka_batch_provider.spark.ingest import stage_with
    from kafka_batch_provider.steps.write import write_batch

    def job(spark: Any) -> dict[str, Any]:
        return write_batch(plan, store, kafka_config, stage_with(spark, registry), options, progress)

    return run_on_connect(remote, plan.batch_id, job, on_session)


def run_on_connect(
    remote: str, batch_id: str, job: Callable[[Any], T], on_session: Callable[[str], None] | None = None
) -> T:
    """``job(spark)`` on a session of the Spark Connect server at ``remote``, its Spark jobs tagged with
    ``batch_id`` (stopped when it fails), its errors one line with their retry decision kept."""
    spark = connect_session(remote)
    if on_session is not None:
        on_session(spark.session_id)
    tag = batch_tag(batch_id)
    spark.addTag(tag)  # so a failed or killed attempt's Spark job can be stopped on the shared session
    try:
        return job(spark)
    except KafkaBatchError:
        interrupt(spark, tag)
        raise
    except Exception as exc:
        interrupt(spark, tag)
        line = scrub(spark_error_line(exc), remote)
        if missing_package(str(exc)):
            raise ConfigError(line) from None
        # A task's own error keeps its class, so its retry decision (errors.py) is the one
        # spark-submit's exit code carries; anything else (an executor lost) may pass on a retry.
        error = task_error_class(str(exc)) or SparkStepError
        raise error(f"batch {batch_id} through Spark Connect at {remote_address(remote)}: {line}") from None
    finally:
        # The server-side session stays for the next batch (warm workers); the client's channel goes.
        spark.client.close()


def batch_tag(batch_id: str) -> str:
    return f"kafka-batch-{batch_id}"


def interrupt(spark: Any, tag: str) -> None:
    """Stop this batch's Spark jobs still running on the (shared) session, never another batch's."""
    try:
        spark.interruptTag(tag)
    except Exception:  # the server may be gone: nothing is running there then
        log.debug("interrupting %s failed", tag, exc_info=True)


def interrupt_batch(remote: str, batch_id: str, session_id: str | None = None) -> None:
    """Stop a batch's Spark jobs from elsewhere (Airflow's on_kill), in the session they run in.

    ``session_id`` is the one :func:`write_through_connect` reported: the shared session of the
    batch's time bucket (or a fresh one), not necessarily the current bucket's. Without it, the
    current bucket's shared session is asked. A session the server closed has nothing running.
    """
    try:
        spark = connect_session(with_session_id(remote, session_id) if session_id else remote)
    except KafkaBatchError:
        return
    try:
        interrupt(spark, batch_tag(batch_id))
    finally:
        spark.client.close()
