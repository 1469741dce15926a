"""Read and write steps, run inside Spark: plan in, published batch and manifest out.

1. Read exactly the plan's ranges (Python data source, or Spark's JVM Kafka source).
2. Write Parquet into a fresh ``_staging/<batch>.<attempt>/`` directory.
3. Read back per-partition statistics *from the written files* (row counts, offset and
   timestamp bounds) and check them against the plan.
4. Publish by renaming the staging directory to ``batch_id=<batch>/``.
5. Write the manifest last (atomic), the storage-side commit point.

A crash anywhere before 5 leaves no manifest, so the batch is simply written again; the
publish step replaces (never merges) what an earlier attempt published.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_batch_provider.batch_store import BatchStore, utc_now
from kafka_batch_provider.manifest import build_manifest, verify_manifest
from kafka_batch_provider.plan import OffsetPlan
from kafka_batch_provider.spark.jvm_options import jvm_reader_options
from kafka_batch_provider.spark.options import WriteOptions
from kafka_batch_provider.spark.source import KafkaBatchDataSource, ranges_json

log = logging.getLogger(__name__)


def read_plan(
    spark: SparkSession, plan: OffsetPlan, kafka_config: Mapping[str, Any], options: WriteOptions = WriteOptions()
) -> DataFrame:
    """A DataFrame of exactly the plan's ranges, in the schema of Spark's Kafka source."""
    # The plan's end offsets were read with this isolation level: read with it too.
    config = {**{k: v for k, v in kafka_config.items() if k != "logger"}, "isolation.level": plan.isolation_level}
    if options.reader == "jvm":
        return spark.read.format("kafka").options(**jvm_reader_options(plan.readable_ranges, config)).load()
    spark.dataSource.register(KafkaBatchDataSource)
    source_options = {f"kafka.{k}": str(v) for k, v in config.items()}
    source_options["ranges"] = ranges_json(plan.readable_ranges)
    source_options["maxOffsetsPerTask"] = str(options.max_offsets_per_task)
    source_options["stallTimeoutSeconds"] = str(options.stall_timeout)
    return spark.read.format(KafkaBatchDataSource.name()).options(**source_options).load()


def decode_values(df: DataFrame, options: WriteOptions) -> DataFrame:
    """Add a decoded value column; the raw ``value`` column always stays.

    ``string`` adds ``value_string``; ``json`` adds ``value_json`` parsed with the DDL
    ``value_schema`` (malformed JSON gives a null struct, the raw bytes remain in ``value``).
    """
    if options.value_format == "string":
        return df.withColumn("value_string", F.col("value").cast("string"))
    if options.value_format == "json":
        return df.withColumn("value_json", F.from_json(F.col("value").cast("string"), options.value_schema))
    return df


def iso_from_micros(micros: int | None) -> str | None:
    if micros is None:
        return None
    return iso(datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc))


def footer_stats(path: Path) -> list[dict[str, Any]] | None:
    """Per Kafka partition statistics from the Parquet footers of the written files.

    Each Spark task reads a slice of one Kafka partition and writes its own file, so a
    file's footer (row count, min/max per column) describes one partition. Returns
    ``None`` when that does not hold or a statistic is missing; the caller then scans.
    """
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for file in sorted(path.glob("*.parquet")):
        meta = pq.ParquetFile(file).metadata
        if meta.num_rows == 0:
            continue
        index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        bounds = {}
        for name in ("topic", "partition", "offset", "timestamp"):
            stats = [
                meta.row_group(g).column(index[name]).statistics
                for g in range(meta.num_row_groups)
                if meta.row_group(g).num_rows
            ]
            if not all(s is not None and s.has_min_max for s in stats):
                return None
            bounds[name] = (min(s.min for s in stats), max(s.max for s in stats))
        if bounds["topic"][0] != bounds["topic"][1] or bounds["partition"][0] != bounds["partition"][1]:
            return None
        key = (bounds["topic"][0], int(bounds["partition"][0]))
        entry = merged.setdefault(key, {"topic": key[0], "partition": key[1], "rows": 0, "bounds": []})
        entry["rows"] += meta.num_rows
        entry["bounds"].append((bounds["offset"], bounds["timestamp"]))
    result = []
    for entry in merged.values():
        offsets = [o for o, _ in entry["bounds"]]
        stamps = [t for _, t in entry["bounds"]]
        result.append(
            {
                "topic": entry["topic"],
                "partition": entry["partition"],
                "rows": entry["rows"],
                "min_offset": min(lo for lo, _ in offsets),
                "max_offset": max(hi for _, hi in offsets),
                "min_timestamp": iso(min(lo for lo, _ in stamps)),
                "max_timestamp": iso(max(hi for _, hi in stamps)),
            }
        )
    return result


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def partition_stats(spark: SparkSession, path: Path) -> list[dict[str, Any]]:
    """Per Kafka partition statistics, read back from the written Parquet files.

    Uses the files' footers when they suffice (no extra Spark job), else scans them.
    """
    from_footers = footer_stats(path)
    if from_footers is not None:
        return from_footers
    rows = (
        spark.read.parquet(path.as_uri())
        .groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.min("offset").alias("min_offset"),
            F.max("offset").alias("max_offset"),
            # As epoch micros: collecting a timestamp would convert it to the driver's local zone.
            F.unix_micros(F.min("timestamp")).alias("min_timestamp"),
            F.unix_micros(F.max("timestamp")).alias("max_timestamp"),
        )
        .collect()
    )
    return [
        {
            "topic": r["topic"],
            "partition": int(r["partition"]),
            "rows": int(r["rows"]),
            "min_offset": int(r["min_offset"]),
            "max_offset": int(r["max_offset"]),
            "min_timestamp": iso_from_micros(r["min_timestamp"]),
            "max_timestamp": iso_from_micros(r["max_timestamp"]),
        }
        for r in rows
    ]


def write_batch(
    spark: SparkSession,
    plan: OffsetPlan,
    output: str,
    kafka_config: Mapping[str, Any],
    options: WriteOptions = WriteOptions(),
    force: bool = False,
    progress: Callable[[str], None] = log.info,
) -> dict[str, Any] | None:
    """Read the plan's ranges and publish them as one batch with its manifest.

    :param force: write again even when the batch already has a manifest (allowed only
        while the batch is not committed: committed batches never change).
    :returns: the manifest, or ``None`` when the plan has nothing to read.
    """
    store = BatchStore(output)
    bid = plan.batch_id
    if store.commit_record(bid) is not None:
        progress(f"batch {bid} is already committed; its data is not written again")
        return store.load_manifest(bid) if store.has_manifest(bid) else None
    if store.has_manifest(bid) and not force:
        manifest = store.load_manifest(bid)
        verify_manifest(plan, manifest)
        progress(f"batch {bid} is already written ({manifest['rows']} rows); not reading again")
        return manifest
    if not plan.has_data:
        progress(f"batch {bid} has nothing to read")
        return None

    # Timestamps as Parquet TIMESTAMP_MICROS (UTC), which every Parquet reader understands;
    # Spark's default INT96 is legacy.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    store.clean_staging(bid)
    staging = store.new_staging_dir(bid)
    progress(
        f"batch {bid}: reading {len(plan.readable_ranges)} range(s), up to {plan.planned_offsets} offsets, "
        f"with the {options.reader} reader"
    )
    clock = time.perf_counter()
    df = decode_values(read_plan(spark, plan, kafka_config, options), options)
    df.write.mode("errorifexists").parquet(staging.as_uri())
    timings = {"read_write_seconds": round(time.perf_counter() - clock, 3)}
    clock = time.perf_counter()
    stats = partition_stats(spark, staging)
    timings["verify_seconds"] = round(time.perf_counter() - clock, 3)
    location = store.data_dir(bid).name
    files = [{"path": f"{location}/{f.name}", "bytes": f.stat().st_size} for f in sorted(staging.glob("*.parquet"))]
    manifest = build_manifest(
        plan,
        stats,
        files,
        location=location,
        schema=df.schema.simpleString(),
        written_at=utc_now(),
        options={"reader": options.reader, "value_format": options.value_format, "value_schema": options.value_schema},
        timings=timings,
    )
    store.publish(staging, bid)  # fsyncs the files first: the manifest may only follow durable data
    store.save_manifest(manifest)
    progress(f"batch {bid}: wrote {manifest['rows']} rows in {len(files)} file(s) to {store.data_dir(bid)}")
    return manifest
