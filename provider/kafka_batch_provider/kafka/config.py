"""librdkafka configuration: parse, check, redact.

The configuration is passed straight to confluent-kafka, as the Apache Kafka provider does
with a connection's extra, rather than re-modelled field by field. What this module adds is
the checks the protocol depends on and the redaction that keeps secrets out of logs.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kafka_batch_provider.errors import ConfigError

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

#: Keys whose values are secrets (librdkafka names: sasl.password, ssl.key.password,
#: sasl.oauthbearer.client.secret, sasl.oauthbearer.config, sasl.jaas.config, ...). A superset
#: of Spark's default ``spark.redaction.regex``, which the Spark application replaces with it.
#: Also the storage and catalog names: ``account_key``, ``connection_string``, ``sas_token``,
#: ``s3.access-key-id``, ``credential``.
SECRET_KEY_PATTERN = re.compile(
    r"(?i)secret|password|token|access[._-]?key|account[._-]?key|connection[._-]?string|sas[._-]?key|credential"
    r"|jaas|oauthbearer\.config|ssl\.key\.pem|keystore\.key|private"
)
#: A URI with a password in it (``postgresql://user:pw@host/db``), whatever its key is called.
SECRET_VALUE_PATTERN = re.compile(r"://[^/@\s:]*:[^@\s]+@")


def is_secret(key: str, value: Any = None) -> bool:
    """Whether a setting must not be shown: a secret-looking name, or a URI with a password."""
    return bool(SECRET_KEY_PATTERN.search(key) or SECRET_VALUE_PATTERN.search(str(value or "")))


#: Consumer-only keys that the admin client would only warn about.
_CONSUMER_ONLY_KEYS = {
    "group.id",
    "group.instance.id",
    "isolation.level",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "session.timeout.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "fetch.queue.backoff.ms",
    "enable.partition.eof",
}

#: librdkafka logs through this logger (connection errors, retries). The command line keeps
#: it quiet unless asked, so a broker that is down gives one clear line, not a stream.
LIBRDKAFKA_LOGGER = logging.getLogger("kafka_batch_provider.librdkafka")

_TRUE = {"true", "1", "yes", "on"}


def parse_key_values(pairs: Iterable[str], flag: str = "--kafka-config") -> dict[str, str]:
    """``["a=1", "b=x=y"]`` -> ``{"a": "1", "b": "x=y"}`` (the value keeps later ``=``)."""
    config: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} expects key=value, got {pair!r}")
        config[key.strip()] = value
    return config


def read_config_file(path: str) -> dict[str, Any]:
    """A JSON object of librdkafka settings from a file, or a one-line :class:`ConfigError`."""
    try:
        with open(path) as f:
            return config_object(json.load(f))
    except OSError as exc:
        raise ConfigError(f"cannot read Kafka config file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"Kafka config file {path} is not valid JSON: {exc}") from None


def config_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError("Kafka config must be a JSON object of librdkafka settings")
    return data


def check_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``config`` that is safe for this protocol, or raise :class:`ConfigError`.

    Auto-commit is refused: it would move the group's offsets on a timer, before the data is
    written, which is exactly what the manifest-then-commit protocol exists to prevent.
    """
    checked = dict(config)
    if not str(checked.get("bootstrap.servers", "")).strip():
        raise ConfigError("bootstrap.servers is required (--bootstrap-servers or the connection's extra)")
    if str(checked.get("enable.auto.commit", "false")).strip().lower() in _TRUE:
        raise ConfigError(
            "enable.auto.commit=true is not allowed: offsets are committed by the commit step, "
            "only after the batch is written; remove the setting or set it to false"
        )
    isolation = str(checked.get("isolation.level", READ_COMMITTED))
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise ConfigError(f"isolation.level must be {READ_COMMITTED} or {READ_UNCOMMITTED}, got {isolation!r}")
    checked["isolation.level"] = isolation
    return checked


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy fit for logs, XCom and manifests: secret values replaced by ``***``."""
    return {k: ("***" if is_secret(k, v) else v) for k, v in config.items()}


def admin_config(config: Mapping[str, Any]) -> dict[str, Any]:
    conf = {k: v for k, v in config.items() if k not in _CONSUMER_ONLY_KEYS}
    conf.setdefault("logger", LIBRDKAFKA_LOGGER)
    return conf


def consumer_config(config: Mapping[str, Any], group_id: str) -> dict[str, Any]:
    """A consumer that never commits or stores offsets by itself."""
    conf = dict(config)
    conf.update({"group.id": group_id, "enable.auto.commit": False, "enable.auto.offset.store": False})
    conf.setdefault("logger", LIBRDKAFKA_LOGGER)
    return conf


#: Defaults for the reading consumer; user config overrides them. Larger fetches and a
#: pre-fetch queue keep librdkafka ahead of the Python loop; 16 MB of queue and fetches of at most
#: 16 MB (8 MB a partition) keep a worker reading 64 KB records well below 512 MB on Apache Kafka,
#: which fills its fetches (the tansu broker did not): with 32/32/16 MB a worker peaked at ~510 MB,
#: with these (and 16 MB row groups) ~405 MB, at the same speed (docs/performance.md, 2026-11-26).
#: Once the queue is full librdkafka waits ``fetch.queue.backoff.ms`` (1 s by default) before
#: it fetches again: a reader that empties the queue faster then stalls ~0.6 s every ~100,000
#: records (a 250,000-record range: 1.5 s -> 0.9 s with 10 ms).
READER_DEFAULTS: dict[str, Any] = {
    "fetch.max.bytes": 16 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.max.messages.kbytes": 16 * 1024,
    "fetch.wait.max.ms": 100,
    "fetch.queue.backoff.ms": 10,
}

#: Group id of the reading consumer. It never joins the group (assign only) and never commits, so
#: it needs no ACL: the reader skips the group authorization errors librdkafka reports for it
#: (``kafka.errors.READER_GROUP_ERRORS``).
READER_GROUP_ID = "kafka-batch-reader"


def reader_consumer_config(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a consumer that reads planned ranges (assigned, never joined, never committed)."""
    conf = dict(READER_DEFAULTS)
    conf.update(kafka_config)
    conf = consumer_config(conf, READER_GROUP_ID)
    conf["auto.offset.reset"] = "error"
    conf["enable.partition.eof"] = False
    return conf
