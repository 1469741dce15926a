"""Lag health: numbers in, statuses out. Pure functions, no I/O.

Judged per partition, then for the group (its worst partition), the way Burrow-style lag
monitors do: by trend and time across a window of recent batches, not by one threshold.
The window comes from what the protocol already keeps: each committed batch's plan holds a
snapshot of every partition's offsets at planning time, and its commit record says when and
where the group moved.

Statuses, most severe first (a partition gets the first that applies):

* DATA_LOSS       the committed offset is below the log start: records were deleted unread.
* RETENTION_RISK  records still to ingest are close to expiring: the oldest unconsumed
                  record's age is at least ``retention_risk`` x the topic's ``retention.ms``.
* REWIND          the group's committed offset is below what the last batch committed (or
                  gone): somebody moved it back outside a backfill (backfills never commit).
* STOP            lag > 0 and no batch has committed for longer than ``stop_after``.
* STALL           lag > 0 and the committed offset did not move across the window's batches,
                  though each of them had records to read there.
* DEAD_LETTERS    the newest batch set more than ``dead_letter_share`` of the partition's
                  records aside as dead letters (``--on-bad-record dead-letter``): a producer
                  writes what cannot be decoded.
* WARN            lag grew at every step across the window (ingestion falls behind).
* OK              none of the above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum

from kafka_batch_provider.core.offsets import PartitionOffsets, TopicPartition


class LagStatus(str, Enum):
    OK = "OK"
    WARN = "WARN"
    DEAD_LETTERS = "DEAD_LETTERS"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"
    RETENTION_RISK = "RETENTION_RISK"
    DATA_LOSS = "DATA_LOSS"

    @property
    def severity(self) -> int:
        return _SEVERITY.index(self)

    @property
    def exit_code(self) -> int:
        """``kafka-batch lag --check`` exits with this: 0 OK, 10 WARN, 11 STALL, 12 STOP,
        13 REWIND, 14 RETENTION_RISK, 15 DATA_LOSS, 16 DEAD_LETTERS (added later, so out of order)."""
        return _EXIT_CODES[self]


_SEVERITY = [
    LagStatus.OK,
    LagStatus.WARN,
    LagStatus.DEAD_LETTERS,
    LagStatus.STALL,
    LagStatus.STOP,
    LagStatus.REWIND,
    LagStatus.RETENTION_RISK,
    LagStatus.DATA_LOSS,
]
_EXIT_CODES = {
    LagStatus.OK: 0,
    LagStatus.WARN: 10,
    LagStatus.STALL: 11,
    LagStatus.STOP: 12,
    LagStatus.REWIND: 13,
    LagStatus.RETENTION_RISK: 14,
    LagStatus.DATA_LOSS: 15,
    LagStatus.DEAD_LETTERS: 16,
}


@dataclass(frozen=True)
class PartitionLag(PartitionOffsets):
    """One partition now: its offsets (position and lag as planning sees them), plus age and retention.

    :param oldest_unconsumed_ms: timestamp of the first record at or after the group's
        position (``None`` when there is nothing to consume or it is unknown).
    :param retention_ms: the topic's ``retention.ms`` (``None``: unknown; ``-1``: forever).
    """

    oldest_unconsumed_ms: int | None = None
    retention_ms: int | None = None

    def age_seconds(self, now: datetime) -> float | None:
        if self.oldest_unconsumed_ms is None or self.lag == 0:
            return None
        return max(now.timestamp() - self.oldest_unconsumed_ms / 1000, 0.0)


@dataclass(frozen=True)
class BatchPoint:
    """One committed incremental batch, from its plan snapshot and commit record.

    :param committed: the group's committed offsets right after the batch, every partition
        the plan's snapshot saw (``None``: never committed).
    :param lag_at_plan: lag of every partition when the batch was planned.
    :param dead_letters: ``(dead letters, rows)`` of the partitions where the batch set records aside.
    """

    batch_id: str
    committed_at: datetime
    committed: Mapping[TopicPartition, int | None]
    lag_at_plan: Mapping[TopicPartition, int]
    dead_letters: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthPolicy:
    """:param window: how many recent batches the trend statuses look at.
    :param stop_after: STOP when lag > 0 and the last commit is older than this (e.g. three
        times the schedule interval); ``None`` disables STOP.
    :param retention_risk: fraction of ``retention.ms`` the oldest unconsumed record may
        reach before RETENTION_RISK.
    :param dead_letter_share: fraction of a partition's records in the newest batch that may be
        dead letters before DEAD_LETTERS.
    """

    window: int = 5
    stop_after: timedelta | None = None
    retention_risk: float = 0.8
    dead_letter_share: float = 0.01


@dataclass(frozen=True)
class PartitionHealth:
    state: PartitionLag
    status: LagStatus
    reason: str
    age_seconds: float | None = None

    def to_dict(self) -> dict:
        s = self.state
        return {
            "topic": s.topic,
            "partition": s.partition,
            "committed": s.committed,
            "log_start": s.log_start,
            "log_end": s.log_end,
            "lag": s.lag,
            "oldest_unconsumed_age_seconds": None if self.age_seconds is None else round(self.age_seconds, 3),
            "status": self.status.value,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class HealthReport:
    group_id: str
    partitions: tuple[PartitionHealth, ...]
    batches_in_window: int = 0
    last_commit_at: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def status(self) -> LagStatus:
        return max((p.status for p in self.partitions), key=lambda s: s.severity, default=LagStatus.OK)

    @property
    def total_lag(self) -> int:
        return sum(p.state.lag for p in self.partitions)

    def problems(self, statuses: Iterable[LagStatus] | None = None) -> list[PartitionHealth]:
        wanted = set(statuses) if statuses is not None else set(LagStatus) - {LagStatus.OK}
        return [p for p in self.partitions if p.status in wanted]

    def message(self, statuses: Iterable[LagStatus] | None = None) -> str:
        """One line naming every unhealthy partition, its status and its numbers."""
        bad = self.problems(statuses)
        if not bad:
            return f"group {self.group_id}: {self.status.value}, total lag {self.total_lag}"
        parts = "; ".join(f"{p.state.tp} {p.status.value}: {p.reason}" for p in bad)
        return f"group {self.group_id}: {self.status.value} (total lag {self.total_lag}): {parts}"

    def to_dict(self) -> dict:
        return {
            "group_id": self.group_id,
            "status": self.status.value,
            "total_lag": self.total_lag,
            "batches_in_window": self.batches_in_window,
            "last_commit_at": self.last_commit_at,
            "notes": list(self.notes),
            "partitions": [p.to_dict() for p in self.partitions],
        }


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def judge_partition(
    state: PartitionLag,
    window: Sequence[BatchPoint],
    last_commit_at: datetime | None,
    policy: HealthPolicy,
    now: datetime,
) -> PartitionHealth:
    tp, lag, age = state.tp, state.lag, state.age_seconds(now)

    def result(status: LagStatus, reason: str) -> PartitionHealth:
        return PartitionHealth(state, status, reason, age)

    if state.committed is not None and state.committed < state.log_start:
        return result(
            LagStatus.DATA_LOSS,
            f"committed offset {state.committed} is below the log start {state.log_start}: "
            f"offsets [{state.committed}, {state.log_start}) were deleted before ingestion",
        )
    if lag and age is not None and state.retention_ms and state.retention_ms > 0:
        retention = state.retention_ms / 1000
        if age >= policy.retention_risk * retention:
            return result(
                LagStatus.RETENTION_RISK,
                f"{lag} records to ingest; the oldest is {_human(age)} old and the topic keeps records "
                f"{_human(retention)} (risk from {policy.retention_risk:.0%})",
            )
    recorded = [p.committed.get(tp) for p in window if tp in p.committed]
    last_recorded = recorded[-1] if recorded else None
    if last_recorded is not None and (state.committed is None or state.committed < last_recorded):
        return result(
            LagStatus.REWIND,
            f"committed offset {state.committed} is below {last_recorded}, committed by batch "
            f"{window[-1].batch_id}: the group was moved back outside a backfill",
        )
    if lag and policy.stop_after is not None and last_commit_at is not None:
        silent = (now - last_commit_at).total_seconds()
        if silent > policy.stop_after.total_seconds():
            return result(
                LagStatus.STOP,
                f"lag {lag} and no batch committed for {_human(silent)} "
                f"(limit {_human(policy.stop_after.total_seconds())})",
            )
    # Stalled: every batch of the window had records to read here, yet the offset never moved
    # (a partition that simply had no data then is not stalled).
    had_work = all(p.lag_at_plan.get(tp, 0) > 0 for p in window)
    if (
        lag
        and had_work
        and len(recorded) >= 2
        and len(recorded) == len(window)
        and all(c == state.committed for c in recorded)
    ):
        return result(
            LagStatus.STALL,
            f"lag {lag} and the committed offset {state.committed} has not moved across the last {len(window)} batches",
        )
    dead, rows = window[-1].dead_letters.get(tp, (0, 0)) if window else (0, 0)
    if dead and dead / (dead + rows) > policy.dead_letter_share:
        return result(
            LagStatus.DEAD_LETTERS,
            f"batch {window[-1].batch_id} set {dead} of {dead + rows} records aside as dead letters "
            f"({dead / (dead + rows):.1%}, limit {policy.dead_letter_share:.1%}): they could not be decoded",
        )
    lags = [p.lag_at_plan[tp] for p in window if tp in p.lag_at_plan] + [lag]
    if len(lags) >= 3 and all(b > a for a, b in zip(lags, lags[1:])):
        return result(LagStatus.WARN, f"lag grew at every batch of the window: {' -> '.join(map(str, lags))}")
    return result(LagStatus.OK, f"lag {lag}")


def evaluate(
    group_id: str,
    states: Iterable[PartitionLag],
    history: Sequence[BatchPoint],
    policy: HealthPolicy,
    now: datetime,
    notes: Sequence[str] = (),
) -> HealthReport:
    """Judge every partition against the last ``policy.window`` batches of ``history``."""
    ordered = sorted(history, key=lambda p: p.committed_at)
    window = ordered[-policy.window :] if policy.window > 0 else []
    last_commit_at = ordered[-1].committed_at if ordered else None
    judged = tuple(
        judge_partition(s, window, last_commit_at, policy, now)
        for s in sorted(states, key=lambda s: (s.topic, s.partition))
    )
    return HealthReport(
        group_id=group_id,
        partitions=judged,
        batches_in_window=len(window),
        last_commit_at=last_commit_at.isoformat() if last_commit_at else None,
        notes=tuple(notes),
    )


def ready_to_ingest(
    states: Iterable[PartitionLag], min_lag: int, max_data_age: timedelta | None, now: datetime
) -> tuple[bool, str]:
    """The lag sensor's condition: enough records, or records waiting too long."""
    states = list(states)
    total = sum(s.lag for s in states)
    if total >= min_lag:
        return True, f"total lag {total} >= min_lag {min_lag}"
    ages = [a for a in (s.age_seconds(now) for s in states) if a is not None]
    if max_data_age is not None and ages and max(ages) >= max_data_age.total_seconds():
        return (
            True,
            f"oldest unconsumed record is {_human(max(ages))} old "
            f">= max_data_age {_human(max_data_age.total_seconds())}",
        )
    oldest = f", oldest unconsumed record {_human(max(ages))} old" if ages else ""
    return False, f"total lag {total} < min_lag {min_lag}{oldest}"


def beyond_taken(states: Iterable[PartitionOffsets], taken: Mapping[TopicPartition, int]) -> list[PartitionOffsets]:
    """The partitions with the offsets a running batch is already taking counted as consumed: each
    position moved up to ``taken`` (a pending plan's ends, a batch just fired for), never back."""
    moved = []
    for s in states:
        end = taken.get(s.tp)
        if end is not None and (s.committed is None or end > s.committed):
            s = replace(s, committed=min(end, s.log_end))
        moved.append(s)
    return moved
