"""Written must equal read: the driver's check of the Spark tasks' reports, without Spark."""

from __future__ import annotations

import copy

import pytest

from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.core.planning import PlanPolicy, plan_incremental
from kafka_batch_provider.core.write_check import TaskReports, check_write
from kafka_batch_provider.errors import WriteCheckError

PLAN = plan_incremental(
    "g", ["t"], [PartitionOffsets("t", 0, 0, 0, 10)], PlanPolicy(), "read_committed", "2026-01-01T00:00:00+00:00"
)


def receipt(start, end, rows, first, last, position=None):
    return {
        "topic": "t",
        "partition": 0,
        "start": start,
        "end": end,
        "position": end if position is None else position,
        "rows": rows,
        "first_offset": first,
        "last_offset": last,
    }


def report(name, rows, lo, hi, receipts):
    written = [{"topic": "t", "partition": 0, "rows": rows, "min_offset": lo, "max_offset": hi}] if rows else []
    files = [{"name": name, "bytes": 100 + rows, "rows": rows}] if rows else []
    return {"files": files, "written": written, "receipts": receipts}


def good_reports():
    # Two tasks read [0, 6) and [6, 10); offset 5 is a transaction marker (no row).
    return [
        report("a.parquet", 5, 0, 4, [receipt(0, 6, 5, 0, 4)]),
        report("b.parquet", 4, 6, 9, [receipt(6, 10, 4, 6, 9)]),
    ]


def check(reports, found=None, footers=None, counted=True, letters_found=None):
    merged = TaskReports.merge(reports)
    found = {f["name"]: f["bytes"] for f in merged.files} if found is None else found
    footers = {f["name"]: f["rows"] for f in merged.files} if footers is None else footers
    letters = {f["name"]: f["bytes"] for f in merged.dead_letter_files} if letters_found is None else letters_found
    letter_rows = {f["name"]: f["rows"] for f in merged.dead_letter_files}
    return check_write(PLAN, merged, found, footers, counted, letters, letter_rows)


def with_dead_letters(offsets):
    """The good reports, with ``offsets`` of the second task's range written as dead letters instead of rows."""
    reports = good_reports()
    second = reports[1]
    kept = [o for o in range(6, 10) if o not in offsets]
    second["written"] = [{"topic": "t", "partition": 0, "rows": len(kept), "min_offset": min(kept),
                          "max_offset": max(kept)}] if kept else []  # fmt: skip
    second["files"] = [{"name": "b.parquet", "bytes": 100, "rows": len(kept)}] if kept else []
    second["dead_letters"] = [{"topic": "t", "partition": 0, "rows": len(offsets), "min_offset": min(offsets),
                               "max_offset": max(offsets)}]  # fmt: skip
    second["dead_letter_files"] = [{"name": "b.parquet", "bytes": 50, "rows": len(offsets)}]
    return reports


def test_dead_letters_count_with_the_rows_written_against_the_rows_read():
    stats = check(with_dead_letters([6, 9]))
    assert [(s["rows"], s["dead_letters"]) for s in stats] == [(7, 2)], f"expected 7 rows and 2 dead letters: {stats}"
    assert (stats[0]["min_offset"], stats[0]["max_offset"]) == (0, 8), "the data's bounds are the rows' own"
    only_dead = check(with_dead_letters([6, 7, 8, 9]))
    assert [(s["rows"], s["dead_letters"]) for s in only_dead] == [(5, 4)], only_dead


def test_dead_letters_that_do_not_add_up_are_refused():
    reports = with_dead_letters([6, 9])
    reports[1]["dead_letters"][0]["rows"] = 1  # one reported, two in the file
    with pytest.raises(WriteCheckError, match="files hold 2 dead letters, they reported 1"):
        check(reports)
    reports = with_dead_letters([6, 9])
    reports[1]["dead_letter_files"][0]["rows"] = 1
    reports[1]["dead_letters"][0]["rows"] = 1
    with pytest.raises(WriteCheckError, match="9 rows were read but 8 written"):
        check(reports)
    with pytest.raises(WriteCheckError, match="cannot find 1 of the 1 dead-letter file"):
        check(with_dead_letters([6, 9]), letters_found={})
    reports = with_dead_letters([6, 9])
    reports[1]["dead_letters"][0]["max_offset"] = 10
    with pytest.raises(WriteCheckError, match=r"of dead letters fall outside the planned \[0, 10\)"):
        check(reports)


def test_matching_reports_give_per_partition_stats():
    assert check(good_reports()) == [
        {
            "topic": "t",
            "partition": 0,
            "rows": 9,
            "min_offset": 0,
            "max_offset": 9,
            "min_timestamp": None,
            "max_timestamp": None,
            "dead_letters": 0,
        }
    ]


def test_files_the_driver_cannot_see_are_refused():
    with pytest.raises(WriteCheckError, match="cannot find 2 of the 2 file.*executors and the driver"):
        check(good_reports(), found={})


def test_a_file_with_other_size_or_rows_is_refused():
    with pytest.raises(WriteCheckError, match="a.parquet has 1 bytes, the task wrote 105"):
        check(good_reports(), found={"a.parquet": 1, "b.parquet": 104})
    with pytest.raises(WriteCheckError, match="a.parquet holds 3 rows, the task wrote 5"):
        check(good_reports(), footers={"a.parquet": 3, "b.parquet": 4})


def test_a_file_that_vanished_or_is_not_parquet_is_refused():
    with pytest.raises(WriteCheckError, match="a.parquet vanished or is not a readable Parquet file"):
        check(good_reports(), footers={"a.parquet": None, "b.parquet": 4})


def test_fewer_rows_written_than_read_is_refused():
    reports = good_reports()
    reports[1] = report("b.parquet", 3, 6, 9, [receipt(6, 10, 4, 6, 9)])
    with pytest.raises(WriteCheckError, match="9 rows were read but 8 written"):
        check(reports)


def test_a_range_of_records_that_yields_no_rows_is_refused():
    reports = [report("-", 0, None, None, [receipt(0, 6, 5, 0, 4), receipt(6, 10, 4, 6, 9)])]
    with pytest.raises(WriteCheckError, match="9 rows were read but 0 written"):
        check(reports)


def test_reads_must_cover_the_range_exactly_and_reach_their_end():
    reports = good_reports()
    reports[1]["receipts"] = []
    with pytest.raises(WriteCheckError, match=r"offsets \[6, 10\) were planned but never read"):
        check(reports)
    reports = good_reports()
    reports[0]["receipts"][0]["position"] = 5
    with pytest.raises(WriteCheckError, match="reached 5"):
        check(reports)
    doubled = good_reports()
    doubled[1]["receipts"].append(copy.deepcopy(doubled[0]["receipts"][0]))
    with pytest.raises(WriteCheckError, match="do not cover"):
        check(doubled)


def test_offsets_outside_the_plan_or_unplanned_partitions_are_refused():
    reports = good_reports()
    reports[1]["written"][0]["max_offset"] = 10
    with pytest.raises(WriteCheckError, match=r"outside the planned \[0, 10\)"):
        check(reports)
    reports = good_reports()
    reports[1]["written"][0]["partition"] = 3
    with pytest.raises(WriteCheckError, match="unplanned partitions"):
        check(reports)


def test_without_receipts_rows_are_counted_where_written():
    reports = good_reports()
    for r in reports:
        r["receipts"] = []
    assert check(reports, counted=False)[0]["rows"] == 9
    with pytest.raises(WriteCheckError, match="never read"):
        check(reports, counted=True)
