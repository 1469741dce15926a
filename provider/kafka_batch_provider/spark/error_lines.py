"""One line for an error that comes out of Spark (spark-submit's driver or a Spark Connect server).

An error raised in a Spark task arrives wrapped in Spark's traceback text; the user needs the
one line that says what went wrong, and what to do where there is something to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import (
    ConfigError,
    KafkaBatchError,
    KafkaRefusedError,
    ReadFailedError,
    error_for_exit_code,
    error_named,
)

#: What the Spark application prints last when it fails (``spark/app.py``): its error's class,
#: then its one line. Whoever started spark-submit reads both back (:func:`application_error`).
ERROR_CLASS_PREFIX = "error-class: "
ERROR_LINE_PREFIX = "error: "

_TASK_ERROR = re.compile(r"kafka_batch_provider\.errors\.(\w+Error): (.+)")
_MISSING_PACKAGE = re.compile(r"No module named '?kafka_batch_provider")


def task_error_line(text: str) -> str | None:
    """The one-line message of a :class:`KafkaBatchError` raised inside a Spark task, if any."""
    match = _TASK_ERROR.search(text)
    return match.group(2).strip() if match else None


def task_error_kind(text: str) -> str | None:
    """The class name of a :class:`KafkaBatchError` raised inside a Spark task (``ReadError``, ...), if any."""
    match = _TASK_ERROR.search(text)
    return match.group(1) if match else None


def missing_package(text: str) -> bool:
    """Spark's Python workers could not import this package."""
    return bool(_MISSING_PACKAGE.search(text))


def python_worker_died(text: str) -> bool:
    """A Spark task's Python process ended without a Python error (SIGKILL, the OOM killer, a crash)."""
    return "Python worker exited unexpectedly" in text or "PYTHON_WORKER_EXITED_UNEXPECTEDLY" in text


def jvm_connector_missing(text: str) -> bool:
    return "KAFKA_DATA_SOURCE_NOT_ENABLED" in text or "Failed to find data source: kafka" in text


#: The Java Kafka client's refusals (the jvm reader): authentication and authorization, which no
#: retry changes (the Python reader raises ``ReadFailedError`` for the same answers).
_JAVA_KAFKA_REFUSED = re.compile(
    r"org\.apache\.kafka\.common\.errors\.(\w*(?:Authorization|Authentication)Exception): ?([^\n]*)"
)
#: Spark's Kafka source failing a read whose offsets are gone (``failOnDataLoss=true``).
_JAVA_DATA_LOSS = "Some data may have been lost because they are not available in Kafka any more"
_DATA_LOSS_REASON = re.compile(r"Reason: (.*?)\s*(?:with consumer group|\n\n|$)", re.DOTALL)


def java_kafka_refusal(text: str) -> str | None:
    """The jvm reader's authentication or authorization failure, as ``Exception: message``."""
    match = _JAVA_KAFKA_REFUSED.search(text)
    return f"{match.group(1)}: {match.group(2).strip()}" if match else None


def java_data_loss(text: str) -> str | None:
    """Why Spark's Kafka source refused to skip planned offsets (they are gone from Kafka)."""
    if _JAVA_DATA_LOSS not in text:
        return None
    match = _DATA_LOSS_REASON.search(text)
    return " ".join(match.group(1).split()) if match else "planned offsets are not in Kafka any more"


def task_error_class(text: str) -> type[KafkaBatchError] | None:
    """The error class of a failure that reached the driver through Spark, read from its text.

    A :class:`KafkaBatchError` raised in a Spark task keeps its class (and so its retry
    decision); a missing package or the JVM reader without its connector is a configuration
    error; anything else (an executor lost, the JVM) is ``None``: no class of ours, a retry may pass.
    """
    kind = task_error_kind(text)
    if kind:
        return error_named(kind) or KafkaBatchError
    if jvm_connector_missing(text) or missing_package(text):
        return ConfigError
    if java_data_loss(text):
        return ReadFailedError
    if java_kafka_refusal(text):
        return KafkaRefusedError
    return None


def spark_failure_exit_code(exc: BaseException) -> int:
    """The Spark application's exit code for an error that reached it through Spark (1: none of ours)."""
    found = task_error_class(str(exc))
    return found.exit_code if found else 1


def spark_error_line(exc: BaseException) -> str:
    text = str(exc)
    found = task_error_line(text)
    if found:
        return found
    if missing_package(text):
        return (
            "Spark's Python workers cannot import kafka_batch_provider: install airflow-provider-kafka-batch "
            "(this version) into the Python that Spark runs (PYSPARK_PYTHON of the cluster or the Spark Connect server)"
        )
    if jvm_connector_missing(text):
        return (
            "the jvm reader needs Spark's Kafka connector (spark-sql-kafka-0-10) where Spark runs: "
            "fetch its jars with `make jvm-tools` (spark-submit and `kafka-batch spark-connect start` add them), "
            f"give a Spark Connect server them in spark.jars, or use {Setting('reader', 'python')}"
        )
    lost = java_data_loss(text)
    if lost:
        return (
            f"the jvm reader found planned offsets gone from Kafka (retention, deleted records or topic): {lost}; "
            "nothing was published"
        )
    refused = java_kafka_refusal(text)
    if refused:
        return f"Kafka refused the jvm reader: {refused}"
    if python_worker_died(text):
        return (
            "a Spark task's Python worker died (killed, or out of memory: see the executor's log); nothing of "
            "the batch was published; a retry writes it again (after an out-of-memory kill, give the executors "
            "more memory or lower --max-offsets-per-task)"
        )
    if "StatusCode.UNAVAILABLE" in text or "RETRIES_EXCEEDED" in text:
        return "the Spark Connect server stopped answering (gRPC UNAVAILABLE): it went away or cannot be reached"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}"


def application_error(output_lines: Iterable[str], exit_code: int | None, prefix: str = "") -> KafkaBatchError | None:
    """The error a failed run of the Spark application reported, read back from its output: its
    class when the exit code agrees, else its code's decision (``errors.error_for_exit_code``);
    ``None`` when it printed no error line (a JVM that died, a kill)."""
    lines = [line.strip() for line in output_lines]
    errors = [line.removeprefix(ERROR_LINE_PREFIX) for line in lines if line.startswith(ERROR_LINE_PREFIX)]
    if not errors:
        return None
    names = [line.removeprefix(ERROR_CLASS_PREFIX) for line in lines if line.startswith(ERROR_CLASS_PREFIX)]
    return error_for_exit_code(exit_code, prefix + errors[-1], names[-1] if names else None)
