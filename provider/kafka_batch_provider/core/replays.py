"""Which replays may share an output. Pure, no I/O.

A replay (backfill) output holds each offset once: two replays of overlapping ranges would show
readers those offsets twice, so the second is refused. The plan step checks a new replay against
the batches logged and planned; the write step checks it again, when it takes its entry of the
log, against the batches published since it was planned (replays run at once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.errors import PlanError


def refuse_overlaps(root: str, plan: OffsetPlan, others: Sequence[tuple[str, list[OffsetRange], str, str]]) -> None:
    """Refuse ``plan`` when it reads offsets another batch of the output ``root`` holds.

    :param others: ``(batch id, readable ranges, what that batch was, how to get rid of it)`` of
        the batches already there.
    """
    for batch_id, ranges, about, remedy in others:
        for mine in plan.readable_ranges:
            for theirs in ranges:
                if mine.tp == theirs.tp and mine.start < theirs.end and theirs.start < mine.end:
                    raise PlanError(
                        f"replay {mine} overlaps {theirs} of batch {batch_id}{about} in {root}; "
                        f"choose another output{remedy}"
                    )


def by_incarnation(
    entry: Mapping[str, Any], topic_ids: Mapping[str, str]
) -> tuple[list[OffsetRange], list[OffsetRange]]:
    """A logged batch's readable ranges: those of the topics as the plan sees them, and those of
    an earlier topic of the same name (another topic id; without ids, assumed the same)."""
    theirs = entry.get("topic_ids") or {}
    same, earlier = [], []
    for r in (OffsetRange.from_dict(d) for d in entry["ranges"] if d["end"] > d["start"]):
        known, now = theirs.get(r.topic), topic_ids.get(r.topic)
        (same if known is None or now is None or known == now else earlier).append(r)
    return same, earlier


def same_ranges(a: Sequence[OffsetRange], b: Sequence[OffsetRange]) -> bool:
    return sorted((r.topic, r.partition, r.start, r.end) for r in a) == sorted(
        (r.topic, r.partition, r.start, r.end) for r in b
    )
