"""Freshness: from a produced record to that record readable in the output, and to the downstream
DAG's report, in a live Airflow (scheduler, triggerer, dag-processor, api-server) running
``kafka_batch_ingest_on_lag`` on a warm Spark Connect server.

Each burst produces 1,000 records and times, from just before the produce call:

* ``freshness``: until the output's log has the batch that holds them (readable by any reader);
* ``dag``: the lag-fired run, from its creation (the trigger fired) to its last task (lag health);
* ``downstream``: until ``kafka_batch_downstream`` (scheduled on the output's asset) has counted
  the batch in its report.

Where the seconds go, from Airflow's own timestamps: ``trigger`` (produce → the run is created:
the trigger's poll and the triggerer-to-scheduler hand-over), ``scheduler`` (run created → its
first task queued), ``task_start`` (queued → the executor's task process forked, summed over the
tasks), ``between_tasks`` (a task's end → the next one queued: the scheduler's loop), and each
task's own ``plan``, ``spark``, ``commit``, ``health``, which include its process parsing the DAG
file (~0.2-0.35 s each: Airflow 3 stamps ``start_date`` right after the fork). The baseline, in
the same run, is the same 1,000-record batch by ``kafka-batch run`` on the same Connect server
(``direct_seconds``): ``freshness_over_direct`` says what Airflow and the trigger add.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.dev.airflow_live import AirflowStack
from kafka_batch_provider.dev.spark_connect import SparkConnectServer
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

DAGS = Path(__file__).resolve().parents[1] / "dags"
ON_LAG, DOWNSTREAM = "kafka_batch_ingest_on_lag", "kafka_batch_downstream"
TASKS = ("plan", "spark_write", "commit", "lag_health")
BURST = 1_000


def say(line: str) -> None:
    print(f"[freshness] {line}", file=sys.stderr, flush=True)


def at(stamp: str | None) -> float:
    """An Airflow API timestamp as epoch seconds."""
    if not stamp:
        raise ValueError("a timestamp is missing")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


def wait(what: str, probe, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(interval)
    raise TimeoutError(f"freshness bench: expected {what} within {timeout:.0f} s")


def batch_holding(output: Path, topic: str, ends: dict[int, int]) -> dict | None:
    """The log entry whose ranges reach ``ends``, once its files are published (readable)."""
    if not output.exists():
        return None
    for entry in BatchStore(str(output)).log.entries():
        reached = {r["partition"]: r["end"] for r in entry["ranges"] if r["topic"] == topic}
        if reached and all(reached.get(p, -1) >= end for p, end in ends.items() if end):
            published = all((output / entry["location"] / f["name"]).exists() for f in entry["files"])
            return entry if published else None
    return None


def run_of_batch(stack: AirflowStack, known: set[str], batch_id: str) -> dict:
    """The lag-fired run that planned ``batch_id`` (a burst the trigger saw half of takes two runs)."""
    for run in [r for r in stack.dag_runs(ON_LAG, order_by="id") if r["dag_run_id"] not in known]:
        run = stack.wait_for_run(ON_LAG, run["dag_run_id"], timeout=180)
        path = f"/dags/{ON_LAG}/dagRuns/{run['dag_run_id']}/taskInstances/ingest.plan/xcomEntries/return_value"
        if stack.api("GET", path, params={"deserialize": "true"})["value"].get("batch_id") == batch_id:
            return run
    raise RuntimeError(f"freshness bench: no new {ON_LAG} run planned batch {batch_id}")


def reported(report: Path, batch_id: str) -> bool:
    if not report.exists():
        return False
    with sqlite3.connect(report) as db:
        if not db.execute("select 1 from sqlite_master where name = 'batch_rows'").fetchall():
            return False
        return bool(db.execute("select 1 from batch_rows where batch_id = ?", (batch_id,)).fetchall())


def one_burst(stack: AirflowStack, config: dict, topic: str, output: Path, report: Path, first_id: int) -> dict:
    known = {r["dag_run_id"] for r in stack.dag_runs(ON_LAG)}
    started = time.time()
    produce(config, topic, sample_records(2, BURST, first_id=first_id))
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    ends = {tp.partition: end for tp, end in KafkaOffsets(config).log_end_offsets(tps).items()}
    entry = wait("the burst's batch in the output's log", lambda: batch_holding(output, topic, ends), 180)
    readable = time.time()
    wait("the downstream report of the batch", lambda: reported(report, entry["batch_id"]), 180)
    counted = time.time()
    run = run_of_batch(stack, known, entry["batch_id"])
    if run["state"] != "success":
        raise RuntimeError(f"freshness bench: the lag-fired run ended {run['state']}")
    tis = {k.split(".")[-1]: v for k, v in stack.task_instances(ON_LAG, run["dag_run_id"]).items()}
    created = at(run["queued_at"])
    phases = {
        "trigger": created - started,
        "scheduler": at(tis["plan"]["queued_when"]) - created,
        "task_start": sum(at(tis[t]["start_date"]) - at(tis[t]["queued_when"]) for t in TASKS),
        "between_tasks": sum(at(tis[b]["queued_when"]) - at(tis[a]["end_date"]) for a, b in zip(TASKS, TASKS[1:])),
        "plan": at(tis["plan"]["end_date"]) - at(tis["plan"]["start_date"]),
        "spark": at(tis["spark_write"]["end_date"]) - at(tis["spark_write"]["start_date"]),
        "commit": at(tis["commit"]["end_date"]) - at(tis["commit"]["start_date"]),
        "health": at(tis["lag_health"]["end_date"]) - at(tis["lag_health"]["start_date"]),
    }
    return {
        "freshness": readable - started,
        "dag": at(tis["lag_health"]["end_date"]) - created,
        "downstream": counted - started,
        "rows": entry["rows"],
        "phases": phases,
    }


def direct_batch(bootstrap: str, remote: str, work: Path) -> float:
    """The baseline: one 1,000-record batch by ``kafka-batch run`` on the same Connect server."""
    config = {"bootstrap.servers": bootstrap}
    topic = f"fresh-direct-{uuid.uuid4().hex[:8]}"
    create_topics(config, {topic: 2})
    produce(config, topic, sample_records(2, BURST))
    command = [str(Path(sys.executable).parent / "kafka-batch"), "run", "--bootstrap-servers", bootstrap]
    command += ["--topic", topic, "--group", f"{topic}-g", "--output", str(work / topic), "--spark-remote", remote]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"freshness bench: kafka-batch run failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - started


def freshness_measures(bootstrap: str, work: Path, bursts: int = 5) -> dict:
    """Medians over ``bursts`` bursts (after one warm-up burst), and the direct baseline."""
    config = {"bootstrap.servers": bootstrap}
    work = work / "freshness"
    work.mkdir(parents=True, exist_ok=True)
    topic = f"fresh-{uuid.uuid4().hex[:8]}"
    create_topics(config, {topic: 2})
    output, report = work / "lake", work / "report.sqlite"
    say(f"starting a Spark Connect server and a live Airflow (dags/, {ON_LAG} on topic {topic}) ...")
    with SparkConnectServer(master="local[2]", log_path=work / "connect.log") as server:
        direct_batch(bootstrap, server.remote, work)  # warms the server's Python workers
        direct = statistics.median(direct_batch(bootstrap, server.remote, work) for _ in range(3))
        say(f"direct: a {BURST:,}-record batch by kafka-batch run on Spark Connect: {direct:.2f}s")
        host, port = server.remote.removeprefix("sc://").split(":")
        env = {
            "KAFKA_BATCH_TOPICS": topic,
            "KAFKA_BATCH_GROUP": f"{topic}-g",
            "KAFKA_BATCH_OUTPUT": str(output),  # the lag-fired DAG's output, the downstream DAG's asset
            "KAFKA_BATCH_REPORT_DB": str(report),
            "KAFKA_BATCH_LAG_POKE_SECONDS": os.environ.get("KAFKA_BATCH_LAG_POKE_SECONDS", "1"),
            "KAFKA_BATCH_SPARK_CONNECT_CONN_ID": "spark_connect_default",
            "KAFKA_BATCH_RETRY_DELAY_SECONDS": "3",
        }
        with AirflowStack(home=work / "airflow", dags_folder=DAGS, env=env) as stack:
            stack.set_connection("kafka_default", "kafka", extra={"bootstrap.servers": bootstrap})
            stack.set_connection("spark_connect_default", "spark_connect", host=host, port=int(port))
            stack.wait_for_dags([ON_LAG, DOWNSTREAM])
            stack.set_paused(DOWNSTREAM, False)
            stack.set_paused(ON_LAG, False)
            found = []
            for n in range(bursts + 1):
                burst = one_burst(stack, config, topic, output, report, first_id=n * BURST)
                label = "warm-up" if n == 0 else f"{n}/{bursts}"
                say(
                    f"burst {label}: readable after {burst['freshness']:.1f}s, DAG {burst['dag']:.1f}s, "
                    f"downstream {burst['downstream']:.1f}s ("
                    + ", ".join(f"{k} {v:.1f}" for k, v in burst["phases"].items())
                    + ")"
                )
                if n:
                    found.append(burst)
                time.sleep(2)  # the run's last state changes settle before the next burst
    median = statistics.median
    result = {
        "bursts": bursts,
        "burst_records": BURST,
        "freshness_seconds": round(median(b["freshness"] for b in found), 2),
        "downstream_seconds": round(median(b["downstream"] for b in found), 2),
        "dag_seconds": round(median(b["dag"] for b in found), 2),
        "direct_seconds": round(direct, 2),
        "phases_seconds": {k: round(median(b["phases"][k] for b in found), 2) for k in found[0]["phases"]},
        "goals": {"freshness_seconds": 30, "dag_seconds": 15},
    }
    result["freshness_over_direct"] = round(result["freshness_seconds"] / direct, 2)
    say(json.dumps(result))
    return result


if __name__ == "__main__":  # alone: python bench/freshness.py [BURSTS] (make bench runs it with the rest)
    import tempfile

    from kafka_batch_provider.dev.kafka import KafkaBroker

    scratch = Path(tempfile.mkdtemp(prefix="kafka-batch-freshness-"))
    with KafkaBroker(log_path=scratch / "broker.log", data_dir=scratch / "kafka") as broker:
        print(
            json.dumps(freshness_measures(broker.bootstrap_servers, scratch, int(sys.argv[1]) if sys.argv[1:] else 5))
        )
