"""PostgreSQL tables (``--format postgres``): named ``SCHEMA.NAME`` in the database the database URL
names; rows, offset log and the protocol's files all in that database
(:mod:`kafka_batch_provider.output.postgres`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class PostgresKind:
    name = "postgres"
    what = "a PostgreSQL table"
    by_table = True
    uses_catalog = False
    uses_database = True
    merges = True
    partitions = False

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore:
        from kafka_batch_provider.output.postgres import open_postgres_store

        return open_postgres_store(spec)

    def exists(self, spec: OutputSpec) -> bool:
        return True  # (a schema without the log table yet is an output without batches)

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        """``postgres://HOST:PORT/DB/SCHEMA/TABLE``, as Airflow's Postgres provider names a table."""
        from kafka_batch_provider.core.assets import postgres_asset_uri

        return postgres_asset_uri(output.get("database"), output.get("table"))

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


POSTGRES_KIND = PostgresKind()
