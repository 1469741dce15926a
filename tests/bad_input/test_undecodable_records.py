"""Avro topics with records that cannot be decoded, read with ``--on-bad-record fail`` (the default):
the run fails in one ``error:`` line naming topic, partition, offset and why; no data, no dead
letters, no group move. The batch's plan stays pending, so a retry with ``--on-bad-record
dead-letter`` (or after the topic is fixed by a replay elsewhere) reads the same range.

Each case: a topic of its own with a good record, then the bad one; ``kafka-batch run`` through
the session's Spark Connect server and the embedded schema registry.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import Record, create_topics, produce
from tests.bad_input.scene import Scene, cli

READING = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}

#: id -> (how the good record's bytes are spoilt, what the error line must say)
CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "record-wrong-magic-byte": (lambda good: b"\x07" + good[1:], "magic byte 0x07, not 0x00"),
    "record-truncated-header": (lambda good: good[:3], "3 byte(s), shorter than the wire format's 5-byte header"),
    "record-truncated-payload": (lambda good: good[:5], "the value cannot be decoded (schema id"),
    "record-unknown-schema-id": (
        lambda good: b"\x00" + (987654).to_bytes(4, "big") + good[5:],
        "schema not found (schema id 987654)",
    ),
}


def refusal_problems(result: subprocess.CompletedProcess, expected: str) -> list[str]:
    """A failed run: progress lines, then exactly one ``error:`` line (the last) naming the record."""
    lines = result.stderr.strip().splitlines()
    if result.returncode == 0:
        return [f"expected a non-zero exit, got 0 (stdout {result.stdout.strip()[-300:]!r})"]
    if "Traceback" in result.stderr:
        return [f"expected no traceback, got {result.stderr.strip()[-800:]!r}"]
    errors = [line for line in lines if line.startswith("error: ")]
    if len(errors) != 1 or lines[-1] != errors[0]:
        return [f"expected one 'error: ...' line, the last, got {lines[-6:]!r}"]
    if expected not in errors[0] or "offset 1:" not in errors[0] or "--on-bad-record=dead-letter" not in errors[0]:
        return [f"expected the error line to name offset 1, the way out, and say {expected!r}, got {errors[0]!r}"]
    return []


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_an_undecodable_record_fails_the_run_in_one_line_and_changes_nothing(
    case: str,
    scene: Scene,
    verdict,
    schema_registry: str,
    spark_connect_remote: str,
    tmp_path,
) -> None:
    spoil, expected = CASES[case]
    topic = f"undecodable-{uuid.uuid4().hex[:8]}"
    create_topics(scene.kafka_config, {topic: 1})
    serialize = AvroSerializer(SchemaRegistryClient({"url": schema_registry}), json.dumps(READING))
    good = serialize({"id": 1}, SerializationContext(topic, MessageField.VALUE))
    produce(scene.kafka_config, topic, [Record(0, good), Record(0, spoil(good))])
    lake = tmp_path / "lake"
    before = scene.snapshot()
    result = cli(
        "run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", topic, "--group", f"g-{topic}",
        "--output", str(lake), "--value-format", "avro", "--schema-registry-url", schema_registry,
        "--spark-remote", spark_connect_remote, timeout=600,
    )  # fmt: skip
    problems = refusal_problems(result, expected)
    committed = scene.kafka.committed_offsets(f"g-{topic}", [TopicPartition(topic, 0)])
    if any(offset is not None for offset in committed.values()):
        problems.append(f"the group moved: {committed}")
    store = BatchStore(str(lake))
    if store.log.tail() is not None:
        problems.append(f"the output log gained an entry: {store.log.tail()}")
    published = [name for name in store.data.files_below("") if not name.startswith(("_plans/", "_staging/"))]
    if published:
        problems.append(f"files were published: {published}")
    verdict.judge(problems, before, scene.snapshot())
