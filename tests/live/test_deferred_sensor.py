"""The deferrable KafkaLagSensor waits in the live triggerer, holding no worker slot."""

from __future__ import annotations

import time

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.live.conftest import INGEST
from tests.live.helpers import task_instances_of, wait_for, xcom_value

SENSOR = "ingest.wait_for_data"


def test_lag_sensor_defers_to_the_triggerer_and_resumes_when_records_arrive(airflow_stack, live_ingest, kafka_config):
    topic = live_ingest["topic"]
    known = {ti["id"] for ti in task_instances_of(airflow_stack, INGEST, SENSOR)}
    airflow_stack.trigger(INGEST)
    airflow_stack.set_paused(INGEST, False)

    def deferred_sensor():
        tis = [t for t in task_instances_of(airflow_stack, INGEST, SENSOR, "deferred") if t["id"] not in known]
        return tis[:1], [(t["dag_run_id"], t["state"]) for t in task_instances_of(airflow_stack, INGEST, SENSOR)]

    [sensor] = wait_for("the lag sensor of a new run to be deferred (no records yet)", deferred_sensor, timeout=120)
    run_id = sensor["dag_run_id"]

    def picked_up():
        ti = airflow_stack.task_instances(INGEST, run_id)[SENSOR]
        return bool(ti["triggerer_job"]) and ti, (ti["state"], ti["trigger"], ti["triggerer_job"])

    # The triggerer claims new triggers in its own loop: wait for it, however busy the machine is.
    wait_for("the live triggerer to pick up the deferred sensor's trigger", picked_up, timeout=120)
    # While it waits: still deferred, its trigger held by the live triggerer, no pool slot taken.
    for _ in range(3):
        ti = airflow_stack.task_instances(INGEST, run_id)[SENSOR]
        pool = airflow_stack.api("GET", "/pools/default_pool")
        assert ti["state"] == "deferred", (
            f"expected the sensor to stay deferred while no records arrive, found {ti['state']}"
        )
        assert ti["trigger"] and ti["trigger"]["classpath"].endswith("KafkaLagTrigger"), f"trigger: {ti['trigger']}"
        assert ti["triggerer_job"] and ti["triggerer_job"]["job_type"] == "TriggererJob", (
            f"expected the trigger to be assigned to the running triggerer, found {ti['triggerer_job']}"
        )
        assert pool["running_slots"] == 0 and pool["deferred_slots"] >= 1, (
            f"expected no worker slot in use while deferred, found running_slots={pool['running_slots']}, "
            f"deferred_slots={pool['deferred_slots']}"
        )
        time.sleep(2)

    produce(kafka_config, topic, sample_records(2, 10))

    def sensor_finished():
        state = airflow_stack.task_instances(INGEST, run_id)[SENSOR]["state"]
        return state in ("success", "failed", "skipped", "up_for_retry") and state, state

    state = wait_for("the sensor to resume once records arrived", sensor_finished, timeout=120)
    assert state == "success", f"expected the sensor to succeed after records arrived, found {state}"
    result = xcom_value(airflow_stack, INGEST, run_id, SENSOR)
    assert result["total_lag"] == 10, f"expected the sensor to report the 10 new records, found {result}"
    # The batch itself is the scheduled-run test's subject: the fixture stops this run here.
