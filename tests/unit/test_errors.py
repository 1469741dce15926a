"""Retry is decided once, on the error class, and every path reaches the same decision."""

from __future__ import annotations

import inspect

import pytest
from airflow.sdk.exceptions import AirflowFailException

from kafka_batch_provider import errors
from kafka_batch_provider.errors import KafkaBatchError, error_for_exit_code, error_named
from kafka_batch_provider.operators.errors import airflow_error, spark_step_error, task_errors
from kafka_batch_provider.spark.error_lines import spark_failure_exit_code, task_error_class

ALL_ERRORS = sorted(
    (c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, KafkaBatchError)),
    key=lambda c: c.__name__,
)
TRANSIENT = {"KafkaUnavailableError", "ReadStalledError", "RegistryUnavailableError", "SparkStepError", "StorageError"}


def test_the_transient_classes_are_the_outages_and_nothing_else():
    found = {c.__name__ for c in ALL_ERRORS if c.transient}
    assert found == TRANSIENT, f"expected transient errors {sorted(TRANSIENT)}, found {sorted(found)}"


@pytest.mark.parametrize("error_class", ALL_ERRORS, ids=lambda c: c.__name__)
def test_the_exit_code_carries_the_class_decision(error_class):
    transient_code = error_class.exit_code == errors.EXIT_TRANSIENT
    assert transient_code == error_class.transient, (
        f"{error_class.__name__}: transient={error_class.transient} but exit code {error_class.exit_code}"
    )
    assert error_for_exit_code(error_class.exit_code, "m").transient == error_class.transient, (
        f"{error_class.__name__}: its exit code {error_class.exit_code} comes back with another decision"
    )


@pytest.mark.parametrize("error_class", ALL_ERRORS, ids=lambda c: c.__name__)
def test_spark_submit_and_spark_connect_decide_alike_for_an_error_raised_in_a_task(error_class):
    text = f"Traceback ...\nkafka_batch_provider.errors.{error_class.__name__}: t[0]: something\n  at ..."
    # spark-submit: the application exits with a code and names the class; the CLI reads both back.
    code = spark_failure_exit_code(RuntimeError(text))
    through_submit = error_for_exit_code(code, "m", task_error_class(text).__name__)
    assert type(through_submit) is error_class, f"expected {error_class.__name__} back, found {through_submit!r}"
    # Spark Connect: the driver is this process; the class is read from Spark's text.
    through_connect = task_error_class(text)
    assert through_connect is error_class, f"expected {error_class.__name__} back, found {through_connect}"
    assert through_submit.transient == through_connect.transient == error_class.transient, (
        f"{error_class.__name__}: spark-submit says transient={through_submit.transient}, "
        f"Spark Connect says {through_connect.transient}, the class {error_class.transient}"
    )
    # The spark-submit operator, from the application's error line and exit code.
    raised = spark_step_error([f"error: {text.splitlines()[1]}"], error_class.exit_code)
    retried = not isinstance(raised, AirflowFailException)
    assert retried == error_class.transient, (
        f"{error_class.__name__}: Airflow retries={retried}, the class says transient={error_class.transient}"
    )


def test_a_failure_that_is_none_of_ours_may_pass_on_a_retry_on_both_paths():
    text = "Job aborted due to stage failure: ExecutorLostFailure (executor 1 exited)"
    assert spark_failure_exit_code(RuntimeError(text)) == 1
    assert error_for_exit_code(1, "m").transient and task_error_class(text) is None


def test_an_airflow_task_fails_at_once_only_on_a_terminal_error():
    with pytest.raises(AirflowFailException, match="^bad flag$"):
        with task_errors():
            raise errors.ConfigError("bad flag")
    with pytest.raises(Exception) as raised:
        with task_errors():
            raise errors.ReadStalledError("t[0]: no progress for 3s")
    assert not isinstance(raised.value, AirflowFailException), "a stalled read must be left to Airflow's retries"
    assert str(raised.value) == "t[0]: no progress for 3s"
    assert isinstance(airflow_error(errors.StorageAccessError("denied")), AirflowFailException)


def test_error_named_knows_only_this_package_errors():
    assert error_named("ReadStalledError") is errors.ReadStalledError
    assert error_named("ValueError") is None and error_named("EXIT_TERMINAL") is None


def test_a_class_name_that_disagrees_with_the_exit_code_is_not_trusted():
    found = error_for_exit_code(errors.EXIT_TRANSIENT, "m", "ConfigError")
    assert type(found) is errors.SparkStepError and found.transient, f"the exit code decides, found {found!r}"
    assert type(error_for_exit_code(2, "m", "NoSuchError")) is KafkaBatchError
