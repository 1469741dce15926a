"""`make demo`: the main job end to end through Airflow, on the embedded defaults.

1. start the embedded Kafka-protocol broker (or use $KAFKA_BOOTSTRAP_SERVERS),
2. produce sample events to two topics,
3. run the `kafka_batch_ingest` DAG (`airflow dags test`): plan -> Spark local[*] -> commit,
4. produce more events and run it again: the second batch holds only the new events,
5. run the `kafka_batch_backfill` DAG for a time range (by offsets where the broker cannot
   map times to offsets), which never commits the group,
6. print a summary: batches, ranges, rows, lag before and after, lag health, where the data is.

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

from kafka_batch_provider.batch_store import BatchStore  # noqa: E402
from kafka_batch_provider.broker.embedded import EmbeddedBroker  # noqa: E402
from kafka_batch_provider.kafka_offsets import KafkaOffsets  # noqa: E402
from kafka_batch_provider.lag_monitor import lag_report  # noqa: E402
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

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None if external else EmbeddedBroker(log_path=WORK / "broker.log")
    try:
        if broker:
            broker.start()
            say(f"embedded broker (tansu, memory storage) on {broker.bootstrap_servers}")
        bootstrap = external or broker.bootstrap_servers
        config = {"bootstrap.servers": bootstrap}
        suffix = time.strftime("%H%M%S")
        topics = {f"demo.orders.{suffix}": 3, f"demo.payments.{suffix}": 2}
        group, lake = f"demo-ingest-{suffix}", WORK / "lake"
        replay_out = WORK / "lake_replay"
        create_topics(config, topics)

        # Connections and Variables from the environment, as a deployment would set them.
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": config})
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
        os.environ["AIRFLOW_VAR_KAFKA_BATCH_TOPICS"] = ",".join(topics)
        os.environ["AIRFLOW_VAR_KAFKA_BATCH_GROUP"] = group
        os.environ["AIRFLOW_VAR_KAFKA_BATCH_OUTPUT"] = str(lake)

        kafka = KafkaOffsets(config)
        names = list(topics)

        def lag() -> int:
            return sum(kafka.lag(group, names).values())

        hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        produce_burst(config, topics, 10_000, 0, int(hour_ago.timestamp() * 1000))
        say(f"produced 10,000 events to each of {', '.join(names)} (timestamps {hour_ago:%H:%M} UTC)")
        runs = []
        for run, (count, first_id) in enumerate([(None, None), (2_000, 10_000)], start=1):
            if count:
                now = datetime.now(timezone.utc)
                produce_burst(config, topics, count, first_id, int(now.timestamp() * 1000))
                say(f"produced {count:,} more events to each topic (timestamps {now:%H:%M} UTC)")
            before = lag()
            say(f"run {run}: airflow dags test kafka_batch_ingest ...")
            airflow("dags", "test", "kafka_batch_ingest", log_name=f"airflow-ingest-run{run}")
            runs.append((before, lag()))

        store = BatchStore(lake)
        commits = store.commit_records(group)

        # The backfill: by time where the broker maps times to offsets, else by offsets.
        window_start, window_end = hour_ago - timedelta(minutes=5), hour_ago + timedelta(minutes=5)
        if broker_supports_offsets_for_times(config, _probe_topic(config, suffix)):
            conf = {"topic": names[0], "start_time": window_start.isoformat(), "end_time": window_end.isoformat()}
            how = f"time range {window_start:%H:%M}-{window_end:%H:%M} UTC"
        else:
            conf = {"topic": names[0], "start_offsets": {"0": 100}, "end_offsets": {"0": 200}}
            how = "offsets 100-200 of partition 0 (this broker cannot map times to offsets: tansu)"
        conf["output_path"] = str(replay_out)
        say(f"backfill: airflow dags test kafka_batch_backfill, {how} ...")
        committed_before = kafka.committed_offsets(group, [tp for tp in _tps(kafka, names)])
        airflow("dags", "test", "kafka_batch_backfill", "-c", json.dumps(conf), log_name="airflow-backfill")
        committed_after = kafka.committed_offsets(group, [tp for tp in _tps(kafka, names)])

        table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(
            columns=["topic", "partition", "offset"]
        )
        keys = Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
        replay_rows = sum(
            m["rows"]
            for m in (BatchStore(replay_out).load_manifest(p.batch_id) for p in BatchStore(replay_out).plans())
        )

        say()
        say("summary")
        say(f"  {'run':<5}{'batch':<25}{'rows':>8}{'lag before':>12}{'lag after':>11}  ranges")
        for run, (record, (before, after)) in enumerate(zip(commits, runs), start=1):
            plan = store.load_plan(record["batch_id"])
            ranges = ", ".join(f"{r.topic.split('.')[1]}[{r.partition}] {r.start}-{r.end}" for r in plan.ranges)
            say(f"  {run:<5}{record['batch_id']:<25}{record['rows']:>8,}{before:>12,}{after:>11,}  {ranges}")
        say(
            f"  backfill ({how.split(' (')[0]}): {replay_rows:,} rows in {replay_out}; "
            f"group offsets {'unchanged' if committed_before == committed_after else 'CHANGED'}"
        )
        health = lag_report(kafka, group, names, str(lake))
        say(f"  lag health: {health.message()} (what the DAG's last task, ingest.lag_health, judged too)")
        say(
            f"  lake: {lake}  ({table.num_rows:,} rows, {len(commits)} batches, "
            f"every offset exactly once: {'yes' if all(n == 1 for n in keys.values()) else 'NO'})"
        )
        say(f"  read it: pyarrow.dataset.dataset('{lake}', format='parquet', partitioning='hive')")
        say(f"  Airflow task logs: {WORK}/airflow-*.log; done in {time.perf_counter() - started:.0f}s")
        ok = (
            len(commits) == 2
            and commits[1]["rows"] == 4_000
            and runs[-1][1] == 0
            and all(n == 1 for n in keys.values())
            and committed_before == committed_after
            and replay_rows > 0
            and health.status.value == "OK"
        )
        return 0 if ok else 1
    finally:
        if broker:
            broker.stop()


def _tps(kafka: KafkaOffsets, topics: list[str]):
    return kafka.topic_partitions(topics)


def _probe_topic(config: dict, suffix: str) -> str:
    name = f"demo.probe.{suffix}"
    create_topics(config, {name: 1})
    return name


if __name__ == "__main__":
    sys.exit(main())
