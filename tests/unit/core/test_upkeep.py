"""Upkeep's settings refuse what would remove files in flight or the newest batch's records."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.settings import FLAGS_WORDING, worded
from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.errors import ConfigError


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"retention_hours": 0.5}, "--retention-hours must be at least 1, got 0.5"),
        ({"target_file_mb": 0}, "--target-file-mb must be between 1 and 4096 (MB), got 0"),
        ({"target_file_mb": 5000}, "--target-file-mb must be between 1 and 4096 (MB), got 5000"),
        ({"keep_batches": 0}, "--keep-batches must be at least 1, got 0"),
    ],
)
def test_unsafe_settings_are_refused_in_the_callers_words(settings, expected):
    with worded(FLAGS_WORDING), pytest.raises(ConfigError) as refused:
        UpkeepSettings(**settings)
    assert expected in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    with pytest.raises(ConfigError) as refused:
        UpkeepSettings(**settings)
    name = next(iter(settings))
    assert str(refused.value).startswith(name), f"an operator's error names {name}: {refused.value}"


def test_the_report_says_what_changed_in_one_line():
    report = UpkeepReport("delta", "s3://lake/t", False, files_before=40, files_after=2, compacted_files=40)
    report.written_files, report.removed_files, report.pruned_plans = 2, 3, 7
    assert report.summary() == (
        "upkeep of delta output s3://lake/t changed: data files 40 -> 2 (40 compacted into 2), 3 old file(s) "
        "removed, 0 snapshot(s) expired, 7 plan(s) and 0 commit record(s) pruned"
    )
    assert UpkeepSettings(target_file_mb=64).target_bytes == 64 * 1024 * 1024
