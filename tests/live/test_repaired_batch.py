"""A batch whose commit task failed is committed by the next run's plan task, and announced there on
the output's asset exactly as a commit announces a batch (issue 36, item 2), under the scheduler.

The commit fails for real: while the first run goes, a consumer subscribed with the ingest group's
``group.id`` is an active member of it, and Apache Kafka takes a group's offsets from its members
only: the commit is refused (terminal, no retry) and the run fails with its batch in the output.
The consumer leaves; the next run's plan commits the logged batch without reading it again and
announces it, then ingests the new records.
"""

from __future__ import annotations

from confluent_kafka import Consumer

from kafka_batch_provider.operators.assets import output_asset_uri
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import assert_exactly_once
from tests.live.conftest import INGEST
from tests.live.helpers import committed, runs_since, wait_for
from tests.live.test_scheduled_ingest import asset_events


def a_member_of(kafka_config: dict, group: str, topic: str) -> Consumer:
    """A consumer of ``group`` with its partitions assigned (an active member until it closes)."""
    member = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False, "max.poll.interval.ms": 900_000})
    member.subscribe([topic])

    def assigned() -> tuple[list | None, list]:
        member.poll(0.2)
        found = member.assignment()
        return (found or None), found

    wait_for(f"a member of {group} to be assigned {topic}'s partitions", assigned, timeout=60, interval=0)
    return member


def events_of(stack, uri: str, batch_ids: set[str]) -> list[dict]:
    """The events of these batches on the output's asset."""
    found = []
    for asset in stack.api("GET", "/assets", params={"uri_pattern": uri})["assets"]:
        events, _ = asset_events(stack, asset["id"])
        found += [e for e in events or [] if e["extra"].get("batch_id") in batch_ids]
    return found


def failed_log_tail(stack, run_id: str, states: dict) -> str:
    failed = [task for task, state in states.items() if state == "failed"]
    return stack.task_log(INGEST, run_id, failed[0])[-1500:] if failed else "(no failed task)"


def test_a_batch_whose_commit_was_refused_is_committed_and_announced_by_the_next_runs_plan(
    airflow_stack, live_ingest, kafka_config
):
    topic, group, output = live_ingest["topic"], live_ingest["group"], live_ingest["output"]
    produce(kafka_config, topic, sample_records(2, 20))
    member = a_member_of(kafka_config, group, topic)
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(INGEST)}
    try:
        airflow_stack.set_paused(INGEST, False)  # the scheduler makes a run at once, then one a minute
        first = wait_for("the first run", lambda: (runs_since(airflow_stack, INGEST, known)[:1], known), timeout=150)
        run = airflow_stack.wait_for_run(INGEST, first[0]["dag_run_id"], timeout=300)
        produce(kafka_config, topic, sample_records(2, 6, first_id=20))  # for the next run
    finally:
        member.close()  # leaves the group
    states = airflow_stack.task_states(INGEST, run["dag_run_id"])
    assert (run["state"], states["ingest.spark_write"], states["ingest.commit"]) == ("failed", "success", "failed"), (
        f"expected the batch written and its commit refused (the group has an active member), found {states}; "
        f"the failed task's log ends: {failed_log_tail(airflow_stack, run['dag_run_id'], states)}"
    )
    assert committed(kafka_config, group, topic, [0, 1]) == {0: None, 1: None}, "nothing may be committed yet"
    uri = output_asset_uri({"format": "parquet", "output": output})
    [logged] = BatchStore(output).log.entries()
    assert not events_of(airflow_stack, uri, {logged["batch_id"]}), "a batch whose commit failed must not be announced"

    # The next run repairs the batch (committed, announced) and ingests the new records. A run the
    # scheduler started within the moment the member was still there fails as the first did; the
    # one after it then does the work: at most two runs.
    known.add(run["dag_run_id"])
    finished: list[dict] = []
    while not finished or (finished[-1]["state"] != "success" and len(finished) < 2):
        following = wait_for(
            "the next run", lambda: (runs_since(airflow_stack, INGEST, known)[:1], known), timeout=150
        )[0]
        finished.append(airflow_stack.wait_for_run(INGEST, following["dag_run_id"], timeout=300))
        known.add(following["dag_run_id"])
    run = finished[-1]
    states = airflow_stack.task_states(INGEST, run["dag_run_id"])
    assert run["state"] == "success" and set(states.values()) == {"success"}, (
        f"expected the next run to repair the batch and ingest the new records, found {run['state']} with {states}"
        f" (runs: {[r['state'] for r in finished]})"
    )
    assert committed(kafka_config, group, topic, [0, 1]) == {0: 13, 1: 13}
    assert_exactly_once(output, {(topic, p, o) for p in (0, 1) for o in range(13)})
    entries = list(BatchStore(output).log.entries())
    assert [e["rows"] for e in entries] == [20, 6], f"expected the batch once and then the new records: {entries}"

    ours = {e["batch_id"] for e in entries}

    def both_events() -> tuple[list | None, object]:
        events = events_of(airflow_stack, uri, ours)
        return (events if len(events) == 2 else None), (events, airflow_stack.api("GET", "/assets")["assets"])

    events = wait_for("an event for each of the two batches", both_events, timeout=60)
    found = sorted((e["extra"]["seq"], e["extra"]["batch_id"], e["extra"]["rows"], e["source_task_id"]) for e in events)
    expected = [(1, entries[0]["batch_id"], 20, "ingest.plan"), (2, entries[1]["batch_id"], 6, "ingest.commit")]
    assert found == expected, f"expected the repaired batch announced by the plan task, the new one by commit: {found}"
    repaired, new = sorted(events, key=lambda e: e["extra"]["seq"])
    assert set(repaired["extra"]) == set(new["extra"]), (
        f"expected the repaired batch's event to carry a commit's facts, found {sorted(repaired['extra'])} "
        f"and {sorted(new['extra'])}"
    )
