"""Delta tables (``--format delta``): named by the table's location; plans and commit records in its
``_kafka_batch/`` folder (:mod:`kafka_batch_provider.output.delta`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.sink import DELTA

if TYPE_CHECKING:
    from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class DeltaKind:
    name = DELTA
    what = "a Delta table"
    by_table = False
    uses_database = False
    url_scheme = None
    uses_catalog = False
    merges = True
    partitions = True

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore:
        from kafka_batch_provider.output.delta import open_delta_store

        return open_delta_store(spec)  # (created by its first batch's commit)

    def exists(self, spec: OutputSpec) -> bool:
        return True  # (a location without a table yet is a table without batches)

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        from kafka_batch_provider.core.assets import location_asset_uri
        from kafka_batch_provider.output.location import Location

        return location_asset_uri(self.name, Location(str(output["output"])).uri if output.get("output") else None)

    def output_of_plan(self, plan_path: str) -> str:
        """The table above ``<table>/_kafka_batch/_plans/<plan>``."""
        from kafka_batch_provider.output.store import output_of_plan_file
        from kafka_batch_provider.output.tables import CONTROL

        parent, _, folder = output_of_plan_file(plan_path).rstrip("/").rpartition("/")
        if folder != CONTROL or not parent:
            raise ConfigError(f"{plan_path} is not a plan of a Delta table (<table>/{CONTROL}/_plans/...)")
        return parent

    def reopened_by(self, spec: OutputSpec, store: BatchStore) -> str | None:
        return spec.output  # (store.location is its _kafka_batch/ control folder)

    def upkeep(
        self,
        store: BatchStore,
        settings: UpkeepSettings,
        report: UpkeepReport,
        progress: Callable[[str], None],
        in_flight: set[str],
    ) -> None:
        from kafka_batch_provider.output.delta_upkeep import upkeep_delta

        upkeep_delta(store.sink, settings, report, progress, in_flight)  # type: ignore[arg-type]


DELTA_KIND = DeltaKind()
