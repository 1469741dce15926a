"""The schema registry goes away, or moves on, in the middle of an Avro batch.

The registry sits behind a :class:`FaultProxy` port like the broker and the S3 server; the
values are Avro in the registry's wire format (``--value-format avro``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
from kafka_batch_provider.errors import EXIT_TRANSIENT
from kafka_batch_provider.testing.producers import Record, produce
from tests.faults.conftest import back_up_afterwards
from tests.faults.harness import (
    expect_exactly_once,
    expect_nothing_new_visible,
    run_cli,
    run_through_outage,
    through_spark_submit,
)
from tests.faults.harness import scenario_args as kafka_args
from tests.integration.helpers import group_offsets, offsets_of
from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.integration

V1 = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": ["null", "string"], "default": None}]}


@pytest.fixture(scope="session")
def registry_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    """A schema registry of its own, reachable only through a proxy that can go dark."""
    log_path = Path(tmp_path_factory.mktemp("fault-registry")) / "registry.log"
    with EmbeddedSchemaRegistry(log_path=log_path) as registry:
        with FaultProxy(target_port=registry.port) as proxy:
            yield proxy


@pytest.fixture
def registry(registry_proxy: FaultProxy) -> Iterator[FaultProxy]:
    yield from back_up_afterwards(registry_proxy)


def produce_avro(kafka_config: dict, url: str, topic: str, schema: dict, ids: range) -> None:
    serialize = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    produce(kafka_config, topic, [Record(n % 2, serialize({"id": n}, context)) for n in ids])


def avro_args(lake, kafka_config, topic, group_id, remote, url: str, *extra: str) -> list[str]:
    return kafka_args(lake, kafka_config, topic, group_id, remote, "--value-format", "avro",
                      "--schema-registry-url", url, *extra)  # fmt: skip


def test_the_registry_gone_after_planning_fails_the_write_in_one_line_and_a_retry_writes_once(
    outcome, lake, registry, kafka_config, new_topic, group_id, spark_connect_remote
):
    url = f"http://127.0.0.1:{registry.port}"
    topic = new_topic(partitions=2)
    produce_avro(kafka_config, url, topic, V1, range(40))
    args = avro_args(lake, kafka_config, topic, group_id, spark_connect_remote, url, "--stall-timeout", "4")

    failed = run_through_outage(args, lake.env(), "after-plan", registry)  # back once the run has ended
    line = failed.error_line()
    assert failed.process.returncode == EXIT_TRANSIENT, f"expected a transient exit, got {failed.process.returncode}"
    assert f"schema registry at {url} did not answer" in line, line
    expect_nothing_new_visible(lake, Counter())
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "the group moved"

    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == 40, retried
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 20, 1: 20}))


def test_a_version_registered_mid_batch_is_not_used_by_the_retry_of_that_batch(
    outcome, lake, registry, kafka_config, new_topic, group_id, spark_connect_remote
):
    url = f"http://127.0.0.1:{registry.port}"
    topic = new_topic(partitions=2)
    produce_avro(kafka_config, url, topic, V1, range(20))
    args = avro_args(lake, kafka_config, topic, group_id, spark_connect_remote, url)

    # The first attempt dies right after planning; meanwhile the producer moves to version 2.
    crashed = run_cli(args, lake.env(), fail_point="after-plan:kill")
    assert crashed.process.returncode != 0, "the fail point did not stop the run"
    SchemaRegistryClient({"url": url}).register_schema(f"{topic}-value", Schema(json.dumps(V2), "AVRO"))
    produce_avro(kafka_config, url, topic, V2, range(20, 30))

    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and retried["records"] == 20, f"the retry must replay the plan as it was: {retried}"
    columns = lake.output().store().log.tail()["schema"]
    assert "unit" not in columns, f"the retried batch decoded with the newer version: {columns}"
    following = run_cli(args, lake.env()).result()
    assert following["records"] == 10, following
    assert "unit:string" in lake.output().store().log.tail()["schema"], "the next batch reads with version 2"
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 15, 1: 15}))


# One output format: the dead letters of a killed worker's attempt are staged alike for both.
@pytest.mark.parametrize("lake", ["delta"], indirect=True)
def test_a_worker_killed_while_writing_dead_letters_then_a_retry_sets_each_aside_once(
    outcome, lake, registry, kafka_config, new_topic, group_id, spark_connect_remote
):
    url = f"http://127.0.0.1:{registry.port}"
    topic = new_topic(partitions=2)
    serialize = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(V1))
    good = serialize({"id": 0}, SerializationContext(topic, MessageField.VALUE))
    # Every third record of each partition cannot be decoded (a magic byte no serializer writes).
    records = [Record(n % 2, b"\x07" + good[1:] if (n // 2) % 3 == 2 else good) for n in range(120)]
    produce(kafka_config, topic, records)
    bad = {(topic, n % 2, n // 2) for n in range(120) if (n // 2) % 3 == 2}
    args = avro_args(lake, kafka_config, topic, group_id, spark_connect_remote, url, "--on-bad-record", "dead-letter")
    submit_args = through_spark_submit(args, spark_connect_remote)  # the fail point reaches its Python workers

    crashed = run_cli(submit_args, lake.env(), fail_point="writing-dead-letters:kill")
    line = crashed.error_line()
    assert crashed.process.returncode not in (0, None), f"the killed worker must fail the run: {crashed.stderr[-800:]}"
    assert "Python worker died" in line, f"the line must say a worker died: {line} ({crashed.stderr[-3000:]})"
    expect_nothing_new_visible(lake, Counter())
    assert dead_letter_keys(lake) == Counter(), "a failed attempt's dead letters became visible"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "the group moved"

    retried = run_cli(args, lake.env()).result()
    assert retried["reused"] and (retried["records"], retried["dead_letters"]) == (80, 40), retried
    letters = dead_letter_keys(lake)
    outcome.lost += len(bad - set(letters))
    outcome.duplicated += sum(n - 1 for n in letters.values() if n > 1)
    assert set(letters) == bad and max(letters.values()) == 1, f"each dead letter once: {sorted(letters.items())[:5]}"
    expect_exactly_once(outcome, lake, offsets_of(topic, {0: 60, 1: 60}) - bad)
    assert lake.staged_names() == [], "the killed attempt's files were not cleaned up"


def dead_letter_keys(lake) -> Counter:
    """How often each (topic, partition, offset) is visible among the output's published dead letters."""
    import pyarrow.dataset as ds

    store = lake.store()
    root = store.data.path(store.sink.dead_letter_root)
    if not store.data.exists(store.sink.dead_letter_root):
        return Counter()
    table = ds.dataset(root, format="parquet", filesystem=store.data.fs).to_table(["topic", "partition", "offset"])
    return Counter(zip(*(table.column(name).to_pylist() for name in ("topic", "partition", "offset"))))
