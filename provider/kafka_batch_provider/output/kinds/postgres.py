"""PostgreSQL tables (``--format postgres``): named ``SCHEMA.NAME`` in the database the database URL
names; rows, offset log and the protocol's files all in that database
(:mod:`kafka_batch_provider.output.postgres`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from kafka_batch_provider.errors import ConfigError

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

    def asset_uri(self, location_uri: str | None, table: str | None, catalog: str | None) -> str:
        """``postgres://HOST:PORT/DB/SCHEMA/TABLE``, as Airflow's Postgres provider names a table;
        ``location_uri``: the output's files (``dbfiles://HOST:PORT/DB/SCHEMA.TABLE``)."""
        parts = urlsplit(location_uri or "")
        database, _, _ = parts.path.strip("/").partition("/")
        if not parts.netloc or not database or not table or "." not in table:
            raise ConfigError(f"a PostgreSQL output's asset needs its database and table, got {table!r}")
        schema, name = table.split(".", 1)
        return f"postgres://{parts.netloc}/{quote(database)}/{quote(schema)}/{quote(name)}"

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
