"""Ingestion over SASL_SSL with ACLs (``secure_kafka``): a SCRAM-SHA-512 principal with READ on its
topic and its group (nothing else) ingests exactly once through plan, both readers and commit.

* the ``python`` reader (librdkafka: ``sasl.username``/``sasl.password``, ``ssl.ca.location``), then
  the ``jvm`` reader (Spark's own source: the same settings translated to the Java client's
  ``sasl.jaas.config`` and a PEM truststore, :func:`~kafka_batch_provider.spark.jvm_options.java_client_config`),
  into one output, on the session's Spark Connect server;
* the password is in none of what the runs left: their output and error text, the output's files
  (plans, log, data), the Spark Connect server's log (INFO: every statement), nor in the query plan
  of Spark's source read with those settings.

The refusals (no READ on the group or the topic, a wrong password, another CA) are in
``tests/bad_input/test_kafka_access.py``; the DAG runs over SASL_SSL in ``test_secrets_everywhere.py``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.spark.jvm_options import jvm_reader_options
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.integration.helpers import assert_exactly_once, group_offsets, offsets_of
from tests.integration.test_cli import cli, last_json
from tests.support.secure_kafka import SecureKafka

pytestmark = pytest.mark.integration


def files_containing(folder: Path, secret: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_principal_with_read_on_topic_and_group_ingests_exactly_once_with_both_readers_and_no_password_shows(
    secure_kafka: SecureKafka, spark_connect_server, spark_connect_remote, tmp_path
):
    topic, group = f"secure-{uuid.uuid4().hex[:8]}", f"secure-group-{uuid.uuid4().hex[:6]}"
    create_topics(secure_kafka.admin_config, {topic: 2})
    produce(secure_kafka.admin_config, topic, sample_records(2, 20))
    user, password = secure_kafka.new_user([("topic", topic, "READ"), ("group", group, "READ")])
    config_file = tmp_path / "kafka.json"
    config_file.write_text(json.dumps(secure_kafka.client_config(user, password)))
    config_file.chmod(0o600)
    out = tmp_path / "lake"
    log_size_before = spark_connect_server.log_path.stat().st_size
    run = ["run", "--kafka-config-file", str(config_file), "--topic", topic, "--group", group,
           "--output", str(out), "--spark-remote", spark_connect_remote]  # fmt: skip

    results = [cli(*run, "--reader", "python")]
    produce(secure_kafka.admin_config, topic, sample_records(2, 10, first_id=20))
    results.append(cli(*run, "--reader", "jvm"))

    for reader, result in zip(("python", "jvm"), results):
        assert result.returncode == 0, f"expected the {reader} reader's run to pass, got: {result.stderr[-800:]}"
    summaries = [last_json(result) for result in results]
    assert [s["records"] for s in summaries] == [20, 10], f"expected batches of 20 and 10 records, got {summaries}"
    assert group_offsets(secure_kafka.admin_config, group, topic, 2) == {0: 15, 1: 15}
    assert_exactly_once(str(out), offsets_of(topic, {0: 15, 1: 15}))

    texts = {
        f"the {r} run's {k}": getattr(res, k)
        for r, res in zip(("python", "jvm"), results)
        for k in ("stdout", "stderr")
    }
    shown = [place for place, text in texts.items() if password in text]
    assert not shown, f"expected the password in no run's output, found it in {shown}"
    assert not files_containing(out, password), (
        f"expected no output file with the password: {files_containing(out, password)}"
    )
    with spark_connect_server.log_path.open("rb") as server_log:
        server_log.seek(log_size_before)
        logged = server_log.read()
    assert logged, "expected the Spark Connect server to have logged the runs (INFO)"
    assert password.encode() not in logged, "expected the password out of the Spark Connect server's log"


def test_the_jvm_readers_query_plan_shows_no_password(secure_kafka: SecureKafka, spark_connect_remote):
    from kafka_batch_provider.spark.connect import connect_session

    topic = f"secure-plan-{uuid.uuid4().hex[:8]}"
    create_topics(secure_kafka.admin_config, {topic: 1})
    produce(secure_kafka.admin_config, topic, sample_records(1, 10))
    user, password = secure_kafka.new_user([("topic", topic, "READ")])  # Spark's source asks the broker
    options = jvm_reader_options([OffsetRange(topic, 0, 0, 10)], secure_kafka.client_config(user, password))
    assert password in options["kafka.sasl.jaas.config"], "expected the password in the source's options"

    spark = connect_session(spark_connect_remote)  # with the session's redaction settings
    try:
        # The server's own rendering of the plan, as explain() and the Spark UI show it.
        text = spark.read.format("kafka").options(**options).load()._explain_string(extended=True)
    finally:
        spark.client.close()
    assert "KafkaRelation" in text and topic in text, f"expected the plan of Spark's Kafka source:\n{text}"
    assert password not in text, f"expected no password in the query plan:\n{text}"
