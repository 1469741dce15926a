"""The scheduler runs kafka_batch_ingest on its schedule: two batches, the second only new records."""

from __future__ import annotations

from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import assert_exactly_once
from tests.live.conftest import INGEST
from tests.live.helpers import committed, runs_since, wait_for

EVERY_TASK = {"ingest.wait_for_data", "ingest.plan", "ingest.spark_write", "ingest.commit", "ingest.lag_health"}


def test_scheduler_runs_the_ingest_dag_twice_and_the_second_batch_holds_only_new_records(
    airflow_stack, live_ingest, kafka_config
):
    topic, group, output = live_ingest["topic"], live_ingest["group"], live_ingest["output"]
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(INGEST)}
    produce(kafka_config, topic, sample_records(2, 40))
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
