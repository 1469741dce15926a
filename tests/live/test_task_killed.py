"""A Spark task whose process (and its spark-submit) is SIGKILLed mid-run is retried by the scheduler;
the batch lands once."""

from __future__ import annotations

import os
import signal

import psutil

from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import assert_exactly_once
from tests.live.conftest import INGEST
from tests.live.helpers import committed, wait_for

SPARK_TASK = "ingest.spark_write"


def spark_submit_for(output: str) -> tuple[psutil.Process | None, list[str]]:
    """The spark-submit JVM working on a plan of ``output`` (its argv names the plan file)."""
    seen = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any("org.apache.spark.deploy.SparkSubmit" in part for part in cmdline):
            seen.append(proc.pid)
            if any(output in part for part in cmdline):
                return proc, seen
    return None, seen


def test_task_process_killed_mid_run_is_retried_and_the_batch_lands_exactly_once(
    airflow_stack, live_ingest, kafka_config
):
    topic, group, output = live_ingest["topic"], live_ingest["group"], live_ingest["output"]
    produce(kafka_config, topic, sample_records(2, 30))
    airflow_stack.trigger(INGEST)
    airflow_stack.set_paused(INGEST, False)

    jvm = wait_for(
        "spark-submit to start for this test's plan", lambda: spark_submit_for(output), timeout=180, interval=0.5
    )
    running = airflow_stack.api(
        "GET", f"/dags/{INGEST}/dagRuns/~/taskInstances", params={"task_id": SPARK_TASK, "state": ["running"]}
    )["task_instances"]
    assert len(running) == 1, f"expected one running {SPARK_TASK}, found {running}"
    run_id = running[0]["dag_run_id"]
    # The task process runs the operator (spark-submit's parent) and is titled with its TI id.
    task_process = jvm.parent()
    assert task_process is not None and running[0]["id"] in task_process.name(), (
        f"expected spark-submit's parent to be the task process of TI {running[0]['id']}, found {task_process}"
    )
    # The task dies with its spark-submit, as when its worker's container is killed.
    os.kill(task_process.pid, signal.SIGKILL)
    os.kill(jvm.pid, signal.SIGKILL)

    run = airflow_stack.wait_for_run(INGEST, run_id, timeout=420)
    states = airflow_stack.task_states(INGEST, run_id)
    tries = airflow_stack.api("GET", f"/dags/{INGEST}/dagRuns/{run_id}/taskInstances/{SPARK_TASK}/tries")
    try_states = [(t["try_number"], t["state"]) for t in tries["task_instances"]]
    assert run["state"] == "success" and set(states.values()) == {"success"}, (
        f"expected the run to succeed after the retry, found {run['state']} with {states}; "
        f"{SPARK_TASK} tries {try_states}"
    )
    assert len(try_states) >= 2 and try_states[0][1] != "success", (
        f"expected the killed attempt to fail and a retry to succeed, found tries {try_states}"
    )
    assert committed(kafka_config, group, topic, [0, 1]) == {0: 15, 1: 15}
    assert_exactly_once(output, {(topic, p, o) for p in (0, 1) for o in range(15)})
    entries = list(BatchStore(output).log.entries())
    assert [e["rows"] for e in entries] == [30], f"expected one batch of 30 records in the log, found {entries}"
