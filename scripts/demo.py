"""`make demo`: the main job end to end on the embedded defaults, with a summary at the end.

1. start the embedded Kafka-protocol broker (or use $KAFKA_BOOTSTRAP_SERVERS),
2. produce sample events to two topics,
3. run one batch with `kafka-batch run` (plan -> Spark local[*] -> manifest -> commit),
4. produce more events and run a second batch, which finds only the new ones,
5. read the lake back and check that every offset is there exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds

from kafka_batch_provider.broker.embedded import EmbeddedBroker
from kafka_batch_provider.kafka_offsets import KafkaOffsets
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".demo"
KAFKA_BATCH = str(Path(sys.executable).parent / "kafka-batch")


def say(line: str = "") -> None:
    print(line, flush=True)


def run_batch(bootstrap: str, topics: list[str], group: str, output: Path) -> dict:
    command = [KAFKA_BATCH, "run", "--bootstrap-servers", bootstrap, "--group", group, "--output", str(output)]
    for topic in topics:
        command += ["--topic", topic]
    say(f"$ kafka-batch run --group {group} --topic {' --topic '.join(topics)} --output {output.relative_to(ROOT)}")
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"demo failed: kafka-batch run exited with {result.returncode}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def total_lag(kafka: KafkaOffsets, group: str, topics: list[str]) -> int:
    return sum(kafka.lag(group, topics).values())


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    output = WORK / "lake"
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None if external else EmbeddedBroker(log_path=WORK / "broker.log")
    started = time.perf_counter()
    try:
        if broker:
            broker.start()
            say(f"embedded broker (tansu, memory storage) on {broker.bootstrap_servers}")
        bootstrap = external or broker.bootstrap_servers
        config = {"bootstrap.servers": bootstrap}
        suffix = time.strftime("%H%M%S")
        orders, payments = f"demo.orders.{suffix}", f"demo.payments.{suffix}"
        topics, group = [orders, payments], f"demo-ingest-{suffix}"
        create_topics(config, {orders: 3, payments: 2})
        kafka = KafkaOffsets(config)

        produce(config, orders, sample_records(3, 30_000))
        produce(config, payments, sample_records(2, 10_000))
        say(f"produced 30,000 events to {orders} (3 partitions) and 10,000 to {payments} (2 partitions)")
        lag_before_1 = total_lag(kafka, group, topics)
        first = run_batch(bootstrap, topics, group, output)
        lag_after_1 = total_lag(kafka, group, topics)

        produce(config, orders, sample_records(3, 3_000, first_id=30_000))
        produce(config, payments, sample_records(2, 1_000, first_id=10_000))
        say("produced 4,000 more events")
        lag_before_2 = total_lag(kafka, group, topics)
        second = run_batch(bootstrap, topics, group, output)
        lag_after_2 = total_lag(kafka, group, topics)

        table = ds.dataset(str(output), format="parquet", partitioning="hive").to_table(
            columns=["topic", "partition", "offset", "batch_id"]
        )
        keys = Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
        doubled = sum(1 for n in keys.values() if n > 1)

        say()
        say("summary")
        say(f"  {'batch':<24} {'records':>8} {'lag before':>11} {'lag after':>10}  ranges")
        for batch, before, after in ((first, lag_before_1, lag_after_1), (second, lag_before_2, lag_after_2)):
            ranges = ", ".join(f"{r['topic'].split('.')[1]}[{r['partition']}] {r['start']}-{r['end']}" for r in batch["ranges"])
            say(f"  {batch['batch_id']:<24} {batch['records']:>8,} {before:>11,} {after:>10,}  {ranges}")
        say(f"  lake: {output} ({table.num_rows:,} rows, {len(set(table.column('batch_id').to_pylist()))} batches)")
        say(f"  every offset exactly once: {'yes' if doubled == 0 and len(keys) == 44_000 else 'NO'}")
        say(f"  read it: pyarrow.dataset.dataset('{output}', format='parquet', partitioning='hive')")
        say(f"  done in {time.perf_counter() - started:.1f}s")
        ok = doubled == 0 and len(keys) == 44_000 and lag_after_2 == 0 and second["records"] == 4_000
        return 0 if ok else 1
    finally:
        if broker:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
