"""Written must equal read: the driver's check before a batch is published. Pure, no I/O.

Inputs: the plan, the reports the Spark tasks returned (files written, rows and offset
bounds written per Kafka partition, the reader's receipts) and what the driver itself finds
in the staging folder (file sizes, row counts from the Parquet footers). Any disagreement
raises :class:`~kafka_batch_provider.errors.WriteCheckError` and nothing is published:

* a file a task reported is missing or has another size or row count where the driver
  looks (e.g. executors wrote to a local path the driver does not share);
* the receipts do not cover every planned range exactly, or a read stopped short of its end;
* a partition's written rows differ from its read rows, or its offsets do not match;
* rows of an unplanned partition, or offsets outside the planned range.

Dead letters (records whose value could not be decoded) are checked like the data: their files
against what the driver finds, their offsets against the plan, and per partition the rows
written plus the dead letters must equal the rows read.

Receipts come from the ``python`` reader. Spark's JVM Kafka source gives none: then rows are
counted where they were written, and everything but the read-side comparison still holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.errors import WriteCheckError


@dataclass
class TaskReports:
    """The tasks' reports, merged."""

    files: list[dict[str, Any]] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)
    receipts: list[dict[str, Any]] = field(default_factory=list)
    #: the dead letters' files, and their rows and bounds per Kafka partition (like ``files``, ``written``)
    dead_letter_files: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def merge(cls, reports: Iterable[Mapping[str, Any]]) -> TaskReports:
        merged = cls()
        for report in reports:
            merged.files.extend(report.get("files", []))
            merged.written.extend(report.get("written", []))
            merged.receipts.extend(report.get("receipts", []))
            merged.dead_letter_files.extend(report.get("dead_letter_files", []))
            merged.dead_letters.extend(report.get("dead_letters", []))
        return merged


def check_write(
    plan: OffsetPlan,
    reports: TaskReports,
    found_sizes: Mapping[str, int],
    footer_rows: Mapping[str, int | None],
    counted_at_source: bool,
    dead_letter_sizes: Mapping[str, int] | None = None,
    dead_letter_footer_rows: Mapping[str, int | None] | None = None,
) -> list[dict[str, Any]]:
    """Check what the tasks wrote against what they read and what the driver sees.

    :param found_sizes: ``{file name: bytes}`` in the staging folder, as the driver lists it.
    :param footer_rows: ``{file name: rows}`` from the footers of the files the driver found
        (``None``: the file vanished or is not readable Parquet).
    :param counted_at_source: the reader sent receipts (the ``python`` reader).
    :param dead_letter_sizes: ``{file name: bytes}`` of the staged dead letters, as the driver lists them.
    :param dead_letter_footer_rows: ``{file name: rows}`` from their footers.
    :returns: per Kafka partition: ``topic``, ``partition``, ``rows``, min/max offset and
        timestamp (epoch microseconds) of the rows written, and its ``dead_letters``, for the manifest.
    """
    bid = plan.batch_id
    check_files(bid, reports.files, found_sizes, footer_rows)
    check_files(bid, reports.dead_letter_files, dead_letter_sizes or {}, dead_letter_footer_rows or {}, "dead-letter ")
    written = check_rows(plan, reports.files, reports.written, "rows")
    dead = check_rows(plan, reports.dead_letter_files, reports.dead_letters, "dead letters")
    if counted_at_source:
        check_receipts(plan, reports.receipts, merge_written([*reports.written, *reports.dead_letters]))
    stats = {key: {**s, "dead_letters": 0} for key, s in written.items()}
    for key, d in dead.items():
        s = stats.setdefault(key, {"topic": key[0], "partition": key[1], "rows": 0, "min_offset": None,
                                   "max_offset": None, "min_timestamp": None, "max_timestamp": None})  # fmt: skip
        s["dead_letters"] = d["rows"]
    return sorted(stats.values(), key=lambda s: (s["topic"], s["partition"]))


def check_rows(
    plan: OffsetPlan, files: list[dict[str, Any]], reported: list[dict[str, Any]], what: str
) -> dict[tuple[str, int], dict[str, Any]]:
    """The reported rows per partition, once they lie in the planned ranges and add up to the files' rows."""
    bid = plan.batch_id
    merged = merge_written(reported)
    planned = {(r.topic, r.partition): r for r in plan.readable_ranges}
    unplanned = sorted(set(merged) - set(planned))
    if unplanned:
        raise WriteCheckError(f"batch {bid}: the tasks wrote {what} of unplanned partitions {unplanned}")
    for key, stats in merged.items():
        r = planned[key]
        if not (r.start <= stats["min_offset"] and stats["max_offset"] < r.end):
            raise WriteCheckError(
                f"batch {bid} {r.tp}: written offsets [{stats['min_offset']}, {stats['max_offset']}] of {what} "
                f"fall outside the planned [{r.start}, {r.end})"
            )
    rows_in_files = sum(f["rows"] for f in files)
    rows_reported = sum(s["rows"] for s in merged.values())
    if rows_in_files != rows_reported:
        raise WriteCheckError(
            f"batch {bid}: the tasks' files hold {rows_in_files} {what}, they reported {rows_reported}"
        )
    return merged


def check_files(
    bid: str,
    files: list[dict[str, Any]],
    found_sizes: Mapping[str, int],
    footer_rows: Mapping[str, int | None],
    kind: str = "",
) -> None:
    """:param kind: how messages name the files (``"dead-letter "``; data files: nothing)."""
    missing = [f["name"] for f in files if f["name"] not in found_sizes]
    if missing:
        raise WriteCheckError(
            f"batch {bid}: the driver cannot find {len(missing)} of the {len(files)} {kind}file(s) the Spark tasks "
            "wrote "
            f"(e.g. {missing[0]}); do the executors and the driver see the same output? (a local path on a "
            "cluster is not shared: use an object store or a shared filesystem)"
        )
    for f in files:
        if found_sizes[f["name"]] != f["bytes"]:
            raise WriteCheckError(
                f"batch {bid}: {kind}file {f['name']} has {found_sizes[f['name']]} bytes, the task wrote {f['bytes']}"
            )
        if footer_rows.get(f["name"]) is None:
            raise WriteCheckError(f"batch {bid}: {kind}file {f['name']} vanished or is not a readable Parquet file")
        if footer_rows.get(f["name"]) != f["rows"]:
            raise WriteCheckError(
                f"batch {bid}: {kind}file {f['name']} holds {footer_rows.get(f['name'])} rows, "
                f"the task wrote {f['rows']}"
            )


def merge_written(written: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Per Kafka partition: rows and bounds over every task that wrote some of it."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for w in written:
        key = (str(w["topic"]), int(w["partition"]))
        m = merged.setdefault(key, {"topic": key[0], "partition": key[1], "rows": 0})
        m["rows"] += int(w["rows"])
        for name, pick in (("min_offset", min), ("max_offset", max), ("min_timestamp", min), ("max_timestamp", max)):
            values = [v for v in (m.get(name), w.get(name)) if v is not None]
            m[name] = pick(values) if values else None
    return merged


def check_receipts(
    plan: OffsetPlan, receipts: list[dict[str, Any]], written: Mapping[tuple[str, int], Mapping[str, Any]]
) -> None:
    """Every planned range was read to its end, exactly once, and every row read was written."""
    bid = plan.batch_id
    by_partition: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for receipt in receipts:
        by_partition.setdefault((receipt["topic"], int(receipt["partition"])), []).append(receipt)
    planned = {(r.topic, r.partition): r for r in plan.readable_ranges}
    unplanned = sorted(set(by_partition) - set(planned))
    if unplanned:
        raise WriteCheckError(f"batch {bid}: the tasks read unplanned partitions {unplanned}")
    for key, r in planned.items():
        slices = sorted(by_partition.get(key, []), key=lambda s: s["start"])
        covered = r.start
        for s in slices:
            if s["start"] != covered or s["position"] != s["end"]:
                raise WriteCheckError(
                    f"batch {bid} {r.tp}: the reads do not cover [{r.start}, {r.end}) exactly: a read of "
                    f"[{s['start']}, {s['end']}) reached {s['position']} after [{r.start}, {covered}) was covered"
                )
            covered = s["end"]
        if covered != r.end:
            raise WriteCheckError(f"batch {bid} {r.tp}: offsets [{covered}, {r.end}) were planned but never read")
        rows_read = sum(int(s["rows"]) for s in slices)
        w = written.get(key, {"rows": 0, "min_offset": None, "max_offset": None})
        if int(w["rows"]) != rows_read:
            raise WriteCheckError(
                f"batch {bid} {r.tp}: {rows_read} rows were read but {w['rows']} written (as rows or dead letters); "
                "nothing is published"
            )
        firsts = [s["first_offset"] for s in slices if s["first_offset"] is not None]
        lasts = [s["last_offset"] for s in slices if s["last_offset"] is not None]
        if rows_read and (min(firsts), max(lasts)) != (w["min_offset"], w["max_offset"]):
            raise WriteCheckError(
                f"batch {bid} {r.tp}: read offsets [{min(firsts)}, {max(lasts)}] but wrote "
                f"[{w['min_offset']}, {w['max_offset']}]"
            )
