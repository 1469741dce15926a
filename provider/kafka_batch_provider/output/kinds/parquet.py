"""The Parquet layout (``--format parquet``, the default): a folder, named by its path or URI, that
holds its data, offset log, plans and commit records (:mod:`kafka_batch_provider.output.parquet_layout`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_batch_provider.output.sink import PARQUET

if TYPE_CHECKING:
    from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class ParquetKind:
    name = PARQUET
    what = "the Parquet layout"
    by_table = False
    uses_database = False
    url_scheme = None
    uses_catalog = False
    merges = False  # (it only appends)
    partitions = False  # (by batch, not by date)

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore:
        from kafka_batch_provider.output.store import BatchStore

        return BatchStore(spec.output, dict(spec.storage_options))  # the folder itself: nothing to open first

    def exists(self, spec: OutputSpec) -> bool:
        return True  # (an empty folder is an output without batches)

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        from kafka_batch_provider.core.assets import location_asset_uri
        from kafka_batch_provider.output.location import Location

        return location_asset_uri(self.name, Location(str(output["output"])).uri if output.get("output") else None)

    def output_of_plan(self, plan_path: str) -> str:
        from kafka_batch_provider.output.store import output_of_plan_file

        return output_of_plan_file(plan_path)

    def reopened_by(self, spec: OutputSpec, store: BatchStore) -> str | None:
        return store.location.output

    def upkeep(
        self,
        store: BatchStore,
        settings: UpkeepSettings,
        report: UpkeepReport,
        progress: Callable[[str], None],
        in_flight: set[str],
    ) -> None:
        from kafka_batch_provider.output.parquet_upkeep import upkeep_parquet_layout

        upkeep_parquet_layout(store, settings, report, progress, in_flight)


PARQUET_KIND = ParquetKind()
