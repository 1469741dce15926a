"""How a replay's range is chosen: exactly one way, complete, in the past. Pure, no broker."""

from __future__ import annotations

import pytest

from kafka_batch_provider.errors import KafkaBatchError
from kafka_batch_provider.steps.replay import check_replay_range

NOW = 1_800_000_000_000
HOUR = 3_600_000


@pytest.mark.parametrize(
    "chosen, expected",
    [
        ({}, "a replay needs a range"),
        ({"start_offsets": {0: 1}, "start_ms": NOW - 2 * HOUR, "end_ms": NOW - HOUR}, "not both"),
        ({"whole_topic": True, "end_offsets": {0: 5}}, "whole_topic replays everything"),
        ({"start_ms": NOW - HOUR}, "needs both a start and an end time"),
        ({"start_ms": NOW - HOUR, "end_ms": NOW - 2 * HOUR}, "is not after start time"),
        ({"start_ms": NOW - HOUR, "end_ms": NOW + HOUR}, "is in the future"),
    ],
)
def test_a_replay_range_is_refused_in_one_line(chosen, expected):
    arguments = {"start_offsets": None, "end_offsets": None, "start_ms": None, "end_ms": None, "whole_topic": False}
    with pytest.raises(KafkaBatchError) as refused:
        check_replay_range(**{**arguments, **chosen}, now_ms=NOW)
    assert expected in str(refused.value), f"expected {expected!r} in {refused.value}"


@pytest.mark.parametrize(
    "chosen",
    [
        {"whole_topic": True},
        {"end_offsets": {0: 5}},
        {"start_ms": NOW - 2 * HOUR, "end_ms": NOW},
    ],
)
def test_one_complete_range_is_accepted(chosen):
    arguments = {"start_offsets": None, "end_offsets": None, "start_ms": None, "end_ms": None, "whole_topic": False}
    check_replay_range(**{**arguments, **chosen}, now_ms=NOW)


def test_when_the_dag_is_parsed_a_window_still_open_is_not_refused():
    # It may have closed by the time the task runs; the task checks again.
    check_replay_range(None, None, NOW - HOUR, NOW + HOUR, False, now_ms=NOW, refuse_future=False)
