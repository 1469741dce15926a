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
from tests.faults.harness import expect_exactly_once, expect_nothing_new_visible, run_cli, run_through_outage
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
