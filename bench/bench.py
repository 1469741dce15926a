"""Benchmark: `kafka-batch run` to Parquet, Delta and Iceberg against a plain confluent-kafka consumer.

Everything reads the same records from the same broker in the same run, so the ratios are
meaningful on a shared, noisy machine:

* ``ratio``: the pipeline (``kafka-batch run``, the Parquet layout on a local disk;
  ``pipeline_rps``) over the baseline (one plain consumer reading the same ranges);
* ``delta_rps``, ``iceberg_rps``: the same pipeline writing a Delta table on the local disk
  (``--format delta``) and an Iceberg table (``--format iceberg``, a SQLite SQL catalog, a
  local warehouse), each with its own group, so each reads every record;
  ``delta_over_parquet`` and ``iceberg_over_parquet`` are their rows/s over the Parquet
  pipeline's. Each table is read back (deltalake, pyiceberg) and must hold exactly the
  records produced. The runs go in the order of ``--formats``; the first one also warms the
  disk cache for the others;
* ``s3_ratio``: the same pipeline with its output on the embedded S3-protocol server, over
  the local one;
* ``writers``: in one Spark session, the same DataFrame written by Spark's own Parquet writer
  and by this package's writer (pyarrow in each task, reporting what it wrote), best of two
  each; ``pyarrow_over_spark`` is the ratio of their times.

The last stdout line is one JSON object with all of it.

    python bench/bench.py [--records 1000000] [--value-size 200] [--partitions 4]
        [--formats parquet,delta,iceberg] [--no-s3] [--no-writers]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafka_batch_provider.broker.embedded import EmbeddedBroker
from kafka_batch_provider.kafka_offsets import KafkaOffsets
from kafka_batch_provider.offsets import OffsetRange, TopicPartition
from kafka_batch_provider.spark.kafka_reader import reader_consumer_config
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def baseline_read(config: dict, topic: str, ends: dict[int, int]) -> tuple[int, float]:
    """One plain consumer, same reader settings, reading every planned range to its end."""
    consumer = Consumer(reader_consumer_config(config))
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in ends])
    remaining = {p for p, end in ends.items() if end > 0}
    records, total = 0, sum(ends.values())
    started = time.perf_counter()
    while remaining:
        # Like the pipeline's reader, never ask for more than is left: consume() would wait
        # out its whole timeout for a count it cannot reach.
        for m in consumer.consume(min(50_000, total - records), timeout=1.0):
            if m.error() is None:
                records += 1
                len(m.value())
                if m.offset() + 1 >= ends[m.partition()]:
                    remaining.discard(m.partition())
    elapsed = time.perf_counter() - started
    consumer.close()
    return records, elapsed


def run_pipeline(command: list[str], env: dict | None = None) -> tuple[dict, float]:
    started = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=env)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"kafka-batch run failed with exit code {result.returncode}")
    return json.loads(result.stdout.strip().splitlines()[-1]), seconds


TABLES = {"delta": "a Delta table on the local disk", "iceberg": "a SQLite SQL catalog, a local warehouse"}


def table_rows(fmt: str, work: Path) -> int:
    """Rows in the benchmark's Delta or Iceberg table, as the format's own reader counts them."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(work / "delta")).to_pyarrow_table(columns=["offset"]).num_rows
    from pyiceberg.catalog import load_catalog

    # A SQL catalog keeps its tables under the catalog's name: kafka-batch opens it as "kafka_batch".
    table = load_catalog("kafka_batch", **iceberg_catalog(work)).load_table("bench.events")
    return table.scan(selected_fields=("offset",)).to_arrow().num_rows


def iceberg_catalog(work: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": (work / "warehouse").as_uri()}


def table_args(fmt: str, work: Path) -> list[str]:
    if fmt == "delta":
        return ["--format", "delta", "--output", str(work / "delta")]
    properties = [arg for k, v in iceberg_catalog(work).items() for arg in ("--catalog-property", f"{k}={v}")]
    return ["--format", "iceberg", "--table", "bench.events", *properties]


def compare_writers(config: dict, topic: str, ends: dict[int, int], work: Path, master: str) -> dict:
    """Spark's Parquet writer and the pyarrow task writer on the same DataFrame, best of two each."""
    from pyspark.sql import SparkSession

    from kafka_batch_provider.planning import plan_replay
    from kafka_batch_provider.spark.ingest import read_plan
    from kafka_batch_provider.spark.task_writer import REPORT_SCHEMA, TaskWriter

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers need this package
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    states = KafkaOffsets(config).partition_offsets(None, [topic])
    plan = plan_replay([OffsetRange(topic, p, 0, end) for p, end in ends.items()], states, "read_committed", "now")
    times: dict[str, list[float]] = {"spark_parquet": [], "pyarrow_tasks": []}
    try:
        for attempt in range(2):
            df = read_plan(spark, plan, config)
            started = time.perf_counter()
            df.write.mode("overwrite").parquet(str(work / f"spark-writer-{attempt}"))
            times["spark_parquet"].append(time.perf_counter() - started)
            df = read_plan(spark, plan, config, receipts=True)
            started = time.perf_counter()
            df.mapInArrow(TaskWriter(str(work / "pyarrow-writer"), f"_staging/{attempt}"), REPORT_SCHEMA).collect()
            times["pyarrow_tasks"].append(time.perf_counter() - started)
            say(f"writers, round {attempt + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()))
    finally:
        spark.stop()
    best = {k: round(min(v), 3) for k, v in times.items()}
    return {"seconds": best, "pyarrow_over_spark": round(best["pyarrow_tasks"] / best["spark_parquet"], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--keep", action="store_true", help="keep the output directory")
    parser.add_argument(
        "--formats",
        default="parquet,delta,iceberg",
        help="the outputs on the local disk, run in this order (default parquet,delta,iceberg); parquet is "
        "required: it is the reference of every ratio (--formats parquet: no tables)",
    )
    parser.add_argument("--no-s3", action="store_true", help="skip the run with the output on the S3 server")
    parser.add_argument("--no-writers", action="store_true", help="skip the writer comparison")
    args = parser.parse_args()
    formats = list(dict.fromkeys(f.strip() for f in args.formats.split(",") if f.strip()))
    unknown = sorted(set(formats) - {"parquet", *TABLES})
    if unknown or "parquet" not in formats:
        parser.error(f"--formats: parquet plus any of {', '.join(TABLES)}, got {args.formats!r}")

    work = Path(tempfile.mkdtemp(prefix="kafka-batch-bench-"))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None if external else EmbeddedBroker(log_path=work / "broker.log").start()
    bootstrap = external or broker.bootstrap_servers
    try:
        config = {"bootstrap.servers": bootstrap}
        topic = f"bench-{int(time.time())}"
        create_topics(config, {topic: args.partitions})
        say(
            f"producing {args.records:,} records of {args.value_size} bytes to {topic} "
            f"({args.partitions} partitions) on {bootstrap}"
        )
        started = time.perf_counter()
        counts = produce(config, topic, sample_records(args.partitions, args.records, value_size=args.value_size))
        say(f"produced in {time.perf_counter() - started:.1f}s")
        tps = [TopicPartition(topic, p) for p in range(args.partitions)]
        ends = {tp.partition: end for tp, end in KafkaOffsets(config).log_end_offsets(tps).items()}
        assert sum(ends.values()) == sum(counts.values()), f"end offsets {ends} do not match produced {counts}"

        say("baseline: plain confluent-kafka consumer reading the same ranges ...")
        base_records, base_seconds = baseline_read(config, topic, ends)
        say(f"baseline: {base_records:,} records in {base_seconds:.2f}s")

        kafka_batch = str(Path(sys.executable).parent / "kafka-batch")
        common = ["run", "--bootstrap-servers", bootstrap, "--topic", topic, "--spark-master", args.spark_master]
        runs: dict[str, tuple[dict, float]] = {}
        for fmt in formats:  # in the order given: the first spark-submit also warms the disk cache
            if fmt == "parquet":
                say(f"pipeline: kafka-batch run --spark-master {args.spark_master} (Parquet layout, local disk) ...")
                run, seconds = run_pipeline([kafka_batch, *common, "--group", "bench", "--output", str(work / "lake")])
                say(f"pipeline: {run['records']:,} records in {seconds:.2f}s (plan + spark-submit + write + commit)")
                if run["records"] != base_records:
                    say(f"error: pipeline wrote {run['records']} records, baseline read {base_records}")
                    return 1
            else:
                say(f"pipeline: kafka-batch run --format {fmt} ({TABLES[fmt]}) ...")
                run, seconds = run_pipeline([kafka_batch, *common, "--group", f"bench-{fmt}", *table_args(fmt, work)])
                read_back = table_rows(fmt, work)
                say(f"pipeline to {fmt}: {run['records']:,} records in {seconds:.2f}s; the table holds {read_back:,}")
                if not run["records"] == read_back == base_records:
                    say(
                        f"error: {fmt}: the run reported {run['records']} records and the table holds {read_back} "
                        f"rows, but {base_records} were produced"
                    )
                    return 1
            runs[fmt] = run, seconds
        run, pipe_seconds = runs["parquet"]
        summary = {
            "records": run["records"],
            "value_size": args.value_size,
            "partitions": args.partitions,
            "baseline_seconds": round(base_seconds, 3),
            "pipeline_seconds": round(pipe_seconds, 3),
            "baseline_rps": round(base_records / base_seconds),
            "pipeline_rps": round(run["records"] / pipe_seconds),
            "ratio": round((run["records"] / pipe_seconds) / (base_records / base_seconds), 3),
            "spark_master": args.spark_master,
            "timings": run.get("timings", {}),
            "formats": formats,
        }
        for fmt in (f for f in formats if f != "parquet"):
            table_run, table_seconds = runs[fmt]
            summary.update(
                {
                    f"{fmt}_seconds": round(table_seconds, 3),
                    f"{fmt}_rps": round(table_run["records"] / table_seconds),
                    f"{fmt}_over_parquet": round(pipe_seconds / table_seconds, 3),
                    f"{fmt}_timings": table_run.get("timings", {}),
                }
            )
        if not args.no_s3:
            from kafka_batch_provider.objectstore.embedded import EmbeddedS3

            with EmbeddedS3(log_path=work / "s3.log") as s3:
                options = work / "s3-options.json"
                options.write_text(json.dumps(s3.storage_options()))
                env = {**os.environ, "KAFKA_BATCH_STORAGE_OPTIONS_FILE": str(options)}
                say(f"pipeline with the output on the embedded S3 server ({s3.endpoint_url}) ...")
                s3_run, s3_seconds = run_pipeline(
                    [kafka_batch, *common, "--group", "bench-s3", "--output", f"s3://{s3.bucket}/bench"], env
                )
            say(f"pipeline to S3: {s3_run['records']:,} records in {s3_seconds:.2f}s")
            summary.update(
                s3_pipeline_seconds=round(s3_seconds, 3),
                s3_pipeline_rps=round(s3_run["records"] / s3_seconds),
                s3_ratio=round(pipe_seconds / s3_seconds, 3),
                s3_timings=s3_run.get("timings", {}),
            )
        if not args.no_writers:
            say("writers: Spark's Parquet writer and the pyarrow task writer on the same DataFrame ...")
            summary["writers"] = compare_writers(config, topic, ends, work, args.spark_master)
        print(json.dumps(summary))
        return 0
    finally:
        if broker is not None:
            broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
