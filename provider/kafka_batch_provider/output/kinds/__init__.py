"""What makes each output format itself, outside its sink: one small interface (:class:`OutputKind`),
one module per format, and the registry the rest of the package asks (:func:`kind_of`).

The sink (:mod:`kafka_batch_provider.output.sink`) is an output's data and offset log; its kind is
everything else the package needs to know about the format, so that no code outside ``output/``
branches on ``format ==``: how the output is named (a path, or a table in a catalog), what it may do
(merge, partition), how it is opened, whether it exists yet, its asset's URI, where a plan file's
output is, what a plan task's XCom reopens it by, and its upkeep.

These modules import no table library at import time: operators and DAG files ask them at parse time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from kafka_batch_provider.errors import ConfigError

if TYPE_CHECKING:
    from kafka_batch_provider.core.upkeep import UpkeepReport, UpkeepSettings
    from kafka_batch_provider.output.formats import OutputSpec
    from kafka_batch_provider.output.store import BatchStore


class OutputKind(Protocol):
    #: the name users choose it by (``--format``)
    name: str
    #: what it is, in a sentence ("a Delta table")
    what: str
    #: named by a table in a catalog (``--table``), not by a path or URI (``--output``)
    by_table: bool
    #: reads a catalog's properties (a connection's extra)
    uses_catalog: bool
    #: reaches its database by a URL (a secret: ``KAFKA_BATCH_DATABASE_URL``, a file, a connection)
    uses_database: bool
    #: that URL's scheme (``None``: no database)
    url_scheme: str | None
    #: can merge batches into rows (``--mode upsert|changes``), and so keeps deleted keys
    merges: bool
    #: can partition a new table by the Kafka timestamp's date (``--partition-by``)
    partitions: bool

    def open_store(self, spec: OutputSpec, create: bool) -> BatchStore: ...

    def exists(self, spec: OutputSpec) -> bool:
        """Whether there is an output yet to read a log from (before the first plan there may be none)."""
        ...

    def asset_uri(self, output: Mapping[str, Any], catalog: str | None) -> str:
        """The asset URI of the output as :meth:`OutputSpec.describe` shows it (``catalog``: an
        Iceberg catalog's name)."""
        ...

    def output_of_plan(self, plan_path: str) -> str:
        """The ``--output`` holding the plan file ``plan_path``."""
        ...

    def reopened_by(self, spec: OutputSpec, store: BatchStore) -> str | None:
        """What a plan task's XCom names the output by (``output_path``)."""
        ...

    def upkeep(
        self,
        store: BatchStore,
        settings: UpkeepSettings,
        report: UpkeepReport,
        progress: Callable[[str], None],
        in_flight: set[str],
    ) -> None: ...


def kinds() -> dict[str, OutputKind]:
    from kafka_batch_provider.output.kinds.delta import DELTA_KIND
    from kafka_batch_provider.output.kinds.iceberg import ICEBERG_KIND
    from kafka_batch_provider.output.kinds.mysql import MYSQL_KIND
    from kafka_batch_provider.output.kinds.parquet import PARQUET_KIND
    from kafka_batch_provider.output.kinds.postgres import POSTGRES_KIND

    return {kind.name: kind for kind in (PARQUET_KIND, DELTA_KIND, ICEBERG_KIND, POSTGRES_KIND, MYSQL_KIND)}


def kind_of(name: str | None) -> OutputKind:
    """The kind of ``--format`` ``name`` (``None``: the default, parquet)."""
    found = kinds()
    try:
        return found[name or "parquet"]
    except KeyError:
        raise ConfigError(f"unknown output format {name!r}; choose one of {', '.join(found)}") from None


def known_kind(name: str | None) -> OutputKind | None:
    """The kind of ``name``, ``None`` for a name no kind has (:class:`OutputSpec` refuses it in its words)."""
    return kinds().get(name or "parquet")


def named_by_path() -> tuple[str, ...]:
    return tuple(name for name, kind in kinds().items() if not kind.by_table)


def named_by_table() -> tuple[str, ...]:
    return tuple(name for name, kind in kinds().items() if kind.by_table)
