"""A consumer group with an active member: Kafka refuses our commit (real Kafka only).

kafka-batch commits a group it never joins (generation -1, no member id). While another consumer
is a member of that group (it ``subscribe``d with the same ``group.id``), Kafka takes the group's
offsets from its members only and answers UNKNOWN_MEMBER_ID, under both rebalance protocols: the
classic one and KIP-848's ``group.protocol=consumer`` (Kafka 4 runs both). The user must get one
line naming the group and what to do; the batch stays in the output; once the member has left, the
next run commits it without reading again (the plan step's repair).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kafka_batch_provider.errors import EXIT_TERMINAL
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import Output, assert_exactly_once, dataset_keys, group_offsets, offsets_of
from tests.integration.test_cli import cli, last_json

pytestmark = pytest.mark.integration


def join_group(kafka_config: dict, group_id: str, topic: str, protocol: str, timeout: float = 30) -> Consumer:
    """A consumer that subscribes with ``group_id`` and polls until the group assigned it partitions."""
    member = Consumer(
        {
            **kafka_config,
            "group.id": group_id,
            "group.protocol": protocol,
            "enable.auto.commit": False,  # it commits nothing: only its membership matters here
            "auto.offset.reset": "latest",
        }
    )
    member.subscribe([topic])
    deadline = time.monotonic() + timeout
    while not member.assignment():
        assert time.monotonic() < deadline, (
            f"a {protocol} consumer of group {group_id} was assigned no partition within {timeout:g}s"
        )
        member.poll(0.1)
    return member


def wait_until_group_empty(kafka_config: dict, group_id: str, timeout: float = 30) -> None:
    """Until the group has no member left (a consumer that closes leaves at once)."""
    admin = AdminClient(kafka_config)
    deadline = time.monotonic() + timeout
    while True:
        described = admin.describe_consumer_groups([group_id], request_timeout=10)[group_id].result()
        if not described.members:
            return
        assert time.monotonic() < deadline, (
            f"expected group {group_id} to have no member {timeout:g}s after its consumer closed, "
            f"found {len(described.members)} ({described.state})"
        )
        time.sleep(0.1)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_with_an_active_member_refuses_the_commit_in_one_line_and_the_next_run_commits_without_reading(
    protocol,
    kafka_broker_kind,
    kafka_config,
    kafka_bootstrap_servers,
    new_topic,
    group_id,
    tmp_path,
    spark_connect_remote,
):
    if kafka_broker_kind == "tansu":
        pytest.skip(
            "group membership needs a real Kafka (the default broker, or KAFKA_BOOTSTRAP_SERVERS): the embedded "
            "broker (tansu, KAFKA_BATCH_TEST_BROKER=tansu) takes ~23 s to assign a subscribing consumer and does "
            "not speak the consumer protocol (KIP-848)"
        )
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    output = Output(str(tmp_path / "lake"))
    args = [
        "run",
        "--bootstrap-servers",
        kafka_bootstrap_servers,
        "--topic",
        topic,
        "--group",
        group_id,
        "--output",
        output.uri,
        "--spark-remote",
        spark_connect_remote,
        "--timeout",
        "10",
    ]
    member = join_group(kafka_config, group_id, topic, protocol)
    try:
        refused = cli(*args)
    finally:
        member.close()

    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == EXIT_TERMINAL, (
        f"expected exit {EXIT_TERMINAL} (refused: a retry fails the same way while the member stays), "
        f"found {refused.returncode}: {lines[-3:]}"
    )
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in refused.stderr, lines[-3:]
    line = lines[-1]
    for expected in (repr(group_id), "active member", "stop that consumer", "group.id of its own"):
        assert expected in line, f"expected {expected!r} in the error line, found {line!r}"
    [entry] = BatchStore(output.uri).log.entries()
    assert entry["rows"] == 20 and len(dataset_keys(output)) == 20, (
        f"expected the batch (20 rows) to stay in the output, found {entry['rows']} logged, "
        f"{len(dataset_keys(output))} visible"
    )
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "nothing may be committed"

    wait_until_group_empty(kafka_config, group_id)
    finished = last_json(cli(*args))

    assert finished["repaired"] == [entry["batch_id"]] and "spark_seconds" not in finished["timings"], (
        f"expected the next run to commit batch {entry['batch_id']} without reading again, found {finished}"
    )
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    assert_exactly_once(output, offsets_of(topic, {0: 10, 1: 10}))
