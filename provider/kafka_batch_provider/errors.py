"""Errors a user can act on.

Every error raised on purpose by this package is a :class:`KafkaBatchError` whose message is
one line that says what is wrong and, where there is one, what to do. The command line prints
that line alone (no traceback) and exits non-zero; Airflow shows it as the task's failure.
They are raised *before* any state changes (nothing read, written or committed).

Whether a retry may help is decided here, once, on the class (``transient``), and every path
follows it: the command line's exit code (3 transient, 2 terminal, 4 a conflict), the Spark
application's exit code that spark-submit hands back, an error raised in a Spark Connect task,
and an Airflow task (a terminal error fails it at once, a transient one is left to its retries).
"""

from __future__ import annotations

import sys
from typing import Any

#: Exit codes of the command line and the Spark application.
EXIT_TERMINAL = 2
EXIT_TRANSIENT = 3
EXIT_CONFLICT = 4


class KafkaBatchError(Exception):
    """Base class: a one-line, user-facing error. Terminal unless a subclass says otherwise."""

    #: A retry may pass (something was out of reach); otherwise retrying fails the same way.
    transient = False
    exit_code = EXIT_TERMINAL

    def __init__(
        self,
        message: str,
        *,
        setting: Any = None,
        partition: Any = None,
        offsets: tuple[int, int] | None = None,
    ) -> None:
        # Keep the "one line" promise even when a broker error text carries newlines.
        super().__init__(" ".join(str(message).split()))
        #: The setting (``core.settings.Setting``) whose change fixes it, with the value to try.
        self.setting = setting
        #: The topic partition (``core.offsets.TopicPartition``) it is about, when it is one.
        self.partition = partition
        #: The offsets ``[start, end)`` it is about, when it is a range.
        self.offsets = offsets


class ConfigError(KafkaBatchError):
    """Bad flags, bad librdkafka config, bad parameters."""


class ColumnTypeError(ConfigError):
    """A column the table has comes in another type in this batch: a table's column keeps its type."""

    def __init__(
        self,
        message: str,
        where: str = "",
        column: str = "",
        table_type: str = "",
        batch_type: str = "",
        setting: Any = None,
    ) -> None:
        super().__init__(message, setting=setting)
        self.where, self.column, self.table_type, self.batch_type = where, column, table_type, batch_type


class KafkaUnavailableError(KafkaBatchError):
    """The broker could not be reached, or answered "not now" (a leader or coordinator moving)."""

    transient = True
    exit_code = EXIT_TRANSIENT


class KafkaRefusedError(KafkaBatchError):
    """The broker answered a request with an error no retry changes (authorization, authentication,
    an unknown group member): retrying fails the same way, so the task fails at once."""


class SparkStepError(KafkaBatchError):
    """The Spark step failed (a task's error, or a Spark Connect server that went away): a retry may pass."""

    transient = True
    exit_code = EXIT_TRANSIENT


class PlanError(KafkaBatchError):
    """The offsets Kafka reports cannot be turned into a safe plan (unknown topic, data loss, ...)."""


class CommitConflictError(KafkaBatchError):
    """The group's committed offsets moved since the plan was made (compare-and-set failed)."""

    exit_code = EXIT_CONFLICT


class ManifestError(KafkaBatchError):
    """A batch's manifest is missing or does not match its plan."""


class ReadError(KafkaBatchError):
    """A planned range could not be read completely: one of the two below."""


class ReadStalledError(ReadError):
    """A read made no progress for its stall timeout (the broker away, or its leader): a retry
    replays the same plan once the broker is back."""

    transient = True
    exit_code = EXIT_TRANSIENT


class ReadFailedError(ReadError):
    """The broker answered a read with an error no retry changes (the offsets are gone, access
    is denied, the topic was deleted)."""


class WriteCheckError(KafkaBatchError):
    """What the Spark tasks wrote does not match what they read: nothing is published."""


class StorageError(KafkaBatchError):
    """The output's filesystem or object store failed or refused a request."""

    transient = True
    exit_code = EXIT_TRANSIENT


class StorageAccessError(StorageError):
    """The output's store refused access (credentials, permissions, a path that cannot be created):
    retrying cannot help, so Airflow fails the task at once."""

    transient = False
    exit_code = EXIT_TERMINAL


class RegistryUnavailableError(KafkaBatchError):
    """The schema registry could not be reached, or answered "not now" (5xx): a retry may pass."""

    transient = True
    exit_code = EXIT_TRANSIENT


class RegistryRefusedError(KafkaBatchError):
    """The schema registry refused the credentials (401) or the access (403): retrying cannot help."""


class SchemaError(KafkaBatchError):
    """A schema the batch needs is missing, cannot become columns, or cannot take the records."""


class GroupMismatchError(PlanError):
    """The consumer group's offsets disagree with the output's offset log (moved by someone else)."""

    exit_code = EXIT_CONFLICT


class LogConflictError(CommitConflictError):
    """Another writer appended to the output's offset log first: this batch is not published."""


def error_named(name: str) -> type[KafkaBatchError] | None:
    """The class of an error raised in a Spark task, from its name in Spark's traceback text."""
    found = getattr(sys.modules[__name__], name, None)
    return found if isinstance(found, type) and issubclass(found, KafkaBatchError) else None


def error_for_exit_code(code: int | None, message: str, name: str | None = None) -> KafkaBatchError:
    """The error of a Spark application that exited with ``code`` after printing ``message``
    (and the class ``name``): the same class comes back when the code agrees with it, else one
    with its code's decision. Any other code (a JVM that died, a kill) is a Spark step failure,
    which a retry may get past."""
    named = error_named(name) if name else None
    if named is not None and named.exit_code == code:
        return named(message)
    if code == EXIT_TERMINAL:
        return KafkaBatchError(message)
    if code == EXIT_CONFLICT:
        return CommitConflictError(message)
    return SparkStepError(message)
