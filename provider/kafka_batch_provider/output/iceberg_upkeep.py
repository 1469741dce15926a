"""Iceberg upkeep with pyiceberg: snapshot expiry, then removal of orphan files.

Expiry keeps the current snapshot and every snapshot younger than the retention. The batches
of expired snapshots stay known (their saved manifests, the table's ``kafka_batch.*``
properties: see ``iceberg.py``), so expiry never loses an offset. Orphan files are data files
under the table's ``data/`` folder that no remaining snapshot names and that are older than
the retention: files of failed attempts, and files only expired snapshots named; orphan
metadata files are the manifest lists, manifests and metadata.json files nothing current names
(pyiceberg's expiry leaves them). Tables keep only their newest 100 metadata.json files
(``write.metadata.delete-after-commit.enabled``; set on tables created earlier by upkeep).

pyiceberg 0.12 has no data-file compaction (Spark's ``rewrite_data_files``): files stay as the
batches wrote them; the report says so.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.errors import KafkaBatchError, StorageError
from kafka_batch_provider.output.iceberg import METADATA_UPKEEP, IcebergSink, without_retries
from kafka_batch_provider.output.tables import DATA, of_batches, one_line

METADATA = "metadata"
NO_COMPACTION = "pyiceberg 0.12 cannot compact data files (no rewrite_data_files): files stay as the batches wrote them"


def upkeep_iceberg(
    sink: IcebergSink, settings: UpkeepSettings, report: UpkeepReport, progress: Any, in_flight: set[str]
) -> None:
    """:param in_flight: batch ids planned but not in the log yet: their files stay, whatever their age."""
    try:
        _upkeep(sink, settings, report, progress, in_flight)
    except KafkaBatchError:
        raise
    except Exception as exc:  # noqa: BLE001 - catalogs raise their own (SQLAlchemy, HTTP, OS) errors
        raise StorageError(f"upkeep of {sink.name} failed: {one_line(exc)}") from None


def _upkeep(
    sink: IcebergSink, settings: UpkeepSettings, report: UpkeepReport, progress: Any, in_flight: set[str]
) -> None:
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
    if not settings.dry_run and any(table.properties.get(k) != v for k, v in METADATA_UPKEEP.items()):
        with without_retries(table).transaction() as transaction:  # tables created before this setting
            transaction.set_properties(METADATA_UPKEEP)
        table = sink.table()
    orphans = [name for name in orphan_files(sink, table, cutoff, report) if not of_batches(name, in_flight)]
    orphans += orphan_metadata(sink, table, cutoff)
    report.removed_files = len(orphans)
    if orphans and not settings.dry_run:
        progress(f"{sink.name}: removing {len(orphans)} orphan file(s)")
        sink.data.delete(orphans)


def orphan_files(sink: IcebergSink, table: Any, cutoff: float, report: UpkeepReport) -> list[str]:
    """Data files no snapshot names, older than ``cutoff``.

    When a snapshot names a file outside the table's location as the catalog spells it
    (another scheme such as ``s3a://``, a file another engine wrote elsewhere), names cannot be
    compared safely: nothing is removed, and the report says why (Iceberg's own orphan
    removal refuses the same way).
    """
    named = set(table.inspect.all_files().column("file_path").to_pylist()) if table.snapshots() else set()
    orphans = unnamed_files(sink, DATA, named, cutoff)
    if orphans is None:
        foreign = sorted(path for path in named if not path.startswith(f"{sink.table_location}/"))
        report.notes.append(
            f"orphan files not removed: {len(foreign)} file(s) the table names lie outside {sink.table_location}/ "
            f"(e.g. {foreign[0]}), so its files cannot be told from orphans safely"
        )
    return orphans or []


def orphan_metadata(sink: IcebergSink, table: Any, cutoff: float) -> list[str]:
    """Metadata files (``metadata/*.metadata.json``, manifest lists and manifests, ``*.avro``)
    that neither the current metadata nor any remaining snapshot names, older than ``cutoff``:
    pyiceberg's expiry drops snapshots from the metadata but leaves their files behind."""
    named = {table.metadata_location, *(entry.metadata_file for entry in table.metadata.metadata_log)}
    named |= {snapshot.manifest_list for snapshot in table.snapshots()}
    if table.snapshots():
        named |= set(table.inspect.all_manifests().column("path").to_pylist())
    orphans = unnamed_files(sink, METADATA, named, cutoff) or []
    return [name for name in orphans if name.endswith(".avro") or name.endswith(".metadata.json")]


def unnamed_files(sink: IcebergSink, folder: str, named: set[str], cutoff: float) -> list[str] | None:
    """Files below ``folder`` of the table (names relative to it) that are older than ``cutoff``
    and not in ``named`` (full paths as the table spells them); ``None`` when a named path lies
    outside the table's location: the two cannot be compared safely."""
    prefix = f"{sink.table_location}/"
    if any(not path.startswith(prefix) for path in named):
        return None
    relative = {path.removeprefix(prefix) for path in named}
    found = sink.data.files_below(folder)
    return sorted(
        f"{folder}/{name}"
        for name, (_, modified) in found.items()
        if modified < cutoff and f"{folder}/{name}" not in relative
    )
