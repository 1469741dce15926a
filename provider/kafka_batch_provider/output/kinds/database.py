"""What the database outputs' kinds share (:mod:`~kafka_batch_provider.output.kinds.postgres`,
:mod:`~kafka_batch_provider.output.kinds.mysql`): named by a table, reached by a URL, merging, no
partitions; their upkeep removes the staged files of attempts that never committed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class DatabaseKind:
    by_table = True
    uses_catalog = False
    uses_database = True
    merges = True
    partitions = False

    def exists(self, spec: OutputSpec) -> bool:
        return True  # (a database without the log table yet is an output without batches)

    def output_of_plan(self, plan_path: str) -> str:
        return ""  # (the table, not a path, names the output: --table says which)

    def reopened_by(self, spec: OutputSpec, store: BatchStore) -> str | None:
        return None

    def upkeep(
        self,
        store: BatchStore,
        settings: UpkeepSettings,
        report: UpkeepReport,
        progress: Callable[[str], None],
        in_flight: set[str],
    ) -> None:
        """Staged files of attempts that never committed, older than the retention, are removed."""
        import time

        staged = store.data.files_below("data")
        cutoff = time.time() - settings.retention_seconds
        old = {name.split("/")[0] for name, (_, modified) in staged.items() if modified < cutoff}
        leftovers = sorted(batch for batch in old if batch not in in_flight)
        report.removed_files += sum(1 for name in staged if name.split("/")[0] in leftovers)
        if leftovers and not settings.dry_run:
            progress(f"removing the staged files of {len(leftovers)} batch(es) that never committed")
            for batch in leftovers:
                store.data.delete_tree(f"data/{batch}")
