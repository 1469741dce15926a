"""Iceberg tables (``--format iceberg``): named ``NAMESPACE.NAME`` in the catalog its properties
describe; plans and commit records in ``_kafka_batch/`` of the table's location
(:mod:`kafka_batch_provider.output.iceberg`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_batch_provider.errors import StorageError
from kafka_batch_provider.output.sink import ICEBERG

if TYPE_CHECKING:
    from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class IcebergKind:
    name = ICEBERG
    what = "an Iceberg table"
    by_table = True
    uses_database = False
    url_scheme = None
    uses_catalog = True
    merges = True
    partitions = True

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore:
        from kafka_batch_provider.output.iceberg import open_iceberg_store

        return open_iceberg_store(spec, create)

    def exists(self, spec: OutputSpec) -> bool:
        """Whether the catalog has the table (created by the first plan)."""
        from kafka_batch_provider.output.iceberg import load_catalog

        try:
            return bool(load_catalog(spec.catalog_properties).table_exists(str(spec.table)))
        except (OSError, ValueError) as exc:
            raise StorageError(f"Iceberg catalog of {spec.table}: {exc}") from None

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        from kafka_batch_provider.core.assets import iceberg_asset_uri

        return iceberg_asset_uri(output.get("table"), catalog)

    def output_of_plan(self, plan_path: str) -> str:
        return ""  # (the table, not a path, names the output: --table says which)

    def reopened_by(self, spec: OutputSpec, store: BatchStore) -> str | None:
        return spec.output

    def upkeep(
        self,
        store: BatchStore,
        settings: UpkeepSettings,
        report: UpkeepReport,
        progress: Callable[[str], None],
        in_flight: set[str],
    ) -> None:
        from kafka_batch_provider.output.iceberg_upkeep import upkeep_iceberg

        upkeep_iceberg(store.sink, settings, report, progress, in_flight)  # type: ignore[arg-type]


ICEBERG_KIND = IcebergKind()
