"""Which output an operator writes or reads: one value, :class:`BatchOutput`, given to every
operator of an ingestion, and the one place it becomes an
:class:`~kafka_batch_provider.output.formats.OutputSpec`.

A :class:`BatchOutput` holds what the DAG says (format, path or table, partitioning,
connection ids, non-secret catalog properties), never a secret; it is checked when the DAG is
parsed, and :meth:`BatchOutput.spec` reads the connections when the task runs. The tasks after
the plan take the format and location from the plan's XCom (:meth:`BatchOutput.planned`: a
backfill run's plan names the replay output) and only the connections from their own value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kafka_batch_provider.core.merging import merge_spec
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.kinds import kind_of, known_kind, named_by_table
from kafka_batch_provider.output.sink import PARQUET
from kafka_batch_provider.output.store import BatchStore

REPLAY_SUFFIX = "_replay"


def replay_output_for(output_path: str) -> str:
    """Where replays of an ingest DAG go: beside its dataset, never inside it (it holds those offsets)."""
    return output_path.rstrip("/") + REPLAY_SUFFIX


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def blank_to_none(value: Any) -> str | None:
    """Templates render a missing value as ``""`` (or ``"None"`` without native rendering)."""
    if value is None or str(value).strip() in ("", "None", "null"):
        return None
    return str(value).strip()


@dataclass(frozen=True)
class BatchOutput:
    """Where the batches go, as a DAG names it: no secrets, only connection ids.

    ``BatchOutput(output_format="delta", output_path="s3://lake/orders", storage_conn_id="lake")``
    is passed as ``output=`` to the plan, Spark, commit, lag sensor and health operators (and
    the task group); the format, path, table and partitioning may be Jinja templates.

    :param output_format: ``parquet`` (default), ``delta`` or ``iceberg``.
    :param output_path: the folder (parquet) or the Delta table's location.
    :param table: the Iceberg table, ``NAMESPACE.NAME``.
    :param partition_by: ``"date"`` (delta and iceberg).
    :param storage_conn_id: the output's storage connection (see ``hooks/storage.py``).
    :param catalog_conn_id: the Iceberg catalog's connection (see ``hooks/catalog.py``).
    :param catalog_properties: non-secret catalog properties; override the connection's.
    :param database_conn_id: a database output's connection (``postgres`` or ``mysql``: see ``hooks/database.py``).
    :param mode: ``append``, ``upsert`` or ``changes`` (:mod:`kafka_batch_provider.core.merging`);
        ``None`` follows an existing table.
    :param merge_key: value columns forming the key (a list or ``"a,b"``); default: the Kafka key.
    :param order_by: (upsert) the value column ordering a key's records across partitions.
    :param change_format: (changes) ``debezium``.
    :param on_truncate: (changes) ``refuse`` (default) or ``apply``.
    """

    output_format: str | None = PARQUET
    output_path: str | None = None
    table: str | None = None
    partition_by: str | None = None
    storage_conn_id: str | None = None
    catalog_conn_id: str | None = None
    catalog_properties: Mapping[str, Any] = field(default_factory=dict)
    database_conn_id: str | None = None
    mode: str | None = None
    merge_key: Any = None
    order_by: str | None = None
    change_format: str | None = None
    on_truncate: str | None = None

    @property
    def format(self) -> str:
        return (blank_to_none(self.output_format) or PARQUET).lower()

    @property
    def by_table(self) -> bool:
        """Named by a table (an Iceberg table), not by a path or URI."""
        kind = known_kind(self.format)
        return kind is not None and kind.by_table

    @property
    def uses_catalog(self) -> bool:
        kind = known_kind(self.format)
        return kind is not None and kind.uses_catalog

    @property
    def per_topic(self) -> bool:
        """A table per topic: ``{topic}`` in the path or the table name."""
        from kafka_batch_provider.core.table_names import is_table_template

        return is_table_template(self.output_path) or is_table_template(self.table)

    @property
    def given(self) -> bool:
        """Whether an output is named at all (the lag sensor and health check work without one)."""
        return bool(blank_to_none(self.output_path) or blank_to_none(self.table))

    def check(self) -> None:
        """At DAG parse time: a bad combination is a one-line import error. Values that are
        still templates are checked when the task runs."""
        from kafka_batch_provider.hooks.catalog import check_public_properties

        check_public_properties(self.catalog_properties)
        if any(is_template(getattr(self, name)) for name in OUTPUT_TEMPLATE_FIELDS):
            return
        # The connection is read when the task runs: here it only has to be named.
        scheme = getattr(known_kind(self.format), "url_scheme", None) or "postgresql"
        self._spec(
            storage_options={},
            catalog_from_connection={"(from the connection)": "-"},
            database_url=f"{scheme}://(from-the-connection)/-" if self.database_conn_id else None,
        )

    def spec(self) -> OutputSpec:
        """The output with its secrets: reads the storage and catalog connections (at run time)."""
        from kafka_batch_provider.hooks.catalog import catalog_properties_from_connection
        from kafka_batch_provider.hooks.database import database_url_from_connection
        from kafka_batch_provider.hooks.storage import storage_options_from_connection

        catalog = catalog_properties_from_connection(self.catalog_conn_id) if self.uses_catalog else {}
        database_url = database_url_from_connection(self.database_conn_id)
        return self._spec(storage_options_from_connection(self.storage_conn_id), catalog, database_url)

    def _spec(
        self,
        storage_options: Mapping[str, Any],
        catalog_from_connection: Mapping[str, str],
        database_url: str | None = None,
    ) -> OutputSpec:
        """The :class:`OutputSpec`, which checks the output rules (there alone, for every caller)."""
        from kafka_batch_provider.hooks.catalog import check_public_properties

        catalog = {**(catalog_from_connection if self.catalog_conn_id else {})}
        catalog.update(check_public_properties(self.catalog_properties))
        return OutputSpec(
            format=self.format,
            output=blank_to_none(self.output_path),
            table=blank_to_none(self.table),
            catalog_properties=catalog if self.uses_catalog else {},
            storage_options=dict(storage_options),
            partition_by=blank_to_none(self.partition_by),
            merge=merge_spec(
                blank_to_none(self.mode),
                self.merge_key if not isinstance(self.merge_key, str) else blank_to_none(self.merge_key),
                blank_to_none(self.order_by),
                blank_to_none(self.change_format),
                blank_to_none(self.on_truncate),
            ),
            database_url=database_url,
        )

    def replay(self, replay_output_path: str | None = None, replay_table: str | None = None) -> BatchOutput:
        """Where backfill runs write: ``<output_path>_replay`` or ``<table>_replay`` unless overridden."""
        if self.by_table:
            if blank_to_none(replay_output_path):
                raise ConfigError(f"output_format={self.format!r} replays into replay_table, not replay_output_path")
            table = blank_to_none(replay_table) or (blank_to_none(self.table) or "") + REPLAY_SUFFIX
            return replace(self, table=table)
        if blank_to_none(replay_table):
            by_table = " or ".join(repr(name) for name in named_by_table())
            raise ConfigError(f"replay_table is for output_format={by_table}; {self.format} uses replay_output_path")
        path = blank_to_none(replay_output_path) or replay_output_for(blank_to_none(self.output_path) or "")
        return replace(self, output_path=path)

    def planned(self, summary: Mapping[str, Any]) -> BatchOutput:
        """The output a plan task planned into (its XCom's ``output``), with this value's connections.

        An XCom without ``output`` comes from a plan task of an earlier version: a Parquet folder.
        """
        described = summary.get("output") or {"format": PARQUET, "output": summary["output_path"]}
        return replace(
            self,
            output_format=described["format"],
            output_path=described.get("output"),
            table=described.get("table"),
            partition_by=described.get("partition_by"),
            **merge_fields(described.get("merge")),
        )

    def to_dict(self) -> dict[str, Any]:
        """For a trigger's serialized arguments (connection ids, no secrets)."""
        found = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {**found, "catalog_properties": dict(self.catalog_properties or {})}  # plain JSON


def connections_of(output: BatchOutput | None) -> BatchOutput:
    """The output of a task after the plan: only its connections count (checked when the DAG is parsed)."""
    from kafka_batch_provider.hooks.catalog import check_public_properties

    output = output if output is not None else BatchOutput()
    if not isinstance(output, BatchOutput):
        raise ConfigError(f"output must be a BatchOutput(...), got {type(output).__name__}")
    check_public_properties(output.catalog_properties)
    return output


def merge_fields(described: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plan's merge description as :class:`BatchOutput` fields (none: the table's own mode)."""
    if not described:
        return {}
    return {
        "mode": described.get("mode"),
        "merge_key": list(described.get("merge_key") or []) or None,
        "order_by": described.get("order_by"),
        "change_format": described.get("change_format"),
        "on_truncate": described.get("on_truncate"),
    }


#: The parts of a :class:`BatchOutput` that may be templates (the operators' own attributes too:
#: the merge settings are not, since ``mode`` is a sensor's own attribute).
OUTPUT_TEMPLATE_FIELDS = ("output_format", "output_path", "table", "partition_by")


class TemplatedOutput:
    """An operator's :class:`BatchOutput`, with its templated parts kept as the operator's own
    attributes (``output_format``, ``output_path``, ``table``, ``partition_by``).

    Airflow renders template fields on a shallow copy of the task: a value nested in it would be
    rendered in place, and one shared by the tasks of a group, or by the runs of ``dag.test``,
    would keep its first rendering. Flat attributes are rendered on the copy; :attr:`batch_output`
    puts them back together.
    """

    def keep_output(self, output: BatchOutput | None) -> None:
        self._output = connections_of(output)
        for name in OUTPUT_TEMPLATE_FIELDS:
            setattr(self, name, getattr(self._output, name))

    @property
    def batch_output(self) -> BatchOutput:
        """The output, as rendered (inside a running task) or as given (when the DAG is parsed)."""
        return replace(self._output, **{name: getattr(self, name) for name in OUTPUT_TEMPLATE_FIELDS})


def open_output(args: BatchOutput, create: bool) -> tuple[OutputSpec, BatchStore]:
    """The spec and its store; ``create`` only for the plan tasks (they may create an Iceberg table)."""
    spec = args.spec()
    return spec, open_store(spec, create=create)


def open_existing_output(args: BatchOutput) -> BatchStore | None:
    """The store for the lag sensor and health check, ``None`` when no output is named, it names a
    table per topic (each table has its own log: the group alone tells the lag), or its Iceberg
    table does not exist yet (before the first plan: the group alone tells the lag)."""
    if not args.given:
        return None
    spec = args.spec()
    if spec.per_topic:
        return None
    if not kind_of(spec.format).exists(spec):
        return None
    return open_store(spec, create=False)
