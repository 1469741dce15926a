"""Upkeep's settings refuse what would remove files in flight or the newest batch's records."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.settings import FLAGS_WORDING, worded
from kafka_batch_provider.core.upkeep import Unit, UpkeepReport, UpkeepSettings, compaction_runs, settled_through
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


def unit(name: str, size: int, schema: str = "s1") -> Unit:
    return Unit(f"batch_id={name}", (f"{name}.parquet",), size, 10, schema)


def names(runs: list[list[Unit]]) -> list[list[str]]:
    return [[u.folder.removeprefix("batch_id=") for u in run] for run in runs]


@pytest.mark.parametrize(
    ("units", "expected"),
    [
        ([unit("a", 10), unit("b", 10), unit("c", 10)], [["a", "b", "c"]]),
        ([unit("a", 10), unit("big", 100), unit("c", 10)], [["a", "c"]]),  # a full folder stays, the rest merge
        ([unit("a", 10), unit("b", 10, "s2"), unit("c", 10, "s2")], [["b", "c"]]),  # a run of one gains nothing
        ([unit("a", 10), unit("b", 10, "s2"), unit("c", 10)], []),
        ([unit("a", 10), unit("b", 10), unit("c", 10, "s2"), unit("d", 10, "s2")], [["a", "b"], ["c", "d"]]),
        ([Unit("batch_id=empty", (), 0, 0, "s1"), unit("a", 10)], []),
        ([], []),
    ],
)
def test_compaction_merges_runs_of_small_folders_of_one_schema(units, expected):
    found = names(compaction_runs(units, target_bytes=100))
    assert found == expected, f"expected runs {expected}, found {found}"


@pytest.mark.parametrize(
    ("window", "merged", "expected"),
    [
        ([(1, unit("a", 10)), (2, unit("b", 10))], {"batch_id=a", "batch_id=b"}, 9),  # all compacted
        ([(1, unit("a", 10)), (2, unit("big", 100))], set(), 0),  # a alone may still get a neighbour
        ([(1, unit("big", 100)), (2, unit("a", 10))], set(), 1),
        ([(1, unit("a", 10)), (2, unit("b", 10, "s2"))], set(), 1),  # a can never merge (s2 follows); b may
        ([(1, unit("a", 10)), (2, Unit("batch_id=e", (), 0, 0, "s1"))], {"batch_id=a"}, 9),
        ([], set(), 9),
    ],
)
def test_settled_through_stops_before_the_first_batch_a_later_compaction_may_merge(window, merged, expected):
    found = settled_through(window, merged, target_bytes=100, last=9)
    assert found == expected, f"expected the mark at {expected}, found {found}"
