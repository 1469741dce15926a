"""A database output's batch (PostgreSQL, MariaDB) killed at each point of its one transaction
(issue 50): inside it before COMMIT nothing is visible and the retry lands the batch once; after
COMMIT and before the Kafka commit the next run commits without reading again. Counted in the fault
matrix."""

from __future__ import annotations

from collections import Counter

import pytest

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.harness import run_cli
from tests.integration.helpers import group_offsets

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("postgres")]


def rows_of(db) -> Counter:
    if not db.has_table(db.table):
        return Counter()
    return Counter(db.rows(f"SELECT topic, {db.quote('partition')}, {db.quote('offset')} FROM {db.table}"))


def expect_exactly_once(outcome, db, expected: set) -> None:
    seen = rows_of(db)
    outcome.checked = True
    outcome.lost += len(expected - set(seen))
    outcome.duplicated += sum(n - 1 for n in seen.values() if n > 1)
    assert set(seen) == expected and outcome.duplicated == 0, (
        f"expected {len(expected)} offsets once each; missing {sorted(expected - set(seen))[:5]}, "
        f"extra {sorted(set(seen) - expected)[:5]}, duplicated {outcome.duplicated}"
    )


def arguments(db, kafka_config, topic, group, remote) -> list[str]:
    where = ["--format", db.format, "--table", db.table]
    return ["--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic", topic, "--group", group,
            "--spark-remote", remote, "--timeout", "10", *where]  # fmt: skip


def killed_at(point: str, records: int, db, kafka_config, topic: str, group: str, remote: str):
    """``records`` produced over two partitions, then ``kafka-batch run`` killed at ``point``:
    the arguments and environment of the run that follows."""
    produce(kafka_config, topic, sample_records(2, records))
    args = arguments(db, kafka_config, topic, group, remote)
    env = {"KAFKA_BATCH_DATABASE_URL": db.url}
    crashed = run_cli(args, env, fail_point=f"{point}:kill")
    assert crashed.killed, f"expected the run killed at {point}, got exit {crashed.process.returncode}"
    return args, env


def test_a_kill_inside_the_database_transaction_leaves_nothing_and_the_retry_lands_once(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    args, env = killed_at(
        "before-database-commit", 30, output_database, kafka_config, topic, group_id, spark_connect_remote
    )
    assert rows_of(output_database) == Counter(), "rows of an uncommitted transaction are visible"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    retried = run_cli(args, env).result()
    assert retried["records"] == 30 and retried["reused"], f"the retry must replay the saved plan: {retried}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 15, 1: 15}
    expect_exactly_once(outcome, output_database, {(topic, p, o) for p in range(2) for o in range(15)})


def test_a_kill_after_the_database_commit_is_committed_to_kafka_without_reading_again(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    args, env = killed_at("after-log-entry", 20, output_database, kafka_config, topic, group_id, spark_connect_remote)
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "the Kafka commit must not have run"
    finished = run_cli(args, env).result()
    assert finished["repaired"] and finished["skipped"], f"the next run must only finish the commit: {finished}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    expect_exactly_once(outcome, output_database, {(topic, p, o) for p in range(2) for o in range(10)})
