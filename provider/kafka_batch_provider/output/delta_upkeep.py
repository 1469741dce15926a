"""Delta upkeep with delta-rs: ``optimize`` (compaction to a target file size), a checkpoint
and log cleanup, then ``vacuum``.

What the offsets need survives each of them: ``optimize`` is a commit that is not a batch (a
batch committing meanwhile is committed again from the new version, see ``delta.py``); a
checkpoint keeps every ``txn`` action, so log cleanup (``delta.logRetentionDuration``, 30
days by default) forgets only commits whose batches stay known from their saved manifests;
``vacuum`` leaves ``_kafka_batch/`` alone (delta-rs skips ``_`` folders) and removes only files
older than the retention: those compaction replaced, and (``full``) those of failed attempts
that no commit ever named.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.errors import StorageError
from kafka_batch_provider.output.delta import DeltaSink
from kafka_batch_provider.output.tables import of_batches, one_line


def data_files(table: Any) -> list[dict[str, Any]]:
    """The current version's files: ``path``, ``size_bytes`` and partition values."""
    import pyarrow as pa

    return pa.table(table.get_add_actions(flatten=True)).to_pylist()  # delta-rs answers in arro3


def small_file_groups(files: list[dict[str, Any]], target_bytes: int) -> int:
    """How many files compaction would rewrite: those under the target, where a partition has two or more."""
    by_partition = Counter(
        tuple(sorted((k, v) for k, v in f.items() if k.startswith("partition.")))
        for f in files
        if int(f["size_bytes"]) < target_bytes
    )
    return sum(n for n in by_partition.values() if n > 1)


def upkeep_delta(
    sink: DeltaSink, settings: UpkeepSettings, report: UpkeepReport, progress: Any, in_flight: set[str]
) -> None:
    """:param in_flight: batch ids planned but not in the log yet: their files stay, whatever their age."""
    from deltalake.exceptions import DeltaError

    table = sink.table()
    if table is None:
        report.notes.append("the table does not exist yet: nothing to keep up")
        return
    hours = math.ceil(settings.retention_hours)
    try:
        before = data_files(table)
        report.files_before = len(before)
        if settings.dry_run:
            report.compacted_files = small_file_groups(before, settings.target_bytes)
            report.removed_files = len(removable(sink, table, hours, in_flight))
            report.files_after = report.files_before
            report.notes.append("a dry run counts the small files compaction would take, not the files it would write")
            return
        progress(f"{sink.label}: compacting {report.files_before} file(s) to {settings.target_file_mb} MB")
        metrics = table.optimize.compact(target_size=settings.target_bytes)
        report.compacted_files = int(metrics.get("numFilesRemoved", 0))
        report.written_files = int(metrics.get("numFilesAdded", 0))
        table = sink.table()
        table.create_checkpoint()
        table.cleanup_metadata()  # log files older than delta.logRetentionDuration, before the checkpoint
        old = removable(sink, table, hours, in_flight)
        sink.data.delete(old)
        report.removed_files = len(old)
        report.files_after = len(data_files(sink.table()))
    except DeltaError as exc:
        raise StorageError(f"upkeep of {sink.label} failed: {one_line(exc)}") from None


def removable(sink: DeltaSink, table: Any, hours: int, in_flight: set[str]) -> list[str]:
    """What ``vacuum`` would remove (relative to the table), but the files of batches in flight.

    ``full``: files no commit ever named (failed attempts) go too, once older than the
    retention; the retention is checked by UpkeepSettings (at least an hour), not delta-rs's
    7-day floor. delta-rs only lists them (``dry_run``), so in-flight files can be kept back.
    """
    found = table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False, full=True)
    prefixes = (sink.data.uri.rstrip("/") + "/", sink.data.root.rstrip("/") + "/")
    names = []
    for path in map(str, found):
        for prefix in prefixes:
            path = path.removeprefix(prefix)
        if not of_batches(path, in_flight):
            names.append(path)
    return names
