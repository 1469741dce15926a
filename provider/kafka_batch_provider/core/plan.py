"""The offset plan: the unit of work the four steps agree on.

A plan is made once (plan step), persisted before anything is read, and then read by the
Spark job (read + write) and by the commit step. A retry replays the same file, so the
same offsets land in the same place. Each plan names the entry of the output's offset log it
will occupy (``seq``) and the entry before it, so two plans made at once compete for the same
entry and only one of them can ever be published.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.core.offsets import OffsetGap, OffsetRange, TopicPartition
from kafka_batch_provider.errors import ConfigError

PLAN_FORMAT_VERSION = 2

#: Incremental plans start at the group's committed offsets and commit their ends.
INCREMENTAL = "incremental"
#: Replay plans (backfills) read an explicit range and never commit the group.
REPLAY = "replay"


def batch_id_for(
    mode: str, group_id: str | None, seq: int, topic_ids: dict[str, str], ranges: tuple[OffsetRange, ...]
) -> str:
    """A deterministic id of everything that makes a batch unique.

    The same group, log entry, topics and ranges give the same id, so two plan steps that
    see the same state make the same batch (and a retry replaces rather than adds). The log
    sequence and the topic ids keep ids from colliding when a topic is deleted and
    recreated and the same ranges come round again. A replay's id leaves the log sequence out:
    its ranges are its own in its output (overlaps are refused), and it may take another entry
    than the one it planned when replays run at once. The ``b-`` prefix keeps Hive partition
    discovery from reading the id as a number.
    """
    return hashed_id(mode, group_id, None if mode == REPLAY else seq, topic_ids, ranges)


def hashed_id(
    mode: str, group_id: str | None, seq: int | None, topic_ids: dict[str, str], ranges: tuple[OffsetRange, ...]
) -> str:
    canonical = json.dumps(
        [
            mode,
            group_id,
            seq,
            sorted(topic_ids.items()),
            [[r.topic, r.partition, r.start, r.end, r.expected_committed] for r in ranges],
        ],
        separators=(",", ":"),
    )
    return "b-" + hashlib.sha256(canonical.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class OffsetPlan:
    """A batch: per partition, the range to read and the offset to commit afterwards.

    :param seq: the entry of the output's offset log this batch will occupy (1 for the first).
    :param previous: the batch id of the entry before it (``None`` for the first).
    :param topic_ids: the broker's topic ids at planning time (empty when it has none).
    :param ranges: every partition this batch commits, sorted by topic and partition: for an
        incremental batch every chosen partition of the topics, idle ones with an empty range
        (``start == end``) so that their committed offsets are refreshed and never expire.
    :param gaps: offsets skipped on purpose (data-loss policy ``earliest``, or a group ahead
        of the output accepted with ``--on-group-mismatch=group``); empty otherwise.
    :param bounded: ``True`` when ``max_records`` bounds left data for a later batch (plans of
        1.0.0 said ``truncated``, a word a merged table uses for a source's TRUNCATE).
    """

    batch_id: str
    mode: str
    group_id: str | None
    topics: tuple[str, ...]
    isolation_level: str
    ranges: tuple[OffsetRange, ...]
    seq: int = 1
    previous: str | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)
    gaps: tuple[OffsetGap, ...] = ()
    bounded: bool = False
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
            "seq": self.seq,
            "mode": self.mode,
            "group_id": self.group_id,
            "planned_offsets": self.planned_offsets,
            "ranges": [
                {"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end} for r in self.ranges
            ],
            "gaps": [g.to_dict() for g in self.gaps],
            "bounded": self.bounded,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": PLAN_FORMAT_VERSION,
            "batch_id": self.batch_id,
            "mode": self.mode,
            "group_id": self.group_id,
            "topics": list(self.topics),
            "isolation_level": self.isolation_level,
            "seq": self.seq,
            "previous": self.previous,
            "topic_ids": dict(self.topic_ids),
            "ranges": [r.to_dict() for r in self.ranges],
            "gaps": [g.to_dict() for g in self.gaps],
            "bounded": self.bounded,
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
            seq=int(data["seq"]),
            previous=data.get("previous"),
            topic_ids={str(k): str(v) for k, v in (data.get("topic_ids") or {}).items()},
            gaps=tuple(OffsetGap.from_dict(g) for g in data.get("gaps", [])),
            bounded=bool(data.get("bounded", data.get("truncated", False))),
            created_at=str(data.get("created_at", "")),
            extra=dict(data.get("extra") or {}),
        )
        expected = plan_batch_id(plan)
        if plan.batch_id != expected and plan.batch_id != legacy_replay_id(plan):
            # The id names the output location: a hand-edited range must not reuse it.
            raise ConfigError(f"plan {plan.batch_id} does not match its ranges (expected batch id {expected})")
        return plan

    @property
    def has_work(self) -> bool:
        """Something to read, a gap to record, or a group offset to move (else there is no batch)."""
        return self.has_data or bool(self.gaps) or any(r.end != r.expected_committed for r in self.ranges)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> OffsetPlan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"plan file is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"plan file is malformed: a JSON object was expected, found a {type(data).__name__}")
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"plan file is malformed: {exc!r}") from None


def plan_batch_id(plan: OffsetPlan) -> str:
    return batch_id_for(plan.mode, plan.group_id, plan.seq, plan.topic_ids, plan.ranges)


def legacy_replay_id(plan: OffsetPlan) -> str | None:
    """The id a replay planned by builds before 1.0 has (its log sequence in it): such a plan keeps
    the entry it planned (:func:`kafka_batch_provider.steps.write.replay_slot`)."""
    return hashed_id(plan.mode, plan.group_id, plan.seq, plan.topic_ids, plan.ranges) if plan.mode == REPLAY else None
