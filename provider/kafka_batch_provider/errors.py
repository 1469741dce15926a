"""Errors a user can act on.

Every error raised on purpose by this package is a :class:`KafkaBatchError` whose message is
one line that says what is wrong and, where there is one, what to do. The command line prints
that line alone (no traceback) and exits non-zero; Airflow shows it as the task's failure.
They are raised *before* any state changes (nothing read, written or committed).
"""

from __future__ import annotations


class KafkaBatchError(Exception):
    """Base class: a one-line, user-facing error."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # Keep the "one line" promise even when a broker error text carries newlines.
        super().__init__(" ".join(str(message).split()))


class ConfigError(KafkaBatchError):
    """Bad flags, bad librdkafka config, bad parameters."""


class KafkaUnavailableError(KafkaBatchError):
    """The broker could not be reached or answered with an error."""

    exit_code = 3


class SparkStepError(KafkaBatchError):
    """The Spark step failed (a task's error, or a Spark Connect server that went away): a retry may pass."""

    exit_code = 3


class PlanError(KafkaBatchError):
    """The offsets Kafka reports cannot be turned into a safe plan (unknown topic, data loss, ...)."""


class CommitConflictError(KafkaBatchError):
    """The group's committed offsets moved since the plan was made (compare-and-set failed)."""

    exit_code = 4


class ManifestError(KafkaBatchError):
    """A batch's manifest is missing or does not match its plan."""


class ReadError(KafkaBatchError):
    """A planned range could not be read completely."""


class WriteCheckError(KafkaBatchError):
    """What the Spark tasks wrote does not match what they read: nothing is published."""


class StorageError(KafkaBatchError):
    """The output's filesystem or object store failed or refused a request."""

    exit_code = 3


class StorageAccessError(StorageError):
    """The output's store refused access (credentials, permissions, a path that cannot be created):
    retrying cannot help, so Airflow fails the task at once."""

    exit_code = 2


class GroupMismatchError(PlanError):
    """The consumer group's offsets disagree with the output's offset log (moved by someone else)."""

    exit_code = 4


class LogConflictError(CommitConflictError):
    """Another writer appended to the output's offset log first: this batch is not published."""
