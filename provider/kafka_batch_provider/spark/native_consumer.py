"""The ``native`` reader's consumer: librdkafka's messages into Arrow columns in C (issue 48).

One :class:`~kafka_batch_provider.spark.kafka_reader.RangeConsumer`; the range reader's loop
(:func:`~kafka_batch_provider.spark.kafka_reader.read_range`) drives it exactly as it drives the
python reader's, so positions, stalls and errors are judged in one place. The C part
(``kafka_batch_native``, a wheel of its own: ``pip install airflow-provider-kafka-batch-native``)
copies each record's key, value, offset, timestamp and headers into Arrow buffers with the GIL
released, and hands them over through the Arrow C data interface: no Python object per record.
It links the librdkafka that confluent-kafka's wheel carries: the same client, the same settings.

Without the package the python reader reads, and the task's log says so once
(:func:`why_not`, :func:`fallback`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import cache
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.kafka.config import reader_consumer_config
from kafka_batch_provider.spark.kafka_columns import KAFKA_ARROW_SCHEMA, kafka_batch

log = logging.getLogger(__name__)

#: The C part's struct of columns (``kafka_batch_native/_reader.c`` builds them in this order).
NATIVE_COLUMNS = pa.struct(
    [KAFKA_ARROW_SCHEMA.field(name) for name in ("key", "value", "offset", "timestamp", "timestampType", "headers")]
)

#: confluent-kafka's Python-only settings: a Python callable, which C cannot call.
_PYTHON_CALLBACKS = ("error_cb", "throttle_cb", "stats_cb", "oauth_cb", "on_commit", "on_delivery")
#: What confluent-kafka 2.16 turns into something else before librdkafka sees it: plugin paths
#: resolved against its wheel, the AWS IAM token flow it runs in Python (librdkafka has none).
_RESOLVED_IN_PYTHON = frozenset({"plugin.library.paths", ("sasl.oauthbearer.metadata.authentication.type", "aws_iam")})
#: Python's logging levels as librdkafka's syslog ``log_level``.
_SYSLOG_LEVELS = ((logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4), (logging.ERROR, 3))


def why_not(kafka_config: Mapping[str, Any]) -> str | None:
    """Why the native reader cannot read with these settings here (None: it can): a setting that
    confluent-kafka's Python code acts on before librdkafka sees it, or no ``kafka_batch_native``."""
    for key, value in sorted(kafka_config.items()):
        if key == "logger":
            continue
        if key in _PYTHON_CALLBACKS or callable(value):
            return f"the setting {key!r} is a Python callback, which only confluent-kafka's client can call"
        if key in _RESOLVED_IN_PYTHON or (key, str(value)) in _RESOLVED_IN_PYTHON:
            return f"confluent-kafka resolves the setting {key!r} in Python"
        if not isinstance(value, (str, int, float, bool)):
            return f"the setting {key!r} is not a plain value (confluent-kafka interprets {type(value).__name__}s)"
    return _import_failure()


@cache
def _import_failure() -> str | None:
    try:
        import kafka_batch_native  # noqa: F401
    except ImportError as error:
        line = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"{line} (pip install airflow-provider-kafka-batch-native)"
    return None


@cache
def fallback(reason: str) -> None:
    """The one log line of a process whose native reader cannot read (once per reason)."""
    log.warning("reader native: %s; reading with the python reader", reason)


def native_settings(config: Mapping[str, Any]) -> dict[str, str]:
    """librdkafka's settings as strings, as confluent-kafka passes them (``true``/``false`` for booleans).

    The ``logger`` (Python logging) becomes the ``log_level`` its level stands for: librdkafka then
    prints to the worker's stderr what the logger would have let through.
    """
    settings = {}
    for key, value in config.items():
        if key == "logger":
            continue
        settings[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    effective_level = getattr(config.get("logger"), "getEffectiveLevel", None)
    if effective_level is not None and "log_level" not in settings:
        level = effective_level()
        settings["log_level"] = str(next((syslog for py, syslog in _SYSLOG_LEVELS if level <= py), 2))
    return settings


class NativeRangeConsumer:
    """``kafka_batch_native.RangeConsumer`` assigned to ``offset_range`` from its start."""

    name = "native"

    def __init__(self, kafka_config: Mapping[str, Any], offset_range: OffsetRange) -> None:
        from kafka_batch_native import RangeConsumer

        self.topic, self.partition = offset_range.topic, offset_range.partition
        self._consumer = RangeConsumer(native_settings(reader_consumer_config(kafka_config)))
        self._consumer.assign(self.topic, self.partition, offset_range.start)

    def consume(self, n: int, timeout: float, end: int) -> tuple[pa.RecordBatch | None, list[KafkaError]]:
        # librdkafka's timeout is int milliseconds; confluent-kafka rounds the same way.
        capsule, rows, _, failures = self._consumer.consume(n, max(0, min(int(timeout * 1000), 2**31 - 1)), end)
        errors = [KafkaError(code, reason) for code, reason in failures]
        if capsule is None:
            return None, errors
        columns = pa.Array._import_from_c_capsule(NATIVE_COLUMNS.__arrow_c_schema__(), capsule)
        key, value, offset, timestamp, timestamp_type, headers = columns.flatten()
        if headers.null_count < rows:
            # A header name is a string: confluent-kafka decodes it as UTF-8 and so must Arrow.
            headers.values.field(0).validate(full=True)
        return kafka_batch(self.topic, self.partition, key, value, offset, timestamp, timestamp_type, headers), errors

    def position(self) -> int:
        return self._consumer.position(self.topic, self.partition)

    def close(self) -> None:
        self._consumer.close()
