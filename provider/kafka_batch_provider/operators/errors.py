"""How this package's errors surface in Airflow.

Bad input, broken invariants and an output store that refuses access fail the task at once
(no retry can fix them); a broker or an output store that cannot be reached is left to
Airflow's retries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from kafka_batch_provider.errors import KafkaBatchError, KafkaUnavailableError, StorageAccessError, StorageError


@contextmanager
def task_errors() -> Iterator[None]:
    try:
        yield
    except StorageAccessError as exc:  # credentials or permissions: a retry would fail the same way
        raise AirflowFailException(str(exc)) from None
    except (KafkaUnavailableError, StorageError):
        raise
    except KafkaBatchError as exc:
        raise AirflowFailException(str(exc)) from None


# The Spark application's exit codes (spark/app.py): 2 bad input or a broken invariant, 4 a
# conflict (what task_errors() fails at once), 3 a broker or store out of reach; anything else
# (1, a JVM failure, a kill) may pass on a retry.
SPARK_EXIT_CODES_NOT_RETRIED = (2, 4)
ERROR_LINE_PREFIX = "error: "


def spark_step_error(output_lines: Iterable[str], exit_code: int | None) -> AirflowException:
    """What a failed spark-submit of the Spark application raises: its one error line.

    ``output_lines`` are spark-submit's last output lines (the application prints its error
    last); without an error line the message names the exit code.
    """
    errors = [line.strip() for line in output_lines if line.strip().startswith(ERROR_LINE_PREFIX)]
    if not errors:
        return AirflowException(f"spark-submit exited with code {exit_code} and no error line: see the log above")
    message = f"Spark step failed: {errors[-1].removeprefix(ERROR_LINE_PREFIX)}"
    if exit_code in SPARK_EXIT_CODES_NOT_RETRIED:
        return AirflowFailException(message)
    return AirflowException(message)
