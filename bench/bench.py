"""Benchmark: `kafka-batch run` to Parquet against a plain confluent-kafka consumer, same ranges.

Both read the same records from the same broker in the same run, so the ratio
(pipeline records/s over baseline records/s) is meaningful on a shared, noisy machine.
The last stdout line is one JSON object: records, baseline_rps, pipeline_rps, ratio, ...

    python bench/bench.py [--records 1000000] [--value-size 200] [--partitions 4]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--keep", action="store_true", help="keep the output directory")
    args = parser.parse_args()

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
        ends = {
            tp.partition: end
            for tp, end in KafkaOffsets(config)
            .log_end_offsets(
                [
                    __import__("kafka_batch_provider.offsets").offsets.TopicPartition(topic, p)
                    for p in range(args.partitions)
                ]
            )
            .items()
        }
        assert sum(ends.values()) == sum(counts.values()), f"end offsets {ends} do not match produced {counts}"

        say("baseline: plain confluent-kafka consumer reading the same ranges ...")
        base_records, base_seconds = baseline_read(config, topic, ends)
        say(f"baseline: {base_records:,} records in {base_seconds:.2f}s")

        say(f"pipeline: kafka-batch run --spark-master {args.spark_master} ...")
        output = work / "lake"
        command = [
            str(Path(sys.executable).parent / "kafka-batch"),
            "run",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--group",
            "bench",
            "--output",
            str(output),
            "--spark-master",
            args.spark_master,
        ]
        started = time.perf_counter()
        result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        pipe_seconds = time.perf_counter() - started
        if result.returncode != 0:
            say(f"kafka-batch run failed with exit code {result.returncode}")
            return 1
        run = json.loads(result.stdout.strip().splitlines()[-1])
        say(f"pipeline: {run['records']:,} records in {pipe_seconds:.2f}s (plan + spark-submit + write + commit)")
        timings = run.get("timings", {})
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
            "timings": timings,
        }
        if run["records"] != base_records:
            say(f"error: pipeline wrote {run['records']} records, baseline read {base_records}")
            return 1
        print(json.dumps(summary))
        return 0
    finally:
        if broker is not None:
            broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
