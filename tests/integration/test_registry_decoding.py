"""The product's registry client and the in-task decoding against the embedded schema registry
over HTTP: values serialized by confluent-kafka's AvroSerializer become typed columns; outages,
refused credentials and unknown ids each give their one line."""

from __future__ import annotations

import json
import pickle
import re
import time

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.decoding.dead_letters import DEAD_LETTER_SCHEMA
from kafka_batch_provider.dev.local_servers import free_port
from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
from kafka_batch_provider.dev.schema_registry.auth import Credential
from kafka_batch_provider.errors import ConfigError, RegistryRefusedError, RegistryUnavailableError, SchemaError
from kafka_batch_provider.registry.client import SchemaRegistry
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA
from kafka_batch_provider.spark.value_decoding import ValueDecoding

pytestmark = [pytest.mark.integration, pytest.mark.check]  # check: in make check's tier

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "qty", "type": ["null", "int"], "default": None}]}


def produce_values(url: str, topic: str, schema: dict, records: list[dict]) -> list[bytes]:
    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    return [serializer(r, SerializationContext(topic, MessageField.VALUE)) for r in records]


def kafka_batch(topic: str, values: list[bytes | None]) -> pa.RecordBatch:
    rows = len(values)
    columns = {
        "key": [None] * rows,
        "value": values,
        "topic": [topic] * rows,
        "partition": [0] * rows,
        "offset": list(range(rows)),
        "timestamp": [0] * rows,
        "timestampType": [0] * rows,
        "headers": [[]] * rows,
    }
    return pa.RecordBatch.from_pydict(columns, schema=KAFKA_ARROW_SCHEMA)


def test_a_batch_of_two_schema_versions_becomes_typed_columns_in_the_reader_schema(schema_registry):
    topic = f"orders-{time.time_ns()}"
    values = produce_values(schema_registry, topic, V1, [{"id": 1, "item": "pen"}])
    values += produce_values(schema_registry, topic, V2, [{"id": 2, "item": "ink", "qty": 3}])
    registry = SchemaRegistry(RegistrySettings(schema_registry))
    reader = registry.latest(f"{topic}-value")
    assert (reader.subject, reader.version) == (f"{topic}-value", 2), f"expected version 2, found {reader}"
    decoding = ValueDecoding(reader.text, {"url": schema_registry}, keep_raw_value=True)
    decoding = pickle.loads(pickle.dumps(decoding))  # as Spark ships it to its tasks
    out = list(decoding(iter([kafka_batch(topic, [*values, None])])))[0]
    expected_names = [*KAFKA_ARROW_SCHEMA.names, "id", "item", "qty"]
    assert out.schema.names == expected_names, f"expected columns {expected_names}, found {out.schema.names}"
    rows = out.select(["offset", "id", "item", "qty"]).to_pylist()
    expected = [
        {"offset": 0, "id": 1, "item": "pen", "qty": None},
        {"offset": 1, "id": 2, "item": "ink", "qty": 3},
        {"offset": 2, "id": None, "item": None, "qty": None},  # a tombstone
    ]
    assert rows == expected, f"expected {expected}, found {rows}"
    assert out.column("value").to_pylist()[:2] == values, "keep_raw_value keeps the bytes"


def test_an_undecodable_record_fails_the_batch_naming_topic_partition_and_offset(schema_registry):
    topic = f"bad-{time.time_ns()}"
    good = produce_values(schema_registry, topic, V1, [{"id": 1, "item": "pen"}])[0]
    reader = SchemaRegistry(RegistrySettings(schema_registry)).latest(f"{topic}-value")
    decoding = ValueDecoding(reader.text, {"url": schema_registry})
    with pytest.raises(SchemaError) as caught:
        list(decoding(iter([kafka_batch(topic, [good, b"\x07garbage", good[:6]])])))
    message = str(caught.value)
    assert f"{topic}[0] offset 1:" in message and "magic byte 0x07" in message, message
    assert "and 1 more record(s)" in message and "on_bad_record='dead-letter'" in message, message
    assert "\n" not in message


def test_dead_letter_mode_sets_undecodable_records_aside_whole_and_keeps_the_rest(schema_registry):
    topic = f"dead-{time.time_ns()}"
    good = produce_values(schema_registry, topic, V1, [{"id": 1, "item": "pen"}])[0]
    unknown_id = b"\x00" + (987654).to_bytes(4, "big") + good[5:]
    reader = SchemaRegistry(RegistrySettings(schema_registry)).latest(f"{topic}-value")
    decoding = ValueDecoding(reader.text, {"url": schema_registry}, on_bad_record="dead-letter")
    values = [good, b"\x07garbage", good[:6], unknown_id, None]
    out = list(decoding(iter([kafka_batch(topic, values)])))
    assert [type(o).__name__ for o in out] == ["DeadLetterBatch", "RecordBatch"], f"found {out}"
    dead, data = out[0].rows, out[1]
    assert data.column("offset").to_pylist() == [0, 4], "the data keeps the good record and the tombstone"
    assert data.column("id").to_pylist() == [1, None]
    assert dead.schema == DEAD_LETTER_SCHEMA, f"expected {DEAD_LETTER_SCHEMA}, found {dead.schema}"
    letters = dead.select(["offset", "value", "schema_id"]).to_pylist()
    expected = [
        {"offset": 1, "value": b"\x07garbage", "schema_id": None},
        {"offset": 2, "value": good[:6], "schema_id": int.from_bytes(good[1:5], "big")},
        {"offset": 3, "value": unknown_id, "schema_id": 987654},
    ]
    assert letters == expected, f"expected {expected}, found {letters}"
    errors = dead.column("error").to_pylist()
    assert "magic byte 0x07" in errors[0] and "schema id 987654" in errors[2], errors
    assert all(e and "\n" not in e for e in errors), errors


def test_unknown_subjects_versions_and_ids_are_schema_errors(schema_registry):
    registry = SchemaRegistry(RegistrySettings(schema_registry), wait=1)
    cases = [
        (lambda: registry.latest("none-value"), "subject not found (the latest version of 'none-value')"),
        (lambda: registry.by_id(987654), "schema not found (schema id 987654)"),
    ]
    for call, expected in cases:
        with pytest.raises(SchemaError, match=re.escape(expected)):
            call()


def test_an_unreachable_registry_is_waited_for_then_one_transient_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    registry = SchemaRegistry(RegistrySettings(url), wait=2)
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError) as caught:
        registry.by_id(1)
    waited = time.monotonic() - started
    assert 1 <= waited < 30, f"expected about the 2 s wait, waited {waited:.1f}s"
    assert caught.value.transient and url in str(caught.value), str(caught.value)


def test_refused_credentials_fail_at_once_and_never_show_the_secret(tmp_path):
    credentials = (Credential(user="writer", password="w-secret-123"),)
    with EmbeddedSchemaRegistry(log_path=tmp_path / "registry.log", credentials=credentials) as server:
        wrong = SchemaRegistry(RegistrySettings(server.url, {"basic.auth.user.info": "writer:nope-456"}), wait=30)
        started = time.monotonic()
        with pytest.raises(RegistryRefusedError) as caught:
            wrong.by_id(1)
        assert time.monotonic() - started < 10, "a 401 must not be retried for the whole wait"
        message = str(caught.value)
        assert "HTTP 401" in message and "nope-456" not in message and "w-secret" not in message, message
        assert not caught.value.transient
        settings = RegistrySettings(server.url, {"basic.auth.user.info": "writer:w-secret-123"})
        assert "w-secret" not in repr(settings) and "w-secret" not in repr(
            ValueDecoding("{}", settings.client_config())
        )
        with pytest.raises(SchemaError, match=re.escape("schema not found (schema id 1)")):
            SchemaRegistry(settings).by_id(1)  # logged in: the id is simply unknown


@pytest.mark.parametrize(
    "url, expected",
    [
        ("ftp://registry:8081", "not an http:// or https:// URL"),
        ("http://user:secret@registry:8081", "carries credentials"),
    ],
)
def test_registry_urls_are_checked_in_one_line(url, expected):
    with pytest.raises(ConfigError, match=expected) as caught:
        RegistrySettings(url)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    "status, body, expected",
    [
        (408, b'{"error_code": 408, "message": "timeout"}', RegistryUnavailableError),
        (503, b"busy", RegistryUnavailableError),
        (404, b"<html>not here</html>", ConfigError),  # a proxy or a wrong path, not an unknown id
        (407, b"proxy", ConfigError),
    ],
)
def test_answers_that_are_not_the_registrys_own_not_found_never_blame_records(status, body, expected):
    """Only the registry's 40403 makes an id's records bad; anything else is the batch's problem."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        registry = SchemaRegistry(RegistrySettings(f"http://127.0.0.1:{server.server_port}"), wait=1)
        with pytest.raises(expected) as caught:
            registry.writer_schema(7)
        assert not isinstance(caught.value, SchemaError), f"HTTP {status} must not blame records: {caught.value}"
        assert "\n" not in str(caught.value)
    finally:
        server.shutdown()
