"""The native reader's pure parts: its settings, when it cannot read and what it says then, its build."""

from __future__ import annotations

import logging
import sys

import pytest

from kafka_batch_provider import __version__
from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER, reader_consumer_config
from kafka_batch_provider.spark import kafka_reader, native_consumer
from kafka_batch_provider.spark.kafka_columns import KAFKA_ARROW_SCHEMA


def test_settings_become_the_strings_confluent_kafka_would_pass():
    settings = native_consumer.native_settings(
        {"bootstrap.servers": "h:1", "enable.auto.commit": False, "fetch.wait.max.ms": 100, "check.crcs": True}
    )
    assert settings == {
        "bootstrap.servers": "h:1",
        "enable.auto.commit": "false",
        "fetch.wait.max.ms": "100",
        "check.crcs": "true",
    }, settings


@pytest.mark.parametrize(
    "level, syslog", [(logging.DEBUG, "7"), (logging.INFO, "6"), (logging.WARNING, "4"), (logging.ERROR, "3")]
)
def test_the_python_logger_becomes_the_log_level_it_lets_through(level, syslog, monkeypatch):
    monkeypatch.setattr(LIBRDKAFKA_LOGGER, "level", level)
    settings = native_consumer.native_settings(reader_consumer_config({"bootstrap.servers": "h:1"}))
    assert "logger" not in settings and settings["log_level"] == syslog, settings
    chosen = native_consumer.native_settings({"logger": LIBRDKAFKA_LOGGER, "log_level": "0"})
    assert chosen == {"log_level": "0"}, f"expected the user's own log_level kept, found {chosen}"


def test_a_python_callback_setting_sends_the_read_to_the_python_reader():
    reason = native_consumer.why_not({"bootstrap.servers": "h:1", "oauth_cb": lambda config: ("token", 0)})
    assert reason is not None and "'oauth_cb'" in reason and "Python callback" in reason, reason
    assert native_consumer.why_not({"bootstrap.servers": "h:1", "logger": LIBRDKAFKA_LOGGER}) is None


def test_without_the_package_the_python_reader_reads_and_one_line_says_why(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "kafka_batch_native", None)  # import fails as if not installed
    native_consumer._import_failure.cache_clear()
    native_consumer.fallback.cache_clear()
    try:
        from kafka_batch_provider.core.offsets import OffsetRange
        from kafka_batch_provider.spark.python_consumer import PythonRangeConsumer

        opened = []
        monkeypatch.setattr(PythonRangeConsumer, "__init__", lambda self, config, offset_range: opened.append(1))
        with caplog.at_level(logging.WARNING, logger=native_consumer.__name__):
            for _ in range(3):
                consumer, reason = kafka_reader.range_consumer("native", {}, OffsetRange("t", 0, 0, 1))
        assert isinstance(consumer, PythonRangeConsumer) and len(opened) == 3, consumer
        assert "pip install airflow-provider-kafka-batch-native" in reason, reason
        lines = [r.getMessage() for r in caplog.records if r.name == native_consumer.__name__]
        assert len(lines) == 1, f"expected one line for three reads, found {lines}"
        assert "reader native:" in lines[0] and "pip install airflow-provider-kafka-batch-native" in lines[0], lines
        assert lines[0].endswith("reading with the python reader"), lines
    finally:
        native_consumer._import_failure.cache_clear()
        native_consumer.fallback.cache_clear()


def test_the_native_package_is_the_providers_version_and_loads_confluent_kafkas_librdkafka():
    import confluent_kafka
    import kafka_batch_native

    assert kafka_batch_native.__version__ == __version__, (
        f"expected the native reader's version {__version__} (the provider's), found {kafka_batch_native.__version__}"
    )
    assert kafka_batch_native.librdkafka_version() == confluent_kafka.libversion()[0], (
        f"expected confluent-kafka's librdkafka {confluent_kafka.libversion()[0]}, "
        f"found {kafka_batch_native.librdkafka_version()}"
    )


def test_the_c_parts_columns_are_the_kafka_schemas_less_topic_and_partition():
    names = [field.name for field in native_consumer.NATIVE_COLUMNS]
    assert names == [n for n in KAFKA_ARROW_SCHEMA.names if n not in ("topic", "partition")], names


def test_a_bad_setting_is_refused_by_librdkafka_without_its_value():
    from kafka_batch_native import RangeConsumer

    with pytest.raises(ValueError) as refused:
        RangeConsumer({"sasl.password": "s3cr3t-value", "no.such.setting": "s3cr3t-value"})
    assert "no.such.setting" in str(refused.value) and "s3cr3t-value" not in str(refused.value), str(refused.value)


def test_the_native_build_pins_the_confluent_kafka_of_the_constraints():
    import re
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[2]
    [pinned] = re.findall(r"^confluent-kafka==(\S+)$", (root / "constraints.txt").read_text(), re.MULTILINE)
    requires = tomllib.loads((root / "native" / "pyproject.toml").read_text())["build-system"]["requires"]
    assert f"confluent-kafka=={pinned}" in requires, (
        f"expected native/pyproject.toml to build against confluent-kafka=={pinned}, found {requires}"
    )


@pytest.mark.parametrize(
    "setting, why",
    [
        ({"sasl.oauthbearer.metadata.authentication.type": "aws_iam"}, "resolves the setting"),
        ({"plugin.library.paths": "monitoring-interceptor"}, "resolves the setting"),
        ({"default.topic.config": {"acks": "all"}}, "not a plain value"),
        ({"client.id": None}, "not a plain value"),
    ],
    ids=["aws-iam-token", "plugins", "a-dict", "none"],
)
def test_settings_confluent_kafka_acts_on_in_python_send_the_read_to_the_python_reader(setting, why):
    reason = native_consumer.why_not({"bootstrap.servers": "h:1", **setting})
    assert reason is not None and why in reason and next(iter(setting)) in reason, reason


def test_one_consumer_refuses_a_second_init_and_a_close_while_in_use():
    import threading
    import time

    from kafka_batch_native import RangeConsumer

    # No broker at this address: consume() waits its whole timeout with the GIL released.
    settings = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": "0"}
    consumer = RangeConsumer(settings)
    with pytest.raises(RuntimeError, match="already initialized"):
        consumer.__init__(settings)
    consumer.assign("t", 0, 0)
    waiting = threading.Thread(target=consumer.consume, args=(10, 3000, 10))
    waiting.start()
    refused = None
    deadline = time.monotonic() + 2
    while refused is None and time.monotonic() < deadline and waiting.is_alive():
        try:
            consumer.position("t", 0)
        except RuntimeError as error:
            refused = error
    try:
        assert refused is not None and "in use" in str(refused), f"expected calls refused mid-consume, found {refused}"
        with pytest.raises(RuntimeError, match="in use"):
            consumer.close()
    finally:
        waiting.join(10)
        consumer.close()
    with pytest.raises(RuntimeError, match="closed"):
        consumer.consume(1, 0, 1)
