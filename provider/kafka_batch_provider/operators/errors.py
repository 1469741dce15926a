"""How this package's errors surface in Airflow.

Bad input and broken invariants fail the task at once (no retry can fix them); a broker or
an output store that cannot be reached is left to Airflow's retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowFailException

from kafka_batch_provider.errors import KafkaBatchError, KafkaUnavailableError, StorageError


@contextmanager
def task_errors() -> Iterator[None]:
    try:
        yield
    except (KafkaUnavailableError, StorageError):
        raise
    except KafkaBatchError as exc:
        raise AirflowFailException(str(exc)) from None
