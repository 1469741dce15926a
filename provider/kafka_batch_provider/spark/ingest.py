"""The Spark half of the write step: read exactly the plan's ranges and write them, task by task,
into a fresh staging folder (steps 1-2 of :mod:`kafka_batch_provider.steps.write`).

1. Read the ranges: the slice reader with receipts, or Spark's JVM source, whose rows are counted
   on their way to the writer (:func:`observed`).
2. Each Spark task writes its rows with pyarrow into the batch's staging folder and reports
   what it read and wrote (:mod:`kafka_batch_provider.spark.task_writer`).

:func:`stage_with` hands :func:`stage_batch` on this session to the write step, which checks,
logs and publishes what was staged without importing Spark.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kafka_batch_provider import __version__
from kafka_batch_provider.core.file_sizing import bytes_per_offset, writing_tasks
from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.core.task_packing import pack, slices_for
from kafka_batch_provider.core.write_check import TaskReports
from kafka_batch_provider.core.write_options import PYTHON_WORKER_READERS, WriteOptions, check_table_per_topic
from kafka_batch_provider.errors import ConfigError, KafkaBatchError
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark import native_consumer
from kafka_batch_provider.spark.jvm_observation import observed, observed_receipts
from kafka_batch_provider.spark.jvm_options import jvm_reader_options
from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA
from kafka_batch_provider.spark.session_kind import functions_of
from kafka_batch_provider.spark.slice_reader import ANY_TOPIC, ReadAndWrite, Route, SliceReader, string_columns
from kafka_batch_provider.spark.task_writer import RECEIPT_COLUMN, REPORT_SCHEMA, TaskWriter
from kafka_batch_provider.spark.value_decoding import value_decoding
from kafka_batch_provider.steps.tables import StageTables
from kafka_batch_provider.steps.write import Stage, StagedBatch

log = logging.getLogger(__name__)


def read_plan(
    spark: SparkSession,
    plan: OffsetPlan,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    receipts: bool = False,
) -> DataFrame:
    """A DataFrame of exactly the plan's ranges, in the schema of Spark's Kafka source.

    :param receipts: (python reader) add the ``_receipt`` column that says what each task read.
    """
    if options.reader == "jvm":
        return (
            spark.read.format("kafka")
            .options(**jvm_reader_options(plan.readable_ranges, reader_config(plan, kafka_config)))
            .load()
        )
    return slice_reader(plan, kafka_config, options, receipts).frame(spark)


def reader_config(plan: OffsetPlan, kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    # The plan's end offsets were read with this isolation level: read with it too.
    return {**{k: v for k, v in kafka_config.items() if k != "logger"}, "isolation.level": plan.isolation_level}


def slice_reader(
    plan: OffsetPlan,
    kafka_config: Mapping[str, Any],
    options: WriteOptions,
    receipts: bool = True,
    tasks: int | None = None,
    slices: Sequence[OffsetRange] | None = None,
) -> SliceReader:
    """:param tasks: how many Spark tasks read the slices, packed by their offsets (``None``: one
    per slice, at most ``options.max_tasks``).
    :param slices: the slices to read (default: the plan's); the plan gives the isolation level."""
    if slices is None:
        slices = slices_for(plan.readable_ranges, options.max_offsets_per_task, options.max_tasks)
    tasks = len(slices) if tasks is None else tasks
    tasks = min(tasks, options.max_tasks) if options.max_tasks is not None else tasks
    config = reader_config(plan, kafka_config)
    if options.reader == "native" and (reason := native_consumer.why_not(config)) is not None:
        native_consumer.fallback(reason)  # the driver's line (a worker without the package says its own)
    return SliceReader(
        tuple(slices),
        config,
        reader=options.reader,
        stall_timeout=options.stall_timeout,
        receipts=receipts,
        packs=pack(slices, max(tasks, 1)),
    )


def decode_values(df: DataFrame, options: WriteOptions) -> DataFrame:
    """Add a decoded value column (and ``key_string``); the raw ``value`` column always stays.

    ``string`` adds ``value_string``; ``json`` adds ``value_json`` parsed with the DDL
    ``value_schema`` (malformed JSON gives null fields; the raw bytes remain in ``value``).
    Bytes that are not UTF-8 become U+FFFD in ``value_string``: a plain cast would keep them,
    and a Parquet string column that is not UTF-8 breaks its readers (pyarrow cannot decode it).
    """
    F = functions_of(df)
    if options.value_format == "string":
        df = df.withColumn("value_string", F.make_valid_utf8(F.col("value").cast("string")))
    if options.value_format == "json":
        df = df.withColumn("value_json", F.from_json(F.col("value").cast("string"), options.value_schema))
    if options.key_format == "string":
        df = df.withColumn("key_string", F.make_valid_utf8(F.col("key").cast("string")))
    return df


def stage_batch(
    spark: SparkSession,
    plan: OffsetPlan,
    store: BatchStore,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    registry: RegistrySettings | None = None,
) -> StagedBatch:
    """Steps 1-2: read the plan's ranges and write them, task by task, into a fresh staging folder.

    :param registry: the schema registry of values in a registry format (``--value-format avro``).
    """
    if options.reader in PYTHON_WORKER_READERS and options.value_format != "json":
        # Read and write in the same Python worker: the records never go through the JVM.
        return stage_tables(spark, [(plan, store)], kafka_config, options, registry, one_output=True)[0]
    table = prepare_table(plan, store, options, registry)
    slices = slices_for(plan.readable_ranges, options.max_offsets_per_task, options.max_tasks)
    tasks = reading_tasks(spark, len(slices), [table], options)
    receipts = options.reader in PYTHON_WORKER_READERS
    observation = None
    if receipts:
        reader = slice_reader(plan, kafka_config, options, tasks=tasks, slices=slices)
        df = reader.frame(spark)
        tasks = len(reader.packs)
    else:  # Spark's source decides its partitions: merge them without a shuffle
        df, observation = observed(read_plan(spark, plan, kafka_config, options), plan)
        df = df.coalesce(tasks)
    df = decode_values(df, options)
    rows = df.mapInArrow(table.writer, REPORT_SCHEMA).collect()
    reports = [json.loads(row["report"]) for row in rows]
    check_worker_version(reports)
    if observation is not None:
        reports.append({"receipts": observed_receipts(plan, observation.get, reports)})
    schema = (df.drop(RECEIPT_COLUMN) if receipts else df).schema.simpleString()
    return StagedBatch(table.staging, TaskReports.merge(reports), schema, counted_at_source=True, tasks=tasks)


@dataclass(frozen=True)
class TableStage:
    """One output's part of a Spark job: its plan, its staging folder, writer and decoding."""

    plan: OffsetPlan
    store: BatchStore
    staging: str
    writer: TaskWriter
    decoding: Any
    #: the staged files' schema, resolved from the plan (and its reader schema), never by running it
    schema: str


def prepare_table(
    plan: OffsetPlan, store: BatchStore, options: WriteOptions, registry: RegistrySettings | None
) -> TableStage:
    """Everything one output needs before its records are read; refusals (the registry's, a column
    type the table format has not) come here, before anything is staged."""
    decoding = value_decoding(plan, options, registry)
    reserved = (RECEIPT_COLUMN, *(["date"] if store.partition_by else []))  # the tables' partition column
    read_schema = pa.schema([*KAFKA_ARROW_SCHEMA, *string_columns(options.value_format, options.key_format)])
    decoded_schema = decoding.output_schema(read_schema, reserved) if decoding is not None else None
    if decoded_schema is not None:
        store.check_columns(decoded_schema)
    staging = store.new_staging(plan.batch_id)
    data = store.data
    # An existing table's partitioning, not the run's flags, decides how files are split.
    writer = TaskWriter(
        data.output, staging, data.storage_options, partition_by=store.partition_by, target_bytes=options.target_bytes
    )
    schema = from_arrow_schema(decoded_schema if decoded_schema is not None else read_schema).simpleString()
    return TableStage(plan, store, staging, writer, decoding, schema)


def stage_tables(
    spark: SparkSession,
    tables: Sequence[tuple[OffsetPlan, BatchStore]],
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    registry: RegistrySettings | None = None,
    one_output: bool = False,
) -> list[StagedBatch]:
    """Steps 1-2 for several outputs in one Spark job (one table per topic: each plan is one topic's).

    The plans' slices are packed into tasks together (:mod:`kafka_batch_provider.core.task_packing`);
    each task hands each topic's records to that topic's writer, into that output's staging folder.

    :param one_output: ``tables`` is one output of any topics (:func:`stage_batch`).
    :returns: each output's staged batch, in the order of ``tables``; for a table per topic, the
        error of an output that could not be prepared (a column type its format has not, its
        registry subject missing) in its place: the others are read and written without it.
    """
    check_table_per_topic(options)
    clock = time.perf_counter()
    found: list[TableStage | KafkaBatchError] = []
    for plan, store in tables:
        try:
            found.append(prepare_table(plan, store, options, registry))
        except KafkaBatchError as exc:
            if one_output:
                raise
            found.append(exc)
    prepared = [table for table in found if isinstance(table, TableStage)]
    if not prepared:
        return list(found)  # type: ignore[arg-type]  # every one an error
    ranges = [r for table in prepared for r in table.plan.readable_ranges]
    slices = slices_for(ranges, options.max_offsets_per_task, options.max_tasks)
    tasks = reading_tasks(spark, len(slices), prepared, options)
    reader = slice_reader(prepared[0].plan, kafka_config, options, tasks=tasks, slices=slices)
    keys = [ANY_TOPIC] if one_output else [table.plan.topics[0] for table in prepared]
    routes = {key: Route(table.writer, table.decoding) for key, table in zip(keys, prepared)}
    fused = ReadAndWrite(reader, routes, options.value_format, options.key_format)
    rows = reader.slice_ids(spark).mapInArrow(fused, REPORT_SCHEMA).collect()
    reports = [json.loads(row["report"]) for row in rows]
    check_worker_version(reports)
    by_route: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    for report in reports:
        by_route[report["route"]].append(report)
    seconds = round(time.perf_counter() - clock, 3)  # the one job's, for every output's log entry
    staged = iter(
        StagedBatch(table.staging, TaskReports.merge(by_route[key]), table.schema, True, len(reader.packs), seconds)
        for key, table in zip(keys, prepared)
    )
    return [next(staged) if isinstance(table, TableStage) else table for table in found]


def reading_tasks(spark: SparkSession, slices: int, tables: Sequence[TableStage], options: WriteOptions) -> int:
    """As few tasks as the batch's expected size needs (each writes its own files), at most ``max_tasks``.

    The bytes an offset costs come from the outputs' recent batches (weighted by each output's
    offsets, of the outputs that have written some); while none has (a first batch), every slice
    keeps its task.
    """
    offsets = sum(t.plan.planned_offsets for t in tables)
    known = [(e, t.plan.planned_offsets) for t in tables if (e := recent_bytes_per_offset(t.store, t.plan.seq))]
    weight = sum(n for _, n in known)
    per_offset = sum(e * n for e, n in known) / weight if known and weight else None
    tasks = writing_tasks(slices, offsets, per_offset, options.target_bytes, default_parallelism(spark))
    return min(tasks, options.max_tasks) if options.max_tasks is not None else tasks


#: How many earlier log entries are looked at for the bytes an offset costs (idle batches have no files).
SIZE_LOOK_BACK = 10


def recent_bytes_per_offset(store: BatchStore, seq: int) -> float | None:
    """The bytes per offset of the newest of the few entries before ``seq`` that wrote files."""
    for earlier in range(seq - 1, max(seq - 1 - SIZE_LOOK_BACK, 0), -1):
        found = bytes_per_offset(store.log.entry(earlier))
        if found is not None:
            return found
    return None


def default_parallelism(spark: SparkSession) -> int | None:
    """The tasks the cluster runs at once (``None`` through Spark Connect: it does not say)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        return None


def check_worker_version(reports: list[dict[str, Any]]) -> None:
    """Spark's Python workers must run this very version: receipts and reports are its protocol."""
    found = sorted({str(r.get("version")) for r in reports} - {__version__})
    if found:
        raise ConfigError(
            f"Spark's Python workers run kafka_batch_provider {', '.join(found)}, this driver {__version__}: "
            "install the same airflow-provider-kafka-batch version where Spark runs"
        )


def stage_with(spark: SparkSession, registry: RegistrySettings | None = None) -> Stage:
    """The write step's ``stage`` on this session: ``write_batch(plan, store, config, stage_with(spark))``.

    :param registry: the schema registry, for values in a registry format.
    """
    return functools.partial(stage_batch, spark, registry=registry)


def stage_tables_with(spark: SparkSession, registry: RegistrySettings | None = None) -> StageTables:
    """:func:`stage_tables` on this session, for :func:`~kafka_batch_provider.steps.tables.write_tables`."""
    return functools.partial(stage_tables, spark, registry=registry)
