"""A platform's worth of topics: one batch of a pattern into a table per topic, against a run per topic.

``--topics`` topics (500) of ``--partitions`` partitions (3) with ``--records`` records (200) each
partition, on one Apache Kafka broker; one warm Spark Connect server (``local[2]``) serves both:

* ``many_topics_seconds``: ``kafka-batch run --topic-pattern ... --format delta --output
  '<lake>/{topic}' --max-tasks N``: one plan step, one Spark job, a Delta table per topic; every
  table is read back and must hold exactly its topic's records. ``many_topics_plan_seconds``: its
  plan step (goal <= 3 s at 500 topics); ``many_topics_tasks``: the Spark tasks it used;
* ``single_topic_seconds``: ``kafka-batch run --topic <one topic> --format delta`` the way a DAG
  per topic runs it, for ``--sample`` (25) of the topics in turn on the same server; the 500 runs'
  time is estimated as the sample's mean times the topics (running all 500 would take ~20
  minutes of the bench for the same figure);
* ``many_topics_speedup``: the estimated single-topic runs' time over the one batch's (goal >= 20).

``python bench/many_topics.py [--topics 500] [--partitions 3] [--records 200] [--sample 25]``
prints one JSON line; bench.py runs it as its ``many_topics_*`` keys.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deltalake import DeltaTable

from kafka_batch_provider.dev.kafka import KafkaBroker
from kafka_batch_provider.dev.spark_connect import SparkConnectServer
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

KAFKA_BATCH = str(Path(sys.executable).parent / "kafka-batch")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(argv: list[str]) -> tuple[dict, float]:
    """One ``kafka-batch`` command: its JSON summary and its wall seconds."""
    started = time.perf_counter()
    done = subprocess.run([KAFKA_BATCH, *argv], capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"kafka-batch {' '.join(argv[:2])} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), seconds


def rows_of(table: Path) -> int:
    return DeltaTable(str(table)).to_pyarrow_table(columns=["offset"]).num_rows


def tasks_of(table: Path) -> int:
    """The Spark tasks that wrote the table's newest batch, as its log entry says."""
    store = open_store(OutputSpec("delta", output=str(table)), create=False)
    return int(store.log.tail()["options"]["tasks"])


def many_topics(topics: int, partitions: int, records: int, sample: int, max_tasks: int, work: Path) -> dict:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None if external else KafkaBroker(log_path=work / "broker.log", data_dir=work / "kafka").start()
    bootstrap = external or broker.bootstrap_servers
    try:
        config = {"bootstrap.servers": bootstrap}
        prefix = f"many{int(time.time())}"
        names = [f"{prefix}.t{i:04d}" for i in range(topics)]
        say(f"many topics: creating {topics} topics of {partitions} partitions, {records} records each partition ...")
        for start in range(0, topics, 100):
            create_topics(config, {name: partitions for name in names[start : start + 100]})
        for number, name in enumerate(names, 1):
            produce(config, name, sample_records(partitions, partitions * records))
            if number % 100 == 0:
                say(f"  produced to {number} of {topics} topics")
        with SparkConnectServer(master="local[2]", log_path=work / "connect.log") as server:
            common = ["--bootstrap-servers", bootstrap, "--spark-remote", server.remote, "--format", "delta"]
            warm = f"{prefix}.warm"
            create_topics(config, {warm: 1})
            produce(config, warm, sample_records(1, 1_000))
            run(["run", *common, "--topic", warm, "--group", "warm", "--output", str(work / "warm")])

            say(f"many topics: one batch of the pattern into {topics} Delta tables (--max-tasks {max_tasks}) ...")
            lake = work / "lake"
            batch, many_seconds = run(
                ["run", *common, "--topic-pattern", f"{prefix}\\.t[0-9]+", "--group", "many",
                 "--output", str(lake / "{topic}"), "--max-tasks", str(max_tasks)]
            )  # fmt: skip
            wrong = [n for n in names if rows_of(lake / n) != partitions * records]
            if wrong or len(batch["tables"]) != topics:
                raise SystemExit(f"the batch wrote {len(batch['tables'])} tables; wrong row counts in {wrong[:5]}")
            tasks = sorted({tasks_of(lake / n) for n in names})
            say(f"many topics: {topics} tables, {batch['rows']:,} rows in {many_seconds:.1f}s "
                f"(plan {batch['timings']['plan_seconds']:.2f}s)")  # fmt: skip

            say(f"single topics: kafka-batch run per topic for {sample} of the {topics} topics ...")
            singles = []
            for name in names[:sample]:
                one, seconds = run(
                    [
                        "run",
                        *common,
                        "--topic",
                        name,
                        "--group",
                        f"single-{name}",
                        "--output",
                        str(work / "single" / name),
                    ]
                )
                if one["records"] != partitions * records:
                    raise SystemExit(f"{name}: a single run read {one['records']} records")
                singles.append(seconds)
            estimate = statistics.mean(singles) * topics
            say(f"single topics: {statistics.mean(singles):.2f}s a run; {topics} runs ~{estimate:.0f}s")
        return {
            "many_topics": topics,
            "many_topics_partitions": topics * partitions,
            "many_topics_rows": batch["rows"],
            "many_topics_seconds": round(many_seconds, 3),
            "many_topics_plan_seconds": batch["timings"]["plan_seconds"],
            "many_topics_spark_seconds": batch["timings"].get("spark_seconds"),
            "many_topics_commit_seconds": batch["timings"].get("commit_seconds"),
            "many_topics_tasks": tasks,
            "single_topic_seconds": round(statistics.mean(singles), 3),
            "single_topic_seconds_spread": [round(min(singles), 3), round(max(singles), 3)],
            "single_topic_sample": sample,
            "single_topics_estimated_seconds": round(estimate, 1),
            "many_topics_speedup": round(estimate / many_seconds, 2),
        }
    finally:
        if broker is not None:
            broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, default=200, help="records per partition")
    parser.add_argument("--sample", type=int, default=25, help="single-topic runs timed (the rest estimated)")
    parser.add_argument("--max-tasks", type=int, default=8, help="the one batch's --max-tasks")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kafka-batch-many-"))
    try:
        result = many_topics(args.topics, args.partitions, args.records, args.sample, args.max_tasks, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
