"""Live: a scheduled ingest run emits one asset event with the batch's facts, and the downstream
DAG, scheduled on the output's asset (no cron), runs once and counts exactly that batch."""

from __future__ import annotations

import sqlite3

from kafka_batch_provider.core.assets import output_uri
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.live.conftest import DOWNSTREAM, INGEST
from tests.live.helpers import runs_since, wait_for


def test_a_scheduled_batch_is_one_asset_event_and_the_downstream_dag_counts_exactly_that_batch(
    airflow_stack, kafka_config, new_topic, group_id
):
    output = airflow_stack.env["KAFKA_BATCH_OUTPUT"]  # the downstream DAG's asset is fixed at parse time
    topic = new_topic(partitions=2)
    for key, value in (("kafka_batch_topics", topic), ("kafka_batch_group", group_id), ("kafka_batch_output", output)):
        airflow_stack.set_variable(key, value)
    known = {dag: {r["dag_run_id"] for r in airflow_stack.dag_runs(dag)} for dag in (INGEST, DOWNSTREAM)}
    produce(kafka_config, topic, sample_records(2, 12))
    try:
        airflow_stack.set_paused(DOWNSTREAM, False)
        airflow_stack.set_paused(INGEST, False)
        ingest = wait_for(
            f"a scheduled run of {INGEST}",
            lambda: (runs_since(airflow_stack, INGEST, known[INGEST], "scheduled")[:1], known[INGEST]),
            timeout=150,
        )[0]
        ingest = airflow_stack.wait_for_run(INGEST, ingest["dag_run_id"], timeout=300)
        airflow_stack.set_paused(INGEST, True)  # one batch: the next scheduled run must not add another
        assert ingest["state"] == "success", f"expected the ingest run to succeed, found {ingest['state']}"
        downstream = wait_for(
            f"a run of {DOWNSTREAM} triggered by the batch's asset event",
            lambda: (runs_since(airflow_stack, DOWNSTREAM, known[DOWNSTREAM])[:1], known[DOWNSTREAM]),
            timeout=120,
        )[0]
        assert downstream["run_type"] == "asset_triggered", f"expected an asset-triggered run, found {downstream}"
        downstream = airflow_stack.wait_for_run(DOWNSTREAM, downstream["dag_run_id"], timeout=240)
        assert downstream["state"] == "success", f"expected the downstream run to succeed, found {downstream}"
    finally:
        airflow_stack.quiesce(INGEST)
        airflow_stack.quiesce(DOWNSTREAM)

    entry = next(BatchStore(output).log.entries())
    uri = output_uri("parquet", output, None)
    assets = airflow_stack.api("GET", "/assets", params={"uri_pattern": uri})["assets"]
    assert [a["uri"] for a in assets] == [uri], f"expected the output's asset {uri}, found {assets}"
    events = airflow_stack.api("GET", "/assets/events", params={"asset_id": assets[0]["id"]})["asset_events"]
    assert [e["extra"]["batch_id"] for e in events] == [entry["batch_id"]], f"expected one event, found {events}"
    extra = events[0]["extra"]
    assert (extra["seq"], extra["rows"], extra["replay"]) == (1, 12, False), extra
    assert sorted((r["partition"], r["start"], r["end"]) for r in extra["ranges"]) == [(0, 0, 6), (1, 0, 6)], extra
    with sqlite3.connect(airflow_stack.env["KAFKA_BATCH_REPORT_DB"]) as db:
        counted = db.execute("select batch_id, topic, rows from batch_rows").fetchall()
    assert counted == [(entry["batch_id"], topic, 12)], f"expected the batch counted once, found {counted}"
