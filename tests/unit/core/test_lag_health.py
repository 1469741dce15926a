"""Lag health is pure: each status from numbers, including those the embedded broker cannot produce."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kafka_batch_provider.core.lag_health import (
    BatchPoint,
    HealthPolicy,
    LagStatus,
    PartitionLag,
    evaluate,
    ready_to_ingest,
)
from kafka_batch_provider.core.offsets import TopicPartition

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
TP = TopicPartition("t", 0)


def lag(committed, start, end, age_s=None, retention_ms=None) -> PartitionLag:
    stamp = None if age_s is None else int((NOW.timestamp() - age_s) * 1000)
    return PartitionLag("t", 0, committed, start, end, oldest_unconsumed_ms=stamp, retention_ms=retention_ms)


def batch(minutes_ago: float, committed, lag_at_plan) -> BatchPoint:
    return BatchPoint(f"b-{minutes_ago}", NOW - timedelta(minutes=minutes_ago), {TP: committed}, {TP: lag_at_plan})


def status(state, history=(), policy=HealthPolicy()) -> LagStatus:
    report = evaluate("g", [state], list(history), policy, NOW)
    return report.partitions[0].status


def test_caught_up_partition_is_ok():
    assert status(lag(100, 0, 100), [batch(10, 100, 20)]) is LagStatus.OK


def test_committed_below_log_start_is_data_loss_with_the_missing_range():
    report = evaluate("g", [lag(5, 100, 150)], [], HealthPolicy(), NOW)
    assert report.status is LagStatus.DATA_LOSS
    assert "[5, 100)" in report.message() and "t[0] DATA_LOSS" in report.message()


def test_oldest_unconsumed_record_near_retention_is_a_retention_risk():
    day = 86_400_000
    assert status(lag(10, 0, 50, age_s=6 * 86400, retention_ms=7 * day)) is LagStatus.RETENTION_RISK
    assert status(lag(10, 0, 50, age_s=3 * 86400, retention_ms=7 * day)) is LagStatus.OK
    assert status(lag(10, 0, 50, age_s=6 * 86400, retention_ms=-1)) is LagStatus.OK, "retention -1 keeps forever"
    assert status(lag(50, 0, 50, age_s=None, retention_ms=7 * day)) is LagStatus.OK, "nothing left to ingest"


def test_committed_below_the_last_batch_is_a_rewind():
    assert status(lag(10, 0, 100), [batch(20, 40, 40), batch(10, 80, 40)]) is LagStatus.REWIND
    assert status(lag(None, 0, 100), [batch(10, 80, 40)]) is LagStatus.REWIND, "offsets gone is a rewind too"


def test_no_commit_for_too_long_with_lag_is_stop_but_not_without_lag():
    policy = HealthPolicy(stop_after=timedelta(minutes=45))
    assert status(lag(80, 0, 100), [batch(60, 80, 10)], policy) is LagStatus.STOP
    assert status(lag(100, 0, 100), [batch(60, 100, 10)], policy) is LagStatus.OK, "a quiet topic is not stopped"
    assert status(lag(80, 0, 100), [batch(30, 80, 10)], policy) is LagStatus.OK


def test_offset_not_moving_across_the_window_while_there_was_work_is_a_stall():
    stuck = [batch(30, 50, 10), batch(20, 50, 20), batch(10, 50, 30)]
    assert status(lag(50, 0, 90), stuck) is LagStatus.STALL
    idle = [batch(30, 50, 0), batch(20, 50, 0)]
    assert status(lag(50, 0, 60), idle) is LagStatus.OK, "no data then, new data now: not stalled"


def test_lag_growing_at_every_batch_is_warn():
    growing = [batch(30, 10, 100), batch(20, 30, 150)]
    assert status(lag(60, 0, 260), growing) is LagStatus.WARN  # 100 -> 150 -> 200
    assert status(lag(60, 0, 160), growing) is LagStatus.OK  # 100 -> 150 -> 100


def test_most_severe_status_wins_and_the_group_takes_its_worst_partition():
    a = PartitionLag("t", 0, 5, 100, 150)  # DATA_LOSS
    b = PartitionLag("t", 1, 10, 0, 10)  # OK
    report = evaluate("g", [a, b], [], HealthPolicy(), NOW)
    assert [p.status for p in report.partitions] == [LagStatus.DATA_LOSS, LagStatus.OK]
    assert report.status is LagStatus.DATA_LOSS and report.total_lag == 50


def test_a_newest_batch_with_too_many_dead_letters_is_dead_letters_and_older_ones_do_not_count():
    def with_letters(minutes_ago, dead, rows):
        return BatchPoint(f"b-{minutes_ago}", NOW - timedelta(minutes=minutes_ago), {TP: 10}, {TP: 5},
                          {TP: (dead, rows)})  # fmt: skip

    found = evaluate("g", [lag(10, 0, 10)], [with_letters(5, 2, 98)], HealthPolicy(), NOW).partitions[0]
    assert found.status is LagStatus.DEAD_LETTERS, f"expected DEAD_LETTERS, found {found.status}: {found.reason}"
    assert "set 2 of 100 records aside" in found.reason and "2.0%" in found.reason, found.reason
    assert status(lag(10, 0, 10), [with_letters(5, 1, 199)]) is LagStatus.OK, "0.5% is below the 1% limit"
    assert status(lag(10, 0, 10), [with_letters(9, 5, 5), with_letters(5, 0, 10)]) is LagStatus.OK, "an older batch"
    loose = HealthPolicy(dead_letter_share=0.5)
    assert status(lag(10, 0, 10), [with_letters(5, 2, 98)], loose) is LagStatus.OK
    assert LagStatus.DEAD_LETTERS.exit_code == 16 and LagStatus.STALL.exit_code == 11, "the older codes stay"


def test_exit_codes_are_distinct_per_status():
    codes = {s: s.exit_code for s in LagStatus}
    assert codes[LagStatus.OK] == 0 and len(set(codes.values())) == len(codes)
    assert codes[LagStatus.DATA_LOSS] == 15


@pytest.mark.parametrize(
    "states, min_lag, max_age, expected",
    [
        ([lag(0, 0, 5)], 5, None, True),
        ([lag(0, 0, 4)], 5, None, False),
        ([lag(0, 0, 1, age_s=7200)], 100, timedelta(hours=1), True),
        ([lag(0, 0, 1, age_s=600)], 100, timedelta(hours=1), False),
        ([lag(0, 0, 1, age_s=7200)], 100, None, False),
    ],
)
def test_sensor_condition_is_enough_records_or_old_enough_records(states, min_lag, max_age, expected):
    ready, reason = ready_to_ingest(states, min_lag, max_age, NOW)
    assert ready is expected, reason
