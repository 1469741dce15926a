"""The scheduler runs kafka_batch_ingest on its schedule: two batches, the second only new records.
Each committed batch is one asset event with its facts, and the downstream DAG, scheduled on the
output's asset (no cron), counts exactly those batches; the UI's asset page (Chromium) draws the
chain and lists the events. OpenLineage's file transport holds each task's START and COMPLETE
events with the topic, the output and the batch's offsets."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kafka_batch_provider.operators.assets import output_asset_uri
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import assert_exactly_once
from tests.live.asset_page import check_asset_page
from tests.live.conftest import DOWNSTREAM, INGEST, LINEAGE_NAMESPACE
from tests.live.helpers import committed, runs_since, wait_for
from tests.support.openlineage_events import check_run_event, read_events

EVERY_TASK = {"ingest.wait_for_data", "ingest.plan", "ingest.spark_write", "ingest.commit", "ingest.lag_health"}


@pytest.mark.browser
def test_scheduler_runs_the_ingest_dag_twice_and_the_downstream_dag_counts_each_batch_by_its_asset_event(
    airflow_stack, live_ingest, kafka_config, kafka_bootstrap_servers, page, tmp_path
):
    topic, group = live_ingest["topic"], live_ingest["group"]
    output = airflow_stack.env["KAFKA_BATCH_OUTPUT"]  # the downstream DAG's asset is fixed at parse time
    airflow_stack.set_variable("kafka_batch_output", output)
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(INGEST)}
    produce(kafka_config, topic, sample_records(2, 40))
    airflow_stack.set_paused(DOWNSTREAM, False)
    airflow_stack.set_paused(INGEST, False)

    finished: list[dict] = []
    for expected_offsets in (20, 23):
        run = wait_for(
            f"scheduled run number {len(finished) + 1} of {INGEST}",
            lambda: (runs_since(airflow_stack, INGEST, known, "scheduled")[len(finished) :][:1], known),
            timeout=150,
        )[0]
        run = airflow_stack.wait_for_run(INGEST, run["dag_run_id"], timeout=300)
        states = airflow_stack.task_states(INGEST, run["dag_run_id"])
        assert run["state"] == "success" and set(states) == EVERY_TASK and set(states.values()) == {"success"}, (
            f"expected a successful scheduled run with every task succeeding (lag health included), "
            f"found run {run['state']} with {states}"
        )
        assert committed(kafka_config, group, topic, [0, 1]) == {0: expected_offsets, 1: expected_offsets}
        assert_exactly_once(output, {(topic, p, o) for p in (0, 1) for o in range(expected_offsets)})
        finished.append(run)
        if len(finished) == 1:
            produce(kafka_config, topic, sample_records(2, 6, first_id=40))  # for the next scheduled run

    first, second = finished
    assert second["data_interval_start"] >= first["data_interval_end"], (
        f"expected consecutive data intervals, found {first['data_interval_end']} then {second['data_interval_start']}"
    )
    entries = list(BatchStore(output).log.entries())
    assert [e["rows"] for e in entries] == [40, 6], f"expected batches of 40 then 6 new records, found {entries}"

    # One asset event per batch, with its facts; the downstream DAG counted each batch exactly once.
    uri = output_asset_uri({"format": "parquet", "output": output})
    assets = airflow_stack.api("GET", "/assets", params={"uri_pattern": uri})["assets"]
    assert [a["uri"] for a in assets] == [uri], f"expected the output's asset {uri}, found {assets}"
    events = wait_for("the output's asset events", lambda: asset_events(airflow_stack, assets[0]["id"]), timeout=60)
    extras = sorted((e["extra"] for e in events), key=lambda x: x["seq"])
    assert [(x["batch_id"], x["seq"], x["rows"]) for x in extras] == [
        (e["batch_id"], e["seq"], e["rows"]) for e in entries
    ], f"expected one event per batch, found {extras}"
    assert sorted((r["partition"], r["start"], r["end"]) for r in extras[1]["ranges"]) == [(0, 20, 23), (1, 20, 23)]

    def counted() -> tuple[list | None, list]:
        with sqlite3.connect(airflow_stack.env["KAFKA_BATCH_REPORT_DB"]) as db:
            if not db.execute("select 1 from sqlite_master where name = 'batch_rows'").fetchall():
                return None, []
            rows = db.execute("select batch_id, topic, rows from batch_rows order by seq").fetchall()
        return (rows if len(rows) == 2 else None), rows

    def ended() -> tuple[list | None, list]:
        runs = runs_since(airflow_stack, DOWNSTREAM, set())
        return (runs if runs and all(r["state"] in ("success", "failed") for r in runs) else None), runs

    try:
        rows = wait_for(f"{DOWNSTREAM} to count both batches", counted, timeout=240)
        # Every triggered run ends on its own before the quiesce below fails what is unfinished:
        # the asset page's picture shows these runs, and must not show one the teardown failed.
        runs = wait_for(f"{DOWNSTREAM}'s runs to end", ended, timeout=120)
    finally:
        airflow_stack.quiesce(DOWNSTREAM)
    assert rows == [(e["batch_id"], topic, e["rows"]) for e in entries], f"found {rows}"
    assert {r["run_type"] for r in runs} == {"asset_triggered"}, f"expected asset-triggered runs: {runs}"
    assert {r["state"] for r in runs} == {"success"}, f"expected every downstream run to succeed: {runs}"
    check_lineage(airflow_stack, topic, output, entries, finished, kafka_bootstrap_servers)
    check_asset_page(page, airflow_stack.base_url, assets[0]["id"], uri, "kafka-batch:ingest", len(entries), tmp_path)


def check_lineage(stack, topic: str, output: str, entries: list, runs: list, bootstrap_servers: str) -> None:
    """Each batch's plan, Spark and commit tasks sent START and COMPLETE events (the plan's START
    precedes its batch id) that validate and name the topic; only the Spark task names the output,
    and its COMPLETE has the batch's rows, files, version and columns; the commit's carries the
    batch's offsets; spark-submit got its parent job."""
    jobs = {f"{INGEST}.ingest.{t}" for t in ("plan", "spark_write", "commit")}
    wanted = {(job, kind) for job in jobs for kind in ("START", "COMPLETE")} - {(f"{INGEST}.ingest.plan", "START")}

    def events_of(events: list[dict], batch_id: str) -> list[dict]:
        return [
            e for e in events if (e["run"].get("facets") or {}).get("kafkaBatchOffsets", {}).get("batchId") == batch_id
        ]

    def collected() -> tuple[list | None, dict]:
        events = [e for e in read_events(stack.home / "lineage") if e["job"]["name"] in jobs and reads_topic(e, topic)]
        seen = {
            x["batch_id"]: {(e["job"]["name"], e["eventType"]) for e in events_of(events, x["batch_id"])}
            for x in entries
        }
        # The plan's START comes before the plan, so before its batch id: one per DAG run (its parent).
        plan_runs = {
            e["run"]["facets"]["parent"]["run"]["runId"]
            for e in events
            if e["job"]["name"].endswith(".plan") and e["eventType"] == "START"
        }
        complete = len(plan_runs) == len(entries) and all(wanted <= s for s in seen.values())
        return (events if complete else None), seen

    ours = wait_for("each batch's START and COMPLETE lineage events", collected, timeout=60)
    server = bootstrap_servers.split(",")[0]
    lake = ("file", str(Path(output).resolve()))
    for event in ours:
        check_run_event(event)
        assert event["job"]["namespace"] == LINEAGE_NAMESPACE, event["job"]
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [(f"kafka://{server}", topic)], event["inputs"]
        writes = [lake] if event["job"]["name"].endswith(".spark_write") else []
        assert [(d["namespace"], d["name"]) for d in event["outputs"]] == writes, (
            f"expected {event['job']['name']} to name {writes or 'no output'}, found {event['outputs']}"
        )
    for entry in entries:
        batch = events_of(ours, entry["batch_id"])
        (committed,) = [e for e in batch if e["job"]["name"].endswith(".commit") and e["eventType"] == "COMPLETE"]
        offsets = committed["run"]["facets"]["kafkaBatchOffsets"]
        assert (offsets["seq"], offsets["ranges"]) == (
            entry["seq"],
            [{k: r[k] for k in ("topic", "partition", "start", "end")} for r in entry["ranges"]],
        ), f"expected the batch's ranges in the commit's offsets facet, found {offsets}"
        (written,) = [e for e in batch if e["job"]["name"].endswith(".spark_write") and e["eventType"] == "COMPLETE"]
        (dataset,) = written["outputs"]
        statistics = dataset["outputFacets"]["outputStatistics"]
        assert (statistics["rowCount"], statistics["fileCount"]) == (entry["rows"], len(entry["files"])), statistics
        assert dataset["facets"]["version"]["datasetVersion"] == str(entry["seq"]), dataset["facets"]["version"]
        columns = {f["name"] for f in dataset["facets"]["schema"]["fields"]}
        assert {"topic", "partition", "offset", "value"} <= columns, f"expected the files' columns, found {columns}"
    log = stack.task_log(INGEST, runs[0]["dag_run_id"], "ingest.spark_write")
    assert f"spark.openlineage.parentJobName={INGEST}.ingest.spark_write" in log, (
        "expected spark-submit to get the task as the OpenLineage parent job (--conf spark.openlineage.parentJobName)"
    )


def asset_events(stack, asset_id: int) -> tuple[list | None, str]:
    """The asset's events; ``None`` while Airflow's API fails to list them (3.3.2 answers HTTP 500
    while an event's asset-triggered run is queued but not started: its start_date is null)."""
    from kafka_batch_provider.dev.airflow_live import AirflowStackError

    try:
        return stack.api("GET", "/assets/events", params={"asset_id": asset_id})["asset_events"], "listed"
    except AirflowStackError as exc:
        return None, str(exc)[:200]


def reads_topic(event: dict, topic: str) -> bool:
    return any(d["name"] == topic for d in event.get("inputs") or ())
