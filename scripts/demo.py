"""`make demo`: the main job end to end through Airflow, on the embedded defaults.

1. start Apache Kafka itself (a single-node KRaft broker from the jars of `make jvm-tools`; or use
   $KAFKA_BOOTSTRAP_SERVERS) and the embedded S3-protocol server (or use $AWS_ENDPOINT_URL with
   $AWS_ACCESS_KEY_ID),
2. produce sample events to two topics,
3. run the `kafka_batch_ingest` DAG (`airflow dags test`): plan -> Spark -> commit, the lake
   on S3 (`s3://lake/...`, credentials in an Airflow `aws` connection). Spark is a local
   Spark Connect server (`local[*]`): the demo runs five Spark batches, and one warm server
   costs one JVM start instead of five spark-submits (KAFKA_BATCH_DEMO_SPARK=submit runs
   spark-submit per batch instead),
4. produce more events and run it again: the second batch holds only the new events,
5. delete the consumer group (as Kafka does when offsets expire), produce more, run again:
   the batch resumes from the output's offset log and reads only the new events,
6. run the `kafka_batch_backfill` DAG for a time range, mapped to offsets by the broker (by
   offsets where a broker cannot map times, as the embedded tansu one), which never commits the group,
7. ingest the same topics into a Delta Lake table on the local disk (`kafka-batch run --format
   delta`, its own group), read it back with deltalake and DuckDB, list its batches
   (`kafka-batch table`), then keep it up (`kafka-batch upkeep`: its files before and after),
8. an Avro topic through the embedded schema registry into a second Delta table
   (`--value-format avro --on-bad-record dead-letter`): typed columns, a field a new schema
   version adds mid-stream becoming a column, and three corrupt records set aside as dead
   letters, all read back by DuckDB,
9. change data capture: a PostgreSQL table (a plain server process) changed three times, Debezium
   in Kafka Connect writing its change events to Kafka, `kafka-batch run --mode changes
   --change-format debezium` merging each round into a Delta table in one commit with its offsets,
   DuckDB reading the table back equal to `SELECT * FROM` the source each time (scripts/demo_cdc.py),
10. a platform's worth of topics, small: `kafka-batch run --topic-pattern ... --output
   '.demo/topics/{topic}'` writes three topics into a Delta table each in one Spark job, then a
   topic created since into its own in the next run; the metrics each batch sent go to a StatsD
   listener of the demo's (scripts/demo_topics.py),
11. a PostgreSQL table: the `kafka_batch_ingest` DAG into `public.clicks` (a `postgres` connection),
   each batch's rows and offsets in one database transaction; the group deleted, the next run
   resumes from the table's offset log; `SELECT count(*)` equal to what was produced
   (scripts/demo_database.py),
12. print a summary: batches, ranges, rows, lag before and after, lag health, where the data is,
   and copy-paste snippets that query the Delta table.

Airflow uses the project-local AIRFLOW_HOME (.airflow, SQLite); its full task logs go to
.demo/*.log. The Delta table stays in .demo/delta/events after the demo, for the snippets.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".demo"
BIN = Path(sys.executable).parent
os.environ.setdefault("AIRFLOW_HOME", str(ROOT / ".airflow"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # spark-submit for the Spark hook
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pyarrow.dataset as ds  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from demo_cdc import cdc_demo  # noqa: E402 - beside this script
from demo_database import database_demo  # noqa: E402 - beside this script
from demo_topics import LATE, TOPICS, per_topic, topics_demo  # noqa: E402 - beside this script
from pyarrow.fs import FSSpecHandler, PyFileSystem  # noqa: E402

from kafka_batch_provider.dev.kafka import KafkaBroker  # noqa: E402
from kafka_batch_provider.dev.s3 import EmbeddedS3, S3Endpoint  # noqa: E402
from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry  # noqa: E402
from kafka_batch_provider.dev.spark_connect import SparkConnectServer  # noqa: E402
from kafka_batch_provider.kafka.client import KafkaOffsets  # noqa: E402
from kafka_batch_provider.output.store import BatchStore  # noqa: E402
from kafka_batch_provider.steps.lag import lag_report  # noqa: E402
from kafka_batch_provider.testing.producers import (  # noqa: E402
    broker_supports_offsets_for_times,
    create_topics,
    produce,
    sample_records,
)


def say(line: str = "") -> None:
    print(line, flush=True)


def airflow(*args: str, log_name: str) -> None:
    """Run an Airflow CLI command; its (long) output goes to .demo/<log_name>.log."""
    log_path = WORK / f"{log_name}.log"
    with open(log_path, "w") as log:
        result = subprocess.run([str(BIN / "airflow"), *args], stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = log_path.read_text().splitlines()[-15:]
        sys.exit("demo failed: airflow " + " ".join(args) + "\n" + "\n".join(tail) + f"\n(full log: {log_path})")


def kafka_batch(*args: str, log_name: str) -> tuple[list[str], dict]:
    """Run the `kafka-batch` CLI: its stdout lines and last-line JSON; its progress goes to .demo/<log_name>.log."""
    log_path = WORK / f"{log_name}.log"
    with open(log_path, "w") as log:
        result = subprocess.run([str(BIN / "kafka-batch"), *args], stdout=subprocess.PIPE, stderr=log, text=True)
    if result.returncode != 0:
        tail = log_path.read_text().splitlines()[-15:]
        sys.exit("demo failed: kafka-batch " + " ".join(args) + "\n" + "\n".join(tail) + f"\n(full log: {log_path})")
    lines = result.stdout.splitlines()
    return lines[:-1], json.loads(lines[-1])


def duckdb_connection():
    """DuckDB with its delta extension loaded from the duckdb-ext-delta wheel (no download)."""
    import duckdb
    import duckdb_ext

    extensions = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    con = duckdb.connect(config={"extension_directory": extensions, "autoinstall_known_extensions": False})
    con.execute("LOAD delta")
    return con


def produce_burst(config: dict, topics: dict[str, int], count: int, first_id: int, when_ms: int) -> None:
    for topic, partitions in topics.items():
        produce(config, topic, sample_records(partitions, count, first_id=first_id, timestamp_ms=when_ms))


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    started = time.perf_counter()
    say(f"Airflow home: {os.environ['AIRFLOW_HOME']} (SQLite); preparing the metadata database ...")
    airflow("db", "migrate", log_name="airflow-db-migrate")

    with ExitStack() as stack:
        external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if external:
            bootstrap = external
        else:
            broker = stack.enter_context(KafkaBroker(data_dir=WORK / "kafka", log_path=WORK / "broker.log"))
            bootstrap = broker.bootstrap_servers
            say(f"Apache Kafka (single-node KRaft, {WORK / 'kafka'}) on {bootstrap}")
        s3 = S3Endpoint.from_env(os.environ)
        if s3 is None:
            s3 = stack.enter_context(EmbeddedS3(log_path=WORK / "s3.log")).endpoint
            say(f"embedded S3 server (moto, memory storage) on {s3.endpoint_url}, bucket {s3.bucket}")
        spark_remote = None
        if os.environ.get("KAFKA_BATCH_DEMO_SPARK", "connect") == "connect":
            say("Spark: starting a local Spark Connect server (local[*]); the demo's five Spark batches share it ...")
            server = stack.enter_context(
                SparkConnectServer(master="local[*]", log_path=WORK / "spark-connect.log", lean=True)
            )
            spark_remote = server.remote
            say(f"Spark Connect server at {spark_remote}")
        else:
            say("Spark: spark-submit per batch (local[*]), as KAFKA_BATCH_DEMO_SPARK=submit asks")
        registry = stack.enter_context(EmbeddedSchemaRegistry(log_path=WORK / "schema-registry.log"))
        say(f"embedded schema registry (Confluent's REST API) on {registry.url}")
        return run_demo(bootstrap, s3, started, spark_remote, registry.url)


def run_demo(bootstrap: str, s3: S3Endpoint, started: float, spark_remote: str | None, registry_url: str) -> int:
    config = {"bootstrap.servers": bootstrap}
    suffix = time.strftime("%H%M%S")
    topics = {f"demo.orders.{suffix}": 3, f"demo.payments.{suffix}": 2}
    group = f"demo-ingest-{suffix}"
    lake, replay_out = f"s3://{s3.bucket}/demo-{suffix}/lake", f"s3://{s3.bucket}/demo-{suffix}/lake_replay"
    create_topics(config, topics)

    # Connections and Variables from the environment, as a deployment would set them. The
    # storage credentials live in an Airflow `aws` connection, never in the DAG or XCom.
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": config})
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
    if spark_remote:
        host, port = spark_remote.removeprefix("sc://").split(":")
        os.environ["AIRFLOW_CONN_SPARK_CONNECT_DEMO"] = json.dumps(
            {"conn_type": "spark_connect", "host": host, "port": int(port)}
        )
        os.environ["KAFKA_BATCH_SPARK_CONNECT_CONN_ID"] = "spark_connect_demo"  # the DAGs pick the Connect operator
    os.environ["AIRFLOW_CONN_DEMO_LAKE"] = json.dumps(
        {
            "conn_type": "aws",
            "login": s3.access_key,
            "password": s3.secret_key,
            "extra": {"endpoint_url": s3.endpoint_url, "region_name": s3.region},
        }
    )
    os.environ["KAFKA_BATCH_STORAGE_CONN_ID"] = "demo_lake"
    os.environ["AIRFLOW_VAR_KAFKA_BATCH_TOPICS"] = ",".join(topics)
    os.environ["AIRFLOW_VAR_KAFKA_BATCH_GROUP"] = group
    os.environ["KAFKA_BATCH_OUTPUT"] = lake  # every shipped DAG's output (the downstream DAG follows it)

    kafka = KafkaOffsets(config)
    names = list(topics)

    def lag() -> int:
        return sum(kafka.lag(group, names).values())

    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    produce_burst(config, topics, 10_000, 0, int(hour_ago.timestamp() * 1000))
    say(f"produced 10,000 events to each of {', '.join(names)} (timestamps {hour_ago:%H:%M} UTC)")
    runs = []
    for run, (count, first_id) in enumerate([(None, None), (2_000, 10_000), (1_000, 12_000)], start=1):
        if run == 3:
            admin = AdminClient(config)
            admin.delete_consumer_groups([group], request_timeout=30)[group].result()
            say(f"deleted consumer group {group} (as Kafka does when its offsets expire)")
        if count:
            now = datetime.now(timezone.utc)
            produce_burst(config, topics, count, first_id, int(now.timestamp() * 1000))
            say(f"produced {count:,} more events to each topic (timestamps {now:%H:%M} UTC)")
        before = lag()
        say(f"run {run}: airflow dags test kafka_batch_ingest ...")
        airflow("dags", "test", "kafka_batch_ingest", log_name=f"airflow-ingest-run{run}")
        runs.append((before, lag()))

    store = BatchStore(lake, s3.storage_options())
    entries = list(store.log.entries())
    resumed = "resuming from the output's log" in (WORK / "airflow-ingest-run3.log").read_text()
    events, counted = asset_events_and_downstream(lake)

    # The backfill: by time where the broker maps times to offsets, else by offsets.
    window_start, window_end = hour_ago - timedelta(minutes=5), hour_ago + timedelta(minutes=5)
    if broker_supports_offsets_for_times(config, _probe_topic(config, suffix)):
        conf = {"topic": names[0], "start_time": window_start.isoformat(), "end_time": window_end.isoformat()}
        how = f"time range {window_start:%H:%M}-{window_end:%H:%M} UTC"
    else:
        conf = {"topic": names[0], "start_offsets": {"0": 100}, "end_offsets": {"0": 200}}
        how = "offsets 100-200 of partition 0 (this broker cannot map times to offsets)"
    conf["output_path"] = replay_out
    say(f"backfill: airflow dags test kafka_batch_backfill, {how} ...")
    committed_before = kafka.committed_offsets(group, [tp for tp in _tps(kafka, names)])
    airflow("dags", "test", "kafka_batch_backfill", "-c", json.dumps(conf), log_name="airflow-backfill")
    committed_after = kafka.committed_offsets(group, [tp for tp in _tps(kafka, names)])

    # The same topics into a Delta Lake table (the CLI; its own group): the offsets live in the
    # table's commits. Local, so the printed snippets still work after the demo.
    delta_path = WORK / "delta" / "events"
    delta_group = f"demo-delta-{suffix}"
    say(f"delta: kafka-batch run --format delta --output {delta_path} (group {delta_group}) ...")
    topic_args = [arg for name in names for arg in ("--topic", name)]
    _, delta_run = kafka_batch(
        "run",
        *("--bootstrap-servers", bootstrap, *topic_args, "--group", delta_group),
        *("--format", "delta", "--output", str(delta_path)),
        *(["--spark-remote", spark_remote] if spark_remote else []),
        log_name="kafka-batch-delta-run",
    )
    delta_rows, delta_once, duckdb_rows = read_delta(delta_path)
    batch_lines, listed = kafka_batch(
        "table", "--format", "delta", "--output", str(delta_path), log_name="kafka-batch-delta-table"
    )
    # Upkeep, as the kafka_batch_upkeep DAG runs it daily: compaction, log cleanup, vacuum.
    say(f"upkeep: kafka-batch upkeep --format delta --output {delta_path} --retention-hours 1 ...")
    _, upkept = kafka_batch(
        "upkeep", "--format", "delta", "--output", str(delta_path), "--retention-hours", "1",
        log_name="kafka-batch-delta-upkeep",
    )  # fmt: skip
    upkept_rows, upkept_once, _ = read_delta(delta_path)
    avro = avro_demo(config, registry_url, spark_remote, suffix)
    cdc = cdc_demo(config, spark_remote, WORK, kafka_batch, duckdb_connection, say)
    platform = topics_demo(config, spark_remote, WORK, kafka_batch, duckdb_connection, say)
    database = database_demo(config, WORK, airflow, say)

    filesystem = PyFileSystem(FSSpecHandler(store.location.fs))
    table = ds.dataset(store.location.root, filesystem=filesystem, format="parquet", partitioning="hive").to_table(
        columns=["topic", "partition", "offset"]
    )
    keys = Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
    replay_rows = sum(e["rows"] for e in BatchStore(replay_out, s3.storage_options()).log.entries())

    say()
    say("summary")
    say(f"  {'run':<5}{'batch (log entry)':<30}{'rows':>8}{'lag before':>12}{'lag after':>11}  ranges read")
    for run, (entry, (before, after)) in enumerate(zip(entries, runs), start=1):
        ranges = ", ".join(
            f"{r['topic'].split('.')[1]}[{r['partition']}] {r['start']}-{r['end']}"
            for r in entry["ranges"]
            if r["end"] > r["start"]
        )
        label = f"{entry['batch_id']} ({entry['seq']})"
        say(f"  {run:<5}{label:<30}{entry['rows']:>8,}{before:>12,}{after:>11,}  {ranges}")
    say(
        "  run 3 followed a deleted consumer group: "
        + ("it resumed from the output's offset log and read only the new events" if resumed else "NOT RESUMED")
    )
    say(
        f"  backfill ({how.split(' (')[0]}): {replay_rows:,} rows in {replay_out}; "
        f"group offsets {'unchanged' if committed_before == committed_after else 'CHANGED'}"
    )
    say(f"  asset events on {events['uri']} (one per committed batch, in Airflow's metadata DB):")
    for extra in events["extras"]:
        ranges = " ".join(f"{r['topic']}:{r['partition']}=[{r['start']},{r['end']})" for r in extra["ranges"])
        say(f"    batch {extra['batch_id']} (log entry {extra['seq']}): {extra['rows']:,} rows; {ranges}")
    say("  downstream (kafka_batch_downstream's count_batch on those events; each batch read back by its ranges):")
    for row in counted:
        say(f"    batch {row['batch_id']}: {', '.join(f'{t} {n:,}' for t, n in row['rows_by_topic'].items())}")
    health = lag_report(kafka, group, names, store)
    say(f"  lag health: {health.message()} (what the DAG's last task, ingest.lag_health, judged too)")
    say(
        f"  lake: {lake} on {s3.endpoint_url} ({table.num_rows:,} rows, {len(entries)} batches, "
        f"every offset exactly once: {'yes' if all(n == 1 for n in keys.values()) else 'NO'})"
    )
    say(
        f"  read it: pyarrow.dataset.dataset('{store.location.root}', filesystem=<s3fs>, format='parquet', "
        "partitioning='hive'); its offset log: kafka_batch_provider.output.store.BatchStore(lake).log.entries()"
    )
    say(
        f"  Delta table: {delta_path} ({delta_run['records']:,} rows written in one batch, group {delta_group}); "
        f"read back: deltalake {delta_rows:,} rows, DuckDB delta_scan {duckdb_rows:,} rows, "
        f"every offset exactly once: {'yes' if delta_once else 'NO'}"
    )
    say(
        f"  upkeep of the Delta table: data files {upkept['files_before']} -> {upkept['files_after']} "
        f"({upkept['compacted_files']} compacted into {upkept['written_files']}); after it: {upkept_rows:,} rows, "
        f"every offset exactly once: {'yes' if upkept_once else 'NO'}"
    )
    say(f"  its batches (kafka-batch table --format delta --output {delta_path}):")
    for line in batch_lines:
        say(f"    {line}")
    say(f"  query it (copy-paste; {BIN}/python and kafka-batch):")
    for snippet in delta_snippets(delta_path):
        say(f"    {snippet}")
    say(
        f"  Avro (schema registry) -> Delta table {avro['path']}: batch 1 {avro['rows'][0]:,} rows + "
        f"{avro['dead_letters'][0]} dead letters read with version 1, batch 2 {avro['rows'][1]:,} rows with version 2"
    )
    say(f"    columns (DuckDB DESCRIBE): {avro['columns']}")
    say(
        f"    DuckDB delta_scan: {avro['duckdb_rows']:,} rows, {avro['with_humidity']:,} with the humidity version 2 "
        f"added (the first batch's rows read it as null)"
    )
    say(f"    dead letters (DuckDB read_parquet('{avro['dead_letter_glob']}')):")
    for partition, offset, error in avro["letters"]:
        say(f"      [{partition}] offset {offset}: {error}")
    say(f"  Postgres -> Debezium -> Kafka -> Delta table {cdc['path']} (--mode changes --change-format debezium):")
    for number, r in enumerate(cdc["rounds"], start=1):
        say(
            f"    round {number}: {r['what']}: {r['events']} events, {r['upserts']} upserts + {r['deletes']} deletes "
            f"merged; DuckDB {r['lake_rows']:,} rows {'==' if r['equal'] else '!='} Postgres {r['source_rows']:,} rows"
        )
    say(f"  a topic pattern into a Delta table per topic ({platform['lake']}/{{topic}}), one Spark job a run:")
    metrics = per_topic(platform["metrics"])
    for topic, rows in platform["rows"].items():
        got = metrics.get(topic, {})
        say(
            f"    {topic}: DuckDB {rows:,} rows; metrics: records.read {got.get('records.read', 0):,.0f}, "
            f"lag.before {got.get('lag.before', 0):,.0f} -> lag.after {got.get('lag.after', 0):,.0f}"
        )
    first, second = platform["runs"]
    say(
        f"    run 1: {len(first['tables'])} tables, {first['rows']:,} rows (plan {first['timings']['plan_seconds']}s); "
        f"run 2 found the topic created since: {', '.join(t for t in second['tables'] if t not in first['tables'])} "
        f"({len(platform['metrics'])} StatsD lines received from both runs)"
    )
    say(
        f"  Kafka -> PostgreSQL table {database['table']} (the ingest DAG; rows and offsets: one transaction): "
        f"batches {database['batches']}; the second run followed a deleted group and "
        + ("resumed from the table's offset log" if database["resumed"] else "DID NOT RESUME")
    )
    say(
        f"    SELECT count(*) FROM {database['table']}: {database['rows']:,} (produced {database['produced']:,}); "
        f"every offset exactly once: {'yes' if database['once'] else 'NO'}; "
        f"password in the task logs: {'YES' if database['password_shown'] else 'no'}"
    )
    path = f"a Spark Connect server at {spark_remote} for all 14 batches" if spark_remote else "spark-submit per batch"
    say(f"  Spark: {path}")
    say(f"  Airflow task logs: {WORK}/airflow-*.log; done in {time.perf_counter() - started:.0f}s")
    ok = (
        [e["rows"] for e in entries] == [20_000, 4_000, 2_000]
        and resumed
        and runs[-1][1] == 0
        and all(n == 1 for n in keys.values())
        and table.num_rows == 26_000
        and committed_before == committed_after
        and replay_rows > 0
        and health.status.value == "OK"
        and delta_run["records"] == delta_rows == duckdb_rows == 26_000
        and delta_once
        and upkept_rows == 26_000
        and upkept_once
        and upkept["files_after"] <= upkept["files_before"]
        and [b["rows"] for b in listed["batches"]] == [26_000]
        and avro["rows"] == [300, 200]
        and avro["dead_letters"] == [3, 0]
        and avro["duckdb_rows"] == 500
        and avro["with_humidity"] == 200
        and len(avro["letters"]) == 3
        and [r["equal"] for r in cdc["rounds"]] == [True, True, True]
        and [r["source_rows"] for r in cdc["rounds"]] == [1000, 1050, 1050]
        and platform["rows"] == {f"{platform['prefix']}.{n}": c for n, (_, c) in {**TOPICS, LATE[0]: LATE[1:]}.items()}
        and len(platform["runs"][0]["tables"]) == 3
        and database["rows"] == database["produced"] == 4_000
        and database["once"]
        and database["batches"] == [3_000, 1_000]
        and database["resumed"]
        and not database["password_shown"]
    )
    return 0 if ok else 1


READING_V1 = {
    "type": "record",
    "name": "Reading",
    "namespace": "demo",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "celsius", "type": "double"},
        {"name": "taken", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
# Version 2 adds an optional field: a new column of the table from the batch that reads with it.
READING_V2 = {**READING_V1, "fields": [*READING_V1["fields"], {"name": "humidity", "type": ["null", "double"],
                                                               "default": None}]}  # fmt: skip


def avro_demo(config: dict, registry_url: str, spark_remote: str | None, suffix: str) -> dict:
    """An Avro topic into a Delta table in two batches: version 1 and three corrupt records
    (dead letters), then version 2's new field; read back by DuckDB."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kafka_batch_provider.testing.producers import Record

    topic, path = f"demo.readings.{suffix}", WORK / "delta" / "readings"
    create_topics(config, {topic: 2})
    context = SerializationContext(topic, MessageField.VALUE)
    now = int(time.time() * 1000)

    def readings(schema: dict, ids: range, **more) -> list[Record]:
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
        values = [{"sensor": f"s-{n % 7}", "celsius": 18 + n % 10 / 4, "taken": now + n, **more} for n in ids]
        return [Record(n % 2, serialize(v, context), f"s-{n % 7}".encode()) for n, v in zip(ids, values)]

    first = readings(READING_V1, range(300))
    good = first[0].value
    corrupt = [b"\x07" + good[1:], good[:3], b"\x00" + (987654).to_bytes(4, "big") + good[5:]]
    produce(config, topic, [*first, *(Record(n % 2, value) for n, value in enumerate(corrupt))])
    args = [
        "run", "--bootstrap-servers", config["bootstrap.servers"], "--topic", topic, "--group", f"demo-avro-{suffix}",
        "--format", "delta", "--output", str(path), "--value-format", "avro", "--schema-registry-url", registry_url,
        "--on-bad-record", "dead-letter", *(["--spark-remote", spark_remote] if spark_remote else []),
    ]  # fmt: skip
    say(f"avro: {topic} (version 1 and 3 corrupt records) -> kafka-batch run --format delta --value-format avro "
        "--on-bad-record dead-letter ...")  # fmt: skip
    _, one = kafka_batch(*args, log_name="kafka-batch-avro-run1")
    produce(config, topic, readings(READING_V2, range(300, 500), humidity=0.4))
    say("avro: the producer moves to version 2 (adds humidity): kafka-batch run again ...")
    _, two = kafka_batch(*args, log_name="kafka-batch-avro-run2")
    con = duckdb_connection()
    scan = f"delta_scan('{path.as_uri()}')"
    described = con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
    columns = ", ".join(f"{name} {kind.lower()}" for name, kind, *_ in described)
    rows, with_humidity = con.execute(f"SELECT count(*), count(humidity) FROM {scan}").fetchone()
    glob = str(path / "_kafka_batch" / "_dead_letters" / "*" / "*.parquet")
    query = f'SELECT partition, "offset", error FROM read_parquet(\'{glob}\') ORDER BY partition, "offset"'
    letters = con.execute(query).fetchall()
    return {
        "path": path,
        "rows": [one["records"], two["records"]],
        "dead_letters": [one["dead_letters"], two["dead_letters"]],
        "columns": columns,
        "duckdb_rows": rows,
        "with_humidity": with_humidity,
        "dead_letter_glob": glob,
        "letters": letters,
    }


def asset_events_and_downstream(lake: str) -> tuple[dict, list[dict]]:
    """The asset events the ingest runs emitted on the lake's asset, and the downstream DAG's task
    run on them (as the scheduler would run it, asset-triggered), its report in the demo's folder."""
    from types import SimpleNamespace

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.sdk import Asset
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from kafka_batch_provider.operators.assets import output_asset_uri
    from kafka_batch_provider.operators.batch_report import KafkaBatchReportOperator

    uri = output_asset_uri({"format": "parquet", "output": lake})
    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
        extras = [dict(e.extra) for e in session.scalars(query.order_by(AssetEvent.id)).all()]
    report = KafkaBatchReportOperator(
        task_id="count_batch", report_db=str(WORK / "batch_report.sqlite"), storage_conn_id="demo_lake"
    )
    triggering = {Asset(uri=uri): [SimpleNamespace(extra=e, asset=SimpleNamespace(uri=uri)) for e in extras]}
    return {"uri": uri, "extras": extras}, report.execute({"triggering_asset_events": triggering})


def read_delta(path: Path) -> tuple[int, bool, int]:
    """Rows as deltalake reads the table, whether each offset is there once, rows as DuckDB reads it."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["topic", "partition", "offset"])
    keys = Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
    duckdb_rows = duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{path.as_uri()}')").fetchone()[0]
    return table.num_rows, all(n == 1 for n in keys.values()), duckdb_rows


def delta_snippets(path: Path) -> list[str]:
    """Python lines and a shell command that query the table at ``path`` (DuckDB: a file:// URI)."""
    location = json.dumps(str(path))
    return [
        f"python: from deltalake import DeltaTable; DeltaTable({location}).to_pyarrow_table().num_rows",
        "python: import os, duckdb, duckdb_ext; con = duckdb.connect(config={'extension_directory': "
        "os.path.join(list(duckdb_ext.__path__)[0], 'extensions')}); con.execute('LOAD delta')",
        f"python: con.sql(\"SELECT topic, count(*) FROM delta_scan('{path.as_uri()}') GROUP BY topic\").show()",
        f"shell:  kafka-batch table --format delta --output {shlex.quote(str(path))}",
    ]


def _tps(kafka: KafkaOffsets, topics: list[str]):
    return kafka.topic_partitions(topics)


def _probe_topic(config: dict, suffix: str) -> str:
    name = f"demo.probe.{suffix}"
    create_topics(config, {name: 1})
    return name


if __name__ == "__main__":
    sys.exit(main())
