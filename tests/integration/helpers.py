"""Helpers for integration tests: outputs (local or S3), the protocol in-process, what readers see."""

from __future__ import annotations

import functools
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from pyarrow.fs import FSSpecHandler, PyFileSystem

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import LogConflictError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import PlanOutcome, plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import wait_until_stable


@dataclass
class Output:
    """An output for a test: a local directory or a prefix on the S3 server."""

    uri: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def store(self) -> BatchStore:
        return BatchStore(self.uri, self.storage_options)

    @property
    def location(self) -> Location:
        return Location(self.uri, self.storage_options)


@dataclass
class TableOutput(Output):
    """A Delta table (``uri`` is its location) or an Iceberg table (``table`` in ``catalog``)."""

    format: str = "delta"
    table: str | None = None
    catalog: dict[str, str] = field(default_factory=dict)
    partition_by: str | None = None
    merge: MergeSpec | None = None
    #: (postgres, mysql) the database's URL; ``table`` is SCHEMA.NAME (DB.NAME)
    database_url: str | None = None

    def spec(self) -> OutputSpec:
        return OutputSpec(
            format=self.format,
            output=None if self.format in ("iceberg", "postgres", "mysql") else self.uri,
            database_url=self.database_url,
            table=self.table,
            catalog_properties=self.catalog,
            storage_options=self.storage_options,
            partition_by=self.partition_by,
            merge=self.merge,
        )

    def store(self) -> BatchStore:
        return open_store(self.spec())

    def cli_args(self) -> list[str]:
        """The command line's output flags for a table on a local disk."""
        assert not self.storage_options, "cli_args is for local tables (options would need a file)"
        if self.format == "delta":
            return ["--format", "delta", "--output", self.uri]
        properties = [arg for k, v in self.catalog.items() for arg in ("--catalog-property", f"{k}={v}")]
        return ["--format", "iceberg", "--table", str(self.table), *properties]

    def read(self, columns: list[str] | None = None):
        """The table as its own reader (deltalake, pyiceberg, psycopg) sees it (``None``: no table yet)."""
        if self.format == "postgres":
            return self.read_postgres(columns)
        if self.format == "mysql":
            return self.read_mysql(columns)
        if self.format == "delta":
            from deltalake import DeltaTable

            from kafka_batch_provider.output.delta import delta_storage_options

            try:
                table = DeltaTable(
                    self.location.root if self.location.is_local else self.uri,
                    storage_options=delta_storage_options(self.location),
                )
            except Exception:  # noqa: BLE001 - no table yet
                return None
            return table.to_pyarrow_table(columns=columns)
        from kafka_batch_provider.output.iceberg import load_catalog

        table = load_catalog(self.catalog).load_table(self.table)
        return table.scan(selected_fields=tuple(columns) if columns else ("*",)).to_arrow()

    def read_postgres(self, columns: list[str] | None = None):
        import psycopg
        from psycopg import sql

        schema, name = str(self.table).split(".", 1)
        with psycopg.connect(str(self.database_url)) as conn:
            if conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{name}"',)).fetchone()[0] is None:
                return None
            selected = sql.SQL(", ").join(map(sql.Identifier, columns)) if columns else sql.SQL("*")
            cursor = conn.execute(sql.SQL("SELECT {} FROM {}").format(selected, sql.Identifier(schema, name)))
            names, rows = [d.name for d in cursor.description], cursor.fetchall()
            return pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)})

    def read_mysql(self, columns: list[str] | None = None):
        import pymysql

        from kafka_batch_provider.output.databases.mariadb import MARIADB

        schema, name = str(self.table).split(".", 1)
        conn = MARIADB.connect(str(self.database_url))
        try:
            with conn.cursor() as cursor:
                try:
                    selected = ", ".join(f"`{c}`" for c in columns) if columns else "*"
                    cursor.execute(f"SELECT {selected} FROM `{schema}`.`{name}`")
                except pymysql.err.ProgrammingError:  # (no table yet)
                    return None
                names, rows = [d[0] for d in cursor.description], cursor.fetchall()
        finally:
            conn.close()
        return pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)})


def read_dataset(output: Output | str, columns: list[str] | None = None):
    """The output as a plain Parquet reader sees it (a pyarrow Table, ``None`` when empty).

    ``pyarrow.dataset`` with Hive partitioning, as users read the layout; like Spark it skips
    names starting with ``_`` or ``.``.
    """
    output = output if isinstance(output, Output) else Output(str(output))
    if isinstance(output, TableOutput):
        return output.read(columns)
    location = output.location
    if not location.exists(""):
        return None
    filesystem = PyFileSystem(FSSpecHandler(location.fs))
    dataset = ds.dataset(location.root, filesystem=filesystem, format="parquet", partitioning="hive")
    return dataset.to_table(columns=columns) if dataset.files else None


def dataset_keys(output: Output | str) -> Counter:
    """How often each (topic, partition, offset) appears to a plain Parquet reader right now."""
    table = read_dataset(output, ["topic", "partition", "offset"])
    if table is None:
        return Counter()
    return Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))


def offsets_of(topic: str, ends: dict[int, int], first: int = 0) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) from ``first`` up to each partition's end."""
    return {(topic, p, o) for p, end in ends.items() for o in range(first, end)}


def group_offsets(kafka_config: dict, group_id: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offset of each of the topic's first ``partitions`` partitions."""
    kafka = KafkaOffsets(kafka_config)
    try:
        found = kafka.committed_offsets(group_id, [TopicPartition(topic, p) for p in range(partitions)])
    finally:
        kafka.close()
    return {tp.partition: offset for tp, offset in found.items()}


def assert_exactly_once(output: Output | str, expected: set[tuple[str, int, int]]) -> None:
    seen = dataset_keys(output)
    doubled = {k: n for k, n in seen.items() if n > 1}
    assert not doubled, f"offsets seen more than once: {sorted(doubled)[:5]}"
    missing, extra = expected - set(seen), set(seen) - expected
    assert not missing and not extra, (
        f"expected {len(expected)} offsets; missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}"
    )


def write_without_commit(
    spark,
    kafka_config: dict[str, Any],
    output: Output,
    group_id: str,
    topics: list[str],
    partitions: list[int] | None = None,
):
    """Plan and write a batch, then stop as a crash before the commit would: returns its plan."""
    store = output.store()
    plan = plan_batch(KafkaOffsets(kafka_config, timeout=10), store, group_id, topics, PlanPolicy(), partitions).plan
    write_batch(plan, store, kafka_config, stage_with(spark))
    return plan


def run_batch(
    spark,
    kafka_config: dict[str, Any],
    output: Output | str,
    group_id: str,
    topics: list[str],
    policy: PlanPolicy = PlanPolicy(),
    partitions: list[int] | None = None,
    on_group_mismatch: GroupMismatchPolicy = GroupMismatchPolicy.FAIL,
    topic_pattern: str | None = None,
    progress: Any = None,
    **write_options: Any,
) -> tuple[PlanOutcome, dict[str, int]]:
    """plan -> write -> commit, in-process, as ``kafka-batch run`` does with spark-submit
    (``topic_pattern``: ``topics`` is empty)."""
    output = output if isinstance(output, Output) else Output(str(output))
    kafka = KafkaOffsets(kafka_config, timeout=10)
    store = output.store()
    said = {"progress": progress} if progress is not None else {}
    outcome = plan_batch(
        kafka, store, group_id, topics, policy, partitions, on_group_mismatch=on_group_mismatch,
        topic_pattern=topic_pattern, **said,
    )  # fmt: skip
    if not outcome.plan.ranges:
        return outcome, {}
    write_batch(outcome.plan, store, kafka.kafka_config, stage_with(spark), WriteOptions(**write_options))
    return outcome, commit_batch(kafka, store, outcome.plan)


def race_two_writes(spark, kafka_config: dict[str, Any], output: Output, first, second):
    """Write two plans for the same log entry at once: returns ``(won, lost)``.

    Exactly one must be published; the other must fail with :class:`LogConflictError`.
    """
    results: dict[int, object] = {}

    def write(index: int, plan) -> None:
        try:
            results[index] = write_batch(plan, output.store(), kafka_config, stage_with(spark))["batch_id"]
        except Exception as exc:  # noqa: BLE001 - the loser's error is the point
            results[index] = exc

    threads = [threading.Thread(target=write, args=(i, plan)) for i, plan in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, r in results.items() if isinstance(r, str)]
    losers = [r for r in results.values() if not isinstance(r, str)]
    assert len(winners) == 1 and len(losers) == 1, f"expected one winner and one loser, got {results}"
    assert isinstance(losers[0], LogConflictError), f"the loser must fail with a log conflict, got {losers[0]!r}"
    return (first, second) if winners == [0] else (second, first)


def produce_committed_aborted_committed(kafka_config: dict[str, Any], topic: str) -> None:
    """Partition 0 of ``topic``: committed 0-2, marker 3, aborted 4, marker 5, committed 6, marker 7 (the last)."""
    from confluent_kafka import Producer

    producer = Producer({**kafka_config, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"committed-%d" % i, partition=0)
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0)
    producer.flush()
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-3", partition=0)
    producer.commit_transaction(10)
    wait_until_stable(kafka_config, topic)  # the last marker is written after the commit returns


def one_partition_manifest(batch_id: str, rows: int, location: str, staging: str, size: int) -> dict[str, Any]:
    """The log entry the write step appends for a first batch of ``rows`` offsets of ``t[0]``,
    written as one file ``part-0.parquet`` of ``size`` bytes."""
    return {
        "format_version": 1,
        "seq": 1,
        "batch_id": batch_id,
        "previous": None,
        "mode": "incremental",
        "group_id": "g",
        "offsets": {"t:0": rows},
        "ranges": [{"topic": "t", "partition": 0, "start": 0, "end": rows, "rows": rows}],
        "rows": rows,
        "location": location,
        "staging": staging,
        "files": [{"name": "part-0.parquet", "bytes": size, "rows": rows}],
    }


@functools.cache
def duckdb_connection():
    """DuckDB with its avro, delta and iceberg extensions loaded from the PyPI builds pinned for it
    (it cannot download them here); one per test process (loading them takes half a second)."""
    import duckdb
    import duckdb_ext

    extensions = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    con = duckdb.connect(
        config={
            "extension_directory": extensions,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    for name in ("avro", "delta", "iceberg"):
        con.execute(f"LOAD {name}")
    return con
