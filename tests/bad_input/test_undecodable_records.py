"""Avro, Protobuf and JSON Schema topics with records that cannot be decoded, read with
``--on-bad-record fail`` (the default): the run fails in one ``error:`` line naming topic,
partition, offset and why; no data, no dead letters, no group move. The batch's plan stays
pending, so a retry with ``--on-bad-record dead-letter`` (or after the topic is fixed by a
replay elsewhere) reads the same range.

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
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import Record, create_topics, produce
from tests.bad_input.scene import Scene, cli, cli_refusal_problems
from tests.unit.decoding.test_protobuf_decoder import message_class

READING = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}
READING_PROTO = 'syntax = "proto3"; package lab; message Reading { int64 id = 1; }'
READING_JSON = {"type": "object", "properties": {"id": {"type": "integer"}}}

#: id -> (value format, how the good record's bytes are spoilt, what the error line must say)
CASES: dict[str, tuple[str, Callable[[bytes], bytes], str]] = {
    "record-wrong-magic-byte": ("avro", lambda good: b"\x07" + good[1:], "magic byte 0x07, not 0x00"),
    "record-truncated-header": (
        "avro",
        lambda good: good[:3],
        "3 byte(s), shorter than the wire format's 5-byte header",
    ),
    "record-truncated-payload": ("avro", lambda good: good[:5], "the value cannot be decoded (schema id"),
    "record-unknown-schema-id": (
        "avro",
        lambda good: b"\x00" + (987654).to_bytes(4, "big") + good[5:],
        "schema not found (schema id 987654)",
    ),
    # the one message's index is written as [0]'s short form (one byte 0x00): [5] instead
    "protobuf-message-index-out-of-range": (
        "protobuf",
        lambda good: good[:5] + b"\x02\x0a" + good[6:],
        "message index [5] is out of range",
    ),
    "protobuf-corrupt-payload": ("protobuf", lambda good: good[:6] + b"\x08", "DecodeError"),
    "json-schema-breaks-its-schema": (
        "json-schema",
        lambda good: good[:5] + b'{"id": "one"}',
        "the JSON breaks its schema at $.id: 'one' is not of type 'integer'",
    ),
    "json-schema-not-json": ("json-schema", lambda good: good[:5] + b'{"id": 1', "JSONDecodeError"),
}


#: id -> (key format, how the good key's bytes are spoilt, what the error line must say); the values are good Avro
KEY_CASES: dict[str, tuple[str, Callable[[bytes], bytes], str]] = {
    "key-not-in-the-wire-format": ("avro", lambda good: b"order-1", "the key cannot be decoded (magic byte 0x6f"),
    "key-unknown-schema-id": (
        "protobuf",
        lambda good: b"\x00" + (987654).to_bytes(4, "big") + good[5:],
        "the key cannot be decoded (schema registry at http://127.0.0.1:",
    ),
}


def good_value(value_format: str, registry_url: str, topic: str, field: str = MessageField.VALUE) -> bytes:
    """A value (or key) of id 1, as confluent-kafka's serializer of the format writes it."""
    client = SchemaRegistryClient({"url": registry_url})
    context = SerializationContext(topic, field)
    if value_format == "protobuf":
        cls = message_class(READING_PROTO, "lab.Reading")
        return ProtobufSerializer(cls, client, {"use.deprecated.format": False})(cls(id=1), context)
    if value_format == "json-schema":
        return JSONSerializer(json.dumps(READING_JSON), client)({"id": 1}, context)
    return AvroSerializer(client, json.dumps(READING))({"id": 1}, context)


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


@pytest.mark.parametrize("case", [*CASES, *KEY_CASES], ids=[*CASES, *KEY_CASES])
def test_an_undecodable_record_fails_the_run_in_one_line_and_changes_nothing(
    case: str,
    scene: Scene,
    verdict,
    schema_registry: str,
    spark_connect_remote: str,
    tmp_path,
) -> None:
    topic = f"undecodable-{uuid.uuid4().hex[:8]}"
    create_topics(scene.kafka_config, {topic: 1})
    if case in KEY_CASES:  # good values, a bad key
        key_format, spoil, expected = KEY_CASES[case]
        value_format, keys = "avro", ["--key-format", key_format]
        good, key = (
            good_value("avro", schema_registry, topic),
            good_value(key_format, schema_registry, topic, MessageField.KEY),
        )
        produce(scene.kafka_config, topic, [Record(0, good, key), Record(0, good, spoil(key))])
    else:
        value_format, spoil, expected = CASES[case]
        keys = []
        good = good_value(value_format, schema_registry, topic)
        produce(scene.kafka_config, topic, [Record(0, good), Record(0, spoil(good))])
    lake = tmp_path / "lake"
    before = scene.snapshot()
    result = cli(
        "run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", topic, "--group", f"g-{topic}",
        "--output", str(lake), "--value-format", value_format, "--schema-registry-url", schema_registry,
        "--spark-remote", spark_connect_remote, *keys, timeout=600,
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


#: id -> (the run's registry arguments, what the one error line must say); refused when planning
PLAN_CASES: dict[str, tuple[list[str], str]] = {
    "format-not-the-subjects": (["--value-format", "protobuf"], "is a AVRO schema, not protobuf"),
    "json-schema-on-an-avro-subject": (["--value-format", "json-schema"], "is a AVRO schema, not json-schema"),
    "pinned-version-missing": (
        ["--value-format", "avro", "--value-schema-version", "9"],
        "version not found (version 9",
    ),
    "key-format-not-the-subjects": (
        ["--key-format", "json-schema"],
        "-key version 1 is a AVRO schema, not json-schema",
    ),
    "key-subject-missing": (
        ["--key-format", "avro", "--key-subject", "nobody-key"],
        "subject not found (the latest version of 'nobody-key')",
    ),
}


@pytest.mark.parametrize("case", list(PLAN_CASES), ids=list(PLAN_CASES))
def test_a_reader_schema_that_cannot_be_pinned_is_refused_before_anything_is_planned(
    case: str, scene: Scene, verdict, schema_registry: str, tmp_path
) -> None:
    arguments, expected = PLAN_CASES[case]
    topic = f"unpinned-{uuid.uuid4().hex[:8]}"
    create_topics(scene.kafka_config, {topic: 1})
    key = good_value("avro", schema_registry, topic, MessageField.KEY)  # <topic>-key is an Avro subject
    produce(scene.kafka_config, topic, [Record(0, good_value("avro", schema_registry, topic), key)])
    lake = tmp_path / "lake"
    before = scene.snapshot()
    result = cli(
        "run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", topic, "--group", f"g-{topic}",
        "--output", str(lake), "--schema-registry-url", schema_registry, *arguments, timeout=300,
    )  # fmt: skip
    problems = cli_refusal_problems(result, expected)
    store = BatchStore(str(lake))
    if store.plan_files():
        problems.append(f"a refused run left plan files: {store.plan_files()}")
    committed = scene.kafka.committed_offsets(f"g-{topic}", [TopicPartition(topic, 0)])
    if any(offset is not None for offset in committed.values()):
        problems.append(f"the group moved: {committed}")
    verdict.judge(problems, before, scene.snapshot())
