"""The offset plan: the unit of work the four steps agree on.

A plan is made once (plan step), persisted before anything is read, and then read by the
Spark job (read + write) and by the commit step. A retry replays the same file, so the
same offsets land in the same place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.offsets import OffsetGap, OffsetRange, TopicPartition

PLAN_FORMAT_VERSION = 1

#: Incremental plans start at the group's committed offsets and commit their ends.
INCREMENTAL = "incremental"
#: Replay plans (backfills) read an explicit range and never commit the group.
REPLAY = "replay"


def batch_id_for(mode: str, group_id: str | None, ranges: tuple[OffsetRange, ...]) -> str:
    """A deterministic id: the same group and ranges always give the same batch id.

    The id names the output location, so re-running a plan replaces its data instead of
    adding to it. The ``b-`` prefix keeps Hive partition discovery from reading the id
    as a number.
    """
    canonical = json.dumps(
        [mode, group_id, [[r.topic, r.partition, r.start, r.end, r.expected_committed] for r in ranges]],
        separators=(",", ":"),
    )
    return "b-" + hashlib.sha256(canonical.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class OffsetPlan:
    """A batch: per partition, the range to read and the offset to commit afterwards.

    :param ranges: every partition whose committed offset this batch moves, sorted by
        topic and partition. A range may be empty (``start == end``) when only the
        committed offset moves, e.g. a new partition planned at ``latest``.
    :param gaps: offsets skipped because retention had deleted them (data-loss policy
        ``earliest``); empty unless the user chose to skip.
    :param truncated: ``True`` when ``max_records`` bounds left data for a later batch.
    """

    batch_id: str
    mode: str
    group_id: str | None
    topics: tuple[str, ...]
    isolation_level: str
    ranges: tuple[OffsetRange, ...]
    gaps: tuple[OffsetGap, ...] = ()
    truncated: bool = False
    created_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def planned_offsets(self) -> int:
        """Offsets to read: an upper bound on the records (gaps are possible)."""
        return sum(r.size for r in self.ranges)

    @property
    def has_data(self) -> bool:
        return self.planned_offsets > 0

    @property
    def commits_group(self) -> bool:
        return self.mode == INCREMENTAL

    @property
    def readable_ranges(self) -> tuple[OffsetRange, ...]:
        return tuple(r for r in self.ranges if r.size > 0)

    def end_offsets(self) -> dict[TopicPartition, int]:
        return {r.tp: r.end for r in self.ranges}

    def expected_committed(self) -> dict[TopicPartition, int | None]:
        return {r.tp: r.expected_committed for r in self.ranges}

    def summary(self) -> dict[str, Any]:
        """The small form used for stdout lines and XCom."""
        return {
            "batch_id": self.batch_id,
            "mode": self.mode,
            "group_id": self.group_id,
            "planned_offsets": self.planned_offsets,
            "ranges": [
                {"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end} for r in self.ranges
            ],
            "gaps": [g.to_dict() for g in self.gaps],
            "truncated": self.truncated,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": PLAN_FORMAT_VERSION,
            "batch_id": self.batch_id,
            "mode": self.mode,
            "group_id": self.group_id,
            "topics": list(self.topics),
            "isolation_level": self.isolation_level,
            "ranges": [r.to_dict() for r in self.ranges],
            "gaps": [g.to_dict() for g in self.gaps],
            "truncated": self.truncated,
            "created_at": self.created_at,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OffsetPlan:
        if data.get("format_version") != PLAN_FORMAT_VERSION:
            raise ConfigError(
                f"unsupported plan format_version {data.get('format_version')!r} (expected {PLAN_FORMAT_VERSION})"
            )
        plan = cls(
            batch_id=str(data["batch_id"]),
            mode=str(data["mode"]),
            group_id=data.get("group_id"),
            topics=tuple(data["topics"]),
            isolation_level=str(data["isolation_level"]),
            ranges=tuple(OffsetRange.from_dict(r) for r in data["ranges"]),
            gaps=tuple(OffsetGap.from_dict(g) for g in data.get("gaps", [])),
            truncated=bool(data.get("truncated", False)),
            created_at=str(data.get("created_at", "")),
            extra=dict(data.get("extra") or {}),
        )
        expected = batch_id_for(plan.mode, plan.group_id, plan.ranges)
        if plan.batch_id != expected:
            # The id names the output location: a hand-edited range must not reuse it.
            raise ConfigError(f"plan {plan.batch_id} does not match its ranges (expected batch id {expected})")
        return plan

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> OffsetPlan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"plan file is not valid JSON: {exc}") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"plan file is malformed: {exc!r}") from None
