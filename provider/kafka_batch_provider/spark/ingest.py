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
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kafka_batch_provider import __version__
from kafka_batch_provider.core.file_sizing import bytes_per_offset, writing_tasks
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.core.task_packing import pack, slices_for
from kafka_batch_provider.core.write_check import TaskReports, merge_written
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError, WriteCheckError
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.jvm_options import jvm_reader_options
from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA
from kafka_batch_provider.spark.slice_reader import ReadAndWrite, SliceReader, string_columns
from kafka_batch_provider.spark.task_writer import RECEIPT_COLUMN, REPORT_SCHEMA, TaskWriter
from kafka_batch_provider.spark.value_decoding import value_decoding
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
) -> SliceReader:
    """:param tasks: how many Spark tasks read the slices, packed by their offsets (``None``: one
    per slice, at most ``options.max_tasks``)."""
    slices = slices_for(plan.readable_ranges, options.max_offsets_per_task, options.max_tasks)
    tasks = len(slices) if tasks is None else tasks
    tasks = min(tasks, options.max_tasks) if options.max_tasks is not None else tasks
    return SliceReader(
        tuple(slices),
        reader_config(plan, kafka_config),
        stall_timeout=options.stall_timeout,
        receipts=receipts,
        packs=pack(slices, max(tasks, 1)),
    )


def functions_of(df: DataFrame) -> Any:
    """``pyspark.sql.functions`` for ``df``'s kind of session: Spark Connect's for a Connect DataFrame.

    pyspark picks the Connect variants only in a process marked as Spark Connect, which
    :mod:`~kafka_batch_provider.spark.connect` keeps unmarked (a spark-submit started later
    would inherit the mark); the classic ones need a SparkContext in this process.
    """
    if is_connect(df):
        from pyspark.sql.connect import functions
    else:
        from pyspark.sql import functions
    return functions


def is_connect(df: DataFrame) -> bool:
    return type(df).__module__.startswith("pyspark.sql.connect.")


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
    decoding = value_decoding(plan, options, registry)  # the registry is asked before anything is staged
    reserved = (RECEIPT_COLUMN, *(["date"] if store.partition_by else []))  # the tables' partition column
    read_schema = pa.schema([*KAFKA_ARROW_SCHEMA, *string_columns(options.value_format, options.key_format)])
    decoded_schema = decoding.output_schema(read_schema, reserved) if decoding is not None else None
    if decoded_schema is not None:
        store.check_columns(decoded_schema)  # a type the table format has not: refused before reading
    staging = store.new_staging(plan.batch_id)
    data = store.data
    # An existing table's partitioning, not the run's flags, decides how files are split.
    writer = TaskWriter(
        data.output, staging, data.storage_options, partition_by=store.partition_by, target_bytes=options.target_bytes
    )
    # As few writing tasks as the batch's expected size needs (each writes its own files), at most max_tasks.
    slices = len(slices_for(plan.readable_ranges, options.max_offsets_per_task, options.max_tasks))
    per_offset = recent_bytes_per_offset(store, plan.seq)
    tasks = writing_tasks(slices, plan.planned_offsets, per_offset, options.target_bytes, default_parallelism(spark))
    tasks = min(tasks, options.max_tasks) if options.max_tasks is not None else tasks
    receipts = options.reader == "python"
    reader = slice_reader(plan, kafka_config, options, tasks=tasks) if receipts else None
    observation = None
    if reader:
        df = reader.frame(spark)
        tasks = len(reader.packs)
    else:  # Spark's source decides its partitions: merge them without a shuffle
        df, observation = observed(read_plan(spark, plan, kafka_config, options), plan)
        df = df.coalesce(tasks)
    df = decode_values(df, options)
    if reader and options.value_format != "json":
        # Read and write in the same Python worker: the records never go through the JVM.
        fused = ReadAndWrite(reader, writer, options.value_format, decoding, options.key_format)
        rows = reader.slice_ids(spark).mapInArrow(fused, REPORT_SCHEMA).collect()
    else:
        rows = df.mapInArrow(writer, REPORT_SCHEMA).collect()
    reports = [json.loads(row["report"]) for row in rows]
    check_worker_version(reports)
    if observation is not None:
        reports.append({"receipts": observed_receipts(plan, observation.get, reports)})
    # The schema is resolved from the plan (and the reader schema), never by running it.
    if decoded_schema is not None:
        schema = from_arrow_schema(decoded_schema).simpleString()
    else:
        schema = (df.drop(RECEIPT_COLUMN) if receipts else df).schema.simpleString()
    return StagedBatch(staging, TaskReports.merge(reports), schema, counted_at_source=True, tasks=tasks)


#: Planned ranges up to which the JVM source's rows are counted per range: three aggregates a range,
#: each evaluated for every row, so a row costs O(ranges). Beyond, the rows are counted in total.
OBSERVED_RANGES = 64


def observed(df: DataFrame, plan: OffsetPlan) -> tuple[DataFrame, Any]:
    """The JVM source's rows, counted as they leave it (``Dataset.observe``, classic and Spark Connect).

    Spark's source sends no receipts; per planned range (up to :data:`OBSERVED_RANGES`; beyond, in
    total) its rows and their first and last offset are aggregated in the JVM on their way to the
    writing tasks, so the write check compares what was written with what was read for this reader too.
    """
    F = functions_of(df)
    metrics = []
    ranges = plan.readable_ranges
    if len(ranges) > OBSERVED_RANGES:
        metrics = [F.count(F.lit(1)).alias("rows")]
    for i, r in enumerate(ranges if len(ranges) <= OBSERVED_RANGES else ()):
        here = (F.col("topic") == r.topic) & (F.col("partition") == r.partition)
        metrics += [
            F.count_if(here).alias(f"rows_{i}"),
            F.min(F.when(here, F.col("offset"))).alias(f"first_{i}"),
            F.max(F.when(here, F.col("offset"))).alias(f"last_{i}"),
        ]
    name = f"kafka_batch_read_{plan.seq}"
    if is_connect(df):  # as for functions_of
        from pyspark.sql.connect.observation import Observation as ConnectObservation

        observation = ConnectObservation(name)
    else:
        observation = Observation(name)
    return df.observe(observation, *metrics), observation


def observed_receipts(
    plan: OffsetPlan, metrics: Mapping[str, Any], reports: list[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The write check's receipts from :func:`observed`'s metrics: one per planned range, read to
    its end (Spark's source reads up to ``endingOffsets`` or fails: ``failOnDataLoss``).

    Counted in total (more than :data:`OBSERVED_RANGES` ranges), the receipts are the writers'
    own counts per partition, once the total read equals the total they wrote.

    :raises WriteCheckError: the source handed on a different number of rows than were written.
    """
    if "rows" in metrics:
        written = merge_written(w for report in reports for w in report.get("written", ()))
        total = sum(w["rows"] for w in written.values())
        if int(metrics["rows"]) != total:
            raise WriteCheckError(
                f"batch {plan.batch_id}: Spark's Kafka source read {metrics['rows']} rows but {total} were written"
            )
        found = [written.get((r.topic, r.partition), {}) for r in plan.readable_ranges]
        counts = [(w.get("rows", 0), w.get("min_offset"), w.get("max_offset")) for w in found]
    else:
        counts = [
            (metrics[f"rows_{i}"], metrics[f"first_{i}"], metrics[f"last_{i}"])
            for i in range(len(plan.readable_ranges))
        ]
    return [
        {
            "topic": r.topic,
            "partition": r.partition,
            "start": r.start,
            "end": r.end,
            "position": r.end,
            "rows": int(rows),
            "first_offset": first,
            "last_offset": last,
        }
        for r, (rows, first, last) in zip(plan.readable_ranges, counts)
    ]


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
