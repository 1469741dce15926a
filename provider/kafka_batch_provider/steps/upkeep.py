"""The upkeep step: keep an output fit for a year of batches, never touching what the offsets need.

Per format (``output/*_upkeep.py``, run by the output's kind, ``output/kinds/``): Delta
``optimize`` + checkpoint + log cleanup + ``vacuum``; Iceberg snapshot expiry + orphan data files;
the Parquet layout's compaction of small batch folders and its leftover staging folders.
For every format the plans and Kafka commit records of all but the newest batches are pruned.
The newest batch is published first (a publish cut short is rolled forward, as the plan step
does), so nothing upkeep removes is still on its way into the output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
from kafka_batch_provider.output.kinds import kind_of
from kafka_batch_provider.output.store import BatchStore

log = logging.getLogger(__name__)


def upkeep(store: BatchStore, settings: UpkeepSettings, progress: Callable[[str], None] = log.info) -> UpkeepReport:
    """Compact and clean ``store``'s output; a dry run only counts.

    :returns: what was done, in numbers (:meth:`UpkeepReport.summary` is its one line).
    """
    report = UpkeepReport(store.format, store.root, settings.dry_run)
    tail = store.log.tail()
    if tail is not None and not settings.dry_run:
        store.publish(tail)
    # Batches planned but not (yet) in the log: a long write may have files older than the
    # retention, so their files are never removed, whatever their age.
    in_flight = {p.batch_id for p in store.plans_after(tail["seq"] if tail else 0)}
    kind = kind_of(store.format)
    kind.upkeep(store, settings, report, progress, in_flight)
    if kind.merges and not settings.dry_run:
        expire_deleted_keys(store, settings, report)
    report.pruned_plans, report.pruned_commit_records = store.prune_control(settings.keep_batches, settings.dry_run)
    progress(report.summary())
    return report


def expire_deleted_keys(store: BatchStore, settings: UpkeepSettings, report: UpkeepReport) -> None:
    """A merged table's deleted keys older than their retention are forgotten, the rest folded into one file."""
    import time

    from kafka_batch_provider.output.deleted_keys import DeletedKeys

    days = settings.deleted_keys_retention_days
    files, forgotten, kept = DeletedKeys(store.data, store.log).upkeep(time.time() - days * 86400)
    if files:
        report.notes.append(
            f"deleted keys: {forgotten} older than {days:g} days forgotten, {files} file(s) folded into one "
            f"of {kept} key(s)"
        )
