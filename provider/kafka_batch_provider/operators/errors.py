"""How this package's errors surface in Airflow.

Bad input, broken invariants and an output store that refuses access fail the task at once
(no retry can fix them); a broker or an output store that cannot be reached is left to
Airflow's retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowFailException

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
