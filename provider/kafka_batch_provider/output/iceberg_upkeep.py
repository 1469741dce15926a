"""Iceberg upkeep with pyiceberg: snapshot expiry, then removal of orphan data files.

Expiry keeps the current snapshot and every snapshot younger than the retention. The batches
of expired snapshots stay known (their saved manifests, the table's ``kafka_batch.*``
properties: see ``iceberg.py``), so expiry never loses an offset. Orphan files are data files
under the table's ``data/`` folder that no remaining snapshot names and that are older than
the retention: files of failed attempts, and files only expired snapshots named.

pyiceberg 0.12 has no data-file compaction (Spark's ``rewrite_data_files``): files stay as the
batches wrote them; the report says so.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.errors import KafkaBatchError, StorageError
from kafka_batch_provider.output.iceberg import IcebergSink, without_retries
from kafka_batch_provider.output.tables import DATA, one_line

NO_COMPACTION = "pyiceberg 0.12 cannot compact data files (no rewrite_data_files): files stay as the batches wrote them"


def upkeep_iceberg(sink: IcebergSink, settings: UpkeepSettings, report: UpkeepReport, progress: Any) -> None:
    try:
        _upkeep(sink, settings, report, progress)
    except KafkaBatchError:
        raise
    except Exception as exc:  # noqa: BLE001 - catalogs raise their own (SQLAlchemy, HTTP, OS) errors
        raise StorageError(f"upkeep of {sink.name} failed: {one_line(exc)}") from None


def _upkeep(sink: IcebergSink, settings: UpkeepSettings, report: UpkeepReport, progress: Any) -> None:
    report.notes.append(NO_COMPACTION)
    table = sink.table()
    report.files_before = report.files_after = len(table.inspect.files())
    cutoff = time.time() - settings.retention_seconds
    current = table.current_snapshot()
    expiring = [
        s.snapshot_id
        for s in table.snapshots()
        if s.timestamp_ms / 1000 < cutoff and (current is None or s.snapshot_id != current.snapshot_id)
    ]
    if settings.dry_run:
        report.expired_snapshots = len(expiring)
    elif expiring:
        progress(f"{sink.name}: expiring {len(expiring)} snapshot(s) older than {settings.retention_hours:g} h")
        before = len(table.snapshots())
        older_than = datetime.fromtimestamp(cutoff, tz=timezone.utc)
        without_retries(table).maintenance.expire_snapshots().older_than(older_than).commit()
        table = sink.table()
        report.expired_snapshots = before - len(table.snapshots())
    orphans = orphan_files(sink, table, cutoff)
    report.removed_files = len(orphans)
    if orphans and not settings.dry_run:
        progress(f"{sink.name}: removing {len(orphans)} orphan data file(s)")
        sink.data.delete(orphans)


def orphan_files(sink: IcebergSink, table: Any, cutoff: float) -> list[str]:
    """Names (relative to the table's location) of data files no snapshot names, older than ``cutoff``."""
    named = set(table.inspect.all_files().column("file_path").to_pylist()) if table.snapshots() else set()
    prefix = f"{sink.table_location}/"
    named = {path.removeprefix(prefix) for path in named}
    found = sink.data.files_below(DATA)
    return sorted(
        f"{DATA}/{name}" for name, (_, modified) in found.items() if modified < cutoff and f"{DATA}/{name}" not in named
    )
