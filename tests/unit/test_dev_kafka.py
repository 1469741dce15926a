"""The test broker's settings and the choice of broker, without starting one (``dev/kafka.py``,
``testing/pytest_plugin.py``); starting one: ``tests/integration/test_kafka_broker.py``."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from kafka_batch_provider.dev.kafka import KafkaBroker, adopt_recorded_archives, new_cluster_id, properties_text
from kafka_batch_provider.testing.pytest_plugin import broker_kind


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "kafka"),
        ({"KAFKA_BATCH_TEST_BROKER": "tansu"}, "tansu"),
        ({"KAFKA_BATCH_TEST_BROKER": " Kafka "}, "kafka"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "broker:9092", "KAFKA_BATCH_TEST_BROKER": "tansu"}, "external"),
    ],
)
def test_the_session_broker_is_apache_kafka_unless_told_otherwise(environ, expected):
    assert broker_kind(environ) == expected


def test_an_unknown_broker_kind_is_a_usage_error():
    with pytest.raises(pytest.UsageError, match=r"KAFKA_BATCH_TEST_BROKER='redpanda': choose one of kafka, tansu"):
        broker_kind({"KAFKA_BATCH_TEST_BROKER": "redpanda"})


def test_cluster_ids_are_kafkas_base64_uuids_never_starting_with_a_dash():
    for _ in range(200):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_one_node_settings_replication_one_and_the_callers_properties_win(tmp_path):
    broker = KafkaBroker(port=19092, data_dir=tmp_path, properties={"auto.create.topics.enable": "false"})
    settings = broker.server_settings()
    controller = broker.listener_ports["CONTROLLER"]
    assert settings["process.roles"] == "broker,controller"
    assert settings["controller.quorum.voters"] == f"1@127.0.0.1:{controller}"
    assert settings["listeners"] == f"PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:{controller}"
    assert settings["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert settings["inter.broker.listener.name"] == "PLAINTEXT"
    assert settings["transaction.state.log.min.isr"] == "1" and settings["offsets.topic.replication.factor"] == "1"
    assert settings["log.dirs"] == str(tmp_path / "log")
    assert settings["auto.create.topics.enable"] == "false"


def test_behind_a_proxy_the_broker_talks_to_itself_on_an_internal_listener(tmp_path):
    broker = KafkaBroker(port=19092, data_dir=tmp_path, advertised_port=29092, extra_listeners={"SASL_SSL": "SASL_SSL"})
    settings = broker.server_settings()
    ports = broker.listener_ports
    assert set(ports) == {"PLAINTEXT", "CONTROLLER", "INTERNAL", "SASL_SSL"}
    assert settings["advertised.listeners"] == (
        f"PLAINTEXT://127.0.0.1:29092,INTERNAL://127.0.0.1:{ports['INTERNAL']},SASL_SSL://127.0.0.1:{ports['SASL_SSL']}"
    )
    assert settings["inter.broker.listener.name"] == "INTERNAL"
    assert "SASL_SSL:SASL_SSL" in settings["listener.security.protocol.map"].split(",")


def test_an_extra_listener_may_advertise_a_proxys_port(tmp_path):
    broker = KafkaBroker(
        port=19092, data_dir=tmp_path, extra_listeners={"FAULT0": "PLAINTEXT"}, advertised_ports={"FAULT0": 29093}
    )
    settings = broker.server_settings()
    ports = broker.listener_ports
    assert f"FAULT0://127.0.0.1:{ports['FAULT0']}" in settings["listeners"].split(","), settings["listeners"]
    assert settings["advertised.listeners"].split(",") == ["PLAINTEXT://127.0.0.1:19092", "FAULT0://127.0.0.1:29093"]
    assert settings["inter.broker.listener.name"] == "PLAINTEXT", "the broker talks to itself around the proxy"


def test_properties_files_escape_backslashes_as_java_reads_them():
    text = properties_text({"a": "C:\\data", "b": "x=y"})
    assert text.splitlines()[1:] == ["a=C:\\\\data", "b=x=y"]


def test_a_finished_archive_is_moved_into_place_and_an_empty_one_dropped(tmp_path: Path):
    (tmp_path / ".kafka-classes-java17-abc.1234abcd.part").write_bytes(b"archive")
    (tmp_path / ".kafka-classes-java21-def.5678abcd.part").write_bytes(b"")
    adopt_recorded_archives(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kafka-classes-java17-abc.jsa"]
    assert (tmp_path / "kafka-classes-java17-abc.jsa").read_bytes() == b"archive"
