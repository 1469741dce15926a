"""Which output a run writes to, its rules, and opening it: ``--format``, ``--output``, ``--table``.

One value (:class:`OutputSpec`) carries the choice from the command line or an operator to
:func:`open_store`, and is the one place that checks it (worded for the caller:
``core/settings.py``); :func:`open_store` returns the :class:`~kafka_batch_provider.output.store.BatchStore`
the protocol works with:

* ``parquet`` (default): ``--output`` is a folder; data, log, plans and commit records in it;
* ``delta``: ``--output`` is the Delta table's location; plans and commit records in its
  ``_kafka_batch/`` folder;
* ``iceberg``: ``--table NAMESPACE.NAME`` in the catalog the ``catalog_properties`` describe
  (pyiceberg's properties: ``type``, ``uri``, ``warehouse``, ``s3.*``, ...); the table is
  created on first use; plans and commit records in ``_kafka_batch/`` of its location.

Partitioning: ``partition_by="date"`` partitions a *new* table by the UTC date of the Kafka
timestamp. An existing table keeps its own partitioning, whatever the run says
(``partition_by=None`` follows it; a different explicit choice is refused), so steps that
do not write files (commit, lag, ``kafka-batch table``) need not repeat it.

Storage options and catalog properties hold secrets: they are never part of a repr, a log
line or a file this package writes.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.core.settings import Advice, Setting
from kafka_batch_provider.core.table_names import check_template, is_table_template, table_names
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.databases import database_of
from kafka_batch_provider.output.kinds import kind_of, kinds, known_kind, named_by_table
from kafka_batch_provider.output.sink import PARQUET
from kafka_batch_provider.output.store import BatchStore

PARTITION_BY = ("date",)

FORMAT, OUTPUT, TABLE = Setting("output_format"), Setting("output_path"), Setting("table")
PARTITION, CATALOG = Setting("partition_by"), Setting("catalog_conn_id")
DATABASE = Setting("database_conn_id")
DATABASE_ADVICE = Advice(
    keywords="database_conn_id, a postgres or mysql connection",
    flags="$KAFKA_BATCH_DATABASE_URL or --database-url-file (postgresql:// or mysql://USER:PASSWORD@HOST:PORT/DB)",
)
CATALOG_ADVICE = Advice(
    keywords="catalog_conn_id, a connection whose extra holds the pyiceberg catalog properties "
    "(type, uri, warehouse, ...)",
    flags="--catalog-property type=sql --catalog-property uri=sqlite:///... or --catalog-properties-file",
)


@dataclass(frozen=True)
class OutputSpec:
    """:param format: ``parquet``, ``delta`` or ``iceberg``.
    :param output: the folder (parquet) or the table's location (delta).
    :param table: ``NAMESPACE.NAME`` (iceberg).
    :param catalog_properties: pyiceberg catalog properties (iceberg).
    :param storage_options: fsspec options of the output's filesystem.
    :param partition_by: ``"date"`` (delta and iceberg).
    :param merge: how batches become rows (:mod:`kafka_batch_provider.core.merging`): ``None``
        follows an existing table (append for a new one).
    """

    format: str = PARQUET
    output: str | None = None
    table: str | None = None
    catalog_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    partition_by: str | None = None
    merge: MergeSpec | None = None
    #: a database output's connection URL, password included (a secret: never shown)
    database_url: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """The output rules, for the command line and the operators alike (worded for each)."""
        chosen = Setting("output_format", self.format)
        kind = known_kind(self.format)
        if kind is None:
            raise ConfigError(f"unknown {FORMAT} {self.format!r}; choose one of {', '.join(kinds())}", setting=FORMAT)
        if kind.by_table:
            if not self.table or "." not in self.table.strip("."):
                raise ConfigError(
                    f"{chosen} needs {Setting('table', 'NAMESPACE.NAME')}, got {self.table!r}", setting=TABLE
                )
            if self.output:
                raise ConfigError(f"{chosen} takes {TABLE}, not {OUTPUT} (a table is found by its name)", setting=TABLE)
            if kind.uses_catalog and not self.catalog_properties:
                raise ConfigError(f"{chosen} needs the catalog's properties: {CATALOG_ADVICE}", setting=CATALOG)
            if kind.uses_database and not self.database_url:
                raise ConfigError(f"{chosen} needs the database's URL: {DATABASE_ADVICE}", setting=DATABASE)
            if kind.uses_database:
                database = database_of(str(self.database_url))  # (one line, never quoting the URL)
                database.url_parts(str(self.database_url))
                if database.schemes[0] != kind.url_scheme:
                    raise ConfigError(
                        f"{chosen} writes to a {kind.url_scheme}:// database; the database URL is "
                        f"{database.schemes[0]}:// ({database.label})",
                        setting=DATABASE,
                    )
        else:
            if self.table:
                raise ConfigError(
                    f"{TABLE} is for {formats(named_by_table())}; {chosen} takes {OUTPUT}", setting=OUTPUT
                )
            if not self.output:
                raise ConfigError(f"{chosen} needs {OUTPUT} (a path or a URI)", setting=OUTPUT)
        if self.partition_by not in (None, *PARTITION_BY):
            raise ConfigError(
                f"unknown {PARTITION} {self.partition_by!r}; choose {', '.join(PARTITION_BY)}", setting=PARTITION
            )
        if self.partition_by and not kind.partitions:
            raise ConfigError(
                f"{PARTITION} applies to {formats(n for n, k in kinds().items() if k.partitions)} "
                f"({kind.what} does not partition by date)",
                setting=PARTITION,
            )

        if self.merge is not None and self.merge.merges:
            if not kind.merges:
                raise ConfigError(
                    f"{Setting('mode', self.merge.mode)} needs a table: "
                    f"{formats(n for n, k in kinds().items() if k.merges)} ({kind.what} only appends)",
                    setting=FORMAT,
                )
            if self.partition_by:
                raise ConfigError(
                    f"{PARTITION} partitions by the Kafka timestamp, which a merged table's rows do not keep; "
                    f"leave it unset with {Setting('mode', self.merge.mode)}",
                    setting=PARTITION,
                )

        if self.per_topic:
            check_template(self.table or self.output or "", TABLE if self.table else OUTPUT)

    @property
    def per_topic(self) -> bool:
        """The output names a table per topic (``{topic}`` in the path or the table name)."""
        return is_table_template(self.table) or is_table_template(self.output)

    def for_topics(self, topics: Sequence[str]) -> dict[str, OutputSpec]:
        """Each topic's own output, named by the template (:mod:`kafka_batch_provider.core.table_names`)."""
        if not self.per_topic:
            raise ConfigError(f"{OUTPUT} {self.output or self.table!r} names one output, not one per topic")
        if self.table:
            names = table_names(self.table, topics, iceberg=True, setting=TABLE)
            return {topic: replace(self, table=name) for topic, name in names.items()}
        names = table_names(str(self.output), topics, iceberg=False, setting=OUTPUT)
        return {topic: replace(self, output=name) for topic, name in names.items()}

    def describe(self) -> dict[str, Any]:
        """What may be shown (XCom, plans, logs): no storage options or catalog properties."""
        described = {
            "format": self.format,
            "output": self.output,
            "table": self.table,
            "partition_by": self.partition_by,
        }
        if self.merge is not None:
            described["merge"] = self.merge.describe()
        if self.database_url:
            described["database"] = database_without_credentials(self.database_url)
        return described


def database_without_credentials(url: str) -> str:
    """``SCHEME://HOST:PORT/DB`` of a database URL: no user, password or parameters."""
    kind = database_of(url)
    host, port, database = kind.url_parts(url)
    return f"{kind.schemes[0]}://{host}:{port}/{database}"


def formats(names: Iterable[str]) -> str:
    """``--format delta or --format iceberg`` (in the caller's words)."""
    return " or ".join(str(Setting("output_format", name)) for name in names)


def open_store(spec: OutputSpec, create: bool = True) -> BatchStore:
    """The store of the output ``spec`` names (a per-topic template: each topic's, :meth:`OutputSpec.for_topics`).

    :param create: create a missing Iceberg table (with the Kafka schema); readers pass ``False``.
    :raises ConfigError: when an existing table is partitioned otherwise than ``spec.partition_by`` asks.
    """
    if spec.per_topic:
        raise ConfigError(f"{spec.output or spec.table!r} names a table per topic: open each topic's output")
    return kind_of(spec.format).open_store(spec, create)


def add_partition_by_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--partition-by",
        choices=PARTITION_BY,
        help="partition a new table by the UTC date of the Kafka timestamp (delta and iceberg; "
        "an existing table keeps its partitioning)",
    )


def add_merge_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--mode`` and its companions (:mod:`kafka_batch_provider.core.merging`)."""
    from kafka_batch_provider.core.merging import CHANGE_FORMATS, MODES, ON_TRUNCATE

    parser.add_argument(
        "--mode",
        choices=MODES,
        help="append (every record a row; the default of a new table), upsert (the newest record per key wins, "
        "a null value deletes) or changes (apply change events, --change-format); delta and iceberg tables; "
        "an existing table keeps its mode",
    )
    parser.add_argument(
        "--merge-key",
        help="upsert/changes: value columns forming the key, comma-separated (default: the Kafka key's fields)",
    )
    parser.add_argument(
        "--order-by",
        help="upsert: a timestamp value column ordering a key's records across partitions, tombstones by their "
        "Kafka timestamp (default: the Kafka offset)",
    )
    parser.add_argument("--change-format", choices=CHANGE_FORMATS, help="changes: the events' format")
    parser.add_argument(
        "--on-truncate",
        choices=ON_TRUNCATE,
        help="changes: a truncate event fails the batch (refuse, the default) or empties the table (apply)",
    )


def merge_of_args(args: argparse.Namespace) -> MergeSpec | None:
    from kafka_batch_provider.core.merging import merge_spec

    return merge_spec(
        getattr(args, "mode", None),
        getattr(args, "merge_key", None),
        getattr(args, "order_by", None),
        getattr(args, "change_format", None),
        getattr(args, "on_truncate", None),
    )


def merge_argv(merge: MergeSpec | None) -> list[str]:
    """The flags saying ``merge`` (none for ``None``: the table's own mode)."""
    if merge is None:
        return []
    argv = ["--mode", merge.mode]
    if merge.merge_key:
        argv += ["--merge-key", ",".join(merge.merge_key)]
    if merge.order_by:
        argv += ["--order-by", merge.order_by]
    if merge.change_format:
        argv += ["--change-format", merge.change_format]
    if merge.merges:
        argv += ["--on-truncate", merge.on_truncate]
    return argv


def output_of_plan(output_format: str, plan_path: str) -> str:
    """The ``--output`` holding the plan file ``plan_path`` (a Delta table's: above ``_kafka_batch/``)."""
    return kind_of(output_format).output_of_plan(plan_path)
