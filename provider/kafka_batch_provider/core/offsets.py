"""Plain values for offsets: what Kafka reports about a partition and the ranges we read.

No I/O here. Offsets follow Kafka's convention: a committed offset is the offset of the *next*
record to read, and a range ``[start, end)`` excludes ``end``. Offsets are not record counts:
transaction markers, aborted records and compaction leave offsets that no reader ever sees, so
``OffsetRange.size`` is an upper bound on the records in the range, never an exact count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"

    @property
    def key(self) -> str:
        """``topic:partition``, the key of JSON maps (Kafka topic names never contain ``:``)."""
        return f"{self.topic}:{self.partition}"

    @classmethod
    def from_key(cls, key: str) -> TopicPartition:
        topic, _, partition = key.rpartition(":")
        return cls(topic, int(partition))


@dataclass(frozen=True)
class PartitionOffsets:
    """What Kafka told us about one partition at planning time.

    :param committed: the group's committed offset, or ``None`` when the group has none.
    :param log_start: first offset still in the log (retention moves it forward).
    :param log_end: end offset; for ``read_committed`` the last stable offset.
    :param committed_metadata: the string committed beside it (:mod:`~kafka_batch_provider.core.group_owner`).
    """

    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int
    committed_metadata: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def position(self) -> int:
        """Where the next batch would start reading (new partitions: the log start)."""
        return self.log_start if self.committed is None else max(self.committed, self.log_start)

    @property
    def lag(self) -> int:
        """Offsets between that position and the end."""
        return max(self.log_end - self.position, 0)


@dataclass(frozen=True)
class OffsetRange:
    """A half-open range ``[start, end)`` of one partition, plus what the commit must find.

    :param expected_committed: the group's committed offset when the range was planned
        (``None`` for a partition the group never committed). The commit step refuses to
        commit unless the group still has exactly this offset (compare-and-set).
    """

    topic: str
    partition: int
    start: int
    end: int
    expected_committed: int | None = None

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self.topic}[{self.partition}] [{self.start}, {self.end})")

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """Offsets in the range: an upper bound on the records it holds."""
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] [{self.start}, {self.end})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "expected_committed": self.expected_committed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OffsetRange:
        return cls(
            topic=str(data["topic"]),
            partition=int(data["partition"]),
            start=int(data["start"]),
            end=int(data["end"]),
            expected_committed=None if data.get("expected_committed") is None else int(data["expected_committed"]),
        )


@dataclass(frozen=True)
class OffsetGap:
    """Offsets ``[start, end)`` that were gone (retention) and were skipped by policy."""

    topic: str
    partition: int
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OffsetGap:
        return cls(str(data["topic"]), int(data["partition"]), int(data["start"]), int(data["end"]))
