"""Upkeep of the Parquet layout: its compaction of small batch folders and its leftover staging
folders (the upkeep step, :mod:`kafka_batch_provider.steps.upkeep`, runs it for this format)."""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.output.store import BatchStore


def upkeep_parquet_layout(
    store: BatchStore,
    settings: UpkeepSettings,
    report: UpkeepReport,
    progress: Callable[[str], None],
    in_flight: set[str],
) -> None:
    """Finish a compaction a crash cut short, remove failed attempts' staging folders older than
    the retention, then rewrite runs of small batch folders into files near the target size
    (:mod:`kafka_batch_provider.output.parquet_compaction`)."""
    layout = store.sink
    compactions = layout.compactions  # type: ignore[attr-defined]
    if not settings.dry_run:
        report.removed_files += compactions.finish(progress)
    report.files_before = report.files_after = layout.data_file_count()  # type: ignore[attr-defined]
    # A compaction's staged files are its record's until published, whatever their age.
    recorded = {record["batch_id"] for record in compactions.records()}
    leftovers = layout.old_staging(time.time() - settings.retention_seconds, in_flight | recorded)  # type: ignore[attr-defined]
    report.removed_files += sum(leftovers.values())
    if leftovers and not settings.dry_run:
        progress(f"removing {len(leftovers)} staging folder(s) of failed attempts ({sum(leftovers.values())} files)")
        for folder in leftovers:
            store.data.delete_tree(folder)
    compactions.compact(settings, report, progress)
    if not settings.dry_run:
        report.files_after = layout.data_file_count()  # type: ignore[attr-defined]
