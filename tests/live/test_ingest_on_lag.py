"""Live: the lag-fired DAG (an asset watcher in the triggerer, no cron) stays idle while nothing is
produced, runs once when records arrive, commits them, and is not fired again for the lag it took."""

from __future__ import annotations

import time

from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.integration.helpers import assert_exactly_once
from tests.live.conftest import ON_LAG
from tests.live.helpers import committed, runs_since, wait_for

#: Seconds of trigger checks (one a second) in which a run must not start.
IDLE = 5


def test_records_fire_the_lag_dag_once_and_no_records_leave_it_idle(airflow_stack, kafka_config):
    topic, group = airflow_stack.env["KAFKA_BATCH_TOPICS"], airflow_stack.env["KAFKA_BATCH_GROUP"]
    output = airflow_stack.env["KAFKA_BATCH_LAG_OUTPUT"]
    create_topics(kafka_config, {topic: 2})
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(ON_LAG)}
    try:
        airflow_stack.set_paused(ON_LAG, False)
        time.sleep(IDLE)  # a negative check: the trigger looks every second and must find nothing
        idle = runs_since(airflow_stack, ON_LAG, known)
        assert idle == [], f"expected no run while nothing was produced, found {idle}"

        produce(kafka_config, topic, sample_records(2, 10))
        run = wait_for(
            f"a run of {ON_LAG} fired by the group's lag",
            lambda: (runs_since(airflow_stack, ON_LAG, known)[:1], known),
            timeout=120,
        )[0]
        assert run["run_type"] == "asset_triggered", f"expected an asset-triggered run (no cron), found {run}"
        run = airflow_stack.wait_for_run(ON_LAG, run["dag_run_id"], timeout=300)
        states = airflow_stack.task_states(ON_LAG, run["dag_run_id"])
        assert run["state"] == "success" and set(states.values()) == {"success"}, f"found {run['state']}, {states}"
        assert committed(kafka_config, group, topic, [0, 1]) == {0: 5, 1: 5}
        assert_exactly_once(output, {(topic, p, o) for p in (0, 1) for o in range(5)})

        time.sleep(IDLE)  # the lag it took must not fire a second run
        runs = runs_since(airflow_stack, ON_LAG, known)
        assert len(runs) == 1, f"expected exactly one run for one burst of records, found {runs}"
        assert [e["rows"] for e in BatchStore(output).log.entries()] == [10]
    finally:
        airflow_stack.quiesce(ON_LAG)
