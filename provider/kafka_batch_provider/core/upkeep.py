"""Upkeep: what a year of batches needs, as settings and a report. Pure, no I/O.

A pipeline that runs every 5-15 minutes writes 35,000-100,000 batches a year: small files,
table metadata that grows with every commit, and control files (plans, Kafka commit records)
nobody else removes. Upkeep (``kafka-batch upkeep``, the upkeep operator, the shipped
``kafka_batch_upkeep`` DAG) compacts and cleans each format with its own library, never
touching what the offsets need; the I/O is in ``output/*_upkeep.py`` and ``steps/upkeep.py``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kafka_batch_provider.core.file_sizing import DEFAULT_TARGET_FILE_MB, MB, check_target_file_mb
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

#: Files younger than this are never removed: a batch in flight stages its files before its
#: table commit names them, and a removed staged file would leave the commit pointing at nothing.
MIN_RETENTION_HOURS = 1.0


@dataclass(frozen=True)
class UpkeepSettings:
    """:param target_file_mb: compaction's target file size (Delta ``optimize``).
    :param retention_hours: how old a file, a table version or a snapshot that is no longer
        current must be before it is removed (Delta ``vacuum``, Iceberg snapshot expiry and
        orphan files, staged files of failed attempts).
    :param keep_batches: plans and Kafka commit records of the newest this many batches stay
        (lag health reads the recent commit records); older ones are removed.
    :param dry_run: report what would be done, change nothing.
    :param deleted_keys_retention_days: (merged tables) how long a deleted key is remembered, so
        that an older change (a replay, a late partition) cannot bring it back: replays of ranges
        older than this may.
    """

    target_file_mb: int = DEFAULT_TARGET_FILE_MB
    retention_hours: float = 168.0
    keep_batches: int = 1000
    dry_run: bool = False
    deleted_keys_retention_days: float = 30.0

    def __post_init__(self) -> None:
        check_target_file_mb(self.target_file_mb)
        if not (math.isfinite(self.retention_hours) and self.retention_hours >= MIN_RETENTION_HOURS):
            raise ConfigError(
                f"{Setting('retention_hours')} must be at least {MIN_RETENTION_HOURS:g}, got {self.retention_hours:g}: "
                "a batch in flight has staged files no table commit names yet, and upkeep must not remove them",
                setting=Setting("retention_hours"),
            )
        days = self.deleted_keys_retention_days
        if not (math.isfinite(days) and days >= 1):
            raise ConfigError(
                f"{Setting('deleted_keys_retention_days')} must be at least 1, got {days:g}",
                setting=Setting("deleted_keys_retention_days"),
            )
        if self.keep_batches < 1:
            raise ConfigError(
                f"{Setting('keep_batches')} must be at least 1, got {self.keep_batches}: the newest batch's plan "
                "and commit record are what the next run reconciles with",
                setting=Setting("keep_batches"),
            )

    @property
    def target_bytes(self) -> int:
        return self.target_file_mb * MB

    @property
    def retention_seconds(self) -> float:
        return self.retention_hours * 3600


@dataclass
class UpkeepReport:
    """What one upkeep run did (or, for a dry run, would do), in numbers.

    :param files_before: data files the output's readers read before upkeep, and ``files_after``.
    :param compacted_files: files rewritten into larger ones (``written_files``).
    :param removed_files: files deleted: no longer part of the output and older than the retention.
    :param expired_snapshots: Iceberg snapshots expired.
    :param pruned_plans: plan files removed, ``pruned_commit_records`` Kafka commit records removed.
    """

    format: str
    output: str
    dry_run: bool
    files_before: int = 0
    files_after: int = 0
    compacted_files: int = 0
    written_files: int = 0
    removed_files: int = 0
    expired_snapshots: int = 0
    pruned_plans: int = 0
    pruned_commit_records: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One line for the end of a run."""
        verb = "would change" if self.dry_run else "changed"
        return (
            f"upkeep of {self.format} output {self.output} {verb}: data files {self.files_before} -> "
            f"{self.files_after} ({self.compacted_files} compacted into {self.written_files}), "
            f"{self.removed_files} old file(s) removed, {self.expired_snapshots} snapshot(s) expired, "
            f"{self.pruned_plans} plan(s) and {self.pruned_commit_records} commit record(s) pruned"
        )


@dataclass(frozen=True)
class Unit:
    """A folder of the Parquet layout that readers read: a batch's or an earlier compaction's.

    :param folder: its name (``batch_id=<id>``).
    :param files: its files' names, ``bytes`` their total size, ``rows`` their rows.
    :param schema: the Spark schema its rows were written with (only equal schemas are merged).
    :param staging: where its files wait until they are published.
    """

    folder: str
    files: tuple[str, ...]
    bytes: int
    rows: int
    schema: str
    staging: str | None = None


def compaction_runs(units: list[Unit], target_bytes: int) -> list[list[Unit]]:
    """The runs of small folders worth rewriting together, in the order given.

    A folder of at least ``target_bytes`` already is what compaction makes and stays as it is;
    the small ones are merged with their small neighbours of the same schema (a schema change,
    e.g. a decoded value column added, starts a new run). A run of one folder gains nothing.
    """
    runs: list[list[Unit]] = []
    current: list[Unit] = []
    for unit in units:
        if unit.bytes >= target_bytes or not unit.files:
            continue
        if current and current[-1].schema != unit.schema:
            runs.append(current)
            current = []
        current.append(unit)
    runs.append(current)
    return [run for run in runs if len(run) > 1]


def settled_through(window: list[tuple[int, Unit]], merged: set[str], target_bytes: int, last: int) -> int:
    """How far the next compaction need not look again: the entry before the first batch of
    ``window`` (entry number, folder; ascending) that a later compaction may still merge.

    Settled are folders merged now or before (``merged``), folders without files or of at
    least ``target_bytes``, and small folders that can never be merged: a small folder of
    another schema follows them, and runs are of neighbours of one schema. A small folder
    left alone for want of a neighbour (a run of one) is not: the next batches may join it.
    :returns: ``last`` when every batch of the window is settled.
    """
    small = [(seq, unit) for seq, unit in window if unit.files and unit.bytes < target_bytes]
    later: set[str] = set()  # schemas of the small folders after the one looked at
    waiting = last
    for seq, unit in reversed(small):
        if unit.folder not in merged and not (later - {unit.schema}):
            waiting = seq - 1
        later.add(unit.schema)
    return waiting
