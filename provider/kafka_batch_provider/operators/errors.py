"""How this package's errors surface in Airflow: the decision is the error class's (``transient``
in ``errors.py``), taken the same way whether the error was raised here, in spark-submit's
application (its exit code) or in a Spark Connect task (its class).

A terminal error (bad input, a broken invariant, a store that refuses access) fails the task at
once; a transient one (a broker or store out of reach, a Spark step that died) is left to
Airflow's retries, which replay the same plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from kafka_batch_provider.errors import KafkaBatchError
from kafka_batch_provider.spark.error_lines import application_error


def airflow_error(error: KafkaBatchError) -> AirflowException:
    """A retryable ``AirflowException`` for a transient error, ``AirflowFailException`` otherwise."""
    return (AirflowException if error.transient else AirflowFailException)(str(error))


@contextmanager
def task_errors() -> Iterator[None]:
    try:
        yield
    except KafkaBatchError as exc:
        # A retried error keeps its cause in the log; a terminal one is its one line.
        raise airflow_error(exc) from (exc if exc.transient else None)


def spark_step_error(output_lines: Iterable[str], exit_code: int | None) -> AirflowException:
    """What a failed spark-submit of the Spark application raises: its one error line.

    ``output_lines`` are spark-submit's last output lines (the application prints its error
    last); without an error line (a JVM that died, a kill) the message names the exit code and
    a retry is allowed.
    """
    error = application_error(output_lines, exit_code, prefix="Spark step failed: ")
    if error is None:
        return AirflowException(f"spark-submit exited with code {exit_code} and no error line: see the log above")
    return airflow_error(error)
