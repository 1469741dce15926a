"""Which Spark step failures are retried, and the one line each one shows."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from kafka_batch_provider.operators.errors import spark_step_error
from kafka_batch_provider.spark.error_lines import spark_error_line, spark_failure_exit_code

OUTPUT = [
    "26/11/22 09:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library",
    "error: batch b-1: a file of _staging/b-1.1 vanished before it was published (part-0.parquet)",
    "26/11/22 09:00:02 INFO ShutdownHookManager: Shutdown hook called",
]


@pytest.mark.parametrize(
    "exit_code, retried",
    [(2, False), (4, False), (3, True), (1, True), (-9, True), (137, True)],
)
def test_bad_input_and_conflicts_fail_at_once_and_the_rest_is_retried(exit_code, retried):
    error = spark_step_error(OUTPUT, exit_code)
    assert isinstance(error, AirflowFailException) is not retried, (
        f"exit code {exit_code}: expected {'a retry' if retried else 'no retry'}, got {type(error).__name__}"
    )
    assert str(error) == (
        "Spark step failed: batch b-1: a file of _staging/b-1.1 vanished before it was published (part-0.parquet)"
    )


def test_without_an_error_line_the_exit_code_is_named_and_a_retry_allowed():
    error = spark_step_error(["Exception in thread main java.lang.OutOfMemoryError"], 2)
    assert type(error) is AirflowException, f"expected a retryable AirflowException, got {type(error).__name__}"
    assert str(error) == "spark-submit exited with code 2 and no error line: see the log above"


JAVA_TOPIC_REFUSED = (
    "Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, most recent failure: Lost task 0.0 "
    "(TID 0) (localhost executor driver): org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized "
    "to access topics: [orders]\n\nDriver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler..."
)
JAVA_DATA_LOSS = (
    "(org.apache.spark.sql.kafka010.KafkaIllegalStateException) Some data may have been lost because they are not "
    "available in Kafka any more;\neither the data was aged out by Kafka or the topic may have been deleted before all "
    "the data in the\ntopic was processed.\nIf you don't want your streaming query to fail on such cases, set the "
    "source option failOnDataLoss to false.\nReason: Could not read records in offset [0, 20) for topic partition "
    "orders-0\nwith consumer group spark-kafka-relation-27396015-executor.\n\nJVM stacktrace:\n..."
)


def test_the_jvm_readers_kafka_failures_are_one_line():
    assert spark_error_line(RuntimeError(JAVA_TOPIC_REFUSED)) == (
        "Kafka refused the jvm reader: TopicAuthorizationException: Not authorized to access topics: [orders]"
    )
    assert spark_error_line(RuntimeError(JAVA_DATA_LOSS)) == (
        "the jvm reader found planned offsets gone from Kafka (retention, deleted records or topic): Could not read "
        "records in offset [0, 20) for topic partition orders-0; nothing was published"
    )


@pytest.mark.parametrize(
    "spark_text, expected",
    [
        ("...\nkafka_batch_provider.errors.ReadFailedError: orders[0]: reading [5, 9) failed at offset 5\n...", 2),
        ("...\nkafka_batch_provider.errors.ReadStalledError: orders[0]: no progress for 60s\n...", 3),
        ("...\nkafka_batch_provider.errors.StorageError: s3://lake: 503 Slow Down\n...", 3),
        ("...\nkafka_batch_provider.errors.LogConflictError: another run published first\n...", 4),
        ("[DATA_SOURCE_NOT_FOUND] Failed to find data source: kafka.", 2),
        # The jvm reader: the Java client's authorization and authentication refusals, and data loss.
        (JAVA_TOPIC_REFUSED, 2),
        ("...org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed\n...", 2),
        (JAVA_DATA_LOSS, 2),
        ("Job aborted due to stage failure: ExecutorLostFailure (executor 1 exited)", 1),
    ],
)
def test_errors_reaching_the_driver_through_spark_keep_their_exit_code(spark_text, expected):
    assert spark_failure_exit_code(RuntimeError(spark_text)) == expected


def test_only_a_refused_port_stops_the_connect_clients_retries():
    import socket

    from kafka_batch_provider.spark.connect import port_refuses

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert port_refuses("127.0.0.1", port), "expected a closed local port to count as a server that is gone"
    assert not port_refuses("no-such-host.invalid", port), "a name that does not resolve is a network problem"
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert not port_refuses("127.0.0.1", listening.getsockname()[1]), "expected a listening server to be retried"


def test_a_python_worker_that_died_is_one_line_with_the_way_on():
    text = (
        "An error occurred while calling o66.collectToPython.\n: org.apache.spark.SparkException: Job aborted: "
        "Task 0 in stage 1.0 failed 1 times: org.apache.spark.SparkException: Python worker exited unexpectedly "
        "(crashed)\n\tat org.apache.spark.api.python..."
    )
    line = spark_error_line(RuntimeError(text))
    assert line.startswith("a Spark task's Python worker died") and "\n" not in line, line
    assert spark_error_line(RuntimeError("[PYTHON_WORKER_EXITED_UNEXPECTEDLY] ...")).startswith("a Spark task's")
