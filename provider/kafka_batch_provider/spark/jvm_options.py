"""Options for Spark's own Kafka source (``format("kafka")``), built from a plan. Pure, no I/O.

For clusters that have the ``spark-sql-kafka-0-10`` connector (``make jvm-tools`` fetches it:
:mod:`~kafka_batch_provider.spark.kafka_connector`). The result has the same schema as the Python
reader (``includeHeaders`` on). Offsets go in Spark's JSON vocabulary: ``{"topic": {"0": 42}}``
for ``startingOffsets`` / ``endingOffsets``.

The Kafka settings are librdkafka's (a connection's extra, ``--kafka-config``); Spark's source runs
the Java client, whose names differ: :func:`java_client_config` translates them (SASL credentials
become ``sasl.jaas.config``, PEM files a PEM trust or key store) and leaves out what only librdkafka
knows. Secrets then travel as source options, so :data:`REDACTION_CONF` keeps them out of query
plans, the Spark UI, event logs and Spark Connect's statement texts.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.config import SECRET_KEY_PATTERN

#: Settings both clients name and read alike.
SHARED_SETTINGS = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "client.rack",
        "client.dns.lookup",
        "isolation.level",
        "request.timeout.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
        "socket.connection.setup.timeout.max.ms",
        "metadata.max.age.ms",
        "connections.max.idle.ms",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "check.crcs",
        "sasl.mechanism",
        "ssl.key.password",
    }
)
#: librdkafka's name -> the Java client's, same meaning and values.
RENAMED_SETTINGS = {
    "sasl.mechanisms": "sasl.mechanism",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "socket.receive.buffer.bytes": "receive.buffer.bytes",
    "socket.send.buffer.bytes": "send.buffer.bytes",
}
#: SASL mechanisms whose librdkafka credentials (``sasl.username``, ``sasl.password``) map to a
#: JAAS login module of the Java client.
JAAS_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: Kafka client settings Spark's source refuses or manages itself (see Spark's
#: "Structured Streaming + Kafka Integration Guide", section "Kafka Specific Configurations").
_SPARK_MANAGED = {
    "group.id",
    "auto.offset.reset",
    "key.deserializer",
    "value.deserializer",
    "enable.auto.commit",
    "interceptor.classes",
}

_SECRET_WORDS = SECRET_KEY_PATTERN.pattern.removeprefix("(?i)")
#: Spark's settings that keep the reader's secret options (``kafka.sasl.jaas.config``,
#: ``kafka.ssl.*password``, ``kafka.ssl.keystore.key``) out of sight; Java regular expressions:
#:
#: * ``spark.redaction.regex`` (core; read when the context starts): conf and options whose key
#:   *or value* matches are shown as ``*********(redacted)`` in the UI's environment, event logs
#:   and wherever Spark redacts a map of options (Spark's default misses ``jaas`` in a key, but a
#:   JAAS value matches its ``password``);
#: * ``spark.sql.redaction.options.regex`` (per session): data source options whose key matches,
#:   in plan strings (Spark's default ``(?i)url`` kept);
#: * ``spark.sql.redaction.string.regex`` (per session): any text Spark redacts as a whole: plan
#:   strings, and Spark Connect's statement text (its UI tab, its stages' descriptions, the event
#:   log), which is the request's protobuf text: ``key: "kafka.sasl.jaas.config" value: "..."``.
#:   A JAAS text shown on its own is caught too (``password="..."``).
REDACTION_CONF = {
    "spark.redaction.regex": SECRET_KEY_PATTERN.pattern,
    "spark.sql.redaction.options.regex": f"(?i)url|{_SECRET_WORDS}",
    "spark.sql.redaction.string.regex": (
        rf'(?i)key: "[^"]*(?:{_SECRET_WORDS})[^"]*"\s*value: "(?:[^"\\]|\\.)*"?'
        r'|password\s*=\s*"(?:[^"\\]|\\.)*"?'
    ),
}
#: The per-session ones, which a Spark Connect client sets on its session.
SESSION_REDACTION_CONF = {k: v for k, v in REDACTION_CONF.items() if k.startswith("spark.sql.")}


def jvm_reader_options(ranges: Sequence[OffsetRange], kafka_config: Mapping[str, Any]) -> dict[str, str]:
    """``spark.read.format("kafka").options(**result)`` reads exactly ``ranges``.

    :param kafka_config: librdkafka settings, translated by :func:`java_client_config` and
        passed as ``kafka.<key>``.
    """
    readable = [r for r in ranges if r.size > 0]
    if not readable:
        raise ConfigError("the JVM Kafka reader needs at least one non-empty range")
    assign: dict[str, list[int]] = defaultdict(list)
    starting: dict[str, dict[str, int]] = defaultdict(dict)
    ending: dict[str, dict[str, int]] = defaultdict(dict)
    for r in readable:
        assign[r.topic].append(r.partition)
        starting[r.topic][str(r.partition)] = r.start
        ending[r.topic][str(r.partition)] = r.end
    options = {
        "assign": json.dumps(dict(assign), sort_keys=True),
        "startingOffsets": json.dumps(dict(starting), sort_keys=True),
        "endingOffsets": json.dumps(dict(ending), sort_keys=True),
        "includeHeaders": "true",
        # A planned offset that no longer exists is data loss: fail, never skip silently.
        "failOnDataLoss": "true",
    }
    for key, value in java_client_config(kafka_config).items():
        if key not in _SPARK_MANAGED:
            options[f"kafka.{key}"] = value
    return options


def java_client_config(config: Mapping[str, Any]) -> dict[str, str]:
    """The Java client's settings for a librdkafka config: what Spark's Kafka source needs.

    * ``sasl.username`` / ``sasl.password`` (PLAIN, SCRAM-SHA-256/512) -> ``sasl.jaas.config``;
    * ``ssl.ca.location`` (a PEM file) -> ``ssl.truststore.type=PEM`` + ``ssl.truststore.location``;
      ``ssl.ca.pem`` -> ``ssl.truststore.certificates``;
    * a client certificate: ``ssl.certificate.location`` and ``ssl.key.location`` naming one PEM
      file (key and chain) -> a PEM keystore; ``ssl.certificate.pem`` + ``ssl.key.pem`` -> its
      inline form; ``ssl.keystore.location`` (PKCS#12) + ``ssl.keystore.password`` as they are;
    * ``ssl.endpoint.identification.algorithm=none`` -> the Java client's empty value;
    * settings both clients share pass as they are, a few under their Java names
      (``fetch.wait.max.ms`` -> ``fetch.max.wait.ms``); librdkafka's own tuning is left out.

    Files are named, not read: they must exist where Spark's tasks run, as for the Python reader.

    :raises ConfigError: a setting the Java client cannot express (OAUTHBEARER or GSSAPI
        credentials, a CA folder, certificate verification switched off).
    """
    conf = {str(k): v for k, v in config.items() if k != "logger" and v is not None}
    java: dict[str, str] = {}
    for key, value in conf.items():
        if key in SHARED_SETTINGS:
            java[key] = str(value)
        elif key in RENAMED_SETTINGS:
            java[RENAMED_SETTINGS[key]] = str(value)
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if "security.protocol" in conf:
        java["security.protocol"] = protocol
    java.update(_sasl(conf, java.get("sasl.mechanism", "GSSAPI"), protocol))
    java.update(_tls(conf))
    return java


def _refused(what: str) -> ConfigError:
    return ConfigError(
        f"the jvm reader (Spark's Java Kafka client) cannot take {what}: use {Setting('reader', 'python')}"
    )


def _sasl(conf: Mapping[str, Any], mechanism: str, protocol: str) -> dict[str, str]:
    if not protocol.startswith("SASL_"):
        return {}
    username, password = conf.get("sasl.username"), conf.get("sasl.password")
    module = JAAS_LOGIN_MODULES.get(mechanism.upper())
    if module is None:  # OAUTHBEARER, GSSAPI: librdkafka's settings have no Java counterpart here
        raise _refused(f"sasl.mechanism={mechanism} (it maps PLAIN and SCRAM credentials only)")
    if username is None and password is None:
        return {}
    if module is None:
        raise _refused(f"sasl.username/sasl.password with sasl.mechanism={mechanism} (it maps PLAIN and SCRAM only)")
    if username is None or password is None:
        raise ConfigError(f"sasl.mechanism {mechanism} needs both sasl.username and sasl.password")
    credentials = f'username="{_jaas_quoted(username)}" password="{_jaas_quoted(password)}"'
    return {"sasl.jaas.config": f"{module} required {credentials};"}


def _jaas_quoted(value: Any) -> str:
    """A value inside JAAS double quotes (the Java client reads ``\\"`` and ``\\\\`` escapes)."""
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ConfigError("a SASL user name or password with a line break cannot be passed to the jvm reader")
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _tls(conf: Mapping[str, Any]) -> dict[str, str]:
    java: dict[str, str] = {}
    if str(conf.get("enable.ssl.certificate.verification", "true")).strip().lower() in ("false", "0", "no", "off"):
        raise _refused("enable.ssl.certificate.verification=false (the Java client always verifies)")
    if "ssl.endpoint.identification.algorithm" in conf:
        algorithm = str(conf["ssl.endpoint.identification.algorithm"]).strip().lower()
        java["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    ca = conf.get("ssl.ca.location")
    if ca and str(ca) != "probe":  # probe: the system's CAs, which the JVM's default truststore stands for
        if str(ca).endswith("/"):
            raise _refused(f"ssl.ca.location={ca} (a folder of CA files; name one PEM file)")
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)})
    if conf.get("ssl.ca.pem"):
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": str(conf["ssl.ca.pem"])})
    certificate, key = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    if certificate or key:
        if certificate != key:
            raise _refused(
                "ssl.certificate.location and ssl.key.location in two files (put the key and the certificate "
                "chain in one PEM file and name it in both)"
            )
        java.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certificate)})
    if conf.get("ssl.certificate.pem") or conf.get("ssl.key.pem"):
        java.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": str(conf.get("ssl.certificate.pem", "")),
                "ssl.keystore.key": str(conf.get("ssl.key.pem", "")),
            }
        )
    if conf.get("ssl.keystore.location"):
        java.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(conf["ssl.keystore.location"])})
        if conf.get("ssl.keystore.password") is not None:
            java["ssl.keystore.password"] = str(conf["ssl.keystore.password"])
    return java
