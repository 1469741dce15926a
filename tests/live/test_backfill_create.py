"""``airflow backfill create`` over two data intervals of kafka_batch_ingest: replay, never commit."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import assert_exactly_once
from tests.live.conftest import INGEST
from tests.live.helpers import committed, runs_since, wait_for, xcom_value

INTERVAL_START = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def test_backfill_create_replays_two_intervals_into_the_replay_output_without_committing(
    airflow_stack, live_ingest, kafka_config, kafka_broker_kind
):
    topic, group, output = live_ingest["topic"], live_ingest["group"], live_ingest["output"]
    # One record 30 s into each minute from 11:59 to 12:02: the intervals [12:00, 12:01) and
    # [12:01, 12:02) hold the second and third of each partition.
    for minute in range(-1, 3):
        stamp = int((INTERVAL_START + timedelta(minutes=minute, seconds=30)).timestamp() * 1000)
        produce(kafka_config, topic, [Record(p, b"m%d" % minute, timestamp_ms=stamp) for p in (0, 1)])
    # The group is caught up: scheduled runs (the DAG must be unpaused for backfill runs to
    # start) have nothing to do, so any move of the group would be the backfill's.
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    KafkaOffsets(kafka_config).commit(group, {tp: None for tp in tps}, {tp: 4 for tp in tps})
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(INGEST)}

    # Created while the DAG is paused: unpausing makes the scheduler write too, and SQLite
    # refuses a second writer's read-then-write transaction ("database is locked") at once; the
    # triggerer and the dag-processor still write, so a refusal is retried (one transaction).
    airflow_stack.run_cli(
        "backfill",
        "create",
        "--dag-id",
        INGEST,
        "--from-date",
        INTERVAL_START.isoformat(),
        "--to-date",
        (INTERVAL_START + timedelta(minutes=1)).isoformat(),
        retry_locked=60,
    )
    airflow_stack.set_paused(INGEST, False)  # backfill runs start only on an unpaused DAG
    runs = wait_for(
        "two backfill runs",
        lambda: ((found := runs_since(airflow_stack, INGEST, known, "backfill"))[1:] and found, found),
        timeout=60,
    )
    assert len(runs) == 2, f"expected one backfill run per data interval, found {[r['dag_run_id'] for r in runs]}"
    intervals = sorted((r["data_interval_start"], r["data_interval_end"]) for r in runs)
    assert [s[11:16] + "-" + e[11:16] for s, e in intervals] == ["12:00-12:01", "12:01-12:02"], intervals

    replay = output + "_replay"
    planned: list[tuple[str, int, int]] = []
    for run in runs:
        run = airflow_stack.wait_for_run(INGEST, run["dag_run_id"], timeout=300)
        states = airflow_stack.task_states(INGEST, run["dag_run_id"])
        assert run["state"] == "success", f"expected the backfill run to succeed, found {states}"
        assert states["ingest.commit"] == "skipped", f"a backfill run must not commit, found {states}"
        plan = xcom_value(airflow_stack, INGEST, run["dag_run_id"], "ingest.plan")
        assert plan["output_path"] == replay, f"expected the plan to write to {replay}, found {plan['output_path']}"
        planned += [(r["topic"], r["partition"], o) for r in plan["ranges"] for o in range(r["start"], r["end"])]
    assert committed(kafka_config, group, topic, [0, 1]) == {0: 4, 1: 4}, "the backfill moved the consumer group"
    assert not list(Path(output).glob("batch_id=*")), "a backfill run wrote to the incremental output"
    assert not list(Path(replay).glob("_commits/*")), "a backfill run recorded a Kafka commit"
    assert len(planned) == len(set(planned)), f"the two intervals' replays overlap: {sorted(planned)}"
    assert_exactly_once(replay, set(planned))
    if kafka_broker_kind != "tansu":
        assert set(planned) == {(topic, p, o) for p in (0, 1) for o in (1, 2)}, sorted(planned)
    else:
        # tansu answers every ListOffsets by timestamp with 0, so both intervals plan nothing:
        # what is checked there is the backfill's wiring, not the time mapping (Apache Kafka,
        # the default broker, checks that; so do tests/unit/steps/test_replay.py).
        assert planned == [], f"the embedded broker maps every time to offset 0, yet ranges were planned: {planned}"
