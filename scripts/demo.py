"""`make demo`: the main job end to end through Airflow, on the embedded defaults.

1. start the embedded Kafka-protocol broker (or use $KAFKA_BOOTSTRAP_SERVERS) and the
   embedded S3-protocol server (or use $AWS_ENDPOINT_URL with $AWS_ACCESS_KEY_ID),
2. produce sample events to two topics,
3. run the `kafka_batch_ingest` DAG (`airflow dags test`): plan -> Spark local[*] -> commit,
   the lake on S3 (`s3://lake/...`, credentials in an Airflow `aws` connection),
4. produce more events and run it again: the second batch holds only the new events,
5. delete the consumer group (as Kafka does when offsets expire), produce more, run again:
   the batch resumes from the output's offset log and reads only the new events,
6. run the `kafka_batch_backfill` DAG for a time range (by offsets where the broker cannot
   map times to offsets), which never commits the group,
7. print a summary: batches, ranges, rows, lag before and after, lag health, where the data is.

Airflow uses the project-local AIRFLOW_HOME (.airflow, SQLite); its full task logs go to
.demo/*.log.
"""

from __future__ import annotations

import json
import os
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
from pyarrow.fs import FSSpecHandler, PyFileSystem  # noqa: E402

from kafka_batch_provider.batch_store import BatchStore  # noqa: E402
from kafka_batch_provider.broker.embedded import EmbeddedBroker  # noqa: E402
from kafka_batch_provider.kafka_offsets import KafkaOffsets  # noqa: E402
from kafka_batch_provider.lag_monitor import lag_report  # noqa: E402
from kafka_batch_provider.objectstore.embedded import EmbeddedS3, S3Endpoint  # noqa: E402
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
            bootstrap = stack.enter_context(EmbeddedBroker(log_path=WORK / "broker.log")).bootstrap_servers
            say(f"embedded broker (tansu, memory storage) on {bootstrap}")
        s3 = S3Endpoint.from_env(os.environ)
        if s3 is None:
            s3 = stack.enter_context(EmbeddedS3(log_path=WORK / "s3.log")).endpoint
            say(f"embedded S3 server (moto, memory storage) on {s3.endpoint_url}, bucket {s3.bucket}")
        return run_demo(bootstrap, s3, started)


def run_demo(bootstrap: str, s3: S3Endpoint, started: float) -> int:
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
    os.environ["AIRFLOW_VAR_KAFKA_BATCH_OUTPUT"] = lake

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

    # The backfill: by time where the broker maps times to offsets, else by offsets.
    window_start, window_end = hour_ago - timedelta(minutes=5), hour_ago + timedelta(minutes=5)
    if broker_supports_offsets_for_times(config, _probe_topic(config, suffix)):
        conf = {"topic": names[0], "start_time": window_start.isoformat(), "end_time": window_end.isoformat()}
        how = f"time range {window_start:%H:%M}-{window_end:%H:%M} UTC"
    else:
        conf = {"topic": names[0], "start_offsets": {"0": 100}, "end_offsets": {"0": 200}}
        how = "offsets 100-200 of partition 0 (this broker cannot map times to offsets: tansu)"
    conf["output_path"] = replay_out
    say(f"backfill: airflow dags test kafka_batch_backfill, {how} ...")
    committed_before = kafka.committed_offsets(group, [tp for tp in _tps(kafka, names)])
    airflow("dags", "test", "kafka_batch_backfill", "-c", json.dumps(conf), log_name="airflow-backfill")
    committed_after = kafka.committed_offsets(group, [tp for tp in _tps(kafka, names)])

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
    health = lag_report(kafka, group, names, store)
    say(f"  lag health: {health.message()} (what the DAG's last task, ingest.lag_health, judged too)")
    say(
        f"  lake: {lake} on {s3.endpoint_url} ({table.num_rows:,} rows, {len(entries)} batches, "
        f"every offset exactly once: {'yes' if all(n == 1 for n in keys.values()) else 'NO'})"
    )
    say(
        f"  read it: pyarrow.dataset.dataset('{store.location.root}', filesystem=<s3fs>, format='parquet', "
        "partitioning='hive'); its offset log: kafka_batch_provider.batch_store.BatchStore(lake).log.entries()"
    )
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
    )
    return 0 if ok else 1


def _tps(kafka: KafkaOffsets, topics: list[str]):
    return kafka.topic_partitions(topics)


def _probe_topic(config: dict, suffix: str) -> str:
    name = f"demo.probe.{suffix}"
    create_topics(config, {name: 1})
    return name


if __name__ == "__main__":
    sys.exit(main())
