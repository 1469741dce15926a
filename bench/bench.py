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

* ``native_reader_rps``, ``python_reader_rps``, ``kcat_rps``: the read path alone, discarding
  (``bench/native_reader.py``): the native reader (issue 48) and the python reader through the
  range reader's loop, and kcat (librdkafka in C) on the same topic; ``native_over_kcat`` (goal
  >= 0.8), ``native_over_baseline``;
* ``connect_rps``: the same batch through a warm local Spark Connect server (``local[2]``,
  its own group; a 1,000-record batch warms it first) with the default reader (native);
  ``connect_over_baseline`` (goal >= 0.8); ``connect_python_reader_rps``: the same with
  ``--reader python``, ``connect_native_over_python``;
* ``airflow_kafka_rps``: apache-airflow-providers-apache-kafka's ``ConsumeFromTopicOperator``
  writing the same records to Parquet from its ``apply_function``, the way users do it today,
  timed from its first record (its consumer-group join, ~23 s on the embedded broker, is
  reported apart as ``airflow_kafka_join_seconds``); ``best_over_airflow_kafka``;
* ``avro_rps``: as many ~200 B Avro values (the registry's wire format, the embedded registry)
  through the same warm server into typed columns (``--value-format avro``);
  ``avro_over_bytes``: its rows/s over ``connect_rps``;
* ``spark_kafka_source_rps``: Spark's own Kafka source (``spark-sql-kafka-0-10``, the jars of
  ``make jvm-tools``) reading the same ranges into Parquet on the same warm server (``local[2]``):
  ``spark.read.format("kafka")...write.parquet``, no plan, no commit; ``best_over_spark_source``:
  our best path (``pipeline_rps``, ``connect_rps``) over it; ``jvm_reader_rps``: ``kafka-batch run
  --reader jvm`` (our pipeline on Spark's source); ``spark_source_arrow_rps``: Spark's source
  handing Arrow batches to a Python worker that only counts them (``mapInArrow``): the rate an
  Arrow-native Python read from the JVM's fetch would start from;
* ``scaling``: ``connect_rps`` with ``local[2]`` over a ``local[1]`` server's;
* ``fixed_seconds``: a 1,000-record batch through spark-submit (``kafka-batch run``), and
  ``fixed_phases``: where its time went (plan, JVM and Python launch, session, batch, exit,
  commit);
* ``empty_batch_seconds``: ``kafka-batch run`` with nothing new (no Spark is started);
* ``large``: rows/s through the warm Connect server at ``--large-records`` (5M) next to 1M;
* ``plan_commit_seconds``: plan + compare-and-set commit at 1, 200, 2,000 and 10,000 partitions;
* ``peak_worker_rss_mb``: the Connect server's Python workers' peak RSS while ingesting
  ``--rss-gb`` (2) GB of 64 KB records;
* ``year``: a year of batches (``bench/year.py``): Iceberg metadata bytes per batch at 2,000
  partitions, a Delta table's files per 100 batches before and after upkeep, and a soak of
  ``--soak-batches`` (1,000) batches with the plan and commit steps' growth;
* ``merge_*``: merged tables (``bench/merge.py``, ``--merge-rows`` 1,000,000, ``--merge-changes``
  10,000): seconds per batch and files rewritten in Delta and Iceberg, beside a bare delta-rs
  ``merge`` (``merge_delta_*_over_bare``, goal <= 1.2) and pyiceberg's ``upsert``
  (``merge_iceberg_*_over_upsert``, goal <= 0.5), for changes spread over the table and confined
  to its newest keys, and the merges' peak RSS;
* ``db_*``: a PostgreSQL output (``bench/database_output.py``, ``--database-records``): our batch
  transaction against a bare binary COPY (``db_commit_rps``, ``db_copy_rps``), and the whole batch
  on the benchmark's topic against the Parquet layout (``db_postgres_rps``, ``db_parquet_rps``,
  ``db_over_parquet``, goal >= 0.6);
* ``merge_snapshot_*``: a Debezium snapshot at a real database's scale (``bench/merge_snapshot.py``,
  ``--merge-snapshot-rows`` 2,000,000 events as Kafka Connect's JsonConverter writes them, then 3
  batches of 100,000 changes), merged into Delta and Iceberg in batches of the product's bound:
  ``merge_snapshot_eps`` (goal >= 150,000), ``merge_snapshot_driver_rss_mb`` (goal < 1,000), per
  format ``merge_snapshot_<format>_eps``, ``merge_changes_<format>_eps`` and the driver's peak RSS;
* ``many_topics_*``: a platform's worth of topics (``bench/many_topics.py``, ``--many-topics`` 500
  topics of 3 partitions x 200 records): one ``--topic-pattern`` batch into a Delta table per
  topic (``many_topics_seconds``, its ``many_topics_plan_seconds``, goal <= 3 s, and
  ``many_topics_tasks``) against ``kafka-batch run`` per topic on the same warm Spark Connect
  server (a sample, estimated for all): ``many_topics_speedup``, goal >= 20.

The broker is Apache Kafka (``KafkaBroker``, the jars of ``make jvm-tools``), or
``$KAFKA_BOOTSTRAP_SERVERS``. The last stdout line is one JSON object with all of it.

    python bench/bench.py [--records 1000000] [--value-size 200] [--partitions 4]
        [--formats parquet,delta,iceberg] [--no-s3] [--no-writers]
        [--large-records 5000000] [--rss-gb 2] [--no-connect] [--no-airflow-kafka] [--soak-batches 1000]
        [--merge-rows 1000000] [--merge-changes 10000] [--merge-snapshot-rows 2000000]
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

from kafka_batch_provider.core.offsets import OffsetRange, TopicPartition
from kafka_batch_provider.dev.kafka import KafkaBroker
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.kafka.config import reader_consumer_config
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

sys.path.insert(0, str(Path(__file__).resolve().parent))
import native_reader  # noqa: E402 (bench/native_reader.py, beside this file)

KAFKA_BATCH = str(Path(sys.executable).parent / "kafka-batch")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def result_stream():
    """The real stdout, kept for the one JSON line; from here on fd 1 is stderr.

    Whatever else writes to stdout in this process (Airflow's structlog, Spark's py4j closing its
    connection at exit, after the JSON line) then lands in stderr, so the JSON stays the last
    line of stdout.
    """
    result = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return result


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

    from kafka_batch_provider.core.planning import plan_replay
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


def produce_topic(config: dict, topic: str, partitions: int, records: int, value_size: int) -> dict[int, int]:
    """A new topic holding ``records`` records; returns its end offsets."""
    create_topics(config, {topic: partitions})
    started = time.perf_counter()
    counts = produce(config, topic, sample_records(partitions, records, value_size=value_size))
    say(f"produced {records:,} records of {value_size:,} bytes to {topic} in {time.perf_counter() - started:.1f}s")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp.partition: end for tp, end in KafkaOffsets(config).log_end_offsets(tps).items()}
    assert sum(ends.values()) == sum(counts.values()), f"end offsets {ends} do not match produced {counts}"
    return ends


def run_cli(bootstrap: str, topic: str, group: str, output: Path, *spark: str) -> tuple[dict, float]:
    return run_pipeline(
        [
            KAFKA_BATCH,
            "run",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--output",
            str(output),
            *spark,
        ]
    )


class WorkerMemory:
    """Peak RSS of the Python processes below ``pid`` (Spark's workers), sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid, self.peak_mb, self.peak_total_mb = pid, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            sizes = [rss_mb(p) for p in descendants(self.pid) if b"python" in cmdline(p)]
            self.peak_mb = max([self.peak_mb, *sizes])
            self.peak_total_mb = max(self.peak_total_mb, sum(sizes))


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


#: The benchmark's Avro value: ~200 bytes in the registry's wire format.
AVRO_READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sensor", "type": "string"},
        {"name": "celsius", "type": "double"},
        {"name": "taken", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ok", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "payload", "type": "string"},
    ],
}


def avro_measure(config: dict, bootstrap: str, args: argparse.Namespace, work: Path, remote: tuple, bytes_rps: float):
    """``avro_rps``: the same number of ~200 B Avro values (one schema, the subject's latest) through
    the warm Connect server into typed columns, after a 1,000-value Avro batch that warms the
    decoders as the bytes path is warmed; ``avro_over_bytes``: over the bytes batch just before."""
    import io

    import fastavro
    import pyarrow.dataset as ds
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
    from kafka_batch_provider.testing.producers import Record, produce

    topic = f"bench-avro-{int(time.time())}"
    with EmbeddedSchemaRegistry(log_path=work / "schema-registry.log") as registry:
        schema_id = SchemaRegistryClient({"url": registry.url}).register_schema(
            f"{topic}-value", Schema(json.dumps(AVRO_READING), "AVRO")
        )
        parsed = fastavro.parse_schema(AVRO_READING)
        header = b"\x00" + schema_id.to_bytes(4, "big")
        distinct = []  # 1,000 distinct values, produced round and round
        for i in range(1000):
            reading = {
                "id": i * 7919,
                "sensor": f"sensor-{i % 37}",
                "celsius": 20 + i / 100,
                "taken": 1_790_000_000_000 + i,
                "ok": i % 2 == 0,
                "tags": ["lab", f"floor-{i % 5}"],
                "note": None if i % 3 else "checked",
                "payload": "x" * (120 + i % 20),
            }
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed, reading)
            distinct.append(header + buffer.getvalue())
        create_topics(config, {topic: args.partitions, f"{topic}-warm": args.partitions})
        records = (Record(partition=i % args.partitions, value=distinct[i % 1000]) for i in range(args.records))
        started = time.perf_counter()
        produce(config, topic, records)
        size, took = sum(map(len, distinct)) / len(distinct), time.perf_counter() - started
        say(f"produced {args.records:,} Avro values of ~{size:.0f} bytes to {topic} in {took:.1f}s")
        # As the bytes path is measured warm (its 1,000-record batch first), the Avro path's first
        # batch pays the workers' imports of the decoders (polars, fastavro, the registry client).
        produce(
            config, f"{topic}-warm", [Record(partition=i % args.partitions, value=distinct[i]) for i in range(1000)]
        )
        run_pipeline(
            [
                KAFKA_BATCH, "run", "--bootstrap-servers", bootstrap, "--topic", f"{topic}-warm", "--group",
                "bench-avro-warm", "--output", str(work / "avro-warm"), "--value-format", "avro",
                "--value-subject", f"{topic}-value", "--schema-registry-url", registry.url, *remote,
            ]
        )  # fmt: skip
        output = work / "avro"
        run, seconds = run_pipeline(
            [
                KAFKA_BATCH, "run", "--bootstrap-servers", bootstrap, "--topic", topic, "--group", "bench-avro",
                "--output", str(output), "--value-format", "avro", "--schema-registry-url", registry.url, *remote,
            ]
        )  # fmt: skip
    rows = ds.dataset([str(p) for p in output.glob("batch_id=*/*.parquet")], format="parquet").count_rows()
    if not run["records"] == rows == args.records:
        raise SystemExit(f"error: avro: the run reported {run['records']} records, the output holds {rows}")
    rps = run["records"] / seconds
    say(
        f"connect, Avro into typed columns: {run['records']:,} records in {seconds:.2f}s ({rps / bytes_rps:.2f}x bytes)"
    )
    if not args.keep:
        shutil.rmtree(output, ignore_errors=True)
    return {
        "avro_rps": round(rps),
        "avro_seconds": round(seconds, 3),
        "avro_value_bytes": round(size),
        "avro_over_bytes": round(rps / bytes_rps, 3),
        "avro_over_bytes_of": "avro_rps over connect_rps (the same server, just before)",
        "avro_timings": run.get("timings", {}),
    }


def connect_measures(args: argparse.Namespace, config: dict, bootstrap: str, topic: str, work: Path) -> dict:
    """Warm Spark Connect servers (local[2], then local[1]): the 1M batch, an empty batch, 5M, worker RSS."""
    from kafka_batch_provider.dev.spark_connect import SparkConnectServer

    warm_topic = f"{topic}-warm"
    produce_topic(config, warm_topic, args.partitions, 1_000, args.value_size)
    result: dict = {}
    rates: dict[int, float] = {}
    for cores in (2, 1):
        say(f"connect: starting a Spark Connect server (local[{cores}]) ...")
        with SparkConnectServer(master=f"local[{cores}]", log_path=work / f"connect-{cores}.log") as server:
            remote = ("--spark-remote", server.remote)
            run_cli(bootstrap, warm_topic, f"bench-warm-{cores}", work / f"warm-{cores}", *remote)
            run, seconds = run_cli(bootstrap, topic, f"bench-connect-{cores}", work / f"connect-{cores}", *remote)
            rates[cores] = run["records"] / seconds
            say(f"connect local[{cores}]: {run['records']:,} records in {seconds:.2f}s")
            if cores == 1:
                continue
            result.update(
                connect_seconds=round(seconds, 3),
                connect_records=run["records"],
                connect_timings=run.get("timings", {}),
            )
            result.update(spark_source_measures(server.remote, config, topic, run["records"] / seconds, work))
            jvm_run, jvm_seconds = run_cli(
                bootstrap, topic, "bench-connect-jvm", work / "connect-jvm", *remote, "--reader", "jvm"
            )
            result["jvm_reader_rps"] = round(jvm_run["records"] / jvm_seconds)
            say(f"connect, kafka-batch run --reader jvm: {jvm_run['records']:,} records in {jvm_seconds:.2f}s")
            python_run, python_seconds = run_cli(
                bootstrap, topic, "bench-connect-python", work / "connect-python", *remote, "--reader", "python"
            )
            result["connect_python_reader_rps"] = round(python_run["records"] / python_seconds)
            result["connect_native_over_python"] = round(
                (run["records"] / seconds) / result["connect_python_reader_rps"], 3
            )
            say(f"connect, --reader python: {python_run['records']:,} records in {python_seconds:.2f}s")
            result.update(avro_measure(config, bootstrap, args, work, remote, run["records"] / seconds))
            _, empty = run_cli(bootstrap, topic, f"bench-connect-{cores}", work / f"connect-{cores}", *remote)
            result["empty_batch_seconds"] = round(empty, 3)
            say(f"empty batch (nothing new; no Spark job): {empty:.2f}s")
            if args.large_records:
                large_topic = f"{topic}-large"
                produce_topic(config, large_topic, args.partitions, args.large_records, args.value_size)
                big, big_seconds = run_cli(bootstrap, large_topic, "bench-large", work / "large", *remote)
                result["large"] = {
                    "records": big["records"],
                    "seconds": round(big_seconds, 3),
                    "rps": round(big["records"] / big_seconds),
                    "base_records": run["records"],  # the --records batch: connect_rps
                    "large_over_base": round((big["records"] / big_seconds) / rates[2], 3),
                }
                say(f"connect, {big['records']:,} records: {big_seconds:.2f}s")
                if not args.keep:
                    shutil.rmtree(work / "large", ignore_errors=True)
            if args.rss_gb:
                value_size = 64 * 1024
                count = int(args.rss_gb * 1024**3 / value_size) + 1
                rss_topic = f"{topic}-rss"
                produce_topic(config, rss_topic, args.partitions, count, value_size)
                with WorkerMemory(server.pid) as memory:
                    rss_run, rss_seconds = run_cli(bootstrap, rss_topic, "bench-rss", work / "rss", *remote)
                result.update(
                    peak_worker_rss_mb=round(memory.peak_mb, 1),
                    peak_workers_total_rss_mb=round(memory.peak_total_mb, 1),
                    rss_ingested_gb=round(rss_run["records"] * value_size / 1024**3, 2),
                    rss_seconds=round(rss_seconds, 3),
                )
                say(
                    f"{rss_run['records']:,} records of 64 KB in {rss_seconds:.1f}s; workers' peak RSS "
                    f"{memory.peak_mb:.0f} MB each, {memory.peak_total_mb:.0f} MB together"
                )
                shutil.rmtree(work / "rss", ignore_errors=True)
    result["connect_rps"] = round(rates[2])
    result["connect_local1_rps"] = round(rates[1])
    result["scaling"] = round(rates[2] / rates[1], 3)
    result["scaling_of"] = "connect_rps, local[2] over local[1]"
    return result


def spark_source_measures(remote: str, config: dict, topic: str, connect_rps: float, work: Path) -> dict:
    """Spark's own Kafka source on the warm server: into Parquet, and handing Arrow to Python.

    The same ranges as every other measure (offset 0 to the end of each partition), the options the
    ``jvm`` reader builds; a read of the small warm-up topic first loads the connector's classes.
    """
    from kafka_batch_provider.spark.connect import connect_session
    from kafka_batch_provider.spark.jvm_options import jvm_reader_options

    kafka = KafkaOffsets(config)
    ranges = {}
    for name in (f"{topic}-warm", topic):
        tps = kafka.topic_partitions([name])
        ranges[name] = [OffsetRange(tp.topic, tp.partition, 0, end) for tp, end in kafka.log_end_offsets(tps).items()]
    # Our own session helper: it keeps this process out of Spark Connect mode, which would stop the
    # writers' comparison from starting a classic session later in the run.
    spark = connect_session(remote)

    def source(name: str):
        return spark.read.format("kafka").options(**jvm_reader_options(ranges[name], config)).load()

    def count_batches(batches):
        import pyarrow as pa

        rows = sum(batch.num_rows for batch in batches)
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    try:
        source(f"{topic}-warm").write.mode("overwrite").parquet(str(work / "spark-source-warm"))
        records = sum(r.end - r.start for r in ranges[topic])
        started = time.perf_counter()
        source(topic).write.mode("overwrite").parquet(str(work / "spark-source"))
        parquet_seconds = time.perf_counter() - started
        started = time.perf_counter()
        counted = sum(row["rows"] for row in source(topic).mapInArrow(count_batches, "rows long").collect())
        arrow_seconds = time.perf_counter() - started
    finally:
        spark.client.close()
        shutil.rmtree(work / "spark-source", ignore_errors=True)
    if counted != records:
        raise SystemExit(f"error: Spark's source handed {counted} rows to Python, {records} were planned")
    say(
        f"Spark's own Kafka source: {records:,} records into Parquet in {parquet_seconds:.2f}s; "
        f"as Arrow to a Python worker in {arrow_seconds:.2f}s"
    )
    return {
        "spark_kafka_source_seconds": round(parquet_seconds, 3),
        "spark_kafka_source_rps": round(records / parquet_seconds),
        "connect_over_spark_source": round(connect_rps / (records / parquet_seconds), 3),
        "spark_source_arrow_rps": round(records / arrow_seconds),
    }


class ParquetBuffer:
    """What a user's ``apply_function`` does: collect the messages, write Parquet every 50,000."""

    def __init__(self, path: Path) -> None:
        self.path, self.rows, self.first_at, self.writer = path, [], None, None
        self.count = 0

    def add(self, message) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        kind, stamp = message.timestamp()
        self.rows.append(
            (message.key(), message.value(), message.topic(), message.partition(), message.offset(), stamp)
        )
        if len(self.rows) >= 50_000:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.rows:
            return
        names = ["key", "value", "topic", "partition", "offset", "timestamp"]
        table = pa.Table.from_arrays([pa.array(list(column)) for column in zip(*self.rows)], names=names)
        if self.writer is None:
            self.writer = pq.ParquetWriter(str(self.path), table.schema)
        self.writer.write_table(table)
        self.count += len(self.rows)
        self.rows = []

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()


def airflow_kafka_measure(bootstrap: str, topic: str, records: int, work: Path) -> dict:
    """``ConsumeFromTopicOperator`` + an ``apply_function`` writing Parquet, timed from its first record."""
    os.environ["AIRFLOW_CONN_KAFKA_BATCH_BENCH"] = json.dumps(
        {
            "conn_type": "kafka",
            "extra": {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-airflow-{int(time.time())}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            },
        }
    )
    from airflow.providers.apache.kafka.operators.consume import ConsumeFromTopicOperator

    buffer = ParquetBuffer(work / "airflow-kafka.parquet")
    operator = ConsumeFromTopicOperator(
        task_id="consume",
        topics=[topic],
        kafka_config_id="kafka_batch_bench",
        apply_function=buffer.add,
        max_messages=records,
        max_batch_size=10_000,
        poll_timeout=60,
        commit_cadence="end_of_operator",
    )
    started = time.perf_counter()
    operator.execute(context={})
    buffer.close()
    finished = time.perf_counter()
    if buffer.count != records or buffer.first_at is None:
        raise SystemExit(f"ConsumeFromTopicOperator wrote {buffer.count} records, expected {records}")
    return {
        "airflow_kafka_rps": round(records / (finished - buffer.first_at)),
        "airflow_kafka_seconds_from_first_record": round(finished - buffer.first_at, 3),
        "airflow_kafka_join_seconds": round(buffer.first_at - started, 3),
    }


def plan_commit_measure(config: dict, topic: str, work: Path) -> dict:
    """Plan (group, end and start offsets; the plan file) and compare-and-set commit, at 1 to 10,000 partitions.

    Each Kafka call covers every partition at once, so the time barely grows with them.
    """
    from kafka_batch_provider.core.planning import PlanPolicy
    from kafka_batch_provider.output.store import BatchStore
    from kafka_batch_provider.steps.plan import plan_batch

    seconds = {}
    for partitions in (1, 200, 2_000, 10_000):
        name = f"{topic}-pc{partitions}"
        produce_topic(config, name, partitions, partitions * 2, 100)
        kafka = KafkaOffsets(config)
        best = {"plan": float("inf"), "commit": float("inf")}
        for attempt in range(2):  # best of two: the first call also opens the connections
            store = BatchStore(str(work / f"pc-{partitions}-{attempt}"))
            started = time.perf_counter()
            plan = plan_batch(kafka, store, f"bench-pc-{partitions}-{attempt}", [name], PlanPolicy()).plan
            planned = time.perf_counter()
            kafka.commit(plan.group_id, plan.expected_committed(), plan.end_offsets(), metadata=plan.batch_id)
            done = time.perf_counter()
            best = {"plan": min(best["plan"], planned - started), "commit": min(best["commit"], done - planned)}
        seconds[str(partitions)] = {k: round(v, 3) for k, v in best.items()}
        say(f"plan + commit, {partitions} partitions: {best['plan']:.3f}s + {best['commit']:.3f}s (best of 2)")
    return seconds


def merge_measures(rows: int, changes: int) -> dict:
    """``merge_*``: bench/merge.py in a process of its own (its peak RSS is the merges' alone)."""
    say(f"merge: a {rows:,}-row table, batches of {changes:,} changes, against bare delta-rs and pyiceberg ...")
    script = Path(__file__).resolve().parent / "merge.py"
    found = subprocess.run(
        [sys.executable, str(script), "--rows", str(rows), "--changes", str(changes)],
        stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(found.stdout.strip().splitlines()[-1])


def merge_snapshot_measures(rows: int) -> dict:
    """``merge_snapshot_*``: bench/merge_snapshot.py (a Debezium snapshot, then changes; each format's
    commits in a process of their own, whose peak RSS is the driver's)."""
    say(f"merge snapshot: {rows:,} Debezium snapshot events, then 3 x 100,000 changes, Delta and Iceberg ...")
    script = Path(__file__).resolve().parent / "merge_snapshot.py"
    found = subprocess.run(
        [sys.executable, str(script), "--rows", str(rows), "--changes", "100000", "--batches", "3"],
        stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(found.stdout.strip().splitlines()[-1])


def database_measures(records: int, bootstrap: str, topic: str, spark_master: str, keyed_records: int) -> dict:
    """``db_*``: bench/database_output.py (PostgreSQL and MariaDB of its own; the whole batch on the same
    topic against Parquet and Spark's JDBC writer; the upsert case against Debezium's JDBC sink)."""
    say(f"database outputs: {records:,} records committed, the whole batch against Parquet and Spark's JDBC writer, "
        f"{keyed_records:,} keyed records against Debezium's JDBC sink ...")  # fmt: skip
    script = Path(__file__).resolve().parent / "database_output.py"
    found = subprocess.run(
        [sys.executable, str(script), "--records", str(records), "--bootstrap", bootstrap, "--topic", topic,
         "--spark-master", spark_master, "--keyed-records", str(keyed_records)],
        stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(found.stdout.strip().splitlines()[-1])


def many_topics_measures(topics: int, bootstrap: str) -> dict:
    """``many_topics_*``: bench/many_topics.py in a process of its own, on the same broker."""
    say(f"many topics: {topics} topics of 3 partitions, one pattern batch against a run per topic ...")
    script = Path(__file__).resolve().parent / "many_topics.py"
    found = subprocess.run(
        [sys.executable, str(script), "--topics", str(topics)],
        stdout=subprocess.PIPE, text=True, check=True, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
    )  # fmt: skip
    return json.loads(found.stdout.strip().splitlines()[-1])


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
    parser.add_argument("--no-connect", action="store_true", help="skip the Spark Connect runs")
    parser.add_argument("--no-airflow-kafka", action="store_true", help="skip ConsumeFromTopicOperator")
    parser.add_argument("--large-records", type=int, default=5_000_000, help="the large batch (0: skip)")
    parser.add_argument("--rss-gb", type=float, default=2.0, help="GB of 64 KB records for the RSS run (0: skip)")
    parser.add_argument("--soak-batches", type=int, default=1000, help="batches of the soak (under 200: skip)")
    parser.add_argument(
        "--freshness-bursts", type=int, default=5, help="1,000-record bursts through the lag-fired DAG (0: skip)"
    )
    parser.add_argument("--merge-rows", type=int, default=1_000_000, help="the merged table's rows (0: skip)")
    parser.add_argument("--merge-changes", type=int, default=10_000, help="changes per merged batch")
    parser.add_argument("--merge-snapshot-rows", type=int, default=2_000_000, help="Debezium snapshot events (0: skip)")
    parser.add_argument("--database-records", type=int, default=1_000_000, help="PostgreSQL output's records (0: skip)")
    parser.add_argument("--keyed-records", type=int, default=300_000, help="the database upsert case's records")
    parser.add_argument("--many-topics", type=int, default=500, help="topics of the many-topics run (0: skip)")
    args = parser.parse_args()
    output = result_stream()
    formats = list(dict.fromkeys(f.strip() for f in args.formats.split(",") if f.strip()))
    unknown = sorted(set(formats) - {"parquet", *TABLES})
    if unknown or "parquet" not in formats:
        parser.error(f"--formats: parquet plus any of {', '.join(TABLES)}, got {args.formats!r}")

    work = Path(tempfile.mkdtemp(prefix="kafka-batch-bench-"))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = (
        None
        if external
        else KafkaBroker(
            log_path=work / "broker.log",
            data_dir=work / "kafka",
            max_heap="1g",  # 10,000 partitions, GBs of records
        ).start()
    )
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
        say("the read path alone: the native reader, the python reader and kcat, discarding ...")
        read_path = native_reader.measures(bootstrap, topic, ends)
        say(f"the read path alone: {read_path}")

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
            **read_path,
            "native_over_baseline": round(read_path["native_reader_rps"] / (base_records / base_seconds), 3),
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
            from kafka_batch_provider.dev.s3 import EmbeddedS3

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
        say("fixed cost: a 1,000-record batch through spark-submit ...")
        small = f"{topic}-small"
        produce_topic(config, small, args.partitions, 1_000, args.value_size)
        fixed_run, fixed = run_cli(bootstrap, small, "bench-fixed", work / "fixed", "--spark-master", "local[2]")
        summary["fixed_seconds"] = round(fixed, 3)
        summary["fixed_phases"] = fixed_run.get("timings", {})  # where they went: launch, session, batch, exit
        say(f"fixed cost: {fixed:.2f}s ({', '.join(f'{k} {v}' for k, v in summary['fixed_phases'].items())})")
        summary["plan_commit_seconds"] = plan_commit_measure(config, topic, work)
        if not args.no_connect:
            summary.update(connect_measures(args, config, bootstrap, topic, work))
            summary["connect_over_baseline"] = round(summary["connect_rps"] / summary["baseline_rps"], 3)
            best = max(summary["pipeline_rps"], summary["connect_rps"])
            summary["best_over_spark_source"] = round(best / summary["spark_kafka_source_rps"], 3)
            summary["best_over_spark_source_of"] = "max(pipeline_rps, connect_rps) over spark_kafka_source_rps"
        if not args.no_airflow_kafka:
            say("ConsumeFromTopicOperator (apache-airflow-providers-apache-kafka) writing Parquet ...")
            summary.update(airflow_kafka_measure(bootstrap, topic, base_records, work))
            best = max(summary["pipeline_rps"], summary.get("connect_rps", 0))
            summary["best_over_airflow_kafka"] = round(best / summary["airflow_kafka_rps"], 3)
        if not args.no_writers:
            say("writers: Spark's Parquet writer and the pyarrow task writer on the same DataFrame ...")
            summary["writers"] = compare_writers(config, topic, ends, work, args.spark_master)
        if args.freshness_bursts:
            from freshness import freshness_measures  # bench/ is this script's folder

            say(f"freshness: {args.freshness_bursts} bursts through kafka_batch_ingest_on_lag in a live Airflow ...")
            summary["freshness"] = freshness_measures(bootstrap, work, args.freshness_bursts)
            summary["freshness_seconds"] = summary["freshness"]["freshness_seconds"]
            summary["downstream_seconds"] = summary["freshness"]["downstream_seconds"]
        from year import year_measures  # bench/ is this script's folder

        summary["year"] = year_measures(config, topic, work, args.soak_batches)
        if args.merge_rows:
            summary.update(merge_measures(args.merge_rows, args.merge_changes))
        if args.merge_snapshot_rows:
            summary.update(merge_snapshot_measures(args.merge_snapshot_rows))
        if args.database_records:
            summary.update(
                database_measures(args.database_records, bootstrap, topic, args.spark_master, args.keyed_records)
            )
        if args.many_topics:
            summary.update(many_topics_measures(args.many_topics, bootstrap))
        print(json.dumps(summary), file=output, flush=True)
        return 0
    finally:
        if broker is not None:
            broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
