"""`make demo`'s platform step: a topic pattern into a Delta table per topic, in one batch each run,
with the batch's metrics received by a StatsD listener of the demo's own.

Three topics match `demo.platform.<run>.*`; `kafka-batch run --topic-pattern ... --output
'.demo/topics/{topic}'` writes each into its own table in one Spark job; a fourth topic created
afterwards is in the next run, without a restart or a metadata refresh. DuckDB reads every table back.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

TOPICS = {"clicks": (2, 600), "views": (1, 300), "signups": (1, 40)}  # name: (partitions, records)
LATE = ("refunds", 1, 25)


def topics_demo(
    config: dict,
    spark_remote: str | None,
    work: Path,
    kafka_batch: Callable,
    duckdb_connection: Callable,
    say: Callable,
) -> dict[str, Any]:
    suffix = time.strftime("%H%M%S")
    prefix = f"demo.platform.{suffix}"
    for name, (partitions, count) in TOPICS.items():
        create_topics(config, {f"{prefix}.{name}": partitions})
        produce(config, f"{prefix}.{name}", sample_records(partitions, count))
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    statsd.settimeout(0.5)
    lake = work / "topics"
    pattern = re.escape(prefix) + r"\..*"
    common = [
        "run", "--bootstrap-servers", config["bootstrap.servers"], "--topic-pattern", pattern,
        "--group", f"demo-platform-{suffix}", "--format", "delta", "--output", f"{lake}/{{topic}}",
        "--max-tasks", "2", "--metrics-statsd", f"127.0.0.1:{statsd.getsockname()[1]}",
        *(["--spark-remote", spark_remote] if spark_remote else []),
    ]  # fmt: skip
    try:
        say(f"topics: kafka-batch run --topic-pattern '{pattern}' --output '{lake}/{{topic}}' --format delta ...")
        _, first = kafka_batch(*common, log_name="kafka-batch-topics-run1")
        metrics = received(statsd)
        name, partitions, count = LATE
        create_topics(config, {f"{prefix}.{name}": partitions})
        produce(config, f"{prefix}.{name}", sample_records(partitions, count))
        say(f"topics: created {prefix}.{name}; the same command again ...")
        _, second = kafka_batch(*common, log_name="kafka-batch-topics-run2")
        metrics += received(statsd)
    finally:
        statsd.close()
    db = duckdb_connection()
    try:
        rows = {
            topic: db.execute(f"SELECT count(*) FROM delta_scan('{lake / topic}')").fetchone()[0]
            for topic in sorted({*first["tables"], *second["tables"]})
        }
    finally:
        db.close()
    return {"lake": lake, "runs": [first, second], "rows": rows, "metrics": metrics, "prefix": prefix}


def received(statsd: socket.socket) -> list[str]:
    """The StatsD lines that arrived (the run has ended: they are all there, or never come)."""
    lines = []
    while True:
        try:
            lines.append(statsd.recv(65536).decode())
        except TimeoutError:
            return lines


def per_topic(lines: list[str]) -> dict[str, dict[str, float]]:
    """``{topic: {metric: value}}`` of the StatsD lines that name a topic (the last value of each)."""
    found: dict[str, dict[str, float]] = {}
    for line in lines:
        name_value, _, tags = line.partition("|#")
        name, _, value = name_value.partition(":")
        topic = dict(t.split(":", 1) for t in tags.split(",") if ":" in t).get("topic")
        if topic:
            found.setdefault(topic, {})[name.removeprefix("kafka_batch.")] = float(value.split("|")[0])
    return found
