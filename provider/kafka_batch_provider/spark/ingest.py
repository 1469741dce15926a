"""Read and write steps, run by the Spark driver: plan in, batch in the output's log out.

1. Read exactly the plan's ranges (the slice reader with receipts, or Spark's JVM source).
2. Each Spark task writes its rows with pyarrow into the batch's staging folder and
   reports what it read and wrote (:mod:`kafka_batch_provider.spark.task_writer`).
3. The driver lists the staging folder, reads the files' footers and checks the reports
   against the plan: written must equal read (:mod:`kafka_batch_provider.write_check`).
4. The manifest is appended to the output's offset log, exclusively: the commit point.
5. The files are published (a rename on local disks, copies on object stores).

A crash before 4 leaves nothing in the log, so the batch is simply written again (into a
fresh staging folder); a crash after 4 is rolled forward by the next step that finds it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_batch_provider import __version__
from kafka_batch_provider.batch_store import BatchStore, utc_now
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.kafka_offsets import KafkaOffsets
from kafka_batch_provider.manifest import build_manifest
from kafka_batch_provider.plan import OffsetPlan
from kafka_batch_provider.protocol import check_group_unmoved, check_same_topics
from kafka_batch_provider.spark.jvm_options import jvm_reader_options
from kafka_batch_provider.spark.options import WriteOptions
from kafka_batch_provider.spark.slice_reader import ReadAndWrite, SliceReader, slices_of
from kafka_batch_provider.spark.task_writer import RECEIPT_COLUMN, REPORT_SCHEMA, TaskWriter
from kafka_batch_provider.write_check import TaskReports, check_write

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
    plan: OffsetPlan, kafka_config: Mapping[str, Any], options: WriteOptions, receipts: bool = True
) -> SliceReader:
    return SliceReader(
        slices_of(plan.readable_ranges, options.max_offsets_per_task),
        reader_config(plan, kafka_config),
        stall_timeout=options.stall_timeout,
        receipts=receipts,
    )


def decode_values(df: DataFrame, options: WriteOptions) -> DataFrame:
    """Add a decoded value column; the raw ``value`` column always stays.

    ``string`` adds ``value_string``; ``json`` adds ``value_json`` parsed with the DDL
    ``value_schema`` (malformed JSON gives null fields; the raw bytes remain in ``value``).
    Bytes that are not UTF-8 become U+FFFD in ``value_string``: a plain cast would keep them,
    and a Parquet string column that is not UTF-8 breaks its readers (pyarrow cannot decode it).
    """
    if options.value_format == "string":
        return df.withColumn("value_string", F.make_valid_utf8(F.col("value").cast("string")))
    if options.value_format == "json":
        return df.withColumn("value_json", F.from_json(F.col("value").cast("string"), options.value_schema))
    return df


@dataclass
class StagedBatch:
    """What the Spark tasks left in the staging folder, and what they said about it."""

    staging: str
    reports: TaskReports
    schema: str
    counted_at_source: bool


def stage_batch(
    spark: SparkSession,
    plan: OffsetPlan,
    store: BatchStore,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
) -> StagedBatch:
    """Steps 1-2: read the plan's ranges and write them, task by task, into a fresh staging folder."""
    staging = store.new_staging(plan.batch_id)
    data = store.sink.data
    # An existing table's partitioning, not the run's flags, decides how files are split.
    writer = TaskWriter(data.output, staging, data.storage_options, partition_by=partition_of(store))
    receipts = options.reader == "python"
    reader = slice_reader(plan, kafka_config, options) if receipts else None
    df = decode_values(reader.frame(spark) if reader else read_plan(spark, plan, kafka_config, options), options)
    if reader and options.value_format != "json":
        # Read and write in the same Python worker: the records never go through the JVM.
        fused = ReadAndWrite(reader, writer, options.value_format)
        rows = reader.slice_ids(spark).mapInArrow(fused, REPORT_SCHEMA).collect()
    else:
        rows = df.mapInArrow(writer, REPORT_SCHEMA).collect()
    reports = [json.loads(row["report"]) for row in rows]
    check_worker_version(reports)
    # The schema is resolved from the plan, never by running it.
    schema = (df.drop(RECEIPT_COLUMN) if receipts else df).schema.simpleString()
    return StagedBatch(staging, TaskReports.merge(reports), schema, counted_at_source=receipts)


def check_worker_version(reports: list[dict[str, Any]]) -> None:
    """Spark's Python workers must run this very version: receipts and reports are its protocol."""
    found = sorted({str(r.get("version")) for r in reports} - {__version__})
    if found:
        raise ConfigError(
            f"Spark's Python workers run kafka_batch_provider {', '.join(found)}, this driver {__version__}: "
            "install the same airflow-provider-kafka-batch version where Spark runs"
        )


def partition_of(store: BatchStore) -> str | None:
    return getattr(store.sink, "partition_by", None)


def footer_rows(store: BatchStore, name: str) -> int | None:
    """Rows in a staged file's Parquet footer; ``None`` when it is gone or unreadable (the check says so)."""
    try:
        with store.sink.data.open_input(name) as f:
            return pq.ParquetFile(f).metadata.num_rows
    except (OSError, pa.ArrowException):
        return None


def iso_from_micros(micros: int | None) -> str | None:
    if micros is None:
        return None
    moment = datetime.fromtimestamp(micros // 1_000_000, tz=timezone.utc).replace(microsecond=micros % 1_000_000)
    return moment.isoformat(timespec="milliseconds")


def publish_staged(
    store: BatchStore,
    plan: OffsetPlan,
    staged: StagedBatch,
    options: WriteOptions,
    timings: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Steps 3-5: check the staged files, append the manifest to the log, publish the files.

    :raises WriteCheckError: when what was written does not match what was read (nothing
        is published, the plan stays pending).
    :raises LogConflictError: when another batch took the plan's entry of the log first.
    """
    data = store.sink.data
    found = data.file_sizes(staged.staging)
    reported = {f["name"] for f in staged.reports.files}
    footers = {name: footer_rows(store, f"{staged.staging}/{name}") for name in sorted(reported & set(found))}
    stats = check_write(plan, staged.reports, found, footers, staged.counted_at_source)
    # Files of task attempts that failed or were superseded are never part of the batch.
    data.delete(f"{staged.staging}/{name}" for name in sorted(set(found) - reported))
    staging = store.seal(staged.staging, sorted(reported))
    for s in stats:
        s["min_timestamp"], s["max_timestamp"] = (
            iso_from_micros(s["min_timestamp"]),
            iso_from_micros(s["max_timestamp"]),
        )
    manifest = build_manifest(
        plan,
        store.previous_entry(plan),
        stats,
        staged.reports.files,
        staging=staging,
        location=store.sink.batch_location(plan.batch_id, staging),
        schema=staged.schema,
        written_at=utc_now(),
        options={
            "reader": options.reader,
            "value_format": options.value_format,
            "value_schema": options.value_schema,
            "partition_by": partition_of(store),
        },
        timings=timings,
    )
    fail_point("before-log-entry")
    return store.commit_entry(plan, manifest)


def write_batch(
    spark: SparkSession,
    plan: OffsetPlan,
    store: BatchStore,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    progress: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """Read the plan's ranges and make them one batch of the output, with its log entry.

    A batch already in the log is not written again (its publish is finished if it was cut
    short). A plan with nothing to read is recorded in the log without starting a Spark job.

    :returns: the batch's log entry (its manifest).
    """
    bid = plan.batch_id
    entry = store.entry_of(plan)
    if entry is not None:
        store.publish(entry)
        progress(
            f"batch {bid} is already in the output log (entry {plan.seq}, {entry['rows']} rows); not reading again"
        )
        return entry
    previous = store.previous_entry(plan)  # fail before reading when the log moved on since planning
    if previous is not None:
        store.publish(previous)  # finishes a predecessor's publish cut short (replays have no commit step)
    kafka = KafkaOffsets(kafka_config)
    try:
        if not plan.has_data:
            check_same_topics(kafka, plan)
            if plan.commits_group:
                check_group_unmoved(kafka, plan)  # before the entry: a refused commit must not move the log
            entry = store.commit_without_data(plan)
            progress(f"batch {bid} has nothing to read: recorded in the output log as entry {plan.seq}")
            return entry
        return read_check_publish(spark, plan, store, kafka, options, progress)
    finally:
        kafka.close()


def read_check_publish(
    spark: SparkSession,
    plan: OffsetPlan,
    store: BatchStore,
    kafka: KafkaOffsets,
    options: WriteOptions,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Steps 1-5 for a plan with something to read."""
    bid = plan.batch_id
    progress(
        f"batch {bid}: reading {len(plan.readable_ranges)} range(s), up to {plan.planned_offsets} offsets, "
        f"with the {options.reader} reader"
    )
    clock = time.perf_counter()
    try:
        staged = stage_batch(spark, plan, store, kafka.kafka_config, options)
        timings = {"read_write_seconds": round(time.perf_counter() - clock, 3)}
        check_same_topics(kafka, plan)  # a topic recreated while Spark read would pass every other check
        entry = publish_staged(store, plan, staged, options, timings)
    except Exception:
        # The batch may be in the log all the same: another attempt of it (a retry racing a
        # slow first try, which may also have cleaned this attempt's files up) or this one,
        # whose publish then failed. Either way only its publish can remain to be done.
        entry = store.entry_of(plan)
        if entry is None:
            raise
        store.publish(entry)
        progress(f"batch {bid} is in the output log (entry {plan.seq}) and published; this attempt stops here")
        return entry
    store.clean_staging(bid, keep=entry.get("staging"))  # leftovers of crashed attempts of this batch
    if staged.reports.files and not str(entry.get("staging") or "").startswith(staged.staging):
        progress(
            f"batch {bid}: another attempt of the same batch logged it first (output log entry {plan.seq}); "
            "this attempt's files were dropped"
        )
        return entry
    progress(
        f"batch {bid}: wrote {entry['rows']} rows in {len(entry['files'])} file(s) to "
        f"{store.sink.data.uri_of(entry['location']) if entry['location'] else store.root} "
        f"(output log entry {plan.seq}, {store.format})"
    )
    return entry
