"""What a running batch is taking, as the lag-fired DAG's trigger discounts it (``steps.lag.taken_offsets``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.steps.lag import taken_offsets

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
IN_FLIGHT = timedelta(minutes=10)


def store_with_tail(written_minutes_ago: float, commit_recorded: bool) -> SimpleNamespace:
    """An output whose newest log entry is an incremental batch of group ``g`` ending at 30."""
    tail = {
        "seq": 4, "batch_id": "b-4", "mode": "incremental", "group_id": "g",
        "written_at": (NOW - timedelta(minutes=written_minutes_ago)).isoformat(),
        "ranges": [{"topic": "t", "partition": 0, "start": 10, "end": 30}],
    }  # fmt: skip
    return SimpleNamespace(
        log=SimpleNamespace(tail=lambda: tail),
        commit_recorded=lambda entry: commit_recorded,
        plans_after=lambda seq: [],
    )


@pytest.mark.parametrize(
    ("minutes_ago", "recorded", "taken"),
    [
        (1, False, {TopicPartition("t", 0): 30}),  # its run is still committing it
        (1, True, {TopicPartition("t", 0): 30}),
        (60, True, {TopicPartition("t", 0): 30}),  # committed: the group is there anyway
        (60, False, {}),  # its run failed before the commit: lag again, so the repairing run is fired
    ],
    ids=["writing", "committed-just-now", "committed-long-ago", "commit-missing-for-an-hour"],
)
def test_a_logged_batch_is_taken_until_its_commit_is_overdue(minutes_ago, recorded, taken):
    found = taken_offsets(store_with_tail(minutes_ago, recorded), "g", NOW, IN_FLIGHT)
    assert found == taken, f"written {minutes_ago} min ago, commit recorded {recorded}: expected {taken}, got {found}"
