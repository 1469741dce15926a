"""Apache Kafka as the dev server runs it (``dev/kafka.py``): the CLI's start/status/stop, a
restart that keeps the topics, a proxy's port in the metadata, and the one-line refusals."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.dev.kafka import KafkaBroker, kafka_jars
from kafka_batch_provider.dev.local_servers import free_port, pid_alive
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.integration.test_cli import assert_one_line_error, cli, last_json
from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.integration


def test_kafka_start_status_stop_keeps_the_topics_across_a_restart(tmp_path):
    env = {"KAFKA_BATCH_STATE_DIR": str(tmp_path)}
    port = free_port()
    started = last_json(cli("kafka", "start", "--port", str(port), env=env))
    try:
        assert started["running"] and started["bootstrap_servers"] == f"127.0.0.1:{port}", started
        assert started["version"] == "4.4.0" and Path(started["data_dir"]).parent == tmp_path, started
        assert last_json(cli("kafka", "status", env=env))["running"] is True
        config = {"bootstrap.servers": started["bootstrap_servers"]}
        create_topics(config, {"kept": 2})
        produce(config, "kept", sample_records(2, 10))
        assert_one_line_error(cli("kafka", "start", "--port", str(port), env=env), "already running")
    finally:
        stopped = last_json(cli("kafka", "stop", env=env))
    assert stopped["stopped"] is True and not pid_alive(started["pid"])
    assert last_json(cli("kafka", "status", env=env))["running"] is False

    # Started again on the same folder (the controller on another free port): the same topics.
    again = last_json(cli("kafka", "start", "--port", str(port), env=env))
    try:
        tps = [TopicPartition("kept", p) for p in (0, 1)]
        ends = KafkaOffsets({"bootstrap.servers": again["bootstrap_servers"]}, timeout=10).log_end_offsets(tps)
        assert ends == {tps[0]: 5, tps[1]: 5}
    finally:
        last_json(cli("kafka", "stop", env=env))


def test_a_broker_behind_a_proxy_names_the_proxys_port(tmp_path):
    proxy = FaultProxy(target_port=0)
    with KafkaBroker(data_dir=tmp_path / "data", log_path=tmp_path / "kafka.log", advertised_port=proxy.port) as broker:
        proxy.target_port = broker.port
        # A client that bootstraps from the proxy keeps to the proxy (were nothing listening there,
        # a librdkafka that dropped its bootstrap connection for the named broker would fail).
        with proxy:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{proxy.port}"})
            brokers = admin.list_topics(timeout=30).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", proxy.port)]
        # Its own requests (transaction markers) use a listener of their own, not the proxy.
        assert set(broker.listener_ports) == {"PLAINTEXT", "CONTROLLER", "INTERNAL"}
    assert "Kafka Server started" in (tmp_path / "kafka.log").read_text()


def test_a_temporary_broker_removes_its_folder(tmp_path):
    broker = KafkaBroker().start()
    folder = broker.data_dir
    assert (folder / "log" / "meta.properties").is_file()
    broker.stop()
    assert not folder.exists()


def test_missing_jars_are_one_line_naming_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_BATCH_TOOLS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"Apache Kafka's jars are not in .*: fetch them with `make jvm-tools`"):
        kafka_jars()
    result = cli("kafka", "start", "--port", str(free_port()), env={"KAFKA_BATCH_STATE_DIR": str(tmp_path)})
    assert_one_line_error(result, "make jvm-tools")


def test_a_java_older_than_17_is_refused_in_one_line(tmp_path, monkeypatch):
    fake = tmp_path / "jdk" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.24\" 2024-07-16' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(ConfigError, match=r"Apache Kafka needs Java 17\+, .* is: openjdk version \"11.0.24\""):
        KafkaBroker(data_dir=tmp_path / "data").start()
    assert not (tmp_path / "data").exists() or not os.listdir(tmp_path / "data")
